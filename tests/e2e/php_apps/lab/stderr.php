<?php
// Two lines for the web server's error log (FCGI_STDERR), then a page.
error_log('first line from php ' . ($_GET['tag'] ?? ''));
error_log('second line from php');
echo "logged\n";
