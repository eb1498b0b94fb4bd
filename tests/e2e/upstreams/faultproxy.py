"""A TCP proxy that misbehaves on demand, placed between scalwsd and an upstream.

    fp = FaultProxy("127.0.0.1", upstream_port)
    fp.start()              # listens on 127.0.0.1:fp.port, in a thread of its own
    fp.mode = "stall"       # read at each new connection's accept
    ...
    fp.connections          # connections accepted so far
    fp.stop()

Modes (a connection keeps the mode it was accepted under):

  pass                    forwards both ways
  reset_on_connect        accepts, then resets at once (RST)
  refuse                  closes the listening socket: connects are refused
                          (ECONNREFUSED); leaving the mode listens again on
                          the same port
  stall                   accepts and reads, never answers, never closes
  deaf                    accepts, never reads (the sender's buffers fill up:
                          its writes stop making progress), never answers,
                          never closes
  reset_after_request     reads one request head, then resets; the upstream
                          is never contacted
  cut_response_after:N    forwards, but resets the client side after N
                          response bytes
  slow:BYTES:DELAY        forwards the response BYTES at a time, DELAY seconds
                          apart, each piece its own send (partial writes)

Resets are SO_LINGER {1, 0} and then close.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import threading

MODES = ("pass", "reset_on_connect", "refuse", "stall", "deaf", "reset_after_request",
         "cut_response_after:N", "slow:BYTES:DELAY")


def _parse_mode(mode: str):
    name, _, rest = mode.partition(":")
    if name in ("pass", "reset_on_connect", "refuse", "stall", "deaf",
                "reset_after_request") and not rest:
        return (name,)
    if name == "cut_response_after":
        return (name, int(rest))
    if name == "slow":
        size, _, delay = rest.partition(":")
        if int(size) <= 0:
            raise ValueError(mode)
        return (name, int(size), float(delay))
    raise ValueError(f"unknown fault proxy mode {mode!r}; modes: {', '.join(MODES)}")


def _rst(writer: asyncio.StreamWriter):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1",
                 port: int = 0):
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self.connections = 0          # accepted so far (all modes)
        self.requests = 0             # request heads seen in reset_after_request mode
        self._mode = ("pass",)
        self._mode_text = "pass"
        self._loop = None
        self._thread = None
        self._server = None
        self._writers = set()
        self._tasks = set()

    # ---- the API used from the test's thread ----

    def start(self) -> "FaultProxy":
        ready = threading.Event()
        failure = []

        def run():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen())
            except BaseException as e:  # reported to start()
                failure.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name=f"faultproxy-{self.target[1]}",
                                        daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        if failure:
            raise failure[0]
        return self

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode_text

    @mode.setter
    def mode(self, value: str):
        parsed = _parse_mode(value)
        # Applied on the proxy's loop and waited for: when the setter returns,
        # the next accepted connection has the new mode, and "refuse" has
        # already closed the listening socket.
        self._call(self._set_mode(parsed, value))

    def stop(self):
        if self._loop is None or not self._thread.is_alive():
            return
        try:
            self._call(self._shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _call(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # ---- on the proxy's loop ----

    async def _listen(self):
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_mode(self, parsed, text):
        self._mode, self._mode_text = parsed, text
        if parsed[0] == "refuse":
            if self._server is not None:
                self._server.close()  # closes the listening sockets at once
                self._server = None
        elif self._server is None:
            await self._listen()

    async def _shutdown(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        for t in list(self._tasks):
            t.cancel()

    def _track(self, writer):
        self._writers.add(writer)

    def _untrack(self, *writers):
        for w in writers:
            if w is not None:
                self._writers.discard(w)
                if not w.transport.is_closing():
                    w.transport.abort()

    async def _accept(self, reader, writer):
        self.connections += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        self._track(writer)
        mode = self._mode
        up_writer = None
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kind = mode[0]
            if kind in ("reset_on_connect", "refuse"):
                # "refuse" only here in the instant before the listener closed.
                _rst(writer)
                return
            if kind == "deaf":
                # asyncio reads ahead into the StreamReader only up to its
                # limit (2 x 64 KiB), then stops reading the socket.
                await asyncio.Event().wait()
            if kind == "stall":
                while await reader.read(65536):
                    pass
                await asyncio.Event().wait()  # the client closed its side; stay open
            if kind == "reset_after_request":
                try:
                    await reader.readuntil(b"\r\n\r\n")
                    self.requests += 1
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    pass
                _rst(writer)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                _rst(writer)
                return
            self._track(up_writer)
            upsock = up_writer.get_extra_info("socket")
            if upsock is not None:
                upsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = asyncio.ensure_future(self._pump(reader, up_writer))
            down = asyncio.ensure_future(self._pump_down(up_reader, writer, mode))
            try:
                await down
            finally:
                up.cancel()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            self._untrack(writer, up_writer)

    async def _pump(self, reader, writer):
        """Client to upstream, as is; the client's FIN is passed on."""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.transport.abort()

    async def _pump_down(self, reader, writer, mode):
        """Upstream to client, as the mode says."""
        kind = mode[0]
        sent = 0
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if kind == "cut_response_after":
                room = mode[1] - sent
                if len(data) >= room:
                    writer.write(data[:room])
                    await writer.drain()
                    await self._flushed(writer)
                    _rst(writer)
                    return
                writer.write(data)
                sent += len(data)
                await writer.drain()
            elif kind == "slow":
                size, delay = mode[1], mode[2]
                for i in range(0, len(data), size):
                    writer.write(data[i:i + size])
                    await writer.drain()
                    await asyncio.sleep(delay)
            else:
                writer.write(data)
                await writer.drain()
        # The upstream closed: nothing more will come. The client's side is
        # closed once what was written has gone out.
        writer.transport.close()

    @staticmethod
    async def _flushed(writer, timeout=10.0):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while writer.transport.get_write_buffer_size() and loop.time() < deadline:
            await asyncio.sleep(0.001)
