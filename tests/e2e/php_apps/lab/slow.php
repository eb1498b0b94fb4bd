<?php
// Answers after ?ms= milliseconds.
usleep((int)($_GET['ms'] ?? 1000) * 1000);
echo "late\n";
