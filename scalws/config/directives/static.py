"""The config half of the `static` handler: files from a folder.

    static: {root: /srv/www}
    static: {root: public, try_files: [$uri, $uri/, /index.html],
             expires: 7d, charset: utf-8, mime_types: {gltf: model/gltf+json}}

compile() validates the node and returns a model.Static, or None after
reporting every problem through the loader's context (`ctx`, see
loader._Context), in the shape of respond.compile. The runtime half
(csrc/engine.c, serve_static) reads files through the open-file cache with the
values compiled here; nothing here opens a file except `root`'s stat and
the system's /etc/mime.types (see scalws/config/mime.py).

The keys, their defaults and the runtime's behaviour are documented in
docs/configuration.md (section `static`).
"""
from __future__ import annotations

import os
import re

from ..mime import extension_problem, load_mime_types, media_type_problem
from ..model import Static
from .fields import Fields
from .respond import OWNED_HEADERS as RESPOND_OWNED
from .respond import compile_headers, header_value_problem, is_token

KEYS = ("root", "index", "try_files", "autoindex", "expires", "cache_control",
        "headers", "precompressed", "follow_symlinks", "deny_hidden",
        "mime_types", "charset", "default_type", "open_file_cache_valid",
        "open_file_cache_max", "memory_cache_max", "sendfile_chunk")

# nginx's `expires max`: ten years, the longest max-age caches honour.
EXPIRES_MAX = 315360000.0

FOLLOW_SYMLINKS = ("on", "off", "owner")

# Headers the static runtime writes itself: respond's list, with the
# Content-Type advice adjusted, and the headers that come from the file.
OWNED_HEADERS = {
    **RESPOND_OWNED,
    "content-length": "the server sends the file's size",
    "content-type": "use the keys mime_types, default_type and charset instead",
    "cache-control": "use the key cache_control or expires instead",
    "expires": "use the key expires instead",
    "etag": "the server computes it from the file",
    "last-modified": "the server sends the file's modification time",
    "accept-ranges": "the server answers range requests itself",
    "content-range": "the server answers range requests itself",
    "content-encoding": "the server sets it when it serves a precompressed "
                        "file (see precompressed)",
}

_STATUS_RE = re.compile(r"=([0-9]{3})")


def compile(ctx, node, path):
    """Validate `static:` at `node`; return a Static or None."""
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping with at least root, such as "
                  f"{{root: /srv/www}}; got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None

    def sub(name):
        return f"{path}.{name}"

    fields = Fields()
    put, values = fields.put, fields.values

    if ctx.require(keys, node, path, "root"):
        put("root", _root(ctx, keys["root"][1], sub("root")))
    else:
        fields.ok = False

    if "index" in keys:
        put("index", _index(ctx, keys["index"][1], sub("index")))

    if "try_files" in keys:
        tried = _try_files(ctx, keys["try_files"][1], sub("try_files"))
        if tried is None:
            fields.ok = False
        else:
            values["try_files"], values["try_status"], values["try_uri"] = tried

    for name in ("autoindex", "precompressed", "deny_hidden"):
        if name in keys:
            put(name, ctx.boolean(keys[name][1], sub(name)))

    if "expires" in keys and "cache_control" in keys:
        # Report at the later of the two, where the conflict becomes visible.
        later = max(("expires", "cache_control"),
                    key=lambda k: (keys[k][0].start_mark.line, keys[k][0].start_mark.column))
        ctx.error(keys[later][0], sub(later), "expires and cache_control exclude "
                  "each other (expires writes Cache-Control itself); keep one")
        fields.ok = False
    if "expires" in keys:
        expires = _expires(ctx, keys["expires"][1], sub("expires"))
        if expires is False:
            fields.ok = False
        else:
            values["expires"] = expires
    if "cache_control" in keys:
        put("cache_control", _header_value(ctx, keys["cache_control"][1],
                                           sub("cache_control")))

    if "headers" in keys:
        put("headers", _headers(ctx, keys["headers"][1], sub("headers")))

    if "follow_symlinks" in keys:
        put("follow_symlinks", _follow_symlinks(ctx, keys["follow_symlinks"][1],
                                                sub("follow_symlinks")))

    extra = {}
    if "mime_types" in keys:
        extra = _mime_types(ctx, keys["mime_types"][1], sub("mime_types"))
        fields.ok &= extra is not None

    if "charset" in keys:
        charset = _charset(ctx, keys["charset"][1], sub("charset"))
        if charset is False:
            fields.ok = False
        else:
            values["charset"] = charset

    if "default_type" in keys:
        put("default_type", _media_type(ctx, keys["default_type"][1],
                                         sub("default_type")))

    if "open_file_cache_valid" in keys:
        put("open_file_cache_valid", ctx.duration(
            keys["open_file_cache_valid"][1], sub("open_file_cache_valid"),
            positive=True))
    if "open_file_cache_max" in keys:
        put("open_file_cache_max", ctx.integer(
            keys["open_file_cache_max"][1], sub("open_file_cache_max"), 1, 1_000_000))
    if "memory_cache_max" in keys:
        put("memory_cache_max", ctx.size(
            keys["memory_cache_max"][1], sub("memory_cache_max"), 0, 1 << 30))
    if "sendfile_chunk" in keys:
        put("sendfile_chunk", ctx.size(
            keys["sendfile_chunk"][1], sub("sendfile_chunk"), 4 << 10, 1 << 30))

    if not fields.ok:
        return None
    return Static(mime_types=load_mime_types(extra), **values)



# -- root and file names ------------------------------------------------------

def _root(ctx, node, path):
    """An existing folder; relative to the configuration's folder."""
    full = ctx.path(node, path)
    if full is None:
        return None
    if not os.path.exists(full):
        ctx.error(node, path, f"the folder {full} does not exist")
        return None
    if not os.path.isdir(full):
        ctx.error(node, path, f"{full} is not a folder")
        return None
    return full


def _control_problem(text: str):
    if "\0" in text:
        return "must not contain NUL"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return "must not contain control characters"
    return None


def _index(ctx, node, path):
    """index: a name or a list of names -> [names]; [] is allowed (none)."""
    kind = ctx.kind(node)
    if kind == "str":
        items = [(node, path)]
    elif kind == "seq":
        items = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    else:
        ctx.error(node, path, "expected a file name or a list of file names, "
                  f"got {ctx.describe(node)}")
        return None
    names = []
    seen = {}
    ok = True
    for item, ipath in items:
        name = ctx.string(item, ipath)
        if name is None:
            ok = False
            continue
        why = _control_problem(name)
        if why is None and "/" in name:
            why = f"'{name}' is a path: an index is a file name, without '/'"
        if why is None and name in (".", ".."):
            why = f"'{name}' is not a file name"
        if why is None and name in seen:
            why = f"'{name}' is already listed (line {seen[name]})"
        if why is not None:
            ctx.error(item, ipath, why)
            ok = False
            continue
        seen[name] = item.start_mark.line + 1
        names.append(name)
    return names if ok else None


def _try_files(ctx, node, path):
    """try_files -> (candidates, fallback status or None, fallback URI or None)."""
    kind = ctx.kind(node)
    if kind != "seq":
        hint = ""
        if kind == "str" and len(node.value.split()) > 1:
            hint = f"; write [{', '.join(node.value.split())}]"
        ctx.error(node, path, f"expected a list, got {ctx.describe(node)}{hint}")
        return None
    if not node.value:
        ctx.error(node, path, "expected at least one item")
        return None
    candidates = []
    status = uri = None
    seen = {}
    ok = True
    last = len(node.value) - 1
    for i, item in enumerate(node.value):
        ipath = f"{path}[{i}]"
        text = ctx.string(item, ipath)
        if text is None:
            ok = False
            continue
        why = _control_problem(text)
        if why is None and text in seen:
            why = f"'{text}' is already listed (line {seen[text]})"
        if why is None:
            if text.startswith("="):
                why = _try_status(text, i == last)
                if why is None:
                    status = int(text[1:])
            elif text in ("$uri", "$uri/"):
                candidates.append(text)
            elif text.startswith("/"):
                why = _try_path(text, i == last)
                if why is None:
                    if i == last:
                        uri = text
                    else:
                        candidates.append(text)
            elif "$" in text:
                why = (f"'{text}': the only variable is $uri (as $uri or $uri/); "
                       "nginx's other variables do not exist here")
            else:
                why = (f"expected $uri, $uri/ or a path starting with '/', or as the "
                       f"last item =NNN or a URI; got '{text}'")
        if why is not None:
            ctx.error(item, ipath, why)
            ok = False
            continue
        seen[text] = item.start_mark.line + 1
    if ok and not candidates:
        ctx.error(node, path, "expected at least one candidate ($uri, $uri/ or a "
                  "path) before the fallback")
        ok = False
    return (candidates, status, uri) if ok else None


def _try_status(text: str, last: bool):
    m = _STATUS_RE.fullmatch(text)
    if m is None:
        return f"expected =NNN, a status such as =404; got '{text}'"
    code = int(m.group(1))
    if not 400 <= code <= 599:
        return f"the status must be an error (400..599), got {code}"
    if not last:
        return f"'{text}' must be the last item: nothing after it can be tried"
    return None


def _try_path(text: str, last: bool):
    """Why a '/...' item (a file under root, or the last item's URI) is bad."""
    name, q, query = text.partition("?")
    if last and q and query in ("$args", "$query_string"):
        text = name            # the request's query goes with the fallback
    if "$" in text:
        return (f"'{text}': variables are not expanded inside a path; the only "
                "variable is $uri, alone (as $uri or $uri/), and a last item may "
                "end in ?$args (or ?$query_string) to keep the request's query")
    if any(c.isspace() for c in text):
        return "must not contain whitespace"
    if ".." in text.split("?", 1)[0].split("/"):
        return "must not contain '..' segments"
    if "?" in text and not last:
        return f"'{text}' is a file name under root: it has no query string"
    return None


# -- caching and headers ------------------------------------------------------

def _expires(ctx, node, path):
    """Seconds, None for off, or False after reporting."""
    kind = ctx.kind(node)
    if kind == "bool" and not ctx.boolean(node, path):   # a bare off, no, false
        return None
    if kind == "str" and node.value in ("off", "max"):
        return None if node.value == "off" else EXPIRES_MAX
    if kind in ("int", "float") or (kind == "str" and node.value[:1].isdigit()):
        value = ctx.duration(node, path)
        if value is None:
            return False
        if value > EXPIRES_MAX:
            ctx.error(node, path, f"must be at most 3650d (10 years; or write max), "
                      f"got {node.value}")
            return False
        return value
    ctx.error(node, path, "expected a duration such as 7d or 1h, or off or max; "
              f"got {ctx.describe(node)}")
    return False


def _header_value(ctx, node, path):
    value = ctx.string(node, path)
    if value is None:
        return None
    why = header_value_problem(value)
    if why is not None:
        ctx.error(node, path, why)
        return None
    return value


def _headers(ctx, node, path):
    """headers: respond's grammar with this handler's OWNED_HEADERS."""
    return compile_headers(ctx, node, path, owned=OWNED_HEADERS)


# -- files ----------------------------------------------------------------------

def _follow_symlinks(ctx, node, path):
    kind = ctx.kind(node)
    if kind == "bool":                 # YAML 1.1 reads a bare on/off as a boolean
        return "on" if ctx.boolean(node, path) else "off"
    if kind == "str" and node.value in FOLLOW_SYMLINKS:
        return node.value
    ctx.error(node, path, f"expected on, off or owner; got {ctx.describe(node)}")
    return None


def _mime_types(ctx, node, path):
    """mime_types: {ext: type} -> dict, types lowercased."""
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping of extensions to media types, "
                  f"such as {{gltf: model/gltf+json}}; got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, None)
    out = {}
    ok = True
    for ext, (knode, vnode) in keys.items():
        epath = f"{path}.{ext}"
        why = extension_problem(ext)
        if why is not None:
            ctx.error(knode, epath, why)
            ok = False
            continue
        mtype = _media_type(ctx, vnode, epath)
        if mtype is None:
            ok = False
            continue
        out[ext] = mtype
    return out if ok else None


def _media_type(ctx, node, path):
    text = ctx.string(node, path)
    if text is None:
        return None
    why = media_type_problem(text)
    if why is not None:
        ctx.error(node, path, f"{why}; got '{text}'")
        return None
    return text.lower()


def _charset(ctx, node, path):
    """A charset name, None for off, or False after reporting."""
    kind = ctx.kind(node)
    if kind == "bool" and not ctx.boolean(node, path):
        return None
    if kind == "str" and node.value == "off":
        return None
    if kind == "str" and is_token(node.value):
        return node.value
    ctx.error(node, path, f"expected a charset such as utf-8, or off; got "
              f"{ctx.describe(node)}")
    return False
