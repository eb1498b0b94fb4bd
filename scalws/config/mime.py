"""MIME types for the static handler: file extension -> media type.

    load_mime_types(extra, system_path)  -> {ext: type}   the merged map
    parse_mime_types(text, source, strict) -> {ext: type} one /etc/mime.types text
    is_text(type), content_type(type, charset)             the `charset` key
    media_type_problem(text), extension_problem(ext)       checks for the config

Three layers, each overriding the one before: the built-in table
(scalws/config/mime_table.py, generated from tools/mime.types.src),
then the system's /etc/mime.types when it exists, then a route's own
`mime_types` key. Extensions are stored lowercase without the dot, types
lowercase (RFC 9110 §8.3.1: type and subtype are case-insensitive), so the
runtime lowercases the request's extension and does one dict lookup.

This module imports nothing compiled; the built-in table is pure data.
"""
from __future__ import annotations

import os

__all__ = ["SYSTEM_MIME_TYPES", "DEFAULT_TYPE", "TEXT_TYPES", "load_mime_types",
           "parse_mime_types", "builtin_types", "is_text", "content_type",
           "media_type_problem", "extension_problem"]

SYSTEM_MIME_TYPES = "/etc/mime.types"
DEFAULT_TYPE = "application/octet-stream"

# Types outside text/* that are text, so that the `charset` key applies to
# them (besides any +json or +xml structured-syntax suffix, RFC 6839).
TEXT_TYPES = frozenset({
    "application/javascript",          # obsoleted by text/javascript (RFC 9239)
    "application/ecmascript",
    "application/x-javascript",
    "application/json",
    "application/xml",
    "application/manifest+json",
    "application/x-www-form-urlencoded",
})


# RFC 9110 §5.6.2 tchar, as in directives/respond.py. Not imported from
# there: directives/ imports this module (static.py), and once the package
# registers static, importing it from here would be a cycle.
_TCHAR = frozenset(
    "!#$%&'*+-.^_`|~0123456789"
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def _is_token(text: str) -> bool:
    return bool(text) and all(c in _TCHAR for c in text)


def builtin_types() -> dict:
    """A fresh copy of the built-in table (tools/mime.types.src)."""
    # Imported here, not at the top: the table is generated into the
    # handlers package (see tools/gen_mime.py), and a config-only import of
    # this module, as the loader makes, should not load that package.
    from .mime_table import BUILTIN
    return dict(BUILTIN)


def load_mime_types(extra: dict | None = None,
                    system_path: str | None = SYSTEM_MIME_TYPES) -> dict:
    """The merged map: built-in < `system_path` (if readable) < `extra`.

    `extra` is a route's `mime_types`, already checked by the config half
    (lowercase extensions without a dot, valid types). `system_path` None
    skips the system file; a missing or unreadable one is skipped silently,
    as the built-in table covers what a web server needs.
    """
    types = builtin_types()
    if system_path is not None:
        types.update(_system_types(system_path))
    for ext, mtype in (extra or {}).items():
        types[ext.lower()] = mtype.lower()
    return types


# (path, inode, mtime, size) -> parsed map: every static route of a load
# reads the same file, and a reload after the file changed reads it again.
_system_cache: dict = {}


def _system_types(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
            if key not in _system_cache:
                text = f.read().decode("utf-8", "replace")
                _system_cache.clear()
                _system_cache[key] = parse_mime_types(text, path)
    except OSError:
        return {}
    return _system_cache[key]


def parse_mime_types(text: str, source: str = "<string>", strict: bool = False) -> dict:
    """Parse mime.types syntax: `type ext ext ...` per line, `#` comments.

    Lenient (strict=False, for the system file): lines whose type is not
    type/subtype and extensions that cannot be one are skipped; a leading
    dot is dropped; everything is lowercased; when an extension is listed
    twice the later line wins, as with nginx and Python's mimetypes.

    Strict (for tools/mime.types.src): any of those raises ValueError
    "SOURCE:LINE: message", as does a type with no extension, an uppercase
    extension or one listed twice, so the one source stays unambiguous.
    """
    types: dict = {}
    first_line: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        for i, word in enumerate(words):
            if word.startswith("#"):       # a comment, at the start or after words
                del words[i:]
                break
        if not words:
            continue
        mtype, exts = words[0], words[1:]
        why = media_type_problem(mtype)
        if why is not None:
            if strict:
                raise ValueError(f"{source}:{number}: '{mtype}': {why}")
            continue
        if strict and not exts:
            raise ValueError(f"{source}:{number}: '{mtype}' has no extension")
        for ext in exts:
            if strict:
                why = extension_problem(ext)
                if why is None and ext in first_line:
                    why = f"already listed at line {first_line[ext]}"
                if why is not None:
                    raise ValueError(f"{source}:{number}: extension '{ext}': {why}")
            else:
                ext = ext.lstrip(".").lower()
                if extension_problem(ext) is not None:
                    continue
            first_line.setdefault(ext, number)
            types[ext] = mtype.lower()
    return types


def media_type_problem(text: str):
    """Why `text` is not a bare media type `type/subtype`, or None."""
    mtype, slash, subtype = text.partition("/")
    if ";" in text:
        return ("expected a bare type/subtype without parameters (the "
                "charset key adds '; charset=...')")
    if not slash or not _is_token(mtype) or not _is_token(subtype):
        return "expected a media type such as text/html (type/subtype)"
    return None


def extension_problem(ext: str):
    """Why `ext` cannot be a file extension key, or None."""
    if not ext:
        return "an extension must not be empty"
    if ext.startswith("."):
        return f"write the extension without the dot: '{ext.lstrip('.')}'"
    if "." in ext:
        return ("an extension has no dot: a file's type comes from the part "
                "after its last dot")
    if not _is_token(ext):
        return "an extension is letters, digits and !#$%&'*+-^_`|~ only"
    if ext != ext.lower():
        return (f"extensions are matched case-insensitively; write it in "
                f"lowercase: '{ext.lower()}'")
    return None


def is_text(media_type: str) -> bool:
    """True if `media_type` is text, so that a configured charset applies.

    text/*, the JSON, XML and JavaScript types of TEXT_TYPES, and any
    +json or +xml suffix (image/svg+xml, application/ld+json). Parameters
    and case are ignored.
    """
    mtype = media_type.split(";", 1)[0].strip().lower()
    return (mtype.startswith("text/") or mtype in TEXT_TYPES
            or mtype.endswith(("+json", "+xml")))


def content_type(media_type: str, charset: str | None) -> str:
    """The Content-Type value: `charset` appended to text types only."""
    if charset and is_text(media_type):
        return f"{media_type}; charset={charset}"
    return media_type
