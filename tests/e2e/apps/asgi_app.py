"""An ASGI app for tests/e2e/test_apps.py, run by scalwsd's managed uvicorn.

GET /pid          its process id (and SCALWS_APP_WORKER)
GET /print?TEXT   writes TEXT to stdout and to stderr, then answers
GET /slow?SECONDS answers after that long
GET /crash        the process exits with code 3 at once
"""
import asyncio
import os
import sys
import urllib.parse


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    path = scope["path"].rsplit("/", 1)[-1]
    query = urllib.parse.unquote(scope["query_string"].decode())
    if path == "crash":
        os._exit(3)
    if path == "print":
        print(query)
        print(query, file=sys.stderr)
    if path == "slow":
        await asyncio.sleep(float(query or 1))
    body = f"{os.getpid()} {os.environ.get('SCALWS_APP_WORKER')} {path}\n".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
