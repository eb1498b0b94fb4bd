<?php
const CSRF = 'tok-123';

function route(string $method, string $path): array {
    if ($method === 'GET' && preg_match('#^/users/(\d+)$#', $path, $m)) {
        return ['user' => (int)$m[1], 'script' => $_SERVER['SCRIPT_NAME']];
    }
    if ($method === 'GET' && $path === '/search') {
        return ['q' => $_GET['q'] ?? null, 'page' => $_GET['page'] ?? null];
    }
    if ($method === 'POST' && $path === '/users') {
        if (($_POST['_token'] ?? '') !== CSRF) {
            http_response_code(419); // Laravel's "page expired"
            return ['error' => 'csrf'];
        }
        http_response_code(201);
        return ['created' => $_POST['name'] ?? null];
    }
    if ($method === 'POST' && $path === '/avatars') {
        $f = $_FILES['avatar'] ?? null;
        if (!$f || $f['error'] !== UPLOAD_ERR_OK || ($_POST['_token'] ?? '') !== CSRF) {
            http_response_code(422);
            return ['error' => $f['error'] ?? 'no file'];
        }
        @mkdir(__DIR__ . '/storage');
        $dest = __DIR__ . '/storage/' . basename($f['name']);
        move_uploaded_file($f['tmp_name'], $dest);
        return ['stored' => basename($f['name']), 'size' => filesize($dest),
                'sha1' => sha1_file($dest), 'type' => $f['type']];
    }
    http_response_code(404);
    return ['error' => "no route for $method $path"];
}
