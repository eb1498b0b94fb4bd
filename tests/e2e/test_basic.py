"""Normal traffic: curl and http.client against the respond handler and router."""
import http.client
import re
import socket
import subprocess

import pytest

from tests.e2e.conftest import raw, read_response, statuses

BASIC = """
workers: 1
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - {{path: /, respond: {{status: 200, body: "root\\n"}}}}
      - {{path: "= /exact", respond: {{status: 200, body: "exact\\n", headers: {{X-Route: exact}}}}}}
      - {{path: /app/, respond: {{status: 200, body: "app\\n"}}}}
      - {{path: /app/deep/, respond: {{status: 200, body: "deep\\n"}}}}
      - {{path: "^~ /static/", respond: {{status: 200, body: "static\\n"}}}}
      - {{path: "~ \\\\.php$", respond: {{status: 200, body: "php\\n"}}}}
      - {{path: "~* \\\\.JPG$", respond: {{status: 200, body: "jpg\\n"}}}}
      - {{path: "= /empty", respond: 204}}
      - {{path: "= /teapot", respond: {{status: 418, body: "short and stout", content_type: null}}}}
  - listen: ["127.0.0.1:{port}"]
    server_names: [other.test, "*.wild.test"]
    routes:
      - {{path: /, respond: {{status: 200, body: "other\\n"}}}}
"""


def get(port, path, host="localhost", method="GET", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request(method, path, headers={"Host": host, **(headers or {})})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def test_curl_get_and_head(server):
    srv = server(BASIC)
    out = subprocess.run(["curl", "-sS", "-i", f"http://127.0.0.1:{srv.port}/"],
                         capture_output=True, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nServer: scalws\r\n" in head
    assert re.search(rb"\r\nDate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n", head)
    assert b"\r\nContent-Type: text/plain\r\n" in head
    assert b"\r\nContent-Length: 5" in head
    assert body == b"root\n"
    out = subprocess.run(["curl", "-sS", "-I", f"http://127.0.0.1:{srv.port}/"],
                         capture_output=True, check=True).stdout
    assert b"Content-Length: 5" in out and not out.endswith(b"root\n")


def test_head_has_no_body_on_keepalive(server):
    srv = server(BASIC)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /exact HTTP/1.1\r\nHost: a\r\n\r\n")
        data = b""
        while data.count(b"\r\n\r\n") < 2 or not data.endswith(b"exact\n"):
            data += s.recv(4096)
    first, second = data.split(b"HTTP/1.1 200 OK")[1:]
    assert first.endswith(b"\r\n\r\n") and b"Content-Length: 5" in first
    assert second.endswith(b"exact\n")


@pytest.mark.parametrize("path,body", [
    ("/", b"root\n"), ("/anything", b"root\n"), ("/exact", b"exact\n"),
    ("/exact/", b"root\n"), ("/app/x", b"app\n"), ("/app/deep/x", b"deep\n"),
    ("/app/x.php", b"php\n"),            # regex beats a plain prefix (nginx order)
    ("/static/x.php", b"static\n"),      # ^~ prefix stops regex matching
    ("/img/A.jpg", b"jpg\n"),            # ~* is case-insensitive
    ("/img/A.Jpg?x=1", b"jpg\n"),        # the query string is not part of the path
    ("/exact?q=1", b"exact\n"),
])
def test_route_order(server, path, body):
    srv = server(BASIC)
    r, got = get(srv.port, path)
    assert (r.status, got) == (200, body)


def test_exact_route_headers_and_status_codes(server):
    srv = server(BASIC)
    r, body = get(srv.port, "/exact")
    assert r.getheader("X-Route") == "exact"
    r, body = get(srv.port, "/empty")
    assert r.status == 204 and body == b"" and r.getheader("Content-Length") is None
    r, body = get(srv.port, "/teapot")
    assert (r.status, r.reason) == (418, "I'm a Teapot")  # Python's HTTPStatus phrase
    assert r.getheader("Content-Type") is None and body == b"short and stout"


@pytest.mark.parametrize("host,body", [
    ("localhost", b"root\n"), ("other.test", b"other\n"), ("OTHER.test:8080", b"other\n"),
    ("other.test.", b"other\n"), ("a.wild.test", b"other\n"), ("wild.test", b"root\n"),
    ("unknown.example", b"root\n"),
])
def test_virtual_hosts(server, host, body):
    srv = server(BASIC)
    assert get(srv.port, "/", host=host)[1] == body


def test_absolute_form_target_overrides_host(server):
    srv = server(BASIC)
    data = raw(srv.port, b"GET http://other.test/x HTTP/1.1\r\nHost: localhost\r\n"
                         b"Connection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"other\n")


def test_unmatched_is_404_and_keeps_connection(server):
    srv = server("""
        workers: 1
        sites:
          - listen: "127.0.0.1:{port}"
            routes:
              - {{path: "= /only", respond: 200}}
    """)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /nope HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, body, rest = read_response(s)
        assert status == 404 and b"404 Not Found" in body and len(body) < 512
        assert headers["content-type"] == "text/html"
        s.sendall(b"GET /only HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, body, rest = read_response(s, rest)
        assert status == 200


def test_keepalive_many_requests_one_connection(server):
    srv = server(BASIC)
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    for i in range(50):
        c.request("GET", f"/app/{i}")
        r = c.getresponse()
        assert r.status == 200 and r.read() == b"app\n"
        assert not r.will_close
    c.close()


def test_http10_close_and_keepalive(server):
    srv = server(BASIC)
    data = raw(srv.port, b"GET / HTTP/1.0\r\n\r\n")  # server closes after it
    assert data.startswith(b"HTTP/1.1 200 OK") and b"Connection: close\r\n" in data
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, headers, body, rest = read_response(s)
        assert headers["connection"] == "keep-alive" and body == b"root\n"
        s.sendall(b"GET /exact HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert read_response(s, rest)[2] == b"exact\n"


def test_connection_close_request(server):
    srv = server(BASIC)
    data = raw(srv.port, b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
                         b"GET /exact HTTP/1.1\r\nHost: a\r\n\r\n")
    assert statuses(data) == [200]  # nothing after a close is answered
    assert b"Connection: close\r\n" in data


def test_server_header_configurable(server):
    srv = server("""
        server_header: "edge/1"
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: 200}}]
    """)
    assert get(srv.port, "/")[0].getheader("Server") == "edge/1"
    srv2 = server("""
        server_header: off
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: 200}}]
    """)
    r, _ = get(srv2.port, "/")
    assert r.getheader("Server") is None and r.getheader("Date")


def test_ipv6_and_unix_listeners(server, tmp_path):
    sock = tmp_path / "s.sock"
    srv = server("""
        workers: 2
        sites:
          - listen: ["[::1]:{port}", "unix:{tmp}/s.sock"]
            routes: [{{path: /, respond: {{status: 200, body: "hi"}}}}]
    """)
    out = subprocess.run(["curl", "-sS", "-g", f"http://[::1]:{srv.port}/"],
                         capture_output=True, check=True).stdout
    assert out == b"hi"
    out = subprocess.run(["curl", "-sS", "--unix-socket", str(sock), "http://x/"],
                         capture_output=True, check=True).stdout
    assert out == b"hi"


@pytest.mark.parametrize("target,body", [
    (b"/app/../exact", b"exact\n"),      # dot segments resolved before routing
    (b"//exact", b"exact\n"),            # slashes merged
    (b"/%65xact", b"exact\n"),           # percent-decoded
    (b"/static/%2e%2e/x.php", b"php\n"), # an encoded ".." leaves the ^~ prefix
    (b"/app%2Fdeep%2Fx", b"deep\n"),     # an encoded slash is a slash
    (b"/./static/./a", b"static\n"),
])
def test_routes_match_the_normalized_path(server, target, body):
    srv = server(BASIC)
    data = raw(srv.port, b"GET " + target + b" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [200] and data.endswith(body), data


@pytest.mark.parametrize("target", [b"/..", b"/a/../../b", b"/%2e%2e/etc/passwd", b"/a%00b",
                                    b"/%zz", b"/%c0%ae%c0%ae/"])
def test_paths_that_climb_or_hide_are_400(server, target):
    srv = server(BASIC)
    data = raw(srv.port, b"GET " + target + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert statuses(data) == [400] and b"Connection: close" in data
