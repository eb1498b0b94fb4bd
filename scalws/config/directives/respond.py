"""The config half of the `respond` handler: a fixed response.

    respond: 204
    respond: {status: 200, body: "ok\\n", content_type: text/plain,
              headers: {Cache-Control: no-store, Set-Cookie: [a=1, b=2]}}

compile() validates the node and returns a model.Respond, or None after
reporting every problem through the loader's context (`ctx`, see
loader._Context: error, mapping, integer, string, kind, describe). The
runtime half (scalws/handlers/respond) prebuilds the response bytes from
the Respond and patches only the Date header per response.

This module also owns the header grammar checks (RFC 9110 §5.1 tokens,
§5.5 field values) that the loader reuses for server_header.
"""
from __future__ import annotations

from ..model import Respond

KEYS = ("status", "body", "content_type", "headers")

# RFC 9110 §5.6.2: token = 1*tchar.
_TCHAR = frozenset(
    "!#$%&'*+-.^_`|~0123456789"
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

# Headers the server writes itself, by lowercase name -> what to do instead.
OWNED_HEADERS = {
    "content-length": "the server computes it from body",
    "transfer-encoding": "the server chooses the framing",
    "connection": "the server manages connections (see limits.keepalive_*)",
    "keep-alive": "the server manages connections (see limits.keepalive_*)",
    "date": "the server sends the current date",
    "server": "use the top-level key server_header instead",
    "content-type": "use the key content_type instead",
}

# Statuses whose responses never have content (RFC 9110 §15.3.5, §15.4.5).
NO_CONTENT = (204, 304)


def is_token(name: str) -> bool:
    """True if `name` is an RFC 9110 token (a valid header field name)."""
    return bool(name) and all(c in _TCHAR for c in name)


def header_value_problem(value: str):
    """Why `value` cannot be a header field value, or None if it can.

    RFC 9110 §5.5: visible ASCII, spaces and tabs; no CR, LF, NUL or other
    controls. Non-ASCII (obs-text) is refused so that no one has to guess an
    encoding; leading and trailing whitespace is refused because a
    recipient strips it.
    """
    for c in value:
        if c in "\r\n":
            return "must not contain CR or LF"
        if c == "\0":
            return "must not contain NUL"
        if c != "\t" and (ord(c) < 0x20 or ord(c) == 0x7F):
            return f"must not contain the control character {ord(c):#04x}"
        if ord(c) > 0x7E:
            return f"must be ASCII (found {c!r})"
    if value != value.strip(" \t"):
        return "must not start or end with whitespace"
    return None


def compile(ctx, node, path):
    """Validate `respond:` at `node`; return a Respond or None."""
    kind = ctx.kind(node)
    if kind == "int":
        status = _status(ctx, node, path)
        if status is None:
            return None
        return Respond(status=status, body=b"", headers=[], content_type=None)
    if kind != "map":
        ctx.error(node, path, "expected a status such as 204 or a mapping "
                  f"with status, body, content_type, headers; got {ctx.describe(node)}")
        return None

    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    ok = True

    status = 200
    if "status" in keys:
        status = _status(ctx, keys["status"][1], f"{path}.status")
        ok &= status is not None

    body = b""
    if "body" in keys:
        bnode = keys["body"][1]
        text = ctx.string(bnode, f"{path}.body", nonempty=False)
        if text is None:
            ok = False
        else:
            body = text.encode("utf-8")
            if body and status in NO_CONTENT:
                ctx.error(bnode, f"{path}.body",
                          f"a {status} response has no content: the body must be empty")
                ok = False

    # Content-Type defaults to text/plain when there is a body; an empty
    # response has none unless one is asked for.
    content_type = "text/plain" if body else None
    if "content_type" in keys:
        cnode = keys["content_type"][1]
        cpath = f"{path}.content_type"
        if ctx.kind(cnode) == "null":
            content_type = None
        else:
            content_type = ctx.string(cnode, cpath)
            if content_type is None:
                ok = False
            elif (why := header_value_problem(content_type)) is not None:
                ctx.error(cnode, cpath, why)
                ok = False
            elif status in NO_CONTENT:
                ctx.error(cnode, cpath, f"a {status} response has no content: "
                          "remove content_type or set it to null")
                ok = False

    headers = []
    if "headers" in keys:
        headers = compile_headers(ctx, keys["headers"][1], f"{path}.headers")
        ok &= headers is not None

    if not ok:
        return None
    return Respond(status=status, body=body, headers=headers, content_type=content_type)


def _status(ctx, node, path):
    status = ctx.integer(node, path)
    if status is None:
        return None
    if not 100 <= status <= 599:
        ctx.error(node, path, f"status {status} is out of range (200..599)")
        return None
    if status < 200:
        ctx.error(node, path, f"status {status} is informational (1xx), "
                  "not a final response; use 200..599")
        return None
    return status


def compile_headers(ctx, node, path, owned=None):
    """headers: {Name: value or [values]} -> [(name, value)] in file order.

    `owned` maps the lowercase names the handler sets itself to the advice
    given when one is configured (default: respond's OWNED_HEADERS)."""
    owned = OWNED_HEADERS if owned is None else owned
    if ctx.kind(node) != "map":
        ctx.error(node, path, f"expected a mapping of header names to values, "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, None)   # None: any key is allowed here
    if keys is None:
        return None
    out = []
    ok = True
    seen = {}
    for name, (knode, vnode) in keys.items():
        hpath = f"{path}.{name}"
        lname = name.lower()
        if not is_token(name):
            ctx.error(knode, hpath, f"'{name}' is not a valid header name "
                      "(letters, digits and !#$%&'*+-.^_`|~ only)")
            ok = False
            continue
        if lname in owned:
            ctx.error(knode, hpath, f"header '{name}' is set by the server: "
                      f"{owned[lname]}")
            ok = False
            continue
        if lname in seen:
            ctx.error(knode, hpath, f"header '{name}' is already set as "
                      f"'{seen[lname]}' (names are case-insensitive); "
                      "give one name a list of values to send it more than once")
            ok = False
            continue
        seen[lname] = name
        values = vnode.value if ctx.kind(vnode) == "seq" else [vnode]
        if ctx.kind(vnode) == "seq" and not values:
            ctx.error(vnode, hpath, "expected at least one value")
            ok = False
        for i, item in enumerate(values):
            ipath = f"{hpath}[{i}]" if item is not vnode else hpath
            value = ctx.scalar_text(item, ipath)
            if value is None:
                ok = False
                continue
            why = header_value_problem(value)
            if why is not None:
                ctx.error(item, ipath, why)
                ok = False
                continue
            out.append((name, value))
    return out if ok else None
