<?php
// A WordPress-shaped front controller: pretty permalinks from REQUEST_URI.
$uri = $_SERVER['REQUEST_URI'];
$path = parse_url($uri, PHP_URL_PATH);
header('Content-Type: text/plain');
header('X-Script: ' . $_SERVER['SCRIPT_NAME']);
if (isset($_GET['p'])) {
    echo "post id " . (int)$_GET['p'] . "\n";
} elseif ($path === '/') {
    echo "home\n";
} elseif (preg_match('#^/(\d{4})/(\d{2})/([a-z0-9-]+)/?$#', $path, $m)) {
    echo "post $m[3] from $m[1]-$m[2]\n";
} else {
    http_response_code(404);
    echo "no page at $path\n";
}
