"""The static handler: real files in a temporary folder, real scalwsd, raw
sockets and http.client; every header that matters asserted."""
import email.utils
import hashlib
import http.client
import os
import re
import socket
import time

import pytest

from tests.e2e.conftest import raw, read_response, statuses

CONF = """
workers: 1
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /, static: {{root: "{root}", open_file_cache_valid: 200ms {extra}}}}}
"""

# A second document root: links from the first into it are followed (the
# sandbox lets a worker read every root, and nothing else).
CONF_SHARED = CONF + """\
      - {{path: /shared/, static: {{root: "{shared}"}}}}
"""


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / "page.html").write_text("<p>hi</p>\n")
    (root / "sub").mkdir()
    (root / "sub" / "index.html").write_text("<h1>index</h1>\n")
    (root / "noindex").mkdir()
    (root / ".secret").write_text("no")
    (root / ".well-known").mkdir()
    (root / ".well-known" / "acme").write_text("token")
    (root / "mid.bin").write_bytes(os.urandom(40_000))       # in memory, referenced
    (root / "big.bin").write_bytes(os.urandom(3_000_000))    # sendfile
    (root / "data.weird").write_text("w")
    return root


def start(server, www, extra=""):
    return server(CONF, root=str(www), extra=extra)


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def test_small_file_headers_and_body(server, www):
    srv = start(server, www)
    r, body = get(srv.port, "/a.txt")
    assert (r.status, body) == (200, b"hello\n")
    assert r.getheader("Content-Type") == "text/plain"
    assert r.getheader("Content-Length") == "6"
    st = os.stat(www / "a.txt")
    assert r.getheader("Last-Modified") == email.utils.formatdate(int(st.st_mtime), usegmt=True)
    # nginx's: mtime (s) and size in hex, no inode: the same on every host
    assert r.getheader("ETag") == f'"{int(st.st_mtime):x}-{st.st_size:x}"'
    assert r.getheader("Server") == "scalws" and r.getheader("Date")
    r, body = get(srv.port, "/page.html")
    assert r.getheader("Content-Type") == "text/html" and body == b"<p>hi</p>\n"
    r, body = get(srv.port, "/data.weird")
    assert r.getheader("Content-Type") == "application/octet-stream"


def test_head_has_headers_and_no_body(server, www):
    srv = start(server, www)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"HEAD /big.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        data = b""
        while not data.endswith(b"hello\n"):
            data += s.recv(65536)
    first, second = data.split(b"HTTP/1.1 200 OK")[1:]
    assert b"Content-Length: 3000000\r\n" in first and first.endswith(b"\r\n\r\n")
    assert second.endswith(b"\r\n\r\nhello\n")


@pytest.mark.parametrize("name", ["a.txt", "mid.bin", "big.bin"])
def test_bodies_byte_exact(server, www, name):
    srv = start(server, www)
    r, body = get(srv.port, "/" + name)
    assert r.status == 200
    assert hashlib.sha256(body).digest() == hashlib.sha256((www / name).read_bytes()).digest()


def test_pipelined_files_stay_in_order(server, www):
    srv = start(server, www)
    names = ["big.bin", "a.txt", "mid.bin", "a.txt", "big.bin", "page.html"]
    req = b"".join(b"GET /%s HTTP/1.1\r\nHost: a\r\n\r\n" % n.encode() for n in names)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(req)
        rest = b""
        for n in names:
            status, headers, body, rest = read_response(s, rest)
            assert status == 200 and body == (www / n).read_bytes(), n


def test_conditional_requests(server, www):
    srv = start(server, www)
    r, _ = get(srv.port, "/a.txt")
    etag, lm = r.getheader("ETag"), r.getheader("Last-Modified")
    for headers in ({"If-None-Match": etag}, {"If-None-Match": f'"x", W/{etag}'},
                    {"If-None-Match": "*"}, {"If-Modified-Since": lm}):
        r, body = get(srv.port, "/a.txt", headers)
        assert r.status == 304 and body == b"", headers
        assert r.getheader("ETag") == etag and r.getheader("Content-Length") is None
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2).
    r, body = get(srv.port, "/a.txt", {"If-None-Match": '"other"', "If-Modified-Since": lm})
    assert r.status == 200 and body == b"hello\n"
    r, _ = get(srv.port, "/a.txt", {"If-Modified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"})
    assert r.status == 200
    r, _ = get(srv.port, "/a.txt", {"If-Match": '"nope"'})
    assert r.status == 412
    r, _ = get(srv.port, "/a.txt", {"If-Match": etag})
    assert r.status == 200
    r, _ = get(srv.port, "/a.txt", {"If-Unmodified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"})
    assert r.status == 412


def test_folders_index_and_redirect(server, www):
    srv = start(server, www)
    data = raw(srv.port, b"GET /sub?x=1&y=2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [301] and b"\r\nLocation: /sub/?x=1&y=2\r\n" in data
    r, body = get(srv.port, "/sub/")
    assert r.status == 200 and body == b"<h1>index</h1>\n"
    assert r.getheader("Content-Type") == "text/html"
    assert get(srv.port, "/noindex/")[0].status == 403  # folders are not listed
    assert get(srv.port, "/")[0].status == 403


def test_missing_hidden_and_methods(server, www):
    srv = start(server, www)
    assert get(srv.port, "/nope")[0].status == 404
    assert get(srv.port, "/a.txt/x")[0].status == 404
    assert get(srv.port, "/.secret")[0].status == 404
    assert get(srv.port, "/sub/../.secret")[0].status == 404
    assert get(srv.port, "/%2esecret")[0].status == 404
    r, body = get(srv.port, "/.well-known/acme")
    assert (r.status, body) == (200, b"token")
    r, _ = get(srv.port, "/a.txt", method="POST")
    assert r.status == 405 and r.getheader("Allow") == "GET, HEAD"
    r, _ = get(srv.port, "/a.txt", method="DELETE")
    assert r.status == 405


def test_path_escapes_stay_in_root(server, www, tmp_path):
    (tmp_path / "outside.txt").write_text("secret")
    srv = start(server, www)
    for target in (b"/../outside.txt", b"/%2e%2e/outside.txt", b"/sub/..%2f..%2foutside.txt",
                   b"/a%00.txt", b"/%c0%ae%c0%ae/outside.txt"):
        data = raw(srv.port, b"GET " + target + b" HTTP/1.1\r\nHost: a\r\n\r\n")
        assert statuses(data) == [400] and b"secret" not in data, target
    # A backslash is no separator on Linux: a name with backslashes, not a way up.
    data = raw(srv.port, b"GET /..\\..\\outside.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [404] and b"secret" not in data


def test_the_etag_is_the_same_on_every_host(server, www, tmp_path):
    # Two hosts serving one release: the same bytes and times, other inodes
    # (here: two roots). A balancer's revalidations must match on either.
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_bytes((www / "a.txt").read_bytes())
    st = os.stat(www / "a.txt")
    os.utime(other / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(other / "a.txt").st_ino != st.st_ino
    one, two = start(server, www), start(server, other)
    etag = get(one.port, "/a.txt")[0].getheader("ETag")
    assert get(two.port, "/a.txt")[0].getheader("ETag") == etag
    assert get(two.port, "/a.txt", {"If-None-Match": etag})[0].status == 304


def test_symlinks(server, www, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "outside.txt").write_text("outside")
    (tmp_path / "nowhere.txt").write_text("in no root")
    os.symlink(shared / "outside.txt", www / "link.txt")
    os.symlink(tmp_path / "nowhere.txt", www / "nowhere.txt")
    srv = server(CONF_SHARED, root=str(www), shared=str(shared), extra="")
    assert get(srv.port, "/link.txt")[1] == b"outside"  # followed by default, as nginx
    # a link out of every root: the sandbox refuses it (docs/operations.md)
    assert get(srv.port, "/nowhere.txt")[0].status == 403
    srv2 = server(CONF_SHARED, root=str(www), shared=str(shared),
                  extra=", follow_symlinks: off")
    assert get(srv2.port, "/link.txt")[0].status == 403
    assert get(srv2.port, "/a.txt")[0].status == 200


def test_changes_are_seen_within_open_file_cache_valid(server, www):
    srv = start(server, www)
    assert get(srv.port, "/a.txt")[1] == b"hello\n"
    (www / "a.new").write_text("replaced by rename\n")
    os.replace(www / "a.new", www / "a.txt")
    t0 = time.monotonic()
    while get(srv.port, "/a.txt")[1] != b"replaced by rename\n":
        assert time.monotonic() - t0 < 2.0, "the change was not seen"
        time.sleep(0.02)
    os.unlink(www / "a.txt")
    t0 = time.monotonic()
    while get(srv.port, "/a.txt")[0].status != 404:
        assert time.monotonic() - t0 < 2.0, "the deletion was not seen"
        time.sleep(0.02)
    (www / "a.txt").write_text("written in place, longer than before\n")
    t0 = time.monotonic()
    while get(srv.port, "/a.txt")[1] != b"written in place, longer than before\n":
        assert time.monotonic() - t0 < 2.0, "the new file was not seen"
        time.sleep(0.02)


def test_mime_charset_expires_and_headers(server, www):
    srv = start(server, www, extra=", mime_types: {weird: text/x-weird}, charset: utf-8, "
                                   "expires: 1h, headers: {X-Frame-Options: DENY}")
    r, _ = get(srv.port, "/data.weird")
    assert r.getheader("Content-Type") == "text/x-weird; charset=utf-8"
    r, _ = get(srv.port, "/mid.bin")
    assert r.getheader("Content-Type") == "application/octet-stream"  # not text: no charset
    assert r.getheader("Cache-Control") == "max-age=3600"
    expires = email.utils.parsedate_to_datetime(r.getheader("Expires")).timestamp()
    assert abs(expires - (time.time() + 3600)) < 5
    assert r.getheader("X-Frame-Options") == "DENY"


def test_file_truncated_while_sent_ends_the_connection(server, www):
    big = www / "shrinks.bin"
    big.write_bytes(os.urandom(16_000_000))
    srv = start(server, www)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET /shrinks.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        got = s.recv(65536)
        assert got.startswith(b"HTTP/1.1 200 OK") and b"Content-Length: 16000000" in got
        os.truncate(big, 1_000_000)
        while True:
            try:
                b = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not b:
                break
            got += b
    body = got.split(b"\r\n\r\n", 1)[1]
    assert len(body) < 16_000_000  # never a complete-looking response


def test_single_ranges(server, www):
    srv = start(server, www)
    data = (www / "big.bin").read_bytes()
    for spec, first, last in (("bytes=0-99", 0, 99), ("bytes=2999900-", 2999900, 2999999),
                              ("bytes=-10", 2999990, 2999999), ("bytes=100-5000000", 100, 2999999)):
        r, body = get(srv.port, "/big.bin", {"Range": spec})
        assert r.status == 206, spec
        assert r.getheader("Content-Range") == f"bytes {first}-{last}/3000000"
        assert body == data[first:last + 1]
    small = (www / "mid.bin").read_bytes()  # served from memory
    r, body = get(srv.port, "/mid.bin", {"Range": "bytes=10-19"})
    assert r.status == 206 and body == small[10:20]
    r, body = get(srv.port, "/mid.bin", {"Range": "bytes=1000-30000"})
    assert r.status == 206 and body == small[1000:30001]
    r, body = get(srv.port, "/a.txt", {"Range": "bytes=0-0"})
    assert (r.status, body) == (206, b"h")


def test_unsatisfiable_ignored_and_if_range(server, www):
    srv = start(server, www)
    r, body = get(srv.port, "/a.txt", {"Range": "bytes=100-200"})
    assert r.status == 416 and r.getheader("Content-Range") == "bytes */6" and body == b""
    for ignored in ("bytes=5-1", "items=0-1", "bytes=abc"):
        r, body = get(srv.port, "/a.txt", {"Range": ignored})
        assert (r.status, body) == (200, b"hello\n"), ignored
    r, _ = get(srv.port, "/a.txt")
    etag, lm = r.getheader("ETag"), r.getheader("Last-Modified")
    assert r.getheader("Accept-Ranges") == "bytes"
    assert get(srv.port, "/a.txt", {"Range": "bytes=1-2", "If-Range": etag})[1] == b"el"
    assert get(srv.port, "/a.txt", {"Range": "bytes=1-2", "If-Range": lm})[1] == b"el"
    r, body = get(srv.port, "/a.txt", {"Range": "bytes=1-2", "If-Range": '"stale"'})
    assert (r.status, body) == (200, b"hello\n")
    r, body = get(srv.port, "/a.txt", {"Range": "bytes=1-2"}, method="HEAD")
    assert r.status == 200  # Range applies to GET only


def test_sparse_1gib_whole_and_by_ranges(server, www):
    with open(www / "sparse.bin", "wb") as f:
        f.truncate(1 << 30)
        f.seek(123_456_789)
        f.write(b"marker")
    srv = start(server, www)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"GET /sparse.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        assert b"Content-Length: 1073741824" in head
        h = hashlib.sha256(body)
        n = len(body)
        while n < 1 << 30:
            b = s.recv(1 << 20)
            assert b, "connection closed early"
            h.update(b)
            n += len(b)
    expect = hashlib.sha256()
    with open(www / "sparse.bin", "rb") as f:
        while chunk := f.read(1 << 20):
            expect.update(chunk)
    assert n == 1 << 30 and h.digest() == expect.digest()
    r, body = get(srv.port, "/sparse.bin", {"Range": "bytes=123456780-123456799"})
    assert r.status == 206 and body == bytes(9) + b"marker" + bytes(5)


def test_precompressed_siblings(server, www):
    import gzip
    text = b"body " * 1000
    (www / "app.js").write_bytes(text)
    (www / "app.js.gz").write_bytes(gzip.compress(text))
    (www / "app.js.br").write_bytes(b"pretend-brotli")
    srv = start(server, www)
    r, body = get(srv.port, "/app.js", {"Accept-Encoding": "gzip, br"})
    assert r.getheader("Content-Encoding") == "br" and body == b"pretend-brotli"
    assert r.getheader("Vary") == "Accept-Encoding"
    assert r.getheader("Content-Type") == "text/javascript"  # the original's type
    br_etag = r.getheader("ETag")
    r, body = get(srv.port, "/app.js", {"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") == "gzip" and gzip.decompress(body) == text
    assert r.getheader("ETag") != br_etag  # each representation has its own validator
    r, body = get(srv.port, "/app.js", {"Accept-Encoding": "br;q=0.5, gzip;q=0.9"})
    assert r.getheader("Content-Encoding") == "gzip"
    r, body = get(srv.port, "/app.js", {"Accept-Encoding": "identity"})
    assert r.getheader("Content-Encoding") is None and body == text
    r, body = get(srv.port, "/app.js")
    assert r.getheader("Content-Encoding") is None and body == text
    assert r.getheader("Vary") == "Accept-Encoding"
    # Range applies to the encoded representation.
    r, body = get(srv.port, "/app.js", {"Accept-Encoding": "br", "Range": "bytes=0-7"})
    assert r.status == 206 and body == b"pretend-" and r.getheader("Content-Encoding") == "br"
    # 304 for the representation the client has.
    r, _ = get(srv.port, "/app.js", {"Accept-Encoding": "br", "If-None-Match": br_etag})
    assert r.status == 304
    # A sibling with the identity file's size and time still has its own ETag.
    (www / "same.txt").write_bytes(b"0123456789")
    (www / "same.txt.br").write_bytes(b"abcdefghij")
    t = os.stat(www / "same.txt").st_mtime_ns
    os.utime(www / "same.txt.br", ns=(t, t))
    plain = get(srv.port, "/same.txt")[0].getheader("ETag")
    br = get(srv.port, "/same.txt", {"Accept-Encoding": "br"})[0].getheader("ETag")
    assert br == plain[:-1] + '-br"' and br != plain
    srv2 = start(server, www, extra=", precompressed: false")
    r, body = get(srv2.port, "/app.js", {"Accept-Encoding": "gzip, br"})
    assert r.getheader("Content-Encoding") is None and body == text and r.getheader("Vary") is None


def test_content_type_per_route_and_representation(server, www):
    """The type a route finds for a file is kept with the file's cache
    entry (static.c): another site's route over the same root with its
    own types, and the sibling served in the original's place, each keep
    their own type, in either order and on repeated answers."""
    import gzip
    (www / "doc.zzq").write_text("# doc\n")
    (www / "app.js").write_bytes(b"x" * 300)
    (www / "app.js.gz").write_bytes(gzip.compress(b"x" * 300))
    srv = server("""
        workers: 1
        sites:
          - listen: "127.0.0.1:{port1}"
            routes:
              - {{path: /, static: {{root: "%s", mime_types: {{zzq: text/x-zzq}}}}}}
          - listen: "127.0.0.1:{port2}"
            routes:
              - {{path: /, static: {{root: "%s", default_type: text/x-unknown}}}}
    """ % (www, www))
    other = srv.ports[1]
    for _ in range(3):
        assert get(other, "/doc.zzq")[0].getheader("Content-Type") == "text/x-unknown"
        assert get(srv.port, "/doc.zzq")[0].getheader("Content-Type") == "text/x-zzq"
    for _ in range(3):
        r, _ = get(srv.port, "/app.js", {"Accept-Encoding": "gzip"})
        assert r.getheader("Content-Encoding") == "gzip"
        assert r.getheader("Content-Type") == "text/javascript"
        r, _ = get(srv.port, "/app.js.gz")  # the sibling asked for by its own name
        assert r.getheader("Content-Encoding") is None
        assert r.getheader("Content-Type") == "application/gzip"


def test_try_files(server, www):
    (www / "spa").mkdir()
    (www / "spa" / "index.html").write_text("<app>")
    (www / "down.html").write_text("maintenance")
    srv = server("""
        sites:
          - listen: "127.0.0.1:{port}"
            routes:
              - {{path: /app/, static: {{root: "{root}", try_files: [$uri, $uri/, /spa/index.html]}}}}
              - {{path: /strict/, static: {{root: "{root}", try_files: [$uri, =410]}}}}
              - {{path: /fallback/, static: {{root: "{root}", try_files: [$uri, /api/hello]}}}}
              - {{path: /spa/, static: {{root: "{root}", try_files: [$uri, $uri/, /down.html]}}}}
              - {{path: "= /api/hello", respond: {{status: 200, body: "from api"}}}}
    """, root=str(www))
    (www / "app").mkdir()
    (www / "app" / "real.txt").write_text("real")
    (www / "app" / "folder").mkdir()
    (www / "app" / "folder" / "index.html").write_text("folder index")
    assert get(srv.port, "/app/real.txt")[1] == b"real"             # $uri
    assert get(srv.port, "/app/folder")[1] == b"folder index"       # $uri/ without a redirect
    r, body = get(srv.port, "/app/some/client/route")               # single-page app
    assert (r.status, body) == (200, b"<app>") and r.getheader("Content-Type") == "text/html"
    r, body = get(srv.port, "/strict/missing")
    assert r.status == 410 and b"410 Gone" in body
    r, body = get(srv.port, "/fallback/missing")                    # routed again, to respond
    assert (r.status, body) == (200, b"from api")
    # The fallback URI is routed again, as nginx's internal redirect: no route
    # takes /down.html here, so it is a 404 even though the file exists.
    assert get(srv.port, "/spa/nothing")[0].status == 404
    assert get(srv.port, "/strict/../app/real.txt")[1] == b"real"


def _rss_kib(pid):
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def test_slow_readers_cost_no_memory_and_block_nobody(server, www):
    (www / "large.bin").write_bytes(os.urandom(20_000_000))
    srv = start(server, www)
    worker = srv.workers()[0]
    assert get(srv.port, "/a.txt")[0].status == 200  # warm
    before = _rss_kib(worker)
    readers = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        # A window above loopback's 64 KiB MSS: smaller ones make TCP itself
        # crawl (sender-side silly-window avoidance), which is not under test.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 131072)
        s.sendall(b"GET /large.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        readers.append([s, s.recv(4096)])  # the head and a little: then they stall
    # While 20 downloads wait on their clients, small requests stay fast.
    worst = 0.0
    for _ in range(50):
        t0 = time.monotonic()
        assert get(srv.port, "/a.txt")[1] == b"hello\n"
        worst = max(worst, time.monotonic() - t0)
    assert worst < 0.2, worst
    grown = _rss_kib(worker) - before
    assert grown < 4096, f"worker RSS grew by {grown} KiB with 20 stalled downloads"
    # Then every reader gets the whole file.
    for s, got in readers:
        total = len(got.split(b"\r\n\r\n", 1)[1])
        while total < 20_000_000:
            b = s.recv(1 << 20)
            assert b, "download cut short"
            total += len(b)
        s.close()


def test_autoindex_lists_and_escapes(server, www):
    (www / "list").mkdir()
    (www / "list" / "b file & <x>.txt").write_text("12345")
    (www / "list" / "a").mkdir()
    (www / "list" / ".hidden").write_text("h")
    (www / "list" / 'q"uote').write_text("q")
    srv = start(server, www, extra=", autoindex: true")
    r, body = get(srv.port, "/list/")
    assert r.status == 200 and r.getheader("Content-Type") == "text/html; charset=utf-8"
    html = body.decode()
    assert int(r.getheader("Content-Length")) == len(body)
    assert '<a href="a/">a/</a>' in html                           # folders first
    assert html.index('href="a/"') < html.index("b%20file")
    assert '<a href="b%20file%20%26%20%3Cx%3E.txt">b file &amp; &lt;x&gt;.txt</a>' in html
    assert '<a href="q%22uote">q&quot;uote</a>' in html
    assert ".hidden" not in html and "<x>" not in html
    assert re.search(r"b file &amp; &lt;x&gt;\.txt</a>  \w{3}, .* GMT  5\n", html)
    assert get(srv.port, "/list/b%20file%20%26%20%3Cx%3E.txt")[1] == b"12345"
    r, body = get(srv.port, "/list/", method="HEAD")
    assert r.status == 200 and body == b""
    assert get(srv.port, "/sub/")[1] == b"<h1>index</h1>\n"  # an index file still wins
    assert get(start(server, www).port, "/list/")[0].status == 403  # off by default


def _parts(r, body):
    """The parts of a multipart/byteranges body, through the stdlib's MIME parser."""
    import email.parser
    import email.policy
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + r.getheader("Content-Type").encode() + b"\r\n\r\n" + body)
    assert msg.is_multipart()
    return [(p["Content-Range"], p.get_payload(decode=True)) for p in msg.iter_parts()]


@pytest.mark.parametrize("name", ["mid.bin", "big.bin"])   # from memory, from disk
def test_several_ranges_are_multipart(server, www, name):
    srv = start(server, www)
    data = (www / name).read_bytes()
    size = len(data)
    r, body = get(srv.port, "/" + name, {"Range": "bytes=0-9, 100-199, -5"})
    assert r.status == 206
    assert r.getheader("Content-Type").startswith("multipart/byteranges; boundary=")
    assert int(r.getheader("Content-Length")) == len(body)
    assert _parts(r, body) == [
        (f"bytes 0-9/{size}", data[0:10]),
        (f"bytes 100-199/{size}", data[100:200]),
        (f"bytes {size - 5}-{size - 1}/{size}", data[-5:]),
    ]
    b1 = r.getheader("Content-Type")
    r2, _ = get(srv.port, "/" + name, {"Range": "bytes=0-9, 100-199"})
    assert r2.getheader("Content-Type") != b1  # a new boundary each answer


def test_several_large_ranges_of_a_disk_file_get_the_whole_file(server, www):
    srv = start(server, www)
    r, body = get(srv.port, "/big.bin", {"Range": "bytes=0-999999, 1000000-2099999"})
    assert r.status == 200 and len(body) == 3_000_000  # over 1 MiB to gather: ignored


def test_follow_symlinks_owner(server, www, tmp_path):
    # The link and its target must have one owner (nginx's if_not_owner).
    # The test chowns files, so it needs root (CI runs as root).
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    other = 65534  # nobody
    shared = tmp_path / "shared"   # another root: the sandbox lets the workers read it
    shared.mkdir()
    (shared / "mine.txt").write_text("same owner")
    (shared / "theirs.txt").write_text("other owner")
    os.chown(shared / "theirs.txt", other, other)
    os.symlink(shared / "mine.txt", www / "ok-link")
    os.symlink(shared / "theirs.txt", www / "bad-link")
    (www / "dir-target").mkdir()
    (www / "dir-target" / "f.txt").write_text("in a linked folder")
    os.symlink(www / "dir-target", www / "dir-link")
    os.symlink(www / "dir-target", www / "their-dir-link")
    os.lchown(www / "their-dir-link", other, other)
    srv = server(CONF_SHARED, root=str(www), shared=str(shared),
                 extra=", follow_symlinks: owner")
    assert get(srv.port, "/ok-link")[1] == b"same owner"
    assert get(srv.port, "/bad-link")[0].status == 403
    assert get(srv.port, "/dir-link/f.txt")[1] == b"in a linked folder"   # a link mid-path
    assert get(srv.port, "/their-dir-link/f.txt")[0].status == 403
    assert get(srv.port, "/a.txt")[1] == b"hello\n"
    assert get(srv.port, "/nope")[0].status == 404
