<?php
header('Content-Type: text/plain');
echo "hello world";
