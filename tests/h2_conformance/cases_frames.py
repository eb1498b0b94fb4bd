"""The conformance cases of RFC 9113 sections 3.4 to 7 (the preface,
frames, stream states, each frame type, flow control, CONTINUATION, error
codes and push); cases.py says what a case is."""
from __future__ import annotations

from .client import (ACK, CONTINUATION, COMPRESSION_ERROR, DATA, END_HEADERS, END_STREAM,
                     ENABLE_PUSH, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, GOAWAY, HEADERS,
                     INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, PADDED, PING, PREFACE, PRIORITY,
                     PROTOCOL_ERROR, PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, SETTINGS,
                     STREAM_CLOSED, WINDOW_UPDATE, Failed, frame, hp_literal, hp_literals, settings)
from .caselib import case, ok, u32

# ---- §3.4 the connection preface ---------------------------------------------------------------

@case("3.4", "an invalid preface: the connection ends with no stream served")
def _(connect):
    c = connect(handshake=False)
    c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + frame(SETTINGS, 0, 0))
    data = b""
    while True:  # PROTOCOL_ERROR, "a GOAWAY frame MAY be omitted"
        try:
            c.sock.settimeout(3)
            b = c.sock.recv(65536)
        except (ConnectionResetError, OSError):
            break
        if not b:
            break
        data += b
    # On a cleartext port the bytes are not HTTP/2 at all: HTTP/1.1 refuses
    # them (4xx/5xx). With ALPN h2: the server's own SETTINGS (sent before it
    # read ours) and WINDOW_UPDATE, at most a GOAWAY PROTOCOL_ERROR, then the end.
    if data.startswith(b"HTTP/1.1 "):
        if c.scheme != "http" or data[9:10] not in (b"4", b"5"):
            raise Failed(f"answered {data[:40]!r}")
        return
    while data:
        n = int.from_bytes(data[:3], "big")
        ftype = data[3] if len(data) > 3 else None
        payload = data[9:9 + n]
        if ftype == GOAWAY and payload[4:8] == u32(PROTOCOL_ERROR):
            pass
        elif ftype not in (SETTINGS, WINDOW_UPDATE) or len(data) < 9 + n:
            raise Failed(f"unexpected bytes after an invalid preface: {data[:60]!r}")
        data = data[9 + n:]


@case("3.4", "the first frame after the preface is not SETTINGS: PROTOCOL_ERROR")
def _(connect):
    c = connect(handshake=False)
    c.send(PREFACE + frame(PING, 0, 0, b"12345678"))
    c.conn_error(PROTOCOL_ERROR)


@case("3.4", "the preface and SETTINGS: SETTINGS and an ACK come back")
def _(connect):
    c = connect()  # the handshake is the check
    ok(c)


# ---- §4 frames -----------------------------------------------------------------------------------

@case("4.1", "an unknown frame type is ignored")
def _(connect):
    c = connect()
    c.send_frame(0x42, 0xff, 0, b"ignore me")
    c.send_frame(0x42, 0, 1, b"on an idle stream too")
    ok(c)


@case("4.1", "undefined flags on PING are ignored")
def _(connect):
    c = connect()
    c.send_frame(PING, 0xfe, 0, b"flagflag")
    f = c.read_frame()
    while f is not None and f.type != PING:
        f = c.read_frame()
    if f is None or not f.flags & ACK or f.payload != b"flagflag":
        raise Failed(f"PING with undefined flags not answered: {f}")


@case("4.1", "the reserved bit of a stream id is ignored")
def _(connect):
    c = connect()
    c.send_frame(HEADERS, END_STREAM | END_HEADERS, 0x80000001, c.block(c.req()))
    if c.status(1) != 200:
        raise Failed("not served")


@case("4.2", "DATA of 2^14 octets (the default SETTINGS_MAX_FRAME_SIZE) is accepted")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.data(1, b"x" * 16384)
    if c.status(1) != 200:
        raise Failed("not served")


@case("4.2", "DATA over SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.data(1, b"x" * 16385)
    c.conn_error(FRAME_SIZE_ERROR)


@case("4.2", "HEADERS over SETTINGS_MAX_FRAME_SIZE: connection error FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.headers(1, block=c.block(c.req()) + hp_literal("x-pad", "p" * 16384))
    c.conn_error(FRAME_SIZE_ERROR)


@case("4.3", "a header block that does not decode: COMPRESSION_ERROR")
def _(connect):
    c = connect()
    c.headers(1, block=b"\x00\x7f\xff\xff")  # a name length past the block
    c.conn_error(COMPRESSION_ERROR)


@case("4.3", "PRIORITY between HEADERS and CONTINUATION: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:3], end_headers=False)
    c.send_frame(PRIORITY, 0, 1, u32(0) + b"\x10")
    c.send_frame(CONTINUATION, END_HEADERS, 1, b[3:])
    c.conn_error(PROTOCOL_ERROR)


@case("4.3", "HEADERS of another stream inside a header block: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:3], end_headers=False)
    c.send_frame(HEADERS, END_STREAM | END_HEADERS, 3, hp_literals(c.req()))
    c.conn_error(PROTOCOL_ERROR)


# ---- §5.1 stream states --------------------------------------------------------------------------

@case("5.1", "idle: DATA: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.data(1, b"x")
    c.conn_error(PROTOCOL_ERROR)


@case("5.1", "idle: RST_STREAM: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(RST_STREAM, 0, 1, u32(8))
    c.conn_error(PROTOCOL_ERROR)


@case("5.1", "idle: WINDOW_UPDATE: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(WINDOW_UPDATE, 0, 1, u32(100))
    c.conn_error(PROTOCOL_ERROR)


@case("5.1", "idle: CONTINUATION without HEADERS: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(CONTINUATION, END_HEADERS, 1, hp_literals(c.req()))
    c.conn_error(PROTOCOL_ERROR)


@case("5.1", "idle: PRIORITY is allowed (and ignored)")
def _(connect):
    c = connect()
    c.send_frame(PRIORITY, 0, 3, u32(0) + b"\x10")
    ok(c, 5)


@case("5.1", "half-closed (remote): DATA: STREAM_CLOSED")
def _(connect):
    # §5.1 asks for a stream error; nghttp2 ends the connection with the
    # same code (allowed by §5.4).
    c = connect()
    c.headers(1, c.req("/big"))  # the answer takes a while: the stream stays
    c.data(1, b"late")
    c.conn_error(STREAM_CLOSED)


@case("5.1", "half-closed (remote): HEADERS again: STREAM_CLOSED")
def _(connect):
    # §5.1 asks for a stream error; nghttp2 ends the connection with the
    # same code (allowed by §5.4).
    c = connect()
    c.window_auto = False  # /big waits on the window: the stream stays half-closed (remote)
    c.headers(1, c.req("/big"))
    c.headers(1, c.req("/big"), end_stream=False)
    c.conn_error(STREAM_CLOSED)


@case("5.1", "closed (after the client's RST_STREAM): DATA: STREAM_CLOSED")
def _(connect):
    c = connect()
    with c.corked():  # the RST_STREAM arrives before an answer could go
        c.headers(1, c.req("/", "POST"), end_stream=False)
        c.send_frame(RST_STREAM, 0, 1, u32(8))
        c.data(1, b"late", end_stream=False)
    # §5.1 closed: STREAM_CLOSED, as a stream error (the session remembers
    # how its last streams closed); nothing of the answer went
    c.stream_error(1, STREAM_CLOSED)
    ok(c, 3)


@case("5.1", "closed (after the client's RST_STREAM): HEADERS: STREAM_CLOSED")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(RST_STREAM, 0, 1, u32(8))
    c.headers(1, c.req())
    c.conn_error(STREAM_CLOSED)


@case("6.9", "DATA dropped on a closed stream still gives its connection window back")
def _(connect):
    # 3 MiB on a stream the client reset, sent only as the server's
    # connection window allows: the window must keep reopening (dropped
    # DATA counts as consumed), then an upload on a new stream is served.
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(RST_STREAM, 0, 1, u32(8))
    chunk, sent = b"z" * 16384, 0
    while sent < 3 * 1024 * 1024:
        while c.conn_window < len(chunk):
            f = c.read_frame()
            if f is None or f.type == GOAWAY:
                raise Failed(f"{f} after {sent} octets; {c._describe()}")
        c.data(1, chunk, end_stream=False)
        c.conn_window -= len(chunk)
        sent += len(chunk)
    c.headers(3, c.req("/", "POST", [("content-length", "5")]), end_stream=False)
    c.data(3, b"hello")
    if c.status(3) != 200:
        raise Failed("not served")


@case("5.1", "closed (both ends sent END_STREAM): DATA: STREAM_CLOSED")
def _(connect):
    c = connect()
    ok(c, 1)
    c.data(1, b"late")
    c.stream_error(1, STREAM_CLOSED)  # §6.1, as a stream error
    ok(c, 3)


@case("5.1", "closed (both ends sent END_STREAM): HEADERS: STREAM_CLOSED")
def _(connect):
    c = connect()
    ok(c, 1)
    c.headers(1, c.req())
    c.conn_error(STREAM_CLOSED)


@case("5.1", "closed: WINDOW_UPDATE and RST_STREAM right after END_STREAM are ignored")
def _(connect):
    c = connect()
    ok(c, 1)
    c.send_frame(WINDOW_UPDATE, 0, 1, u32(100))
    c.send_frame(RST_STREAM, 0, 1, u32(0))
    ok(c, 3)


@case("5.1.1", "an even stream id from the client: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(2, c.req())
    c.conn_error(PROTOCOL_ERROR)


@case("5.1.1", "a stream id lower than one already used: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    ok(c, 5)
    c.headers(3, c.req())
    c.conn_error(PROTOCOL_ERROR)


@case("5.1.2", "streams over SETTINGS_MAX_CONCURRENT_STREAMS: REFUSED_STREAM or PROTOCOL_ERROR")
def _(connect):
    c = connect()
    limit = c.server_settings.get(3)
    if not limit or limit > 1000:
        raise Failed(f"SETTINGS_MAX_CONCURRENT_STREAMS is {limit}")
    c.window_auto = False
    out = b""
    for i in range(limit):  # open: no END_STREAM from us
        out += frame(HEADERS, END_HEADERS, 1 + 2 * i, c.block(c.req("/", "POST")))
    over = 1 + 2 * limit
    c.send(out + frame(HEADERS, END_HEADERS, over, c.block(c.req("/", "POST"))))
    while True:
        f = c.read_frame()
        if f is None or f.type == GOAWAY:
            if f is not None and f.code() == PROTOCOL_ERROR:
                return  # §5.1.2 allows either
            raise Failed(f"{f}; {c._describe()}")
        if f.type == HEADERS:
            c.decode(f)
            if f.sid == over:
                raise Failed(f"stream {over} over the limit of {limit} was served")
        if f.type == RST_STREAM and f.sid == over:
            if f.code() not in (REFUSED_STREAM, PROTOCOL_ERROR):
                raise Failed(f"{f}")
            return


@case("5.3.1", "HEADERS that depend on their own stream: PROTOCOL_ERROR")
def _(connect):
    # A stream error in §5.3.1; nghttp2 ends the connection (allowed, §5.4).
    c = connect()
    c.headers(1, c.req(), priority=u32(1) + b"\x10")
    c.conn_error(PROTOCOL_ERROR)


@case("5.3.1", "PRIORITY that depends on its own stream: PROTOCOL_ERROR")
def _(connect):
    # RFC 7540 §5.3.1: a stream error PROTOCOL_ERROR, ended as the
    # connection's (§5.4), as HEADERS that depend on their own stream
    c = connect()
    c.send_frame(PRIORITY, 0, 1, u32(1) + b"\x10")
    c.conn_error(PROTOCOL_ERROR)


@case("5.5", "an unknown frame type inside a header block: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:3], end_headers=False)
    c.send_frame(0x42, 0, 1, b"x")
    c.send_frame(CONTINUATION, END_HEADERS, 1, b[3:])
    c.conn_error(PROTOCOL_ERROR)


# ---- §6.1 DATA, §6.2 HEADERS ----------------------------------------------------------------------

@case("6.1", "DATA on stream 0: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.data(0, b"x")
    c.conn_error(PROTOCOL_ERROR)


@case("6.1", "DATA whose pad length is the payload's length or more: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(DATA, PADDED | END_STREAM, 1, b"\x05abcd")  # 5 >= 5 octets after it... and more
    c.conn_error(PROTOCOL_ERROR)


@case("6.1", "DATA with valid padding is accepted")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST", [("content-length", "4")]), end_stream=False)
    c.data(1, b"body", pad=10)
    if c.status(1) != 200:
        raise Failed("not served")


@case("6.2", "HEADERS on stream 0: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(0, c.req())
    c.conn_error(PROTOCOL_ERROR)


@case("6.2", "HEADERS whose pad length exceeds the payload: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.send_frame(HEADERS, PADDED | END_HEADERS | END_STREAM, 1, bytes([len(b) + 1]) + b)
    c.conn_error(PROTOCOL_ERROR)


@case("6.2", "HEADERS with valid padding are accepted")
def _(connect):
    c = connect()
    c.headers(1, c.req(), pad=20)
    if c.status(1) != 200:
        raise Failed("not served")


@case("6.2", "HEADERS without END_HEADERS, then DATA: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req("/", "POST"))
    c.headers(1, block=b, end_headers=False, end_stream=False)
    c.data(1, b"x")
    c.conn_error(PROTOCOL_ERROR)


# ---- §6.3 PRIORITY, §6.4 RST_STREAM -------------------------------------------------------------

@case("6.3", "PRIORITY on stream 0: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(PRIORITY, 0, 0, u32(1) + b"\x10")
    c.conn_error(PROTOCOL_ERROR)


@case("6.3", "PRIORITY of length 4 (not 5): FRAME_SIZE_ERROR")
def _(connect):
    # §6.3 asks for a stream error; nghttp2 makes every frame of a wrong
    # fixed length a connection error (allowed by §5.4). README.
    c = connect()
    c.send_frame(PRIORITY, 0, 1, u32(0))
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.4", "RST_STREAM on stream 0: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(RST_STREAM, 0, 0, u32(8))
    c.conn_error(PROTOCOL_ERROR)


@case("6.4", "RST_STREAM of length 3: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(RST_STREAM, 0, 1, b"\0\0\x08")
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.4", "RST_STREAM from the client ends its stream; the connection goes on")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(RST_STREAM, 0, 1, u32(8))
    ok(c, 3)


# ---- §6.5 SETTINGS -------------------------------------------------------------------------------

@case("6.5", "SETTINGS ACK with a payload: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, ACK, 0, settings((INITIAL_WINDOW_SIZE, 100)))
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.5", "SETTINGS on a stream: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 1, settings((INITIAL_WINDOW_SIZE, 100)))
    c.conn_error(PROTOCOL_ERROR)


@case("6.5", "SETTINGS whose length is not a multiple of 6: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((INITIAL_WINDOW_SIZE, 100))[:5])
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.5.2", "SETTINGS_ENABLE_PUSH of 2: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((ENABLE_PUSH, 2)))
    c.conn_error(PROTOCOL_ERROR)


@case("6.5.2", "SETTINGS_INITIAL_WINDOW_SIZE of 2^31: FLOW_CONTROL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((INITIAL_WINDOW_SIZE, 1 << 31)))
    c.conn_error(FLOW_CONTROL_ERROR)


@case("6.5.2", "SETTINGS_MAX_FRAME_SIZE of 2^14-1: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((MAX_FRAME_SIZE, 16383)))
    c.conn_error(PROTOCOL_ERROR)


@case("6.5.2", "SETTINGS_MAX_FRAME_SIZE of 2^24: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((MAX_FRAME_SIZE, 1 << 24)))
    c.conn_error(PROTOCOL_ERROR)


@case("6.5.2", "an unknown setting is ignored")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((0x4242, 7)))
    ok(c)


@case("6.5.3", "SETTINGS are acknowledged")
def _(connect):
    c = connect()
    c.send_frame(SETTINGS, 0, 0, settings((MAX_FRAME_SIZE, 20000)))
    while True:
        f = c.read_frame()
        if f is None or f.type == GOAWAY:
            raise Failed(f"{f}; {c._describe()}")
        if f.type == SETTINGS and f.flags & ACK:
            if f.payload:
                raise Failed("an ACK with a payload")
            return


# ---- §6.7 PING, §6.8 GOAWAY ------------------------------------------------------------------------

@case("6.7", "PING is answered with an ACK carrying the same data")
def _(connect):
    connect().alive()


@case("6.7", "a PING ACK is not answered")
def _(connect):
    c = connect()
    c.send_frame(PING, ACK, 0, b"unasked!")
    c.alive()  # the next PING's ACK is the first one: alive checks its data
    if any(f.type == PING and f.payload == b"unasked!" for f in c.seen):
        raise Failed("an ACK answered")


@case("6.7", "PING on a stream: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(PING, 0, 1, b"12345678")
    c.conn_error(PROTOCOL_ERROR)


@case("6.7", "PING of length 6: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.send_frame(PING, 0, 0, b"123456")
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.8", "GOAWAY on a stream: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(GOAWAY, 0, 1, u32(0) + u32(0))
    c.conn_error(PROTOCOL_ERROR)


@case("6.8", "the client's GOAWAY: streams it started are still answered")
def _(connect):
    c = connect()
    c.headers(1, c.req())
    c.send_frame(GOAWAY, 0, 0, u32(0) + u32(0))  # we pushed nothing: last stream 0
    if c.status(1) != 200:
        raise Failed("not served")


# ---- §6.9 WINDOW_UPDATE and flow control ---------------------------------------------------------

@case("6.9", "WINDOW_UPDATE of 0 on the connection: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(WINDOW_UPDATE, 0, 0, u32(0))
    c.conn_error(PROTOCOL_ERROR)


@case("6.9", "WINDOW_UPDATE of 0 on a stream: PROTOCOL_ERROR")
def _(connect):
    # A stream error in §6.9; nghttp2 ends the connection (allowed, §5.4).
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(WINDOW_UPDATE, 0, 1, u32(0))
    c.conn_error(PROTOCOL_ERROR)


@case("6.9", "WINDOW_UPDATE of length 3: FRAME_SIZE_ERROR")
def _(connect):
    c = connect()
    c.send_frame(WINDOW_UPDATE, 0, 0, b"\0\0\x01")
    c.conn_error(FRAME_SIZE_ERROR)


@case("6.9.1", "the connection window over 2^31-1: FLOW_CONTROL_ERROR")
def _(connect):
    c = connect()
    c.send_frame(WINDOW_UPDATE, 0, 0, u32(0x7FFFFFFF))
    c.send_frame(WINDOW_UPDATE, 0, 0, u32(0x7FFFFFFF))
    c.conn_error(FLOW_CONTROL_ERROR)


@case("6.9.1", "a stream window over 2^31-1: FLOW_CONTROL_ERROR on the stream")
def _(connect):
    c = connect()
    c.window_auto = False
    c.headers(1, c.req("/big"))
    c.send_frame(WINDOW_UPDATE, 0, 1, u32(0x7FFFFFFF))
    c.send_frame(WINDOW_UPDATE, 0, 1, u32(0x7FFFFFFF))
    c.stream_error(1, FLOW_CONTROL_ERROR, allow_response=True)


@case("6.9.1", "the server sends no more than the client's window (1 octet)")
def _(connect):
    c = connect(client_settings=[(INITIAL_WINDOW_SIZE, 1)])
    c.window_auto = False
    c.headers(1, c.req("/big"))
    got = 0
    while True:
        f = c.read_frame(timeout=1)
        if f is None or f.type in (GOAWAY, RST_STREAM):
            raise Failed(f"{f}; {c._describe()}")
        if f.type == HEADERS:
            c.decode(f)
        if f.type == DATA and f.sid == 1:
            got += len(f.payload)
            if got > 1:
                raise Failed(f"{got} octets into a window of 1")
            if got == 1:
                break
    try:  # nothing more until the window opens
        f = c.read_frame(timeout=0.5)
        if f is not None and f.type == DATA:
            raise Failed("DATA past the window")
    except Failed as e:
        if "no frame within" not in str(e):
            raise


@case("6.9.2", "SETTINGS_INITIAL_WINDOW_SIZE raised after HEADERS: the stream's window grows")
def _(connect):
    c = connect(client_settings=[(INITIAL_WINDOW_SIZE, 0)])
    c.headers(1, c.req("/big"))
    c.send_frame(SETTINGS, 0, 0, settings((INITIAL_WINDOW_SIZE, 65535)))
    status, _, body, _ = c.response(1)  # window_auto: WINDOW_UPDATE as DATA comes
    if status != 200 or len(body) < 70000:
        raise Failed(f"{status}, {len(body)} octets")


@case("6.9.2", "SETTINGS_INITIAL_WINDOW_SIZE that takes a stream window over 2^31-1: "
                "FLOW_CONTROL_ERROR")
def _(connect):
    # §6.9.2: a connection error
    c = connect(client_settings=[(INITIAL_WINDOW_SIZE, 0)])
    c.window_auto = False
    c.headers(1, c.req("/big"))
    # In one write: DATA the server sends between the two (the window is
    # open once the WINDOW_UPDATE is read) would lower the window below
    # the overflow, and nothing would be wrong any more.
    c.send(frame(WINDOW_UPDATE, 0, 1, u32(0x7FFFFFFF)) +
           frame(SETTINGS, 0, 0, settings((INITIAL_WINDOW_SIZE, 1))))
    c.conn_error(FLOW_CONTROL_ERROR)


# ---- §6.10 CONTINUATION ----------------------------------------------------------------------------

@case("6.10", "a header block in HEADERS and two CONTINUATION frames is accepted")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:2], end_headers=False)
    c.send_frame(CONTINUATION, 0, 1, b[2:4])
    c.send_frame(CONTINUATION, END_HEADERS, 1, b[4:])
    if c.status(1) != 200:
        raise Failed("not served")


@case("6.10", "CONTINUATION then another frame type before END_HEADERS: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:2], end_headers=False)
    c.send_frame(CONTINUATION, 0, 1, b[2:4])
    c.send_frame(PING, 0, 0, b"12345678")
    c.conn_error(PROTOCOL_ERROR)


@case("6.10", "CONTINUATION on stream 0: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:2], end_headers=False)
    c.send_frame(CONTINUATION, END_HEADERS, 0, b[2:])
    c.conn_error(PROTOCOL_ERROR)


@case("6.10", "CONTINUATION of another stream: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    b = c.block(c.req())
    c.headers(1, block=b[:2], end_headers=False)
    c.send_frame(CONTINUATION, END_HEADERS, 3, b[2:])
    c.conn_error(PROTOCOL_ERROR)


@case("6.10", "CONTINUATION after HEADERS with END_HEADERS: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(CONTINUATION, END_HEADERS, 1, hp_literal("x-late", "1"))
    c.conn_error(PROTOCOL_ERROR)


@case("6.10", "CONTINUATION after DATA: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.data(1, b"x", end_stream=False)
    c.send_frame(CONTINUATION, END_HEADERS, 1, hp_literal("x-late", "1"))
    c.conn_error(PROTOCOL_ERROR)


# ---- §7 error codes, §8.4 push ----------------------------------------------------------------------

@case("7", "an unknown error code in RST_STREAM is not an error")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(RST_STREAM, 0, 1, u32(0x4242))
    ok(c, 3)


@case("7", "an unknown error code in GOAWAY is not an error")
def _(connect):
    c = connect()
    c.headers(1, c.req())
    c.send_frame(GOAWAY, 0, 0, u32(0) + u32(0x4242))
    if c.status(1) != 200:
        raise Failed("not served")


@case("8.4", "PUSH_PROMISE from a client: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.send_frame(PUSH_PROMISE, END_HEADERS, 1, u32(2) + hp_literals(c.req()))
    c.conn_error(PROTOCOL_ERROR)
