"""Runs prototype (a) on 127.0.0.1:PORT (argv[1]) with uvloop; see proto_a.pyx."""
import asyncio
import socket
import sys

import uvloop

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import proto_a  # noqa: E402


async def main(port):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(proto_a.Proto, "127.0.0.1", port, reuse_port=True,
                                      backlog=511)
    for s in server.sockets:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await server.serve_forever()


uvloop.run(main(int(sys.argv[1])))
