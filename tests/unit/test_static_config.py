"""The config half of the static handler (scalws/config/directives/static.py):
each key's happy path, and each problem with its exact message and
FILE:LINE:COLUMN position.

The loader does not route `static` to this module yet (the runtime is not
written); the `wired` fixture does what registering it in
directives.HANDLERS will do, so these tests go through load_config exactly
as a real file will, and keep passing unchanged once it is registered.
Sample files are inline; in expected problem lines the file is shown as F.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from scalws.config.directives import static
from scalws.config.errors import ConfigError
from scalws.config.loader import load_config
from scalws.config.mime import load_mime_types
from scalws.config.model import Static

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The static mapping's keys start at line 6, column 11 (`P` below).
HEAD = """\
sites:
  - listen: ":8080"
    routes:
      - path: /
        static:
"""
P = "sites[0].routes[0].static"




@pytest.fixture
def www(tmp_path):
    (tmp_path / "www").mkdir()
    return tmp_path / "www"


def write(tmp_path, body):
    """A config whose static mapping is `body` (YAML lines, unindented)."""
    path = tmp_path / "scalws.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(body), " " * 10))
    return path


def load(tmp_path, body) -> Static:
    route = load_config(write(tmp_path, body)).sites[0].routes[0]
    assert route.kind == "static"
    return route.handler


def problems(tmp_path, body):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one_problem(tmp_path, body):
    lines = problems(tmp_path, body)
    assert len(lines) == 1, lines
    return lines[0]


# --------------------------------------------------------------------------
# The whole mapping

def test_defaults(tmp_path, www):
    s = load(tmp_path, "root: www\n")
    assert s.root == str(www)            # relative to the configuration's folder
    expected = Static(root=str(www), mime_types=s.mime_types)
    assert s == expected
    assert (s.index, s.try_files, s.try_status, s.try_uri) == (["index.html"], [], None, None)
    assert (s.autoindex, s.expires, s.cache_control, s.headers) == (False, None, None, [])
    assert (s.precompressed, s.follow_symlinks, s.deny_hidden) == (True, "on", True)
    assert (s.charset, s.default_type) == (None, "application/octet-stream")
    assert (s.open_file_cache_valid, s.open_file_cache_max) == (1.0, 10000)
    assert (s.memory_cache_max, s.sendfile_chunk) == (64 << 10, 2 << 20)
    assert s.mime_types == load_mime_types(None)
    assert s.mime_types["html"] == "text/html"


def test_every_key(tmp_path, www):
    s = load(tmp_path, f"""\
        root: {www}/
        index: [index.html, index.htm]
        try_files: [$uri, $uri/, /maintenance.html, =503]
        autoindex: on
        expires: 7d
        headers: {{X-Frame-Options: DENY, Link: [</a.css>; rel=preload, </b.js>; rel=preload]}}
        precompressed: off
        follow_symlinks: owner
        deny_hidden: no
        mime_types: {{gltf: Model/GLTF+JSON, js: application/javascript}}
        charset: utf-8
        default_type: text/plain
        open_file_cache_valid: 30s
        open_file_cache_max: 500
        memory_cache_max: 1m
        sendfile_chunk: 512k
        """)
    assert s.root == str(www)            # normalised: no trailing slash
    assert s.index == ["index.html", "index.htm"]
    assert s.try_files == ["$uri", "$uri/", "/maintenance.html"]
    assert (s.try_status, s.try_uri) == (503, None)
    assert s.autoindex is True and s.precompressed is False and s.deny_hidden is False
    assert s.expires == 7 * 86400.0 and s.cache_control is None
    assert s.headers == [("X-Frame-Options", "DENY"), ("Link", "</a.css>; rel=preload"),
                         ("Link", "</b.js>; rel=preload")]
    assert s.follow_symlinks == "owner"
    assert s.mime_types["gltf"] == "model/gltf+json"
    assert s.mime_types["js"] == "application/javascript"      # the route wins
    assert s.mime_types["png"] == "image/png"                  # the rest is kept
    assert s.charset == "utf-8" and s.default_type == "text/plain"
    assert (s.open_file_cache_valid, s.open_file_cache_max) == (30.0, 500)
    assert (s.memory_cache_max, s.sendfile_chunk) == (1 << 20, 512 << 10)


def test_not_a_mapping(tmp_path):
    path = tmp_path / "scalws.yaml"
    path.write_text(HEAD.replace("static:\n", "static: /srv/www\n"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}:5:17: {P}: expected a mapping with at least "
                               "root, such as {root: /srv/www}; got a string '/srv/www'")


@pytest.mark.parametrize("key, hint", [
    ("autoindx", "autoindex"), ("try_file", "try_files"), ("expire", "expires"),
    ("mime_type", "mime_types"), ("Root", "root"), ("follow_symlink", "follow_symlinks"),
])
def test_unknown_key_did_you_mean(tmp_path, www, key, hint):
    assert one_problem(tmp_path, f"root: www\n{key}: 1\n") == \
        f"F:7:11: {P}.{key}: unknown key '{key}'; did you mean '{hint}'?"


def test_unknown_key_lists_known_keys(tmp_path, www):
    line = one_problem(tmp_path, "root: www\nzzz: 1\n")
    assert line.startswith(f"F:7:11: {P}.zzz: unknown key 'zzz' (known keys: root, index, ")


def test_duplicate_key(tmp_path, www):
    assert one_problem(tmp_path, "root: www\nautoindex: on\nautoindex: off\n") == \
        f"F:8:11: {P}.autoindex: duplicate key 'autoindex' (first at line 7, column 11)"


def test_every_problem_in_one_pass(tmp_path, www):
    assert problems(tmp_path, """\
        root: www
        index: a/b.html
        expires: forever
        charset: on
        sendfile_chunk: 0
        """) == [
        f"F:7:18: {P}.index: 'a/b.html' is a path: an index is a file name, without '/'",
        f"F:8:20: {P}.expires: expected a duration such as 7d or 1h, or off or max; "
        "got a string 'forever'",
        f"F:9:20: {P}.charset: expected a charset such as utf-8, or off; got a boolean (on)",
        f"F:10:27: {P}.sendfile_chunk: must be between 4k and 1g, got 0",
    ]


def test_merge_keys(tmp_path, www):
    path = tmp_path / "scalws.yaml"
    path.write_text("x-static: &assets {expires: max, charset: utf-8}\n" + HEAD
                    + "          <<: *assets\n          root: www\n          charset: off\n")
    s = load_config(path).sites[0].routes[0].handler
    assert (s.expires, s.charset) == (static.EXPIRES_MAX, None)


# --------------------------------------------------------------------------
# root

def test_root_absolute(tmp_path, www):
    assert load(tmp_path, f"root: {www}/../www/.\n").root == str(www)


def test_root_required(tmp_path):
    assert one_problem(tmp_path, "autoindex: on\n") == \
        f"F:6:11: {P}.root: required key is missing"


def test_root_missing_folder(tmp_path):
    assert one_problem(tmp_path, "root: nowhere\n") == \
        f"F:6:17: {P}.root: the folder {tmp_path}/nowhere does not exist"


def test_root_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    assert one_problem(tmp_path, "root: file\n") == \
        f"F:6:17: {P}.root: {tmp_path}/file is not a folder"


@pytest.mark.parametrize("value, message", [
    ("42", "expected a string, got an integer 42"),
    ('""', "must not be empty"),
    ("[www]", "expected a string, got a list"),
    ("null", "expected a string, got null"),
    ('"a\\0b"', "must not contain NUL"),
])
def test_root_bad_values(tmp_path, value, message):
    assert one_problem(tmp_path, f"root: {value}\n") == f"F:6:17: {P}.root: {message}"


# --------------------------------------------------------------------------
# index

@pytest.mark.parametrize("value, expected", [
    ("default.htm", ["default.htm"]), ("[a.html, b.html]", ["a.html", "b.html"]),
    ("[]", []), ("[.index.html]", [".index.html"]),
])
def test_index(tmp_path, www, value, expected):
    assert load(tmp_path, f"root: www\nindex: {value}\n").index == expected


@pytest.mark.parametrize("value, where, message", [
    ("a/b.html", "7:18", "index: 'a/b.html' is a path: an index is a file name, without '/'"),
    ("[a.html, /b.html]", "7:27", "index[1]: '/b.html' is a path: an index is a "
     "file name, without '/'"),
    ("[..]", "7:19", "index[0]: '..' is not a file name"),
    ("[a.html, a.html]", "7:27", "index[1]: 'a.html' is already listed (line 7)"),
    ("[a.html, 3]", "7:27", "index[1]: expected a string, got an integer 3"),
    ('[""]', "7:19", "index[0]: must not be empty"),
    ('"a\\tb"', "7:18", "index: must not contain control characters"),
    ("{a: b}", "7:18", "index: expected a file name or a list of file names, got a mapping"),
    ("on", "7:18", "index: expected a file name or a list of file names, got a "
     "boolean (on)"),
])
def test_index_problems(tmp_path, www, value, where, message):
    assert one_problem(tmp_path, f"root: www\nindex: {value}\n") == f"F:{where}: {P}.{message}"


# --------------------------------------------------------------------------
# try_files

@pytest.mark.parametrize("value, files, status, uri", [
    ("[$uri]", ["$uri"], None, None),
    ("[$uri, $uri/, =404]", ["$uri", "$uri/"], 404, None),
    ("[$uri, /index.html]", ["$uri"], None, "/index.html"),
    ("[$uri, $uri/, '/index.php?from=static']", ["$uri", "$uri/"], None,
     "/index.php?from=static"),
    ("[/down.html, $uri, =503]", ["/down.html", "$uri"], 503, None),
    ("[$uri/, $uri, =599]", ["$uri/", "$uri"], 599, None),
])
def test_try_files(tmp_path, www, value, files, status, uri):
    s = load(tmp_path, f"root: www\ntry_files: {value}\n")
    assert (s.try_files, s.try_status, s.try_uri) == (files, status, uri)


@pytest.mark.parametrize("value, where, message", [
    ("$uri =404", "7:22", "try_files: expected a list, got a string '$uri =404'; "
     "write [$uri, =404]"),
    ("$uri", "7:22", "try_files: expected a list, got a string '$uri'"),
    ("[]", "7:22", "try_files: expected at least one item"),
    ("[=404]", "7:22", "try_files: expected at least one candidate ($uri, $uri/ or a "
     "path) before the fallback"),
    ("[/index.html]", "7:22", "try_files: expected at least one candidate ($uri, $uri/ "
     "or a path) before the fallback"),
    ("[$uri, =404, $uri/]", "7:29", "try_files[1]: '=404' must be the last item: "
     "nothing after it can be tried"),
    ("[$uri, =200]", "7:29", "try_files[1]: the status must be an error (400..599), got 200"),
    ("[$uri, =40]", "7:29", "try_files[1]: expected =NNN, a status such as =404; got '=40'"),
    ("[$uri, =abc]", "7:29", "try_files[1]: expected =NNN, a status such as =404; got '=abc'"),
    ("[$uri, $args]", "7:29", "try_files[1]: '$args': the only variable is $uri (as "
     "$uri or $uri/); nginx's other variables do not exist here"),
    ("[$uri.html, =404]", "7:23", "try_files[0]: '$uri.html': the only variable is $uri "
     "(as $uri or $uri/); nginx's other variables do not exist here"),
    ("[/cache$uri, =404]", "7:23", "try_files[0]: '/cache$uri': variables are not "
     "expanded inside a path; the only variable is $uri, alone (as $uri or $uri/), and a "
     "last item may end in ?$args (or ?$query_string) to keep the request's query"),
    ("[$uri, '/index.php?q=$uri']", "7:29", "try_files[1]: '/index.php?q=$uri': variables are "
     "not expanded inside a path; the only variable is $uri, alone (as $uri or $uri/), and a "
     "last item may end in ?$args (or ?$query_string) to keep the request's query"),
    ("[$uri, index.html]", "7:29", "try_files[1]: expected $uri, $uri/ or a path "
     "starting with '/', or as the last item =NNN or a URI; got 'index.html'"),
    ("[/../etc/passwd, =404]", "7:23", "try_files[0]: must not contain '..' segments"),
    ("[$uri, /a/../b]", "7:29", "try_files[1]: must not contain '..' segments"),
    ('[$uri, "/a b"]', "7:29", "try_files[1]: must not contain whitespace"),
    ("['/a?b=1', $uri]", "7:23", "try_files[0]: '/a?b=1' is a file name under root: it "
     "has no query string"),
    ("[$uri, $uri, =404]", "7:29", "try_files[1]: '$uri' is already listed (line 7)"),
    ("[$uri, 404]", "7:29", "try_files[1]: expected a string, got an integer 404"),
    ('[$uri, ""]', "7:29", "try_files[1]: must not be empty"),
])
def test_try_files_problems(tmp_path, www, value, where, message):
    assert one_problem(tmp_path, f"root: www\ntry_files: {value}\n") == \
        f"F:{where}: {P}.{message}"


# --------------------------------------------------------------------------
# booleans

@pytest.mark.parametrize("key", ["autoindex", "precompressed", "deny_hidden"])
@pytest.mark.parametrize("value, expected", [("on", True), ("off", False),
                                             ("true", True), ("no", False)])
def test_booleans(tmp_path, www, key, value, expected):
    assert getattr(load(tmp_path, f"root: www\n{key}: {value}\n"), key) is expected


@pytest.mark.parametrize("key", ["autoindex", "precompressed", "deny_hidden"])
def test_boolean_problems(tmp_path, www, key):
    assert one_problem(tmp_path, f"root: www\n{key}: sometimes\n") == \
        f"F:7:{13 + len(key)}: {P}.{key}: expected on or off, got a string 'sometimes'"


# --------------------------------------------------------------------------
# expires and cache_control

@pytest.mark.parametrize("value, expected", [
    ("7d", 7 * 86400.0), ("1h 30m", 5400.0), ("0", 0.0), ("90", 90.0), ("1.5", 1.5),
    ("off", None), ('"off"', None), ("false", None), ("max", 315360000.0),
    ("3650d", 315360000.0),
])
def test_expires(tmp_path, www, value, expected):
    assert load(tmp_path, f"root: www\nexpires: {value}\n").expires == expected


@pytest.mark.parametrize("value, message", [
    ("on", "expected a duration such as 7d or 1h, or off or max; got a boolean (on)"),
    ("forever", "expected a duration such as 7d or 1h, or off or max; got a string "
     "'forever'"),
    ("7 days", "expected a duration such as 10s or 500ms, got a string '7 days'"),
    ("-1", "expected a duration such as 10s or 500ms, got an integer -1"),
    ("3651d", "must be at most 3650d (10 years; or write max), got 3651d"),
    ("[1d]", "expected a duration such as 7d or 1h, or off or max; got a list"),
    ("null", "expected a duration such as 7d or 1h, or off or max; got null"),
])
def test_expires_problems(tmp_path, www, value, message):
    assert one_problem(tmp_path, f"root: www\nexpires: {value}\n") == \
        f"F:7:20: {P}.expires: {message}"


def test_cache_control(tmp_path, www):
    s = load(tmp_path, "root: www\ncache_control: public, max-age=31536000, immutable\n")
    assert (s.cache_control, s.expires) == ("public, max-age=31536000, immutable", None)


@pytest.mark.parametrize("value, message", [
    ('""', "must not be empty"),
    ('" no-cache"', "must not start or end with whitespace"),
    ('"no-cache\\r\\nX-Evil: 1"', "must not contain CR or LF"),
    ("600", "expected a string, got an integer 600"),
])
def test_cache_control_problems(tmp_path, www, value, message):
    assert one_problem(tmp_path, f"root: www\ncache_control: {value}\n") == \
        f"F:7:26: {P}.cache_control: {message}"


def test_expires_and_cache_control_exclude_each_other(tmp_path, www):
    message = ("expires and cache_control exclude each other (expires writes "
               "Cache-Control itself); keep one")
    assert one_problem(tmp_path, "root: www\nexpires: 1d\ncache_control: no-cache\n") == \
        f"F:8:11: {P}.cache_control: {message}"
    assert one_problem(tmp_path, "root: www\ncache_control: no-cache\nexpires: off\n") == \
        f"F:8:11: {P}.expires: {message}"


# --------------------------------------------------------------------------
# headers (respond's grammar, the static handler's owned list)

def test_headers(tmp_path, www):
    s = load(tmp_path, "root: www\nheaders:\n  X-Version: 1.0\n  Vary: Origin\n"
                       "  Set-Cookie: [a=1, b=2]\n")
    assert s.headers == [("X-Version", "1.0"), ("Vary", "Origin"),
                         ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]


@pytest.mark.parametrize("name, advice", [
    ("Content-Type", "use the keys mime_types, default_type and charset instead"),
    ("cache-control", "use the key cache_control or expires instead"),
    ("Expires", "use the key expires instead"),
    ("ETag", "the server computes it from the file"),
    ("Last-Modified", "the server sends the file's modification time"),
    ("Accept-Ranges", "the server answers range requests itself"),
    ("Content-Range", "the server answers range requests itself"),
    ("Content-Encoding", "the server sets it when it serves a precompressed file "
     "(see precompressed)"),
    ("Content-Length", "the server sends the file's size"),
    ("Server", "use the top-level key server_header instead"),
    ("Connection", "the server manages connections (see limits.keepalive_*)"),
])
def test_headers_owned_by_the_server(tmp_path, www, name, advice):
    assert one_problem(tmp_path, f"root: www\nheaders: {{{name}: x}}\n") == \
        f"F:7:21: {P}.headers.{name}: header '{name}' is set by the server: {advice}"


@pytest.mark.parametrize("body, where, message", [
    ("headers: {X Bad: 1}", "7:21", "headers.X Bad: 'X Bad' is not a valid header name "
     "(letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("headers: {X-A: 1, x-a: 2}", "7:29", "headers.x-a: header 'x-a' is already set as "
     "'X-A' (names are case-insensitive); give one name a list of values to send it "
     "more than once"),
    ('headers: {X-A: " a"}', "7:26", "headers.X-A: must not start or end with whitespace"),
    ("headers: {X-A: []}", "7:26", "headers.X-A: expected at least one value"),
    ("headers: {X-A: [a, null]}", "7:30", "headers.X-A[1]: expected a string, got null"),
    ("headers: [X-A]", "7:20", "headers: expected a mapping of header names to values, "
     "got a list"),
])
def test_headers_problems(tmp_path, www, body, where, message):
    assert one_problem(tmp_path, f"root: www\n{body}\n") == f"F:{where}: {P}.{message}"


# --------------------------------------------------------------------------
# follow_symlinks

@pytest.mark.parametrize("value, expected", [
    ("on", "on"), ("off", "off"), ("owner", "owner"), ('"on"', "on"), ('"off"', "off"),
    ("true", "on"), ("no", "off"),
])
def test_follow_symlinks(tmp_path, www, value, expected):
    assert load(tmp_path, f"root: www\nfollow_symlinks: {value}\n").follow_symlinks == expected


@pytest.mark.parametrize("value, got", [
    ("if_not_owner", "a string 'if_not_owner'"), ("1", "an integer 1"), ("Owner", "a string 'Owner'"),
])
def test_follow_symlinks_problems(tmp_path, www, value, got):
    assert one_problem(tmp_path, f"root: www\nfollow_symlinks: {value}\n") == \
        f"F:7:28: {P}.follow_symlinks: expected on, off or owner; got {got}"


# --------------------------------------------------------------------------
# mime_types, charset, default_type

def test_mime_types_override_and_extend(tmp_path, www):
    s = load(tmp_path, "root: www\nmime_types: {ts: video/mp2t, glb: model/gltf-binary}\n")
    assert s.mime_types == load_mime_types({"ts": "video/mp2t", "glb": "model/gltf-binary"})
    assert (s.mime_types["ts"], s.mime_types["glb"]) == ("video/mp2t", "model/gltf-binary")


@pytest.mark.parametrize("body, where, message", [
    ("{.js: text/javascript}", "7:24", "mime_types..js: write the extension without "
     "the dot: 'js'"),
    ("{JS: text/javascript}", "7:24", "mime_types.JS: extensions are matched "
     "case-insensitively; write it in lowercase: 'js'"),
    ("{tar.gz: application/gzip}", "7:24", "mime_types.tar.gz: an extension has no dot: "
     "a file's type comes from the part after its last dot"),
    ('{"a/b": text/plain}', "7:24", "mime_types.a/b: an extension is letters, digits "
     "and !#$%&'*+-^_`|~ only"),
    ("{js: javascript}", "7:28", "mime_types.js: expected a media type such as text/html "
     "(type/subtype); got 'javascript'"),
    ('{txt: "text/plain; charset=utf-8"}', "7:29", "mime_types.txt: expected a bare "
     "type/subtype without parameters (the charset key adds '; charset=...'); got "
     "'text/plain; charset=utf-8'"),
    ("{js: 1}", "7:28", "mime_types.js: expected a string, got an integer 1"),
    ("[js]", "7:23", "mime_types: expected a mapping of extensions to media types, such "
     "as {gltf: model/gltf+json}; got a list"),
])
def test_mime_types_problems(tmp_path, www, body, where, message):
    assert one_problem(tmp_path, f"root: www\nmime_types: {body}\n") == \
        f"F:{where}: {P}.{message}"


@pytest.mark.parametrize("value, expected", [
    ("utf-8", "utf-8"), ("UTF-8", "UTF-8"), ("iso-8859-1", "iso-8859-1"),
    ("off", None), ('"off"', None), ("false", None),
])
def test_charset(tmp_path, www, value, expected):
    assert load(tmp_path, f"root: www\ncharset: {value}\n").charset == expected


@pytest.mark.parametrize("value, got", [
    ('"utf 8"', "a string 'utf 8'"), ("on", "a boolean (on)"), ("8", "an integer 8"),
    ('""', "an empty string"),
])
def test_charset_problems(tmp_path, www, value, got):
    assert one_problem(tmp_path, f"root: www\ncharset: {value}\n") == \
        f"F:7:20: {P}.charset: expected a charset such as utf-8, or off; got {got}"


def test_default_type(tmp_path, www):
    assert load(tmp_path, "root: www\ndefault_type: Text/Plain\n").default_type == "text/plain"


@pytest.mark.parametrize("value, message", [
    ("binary", "expected a media type such as text/html (type/subtype); got 'binary'"),
    ("text/", "expected a media type such as text/html (type/subtype); got 'text/'"),
    ("off", "expected a string, got a boolean (off)"),
])
def test_default_type_problems(tmp_path, www, value, message):
    assert one_problem(tmp_path, f"root: www\ndefault_type: {value}\n") == \
        f"F:7:25: {P}.default_type: {message}"


# --------------------------------------------------------------------------
# caches and sendfile

@pytest.mark.parametrize("body, attr, expected", [
    ("open_file_cache_valid: 500ms", "open_file_cache_valid", 0.5),
    ("open_file_cache_valid: 1m", "open_file_cache_valid", 60.0),
    ("open_file_cache_max: 1", "open_file_cache_max", 1),
    ("open_file_cache_max: 1000000", "open_file_cache_max", 1_000_000),
    ("memory_cache_max: 0", "memory_cache_max", 0),
    ("memory_cache_max: 1g", "memory_cache_max", 1 << 30),
    ("sendfile_chunk: 4k", "sendfile_chunk", 4096),
    ("sendfile_chunk: 16M", "sendfile_chunk", 16 << 20),
])
def test_cache_keys(tmp_path, www, body, attr, expected):
    assert getattr(load(tmp_path, f"root: www\n{body}\n"), attr) == expected


@pytest.mark.parametrize("body, message", [
    ("open_file_cache_valid: 0", "must be more than 0, got 0"),
    ("open_file_cache_valid: soon", "expected a duration such as 10s or 500ms, got a "
     "string 'soon'"),
    ("open_file_cache_max: 0", "must be between 1 and 1000000, got 0"),
    ("open_file_cache_max: 10k", "expected an integer, got a string '10k'"),
    ("memory_cache_max: 2g", "must be between 0 and 1g, got 2g"),
    ("memory_cache_max: big", "expected a size such as 16k or 10m, got a string 'big'"),
    ("sendfile_chunk: 0", "must be between 4k and 1g, got 0"),
    ("sendfile_chunk: 1k", "must be between 4k and 1g, got 1k"),
    ("sendfile_chunk: 1.5m", "expected a size such as 16k or 10m, got a string '1.5m'"),
])
def test_cache_key_problems(tmp_path, www, body, message):
    key, _, value = body.partition(": ")
    col = 11 + len(key) + 2
    assert one_problem(tmp_path, f"root: www\n{body}\n") == \
        f"F:7:{col}: {P}.{key}: {message}"


# --------------------------------------------------------------------------
# Layering

def test_static_config_imports_nothing_compiled(tmp_path):
    """--check-config of a static route must not need a compiled extension."""
    (tmp_path / "www").mkdir()
    text = HEAD + "          root: www\n"
    code = textwrap.dedent(f"""\
        import sys
        from scalws.config import loader
        from scalws.config.directives import routes, static
        routes.HANDLERS["static"] = static.compile
        routes.UNAVAILABLE_HANDLERS = ()
        cfg = loader.load_config_text({text!r},
                                      base_dir={str(tmp_path)!r})
        assert cfg.sites[0].routes[0].kind == "static"
        compiled = [name for name, m in sys.modules.items()
                    if name.startswith("scalws") and
                    not (getattr(m, "__file__", None) or "").endswith(".py")]
        assert not compiled, compiled
        """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

