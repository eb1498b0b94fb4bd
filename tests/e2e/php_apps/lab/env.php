<?php
// $_SERVER, $_GET and the worker's pid as JSON.
header('Content-Type: application/json');
echo json_encode(['server' => $_SERVER, 'get' => $_GET, 'pid' => getmypid()]);
