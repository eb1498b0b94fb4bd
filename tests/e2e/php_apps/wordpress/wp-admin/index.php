<?php
header('Content-Type: text/plain');
echo "dashboard ", $_SERVER['SCRIPT_NAME'], "\n";
