"""The `respond` handler: a fixed response, built once at config load.

The engine (csrc/engine.c) writes these bytes for every matching request and
patches only the Date value and the Connection header, so nothing here runs
per request. The same builder makes the engine's own error pages.
"""
from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

# Statuses whose responses have no body and no Content-Length
# (RFC 9110 §8.6: 1xx and 204 must not send it; 304 describes another body).
_NO_LENGTH = {204, 304}


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


@dataclass(frozen=True)
class Prebuilt:
    """A response cut around its Date value: head_a + date + head_b + [Connection] + CRLF + body."""
    status: int
    head_a: bytes
    head_b: bytes
    body: bytes


def build(status: int, body: bytes, headers=(), content_type: str | None = "text/plain",
          server: str | None = "scalws") -> Prebuilt:
    head_a = f"HTTP/1.1 {status} {reason(status)}\r\n"
    if server:
        head_a += f"Server: {server}\r\n"
    head_a += "Date: "
    head_b = "\r\n"
    if content_type and status not in _NO_LENGTH:
        head_b += f"Content-Type: {content_type}\r\n"
    for name, value in headers:
        head_b += f"{name}: {value}\r\n"
    if status not in _NO_LENGTH:
        head_b += f"Content-Length: {len(body)}\r\n"
    else:
        body = b""
    return Prebuilt(status, head_a.encode("latin-1"), head_b.encode("latin-1"), body)


def from_config(respond, server: str | None) -> Prebuilt:
    """Compiles a config.model.Respond."""
    return build(respond.status, respond.body, respond.headers, respond.content_type, server)


# The engine's own answers, in the order of SWS_ERR_* in engine.h.
ERROR_STATUSES = (400, 403, 404, 405, 408, 412, 413, 414, 417, 431, 500, 501, 502, 503, 504, 505)


def error_page(status: int, server: str | None) -> Prebuilt:
    title = f"{status} {reason(status)}"
    body = (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
            f"<center><h1>{title}</h1></center>\r\n"
            + (f"<hr><center>{server}</center>\r\n" if server else "") +
            f"</body>\r\n</html>\r\n").encode()
    # 405 comes from static routes, which answer GET and HEAD (RFC 9110 §15.5.6).
    headers = (("Allow", "GET, HEAD"),) if status == 405 else ()
    return build(status, body, headers, "text/html", server)
