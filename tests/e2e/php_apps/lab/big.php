<?php
// ?mib=N: N MiB of the byte pattern chr(i % 251), written 64 KiB at a time.
header('Content-Type: application/octet-stream');
$block = '';
for ($i = 0; $i < 65536; $i++) $block .= chr($i % 251);
$n = (int)($_GET['mib'] ?? 1) * 16;
for ($i = 0; $i < $n; $i++) { echo $block; flush(); }
