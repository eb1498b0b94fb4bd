// Node.js hello server for the `node` scenario: 200 "hello world", keep-alive.
// usage: node hello.js PORT, or under scalwsd's `apps:` (command: [node,
// hello.js]) on the unix socket it names in SCALWS_APP_SOCKET.
'use strict';
const http = require('http');
const port = parseInt(process.argv[2] || '18312', 10);
const body = Buffer.from('hello world');
const server = http.createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
  res.end(body);
});
server.keepAliveTimeout = 75000;
server.headersTimeout = 76000;
if (process.env.SCALWS_APP_SOCKET) server.listen(process.env.SCALWS_APP_SOCKET);
else server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
