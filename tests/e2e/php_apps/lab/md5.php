<?php
// The request body's md5 and length, read from php://input in pieces.
$in = fopen('php://input', 'rb');
$ctx = hash_init('md5');
$n = 0;
while (!feof($in)) {
    $piece = fread($in, 65536);
    if ($piece === false) break;
    hash_update($ctx, $piece);
    $n += strlen($piece);
}
header('Content-Type: text/plain');
echo hash_final($ctx), ' ', $n, ' ', $_SERVER['CONTENT_LENGTH'] ?? '-', "\n";
