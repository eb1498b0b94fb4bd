"""An HTTP/3 client for the e2e tests, on aioquic (a second QUIC and
HTTP/3 implementation, PyPI): requests on one connection, concurrently,
with bodies both ways.

    with H3(port, cafile=...) as c:
        status, headers, body = c.get("/")
        answers = c.many([("GET", "/a", [], b""), ...])

Each call runs the asyncio loop of the connection until its answers are
complete (or `timeout`). headers: a list of (name, value) as str; a reset
stream answers status None with the error code in headers [(":reset", code)].
"""
from __future__ import annotations

import asyncio
import ssl

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class _Proto(QuicConnectionProtocol):
    def __init__(self, *args, setup=None, **kw):
        super().__init__(*args, **kw)
        self.h3 = H3Connection(self._quic)
        if setup is not None:
            setup(self)  # a test bends the client before the first packet
        # aioquic checks a response's content-length against its body, also
        # for HEAD (whose answer has the GET's length and no body: RFC 9110 §9.3.2)
        self.head_streams: set[int] = set()
        check = self.h3._check_content_length
        self.h3._check_content_length = \
            lambda stream: None if stream.stream_id in self.head_streams else check(stream)
        self.waiting: dict[int, asyncio.Future] = {}
        self.answers: dict[int, dict] = {}
        self.ended: list[int] = []  # request streams in the order their answers ended
        self.closed: asyncio.Future = asyncio.get_event_loop().create_future()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(
                        f"connection closed: {event.error_code:#x} {event.reason_phrase}"))
            if not self.closed.done():
                self.closed.set_result(event)
            return
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            a = self.answers.setdefault(event.stream_id, {"headers": [], "body": b""})
            a["reset"] = event.error_code
            fut = self.waiting.pop(event.stream_id)
            if not fut.done():
                fut.set_result(a)
            return
        for ev in self.h3.handle_event(event):
            a = self.answers.setdefault(ev.stream_id, {"headers": [], "body": b"",
                                                       "interim": []})
            if isinstance(ev, HeadersReceived):
                hs = [(k.decode(), v.decode("latin-1")) for k, v in ev.headers]
                status = dict(hs).get(":status", "")
                if status.startswith("1") and not a["headers"]:
                    a["interim"].append(hs)
                elif not a["headers"]:
                    a["headers"] = hs
                else:
                    a["trailers"] = hs
            elif isinstance(ev, DataReceived):
                a["body"] += ev.data
            if getattr(ev, "stream_ended", False):
                self.ended.append(ev.stream_id)
                fut = self.waiting.pop(ev.stream_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(a)

    def send(self, method, path, headers, body, authority):
        sid = self._quic.get_next_available_stream_id()
        if method == "HEAD":
            self.head_streams.add(sid)
        hs = [(b":method", method.encode()), (b":scheme", b"https"),
              (b":authority", authority.encode()), (b":path", path.encode())]
        hs += [(k.lower().encode(), v.encode()) for k, v in headers]
        self.h3.send_headers(sid, hs, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        fut = asyncio.get_event_loop().create_future()
        self.waiting[sid] = fut
        self.transmit()
        return fut


class H3:
    def __init__(self, port, cafile=None, host="127.0.0.1", server_name="localhost",
                 authority=None, timeout=10.0, verify=True, session_ticket=None,
                 ticket_handler=None, max_data=None, early=False, setup=None):
        self.port, self.host, self.timeout = port, host, timeout
        self.authority = authority or f"{server_name}:{port}"
        cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                                server_name=server_name)
        if verify:
            cfg.load_verify_locations(cafile)
        else:
            cfg.verify_mode = ssl.CERT_NONE
        if session_ticket is not None:
            cfg.session_ticket = session_ticket
        if max_data is not None:
            cfg.max_data = cfg.max_stream_data = max_data
        self.cfg = cfg
        self.ticket_handler = ticket_handler
        self.early = early  # send requests before the handshake ends (0-RTT with a ticket)
        self.setup = setup  # setup(proto): called with the protocol before it sends
        self.loop = asyncio.new_event_loop()
        self._cm = None
        self.proto: _Proto | None = None

    def __enter__(self):
        async def go():
            self._cm = connect(self.host, self.port, configuration=self.cfg,
                               create_protocol=lambda *a, **kw: _Proto(*a, setup=self.setup, **kw),
                               session_ticket_handler=self.ticket_handler,
                               wait_connected=not self.early)
            return await asyncio.wait_for(self._cm.__aenter__(), self.timeout)
        self.proto = self.loop.run_until_complete(go())
        return self

    def __exit__(self, *exc):
        async def go():
            await self._cm.__aexit__(None, None, None)
        try:
            self.loop.run_until_complete(asyncio.wait_for(go(), self.timeout))
        finally:
            self.loop.close()

    def many(self, requests):
        """[(method, path, headers, body)] at once -> [(status, headers, body)]."""
        async def go():
            futs = [self.proto.send(m, p, h, b, self.authority) for m, p, h, b in requests]
            return await asyncio.wait_for(asyncio.gather(*futs), self.timeout)
        out = []
        for a in self.loop.run_until_complete(go()):
            if "reset" in a:
                out.append((None, [(":reset", a["reset"])], a["body"]))
                continue
            hs = a["headers"]
            status = int(dict(hs)[":status"])
            out.append((status, [(k, v) for k, v in hs if not k.startswith(":")], a["body"]))
        return out

    def request(self, method, path, headers=(), body=b""):
        return self.many([(method, path, list(headers), body)])[0]

    def get(self, path, headers=()):
        return self.request("GET", path, headers)

    def wait_closed(self, timeout=None):
        """The ConnectionTerminated event of a connection the server ends."""
        return self.loop.run_until_complete(
            asyncio.wait_for(asyncio.shield(self.proto.closed), timeout or self.timeout))
