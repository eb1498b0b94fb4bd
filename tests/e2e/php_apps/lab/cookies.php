<?php
// Two cookies, a header PHP folds in nothing, and a long one.
setcookie('a', '1');
setcookie('b', '2', ['path' => '/x', 'httponly' => true]);
header('X-Long: ' . str_repeat('v', 5000));
echo "cookies\n";
