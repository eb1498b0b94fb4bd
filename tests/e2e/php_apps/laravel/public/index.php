<?php
// A Laravel-shaped front controller: routes by method and REQUEST_URI's
// path; the app's code lives outside the document root (../app.php).
require __DIR__ . '/../app.php';
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
$method = $_SERVER['REQUEST_METHOD'];
header('Content-Type: application/json');
echo json_encode(route($method, $path));
