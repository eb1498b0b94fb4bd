"""A site's `routes:`: each route's path pattern (prefix, exact, regex,
checked with the C library's regcomp) and the one key that names its
handler (docs/configuration.md, "routes"); problems through the loader's
context with file:line and the key."""
from __future__ import annotations

import ctypes
import re

from yaml.nodes import ScalarNode

from ..model import Route
from . import HANDLERS, UNAVAILABLE_HANDLERS


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# POSIX regcomp through ctypes: the router compiles routes with the same
# libc, so a pattern that passes here compiles there. glibc constants.
_REG_EXTENDED, _REG_ICASE, _REG_NOSUB = 1, 2, 8


_ROUTE_KEYS = ("path", *HANDLERS, *UNAVAILABLE_HANDLERS)


_MODIFIER_RE = re.compile(r"(=|\^~|~\*|~)\s*(.*)", re.DOTALL)


_MATCH = {"=": "exact", "": "prefix", "^~": "prefix_noregex",
          "~": "regex", "~*": "regex_icase"}


def _routes(ctx, node, path) -> list:
    if ctx.kind(node) != "seq":
        ctx.error(node, path, f"expected a list of routes, got {ctx.describe(node)}")
        return []
    if not node.value:
        ctx.error(node, path, "expected at least one route")
        return []
    routes = []
    seen = {}   # identity of a pattern -> line of its first route
    for i, item in enumerate(node.value):
        rpath = f"{path}[{i}]"
        route = _route(ctx, item, rpath)
        if route is None:
            continue
        # "/a" and "^~ /a" are the same prefix (nginx: duplicate location).
        ident = ("prefix" if route.match == "prefix_noregex" else route.match,
                 route.pattern)
        if ident in seen:
            ctx.error(ctx.origin[id(route)][0], f"{rpath}.path",
                      f"duplicate route for '{route.pattern}' (first at line "
                      f"{seen[ident]}); only the first could ever match")
            continue
        seen[ident] = route.mark[1]
        routes.append(route)
    return routes


def _route(ctx, node, path):
    keys = ctx.mapping(node, path, _ROUTE_KEYS)
    if keys is None:
        return None
    ok = True
    # A refused key (cache: beside a handler, most likely) is reported for
    # itself, not as a second handler.
    for name in keys:
        if name in UNAVAILABLE_HANDLERS:
            ctx.error(keys[name][0], _join(path, name), UNAVAILABLE_HANDLERS[name])
            ok = False
    handlers = [name for name in keys if name != "path" and name not in UNAVAILABLE_HANDLERS]
    match = pattern = None
    if ctx.require(keys, node, path, "path"):
        parsed = _pattern(ctx, keys["path"][1], f"{path}.path")
        if parsed is None:
            ok = False
        else:
            match, pattern = parsed
    else:
        ok = False

    handler = None
    if not handlers:
        # An unknown key (already reported) is most likely a misspelt handler.
        written = {k.value for k, _ in node.value if isinstance(k, ScalarNode)}
        if not written - {"path", "<<"}:
            ctx.error(node, path, "a route needs a handler: one of "
                      f"{', '.join(HANDLERS)}")
        ok = False
    elif len(handlers) > 1:
        ctx.error(keys[handlers[1]][0], _join(path, handlers[1]),
                  f"a route takes exactly one handler, found '{handlers[0]}' "
                  f"and '{handlers[1]}'")
        ok = False
    else:
        kind = handlers[0]
        handler = HANDLERS[kind](ctx, keys[kind][1], _join(path, kind))
        ok &= handler is not None

    if not ok:
        return None
    route = Route(match=match, pattern=pattern, kind=kind, handler=handler,
                  mark=ctx.mark(node))
    ctx.origin[id(route)] = (keys["path"][1], f"{path}.path")
    return route


def _pattern(ctx, node, path):
    """Parse `= /x`, `/x`, `^~ /x`, `~ re`, `~* re` -> (match, pattern)."""
    text = ctx.string(node, path)
    if text is None:
        return None
    m = _MODIFIER_RE.fullmatch(text)
    modifier, pattern = (m.group(1), m.group(2)) if m else ("", text)
    match = _MATCH[modifier]
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in pattern):
        ctx.error(node, path, "must not contain control characters")
        return None
    if match.startswith("regex"):
        if not pattern:
            ctx.error(node, path, f"expected a regular expression after '{modifier}'")
            return None
        why = _regex_problem(pattern, icase=match == "regex_icase")
        if why is not None:
            ctx.error(node, path, why)
            return None
    elif not pattern.startswith("/"):
        hint = ""
        if not modifier and re.search(r"[\^$*()\[\]\\|+?]", pattern):
            hint = f"; for a regular expression write '~ {pattern}'"
        elif not modifier and pattern.startswith("@"):
            hint = "; named locations (@name) are not supported"
        ctx.error(node, path, f"a path must start with '/', got '{pattern}'{hint}")
        return None
    return match, pattern


_REGEX_T_SIZE = 256            # >= sizeof(regex_t) (64 on glibc x86-64)


_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.regcomp.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            libc.regcomp.restype = ctypes.c_int
            libc.regerror.argtypes = [ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
            libc.regerror.restype = ctypes.c_size_t
            libc.regfree.argtypes = [ctypes.c_void_p]
            libc.regfree.restype = None
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc


def _regex_problem(pattern: str, icase: bool):
    """Why `pattern` is not a valid POSIX extended regex, or None."""
    # PCRE habits that POSIX either refuses with an obscure message or, worse,
    # accepts with another meaning (glibc reads \d as a plain 'd').
    if "(?" in pattern:
        return ("'(?' is PCRE syntax; routes use POSIX extended regular "
                "expressions (no (?i), (?:...) or lookarounds; use ~* for "
                "case-insensitive matching)")
    for escape, instead in (("\\d", "[0-9]"), ("\\D", "[^0-9]")):
        if re.search(r"(?<!\\)(?:\\\\)*" + re.escape(escape), pattern):
            return f"'{escape}' is PCRE syntax, not POSIX; write {instead}"
    data = pattern.encode("utf-8")
    if b"\0" in data:
        return "must not contain NUL"
    libc = _load_libc()
    if not libc:
        return None                # no C library to ask: the router will
    preg = ctypes.create_string_buffer(_REGEX_T_SIZE)
    flags = _REG_EXTENDED | _REG_NOSUB | (_REG_ICASE if icase else 0)
    rc = libc.regcomp(preg, data, flags)
    message = None
    if rc != 0:
        buf = ctypes.create_string_buffer(256)
        libc.regerror(rc, preg, buf, len(buf))
        text = buf.value.decode("utf-8", "replace") or f"error {rc}"
        message = f"invalid regular expression: {text}"
    libc.regfree(preg)             # glibc leaves a failed regex_t safe to free
    return message
