<?php
// ?code=404: http_response_code; ?teapot: a Status header with a reason;
// ?to=URL: a Location header (PHP adds Status: 302).
if (isset($_GET['code'])) http_response_code((int)$_GET['code']);
if (isset($_GET['teapot'])) header("Status: 418 I'm a teapot");
if (isset($_GET['to'])) header('Location: ' . $_GET['to']);
echo "status page\n";
