<?php
// Media upload: the file moves to wp-content/uploads/YYYY/MM/.
header('Content-Type: application/json');
$f = $_FILES['async-upload'] ?? null;
if (!$f || $f['error'] !== UPLOAD_ERR_OK || ($_POST['_wpnonce'] ?? '') !== 'n0nce') {
    http_response_code(400);
    echo json_encode(['error' => $f ? $f['error'] : 'no file']);
    exit;
}
$dir = dirname(__DIR__) . '/wp-content/uploads/' . date('Y/m');
@mkdir($dir, 0777, true);
$name = preg_replace('/[^A-Za-z0-9._-]/', '-', basename($f['name']));
move_uploaded_file($f['tmp_name'], "$dir/$name");
echo json_encode(['url' => '/wp-content/uploads/' . date('Y/m') . "/$name",
                  'size' => filesize("$dir/$name"), 'md5' => md5_file("$dir/$name")]);
