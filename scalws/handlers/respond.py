"""The `respond` handler: a fixed response, built once at config load.

The engine (csrc/handlers/respond.c) describes it through the response
interface for every matching request: the protocol adds the status line,
Server and Date, Content-Length and the Connection header, and copies the
header lines and the body built here. Nothing here runs per request. The
same builder makes the engine's own error pages.
"""
from __future__ import annotations

from scalws.config.record import dataclass
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
    """A fixed response as the engine's sws_respond_t holds it: the status and
    its reason, whole header lines (Content-Type, then the route's headers),
    the body, and whether it has a length (not for 204 and 304)."""
    status: int
    reason: bytes
    fields: bytes
    body: bytes
    has_length: bool


def build(status: int, body: bytes, headers=(), content_type: str | None = "text/plain",
          server: str | None = "scalws") -> Prebuilt:
    """`server` names the Server header the engine adds (scalws_engine_set_server);
    it is here for the error pages' signature line."""
    fields = ""
    if content_type and status not in _NO_LENGTH:
        fields += f"Content-Type: {content_type}\r\n"
    for name, value in headers:
        fields += f"{name}: {value}\r\n"
    has_length = status not in _NO_LENGTH
    if not has_length:
        body = b""
    return Prebuilt(status, reason(status).encode("latin-1"), fields.encode("latin-1"), body,
                    has_length)


def from_config(respond, server: str | None) -> Prebuilt:
    """Compiles a config.model.Respond."""
    return build(respond.status, respond.body, respond.headers, respond.content_type, server)


# The engine's own answers, in the order of SWS_ERR_* in engine.h.
ERROR_STATUSES = (400, 403, 404, 405, 408, 412, 413, 414, 417, 425, 431, 500, 501, 502, 503, 504,
                  505)


def error_page(status: int, server: str | None) -> Prebuilt:
    title = f"{status} {reason(status)}"
    body = (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
            f"<center><h1>{title}</h1></center>\r\n"
            + (f"<hr><center>{server}</center>\r\n" if server else "") +
            "</body>\r\n</html>\r\n").encode()
    # 405 comes from static routes, which answer GET and HEAD (RFC 9110 §15.5.6).
    headers = (("Allow", "GET, HEAD"),) if status == 405 else ()
    # 503 comes from an app's route while its workers are down or
    # restarting (the master restarts them within a second or backs off).
    if status == 503:
        headers = (("Retry-After", "1"),)
    return build(status, body, headers, "text/html", server)
