// A Node.js app for tests/e2e/test_apps.py: listens on the unix socket
// scalwsd gives it (SCALWS_APP_SOCKET) and answers "<pid> node <path>".
'use strict';
const http = require('http');
const server = http.createServer((req, res) => {
  const body = Buffer.from(`${process.pid} node ${req.url}\n`);
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
  res.end(body);
});
server.keepAliveTimeout = 75000;
server.listen(process.env.SCALWS_APP_SOCKET);
console.log(`listening on ${process.env.SCALWS_APP_SOCKET}`);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
