"""The conformance cases of RFC 9113 section 8 (messages, fields, control
data, CONNECT) and RFC 7541 (HPACK); cases.py says what a case is."""
from __future__ import annotations

from .client import (COMPRESSION_ERROR, END_STREAM, HEADERS, HEADER_TABLE_SIZE, PROTOCOL_ERROR,
                     Failed, hp_int, hp_literals, hp_str)
from .caselib import R, case, ok

# ---- §8.1 messages: framing, trailers, content-length --------------------------------------------

def malformed(connect, fields, raw=False, body=None, sid=1):
    """A request that §8.1.1 calls malformed: a stream error PROTOCOL_ERROR."""
    c = connect()
    block = hp_literals(fields) if raw else c.block(fields)
    with c.corked():  # the body arrives with the request, before any answer
        c.headers(sid, block=block, end_stream=body is None)
        if body is not None:
            c.data(sid, body)
    c.stream_error(sid, PROTOCOL_ERROR)
    ok(c, sid + 2)


@case("8.1", "GET with a body is served")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "GET", [("content-length", "5")]), end_stream=False)
    c.data(1, b"hello")
    if c.status(1) != 200:
        raise Failed("not served")


@case("8.1", "HEAD: the head with no DATA")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "HEAD"))
    status, fields, body, _ = c.response(1)
    if status != 200 or body or not any(f.type == HEADERS and f.flags & END_STREAM for f in c.seen):
        raise Failed(f"{status}, {len(body)} octets of body")


@case("8.1", "a request body with trailers is served")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST", [("te", "trailers")]), end_stream=False)
    c.data(1, b"body", end_stream=False)
    c.headers(1, [("x-checksum", "abc")])
    if c.status(1) != 200:
        raise Failed("not served")


@case("8.1", "a second HEADERS without END_STREAM (trailers must end the stream): PROTOCOL_ERROR")
def _(connect):
    c = connect()
    c.headers(1, c.req("/", "POST"), end_stream=False)
    c.data(1, b"body", end_stream=False)
    c.headers(1, [("x-checksum", "abc")], end_stream=False)
    c.stream_error(1, PROTOCOL_ERROR, allow_response=True)


@case("8.1", "trailers with a pseudo-header: PROTOCOL_ERROR")
def _(connect):
    c = connect()
    with c.corked():
        c.headers(1, c.req("/", "POST"), end_stream=False)
        c.data(1, b"body", end_stream=False)
        c.headers(1, [(":path", "/x"), ("x-checksum", "abc")])
    c.stream_error(1, PROTOCOL_ERROR, allow_response=True)


@case("8.1.1", "content-length larger than the DATA: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R("/", "POST", [("content-length", "10")]),
              body=b"short")


@case("8.1.1", "content-length smaller than the DATA: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R("/", "POST", [("content-length", "2")]),
              body=b"longer")


@case("8.1.1", "content-length on HEADERS with END_STREAM and no DATA: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R("/", "POST", [("content-length", "3")]))


@case("8.1.1", "content-length that is not a number: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R("/", "POST", [("content-length", "1x")]), body=b"ab")


# ---- §8.2 fields ---------------------------------------------------------------------------------

@case("8.2", "an uppercase field name: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("X-Upper", "1")]), raw=True)


@case("8.2.1", "a field name with a space: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("x bad", "1")]), raw=True)


@case("8.2.1", "a field name with a colon inside: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("x:y", "1")]), raw=True)


@case("8.2.1", "an empty field name: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("", "1")]), raw=True)


@case("8.2.1", "a field value with CR LF: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("x-a", "1\r\nx-b: 2")]), raw=True)


@case("8.2.1", "a field value with NUL: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("x-a", "1\x002")]), raw=True)


@case("8.2.1", "a field value with leading whitespace: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("x-a", " 1")]), raw=True)


@case("8.2.2", "connection: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("connection", "keep-alive")]), raw=True)


@case("8.2.2", "keep-alive: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("keep-alive", "timeout=5")]), raw=True)


@case("8.2.2", "proxy-connection: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("proxy-connection", "close")]), raw=True)


@case("8.2.2", "transfer-encoding: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R("/", "POST", [("transfer-encoding", "chunked")]), raw=True, body=b"x")


@case("8.2.2", "upgrade: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("upgrade", "websocket")]), raw=True)


@case("8.2.2", "te other than trailers: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(extra=[("te", "gzip")]), raw=True)


@case("8.2.2", "te: trailers is accepted")
def _(connect):
    c = connect()
    c.headers(1, block=hp_literals(c.req(extra=[("te", "trailers")])))
    if c.status(1) != 200:
        raise Failed("not served")


@case("8.2.3", "cookie crumbs in several fields are served")
def _(connect):
    c = connect()
    c.headers(1, c.req(extra=[("cookie", "a=1"), ("cookie", "b=2")]))
    if c.status(1) != 200:
        raise Failed("not served")


# ---- §8.3 control data (pseudo-headers) ------------------------------------------------------------

@case("8.3", "a pseudo-header after a regular field: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, [f[0], f[1], f[3], ("x-a", "1"), f[2]], raw=True)


@case("8.3", "an unknown pseudo-header: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, [(":foo", "bar")] + R(), raw=True)


@case("8.3", "a response pseudo-header (:status) in a request: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, [(":status", "200")] + R(), raw=True)


@case("8.3.1", "no :method: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R()[1:], raw=True)


@case("8.3.1", "no :scheme: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, [f[0], f[2], f[3]], raw=True)


@case("8.3.1", "no :path: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, [f[0], f[1], f[3]], raw=True)


@case("8.3.1", "two :method: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, [f[0], (":method", "GET")] + f[1:], raw=True)


@case("8.3.1", "two :scheme: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, f[:2] + [(":scheme", "http")] + f[2:], raw=True)


@case("8.3.1", "two :path: PROTOCOL_ERROR")
def _(connect):
    f = R()
    malformed(connect, f[:3] + [(":path", "/")] + f[3:], raw=True)


@case("8.3.1", "an empty :path: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(path=""), raw=True)


@case("8.3.1", ":path neither origin-form nor '*': PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(path="index.html"), raw=True)


@case("8.3.1", ":path '*' for a method other than OPTIONS: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R(path="*"), raw=True)


@case("8.3.1", "neither :authority nor host: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, R()[:3], raw=True)


@case("8.3.1", ":authority with userinfo: 400")
def _(connect):
    # "MUST NOT include the deprecated userinfo subcomponent"; nghttp2 lets
    # '@' through, ScalWS answers 400 (§8.1.1: a server MAY answer a
    # malformed request before closing the stream) as HTTP/1.1 does for
    # such a Host, rather than send it upstream as Host.
    c = connect()
    c.headers(1, block=hp_literals(R(authority="user@localhost")))
    status = c.status(1)
    if status != 400:
        raise Failed(f"answered {status}")
    ok(c, 3)


@case("8.3.1", "a host field naming another authority than :authority: 400")
def _(connect):
    # "SHOULD treat a request as malformed": answered 400 (§8.1.1).
    c = connect()
    c.headers(1, block=hp_literals(R(extra=[("host", "elsewhere.example")])))
    status = c.status(1)
    if status != 400:
        raise Failed(f"answered {status}")
    c.headers(3, block=hp_literals(R(extra=[("host", "LocalHost")])))  # the same, any case
    if c.status(3) != 200:
        raise Failed("the same authority in host was refused")


@case("8.3.1", "OPTIONS * is served")
def _(connect):
    c = connect()
    c.headers(1, c.req("*", "OPTIONS"))
    status = c.status(1)
    if status >= 500 or status == 400:
        raise Failed(f"answered {status}")


# ---- §8.5 CONNECT ----------------------------------------------------------------------------------

@case("8.5", "CONNECT with :scheme and :path: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, [(":method", "CONNECT"), (":scheme", "http"), (":path", "/"),
                        (":authority", "example.com:443")], raw=True)


@case("8.5", "CONNECT without :authority: PROTOCOL_ERROR")
def _(connect):
    malformed(connect, [(":method", "CONNECT")], raw=True)


@case("8.5", "a well-formed CONNECT is answered, not reset (ScalWS is no forward proxy: 501)")
def _(connect):
    c = connect()
    c.headers(1, block=hp_literals([(":method", "CONNECT"), (":authority", "example.com:443")]))
    status = c.status(1)
    if status != 501:
        raise Failed(f"answered {status}")


# ---- RFC 7541 HPACK ------------------------------------------------------------------------------

def bad_block(connect, block):
    c = connect()
    c.headers(1, block=block)
    c.conn_error(COMPRESSION_ERROR)


@case("7541 2.3.3", "an indexed field past the dynamic table: COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, hp_int(70, 7, 0x80))


@case("7541 6.1", "an indexed field with index 0: COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, b"\x80")


@case("7541 2.3.3", "a literal whose name index is past the table: COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, hp_int(70, 4, 0x00) + hp_str(b"v"))


@case("7541 4.2", "a table size update over SETTINGS_HEADER_TABLE_SIZE: COMPRESSION_ERROR")
def _(connect):
    c = connect()
    limit = c.server_settings.get(HEADER_TABLE_SIZE, 4096)
    c.headers(1, block=hp_int(limit + 1, 5, 0x20) + hp_literals(c.req()))
    c.conn_error(COMPRESSION_ERROR)


@case("7541 4.2", "a table size update after a field: COMPRESSION_ERROR")
def _(connect):
    f = R()
    bad_block(connect, hp_literals(f[:1]) + hp_int(0, 5, 0x20) + hp_literals(f[1:]))


@case("7541 4.2", "a table size update of 0 at the start of a block is accepted")
def _(connect):
    c = connect()
    c.headers(1, block=hp_int(0, 5, 0x20) + hp_literals(c.req()))
    if c.status(1) != 200:
        raise Failed("not served")


@case("7541 5.1", "an integer over 2^32 (an endless continuation): COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, b"\xff" + b"\xff" * 10 + b"\x01")


@case("7541 5.2", "a string longer than the block: COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, b"\x00" + hp_int(100, 7) + b"short")


@case("7541 5.2", "a Huffman string with EOS in it: COMPRESSION_ERROR")
def _(connect):
    # 'a' is 00011; EOS is thirty 1 bits: a decoder must reject it (§5.2).
    bad_block(connect, hp_literals(R()) + b"\x00\x81a" + b"\x84" + b"\x1f\xff\xff\xff")


@case("7541 5.2", "Huffman padding longer than 7 bits: COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, hp_literals(R()) + b"\x00\x81a" + b"\x82\x1f\xff")  # 'a' then 11 1-bits


@case("7541 5.2", "Huffman padding that is not the EOS prefix (zeros): COMPRESSION_ERROR")
def _(connect):
    bad_block(connect, hp_literals(R()) + b"\x00\x81a" + b"\x81\x18")  # 'a' then 000


@case("7541 2.3.2", "the dynamic table carries over between requests")
def _(connect):
    c = connect()
    extra = [("x-repeat", "a value worth indexing")]
    for sid in (1, 3, 5):  # hpack's encoder indexes, then refers to the entries
        c.headers(sid, c.req(extra=extra))
        if c.status(sid) != 200:
            raise Failed("not served")
