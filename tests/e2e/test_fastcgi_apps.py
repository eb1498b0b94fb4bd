"""Front controllers as operators write them for nginx, against a real
PHP-FPM: `try_files: [$uri, $uri/, "/index.php?$args"]` on a static `/`
and a `~ [^/]\\.php(/|$)` fastcgi route, for a WordPress-shaped and a
Laravel-shaped application (tests/e2e/php_apps/wordpress and laravel,
copied into tmp_path: uploads write there).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid

import pytest

from tests.e2e.conftest import ROOT
from tests.e2e.test_fastcgi import client, fcgi_yaml, get

pytestmark = pytest.mark.timeout(60)

APPS = os.path.join(ROOT, "tests", "e2e", "php_apps")
FRONT = {"index": ["index.php", "index.html"],
         "try_files": ["$uri", "$uri/", "/index.php?$args"]}


def multipart(fields: dict, files: dict) -> tuple[bytes, str]:
    """A multipart/form-data body: fields {name: value}, files {name:
    (filename, content type, bytes)}. Returns (body, Content-Type)."""
    boundary = "----sws" + uuid.uuid4().hex
    out = []
    for name, value in fields.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                   f"{value}\r\n".encode())
    for name, (filename, ctype, data) in files.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                   f'filename="{filename}"\r\nContent-Type: {ctype}\r\n\r\n'.encode()
                   + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


@pytest.fixture
def app_copy(tmp_path):
    def make(name) -> str:
        dest = tmp_path / name
        shutil.copytree(os.path.join(APPS, name), dest)
        return str(dest)
    return make


def test_wordpress_shaped(server, php_fpm, app_copy):
    root = app_copy("wordpress")
    fpm = php_fpm(children=3)
    srv = server(fcgi_yaml([fpm.addr], root=root, static=FRONT))
    c = client(srv)

    def page(path, method="GET", **kw):
        status, _, headers, body = get(c, path, method, **kw)
        return status, headers.get("x-script"), body

    # Pretty permalinks: not files, so the front controller, which reads
    # REQUEST_URI (the client's, not /index.php).
    assert page("/") == (200, "/index.php", b"home\n")
    assert page("/2026/12/hello-world/") == (200, "/index.php",
                                             b"post hello-world from 2026-12\n")
    assert page("/?p=7") == (200, "/index.php", b"post id 7\n")
    assert page("/no/such/page") == (404, "/index.php", b"no page at /no/such/page\n")
    # POST to a permalink reaches the front controller too (a comment form).
    assert page("/2026/12/hello-world/", "POST", body=b"c=1",
                headers={"Content-Type": "application/x-www-form-urlencoded"})[0] == 200
    # wp-admin/ runs its own index.php (index: like nginx's, an internal
    # redirect to the .php route: never the script's source).
    for path in ("/wp-admin/", "/wp-admin"):
        status, _, body = page(path)
        assert (status, body) == (200, b"dashboard /wp-admin/index.php\n"), path
    # Static files are static's: PHP never sees them.
    status, _, headers, body = get(c, "/wp-content/uploads/style.css")
    assert (status, body) == (200, b"body { color: #123; }\n")
    assert headers["content-type"].startswith("text/css")
    lines = len(fpm.access())

    # Media upload: multipart to wp-admin/async-upload.php, then the file
    # is served by static with the same bytes.
    data = os.urandom(3 * 1024 * 1024 + 7)
    body, ctype = multipart({"_wpnonce": "n0nce", "name": "photo.jpg"},
                            {"async-upload": ("photo.jpg", "image/jpeg", data)})
    status, _, _, answer = get(c, "/wp-admin/async-upload.php", "POST", body,
                               {"Content-Type": ctype})
    assert status == 200, answer
    info = json.loads(answer)
    assert info["size"] == len(data) and info["md5"] == hashlib.md5(data).hexdigest()
    status, _, headers, got = get(c, info["url"])
    assert status == 200 and got == data
    assert headers["content-type"] == "image/jpeg"
    assert len(fpm.access()) == lines + 1  # the upload; the download was static
    # A bad nonce is the application's 400.
    body, ctype = multipart({"_wpnonce": "x"}, {"async-upload": ("a.txt", "text/plain", b"a")})
    assert get(c, "/wp-admin/async-upload.php", "POST", body, {"Content-Type": ctype})[0] == 400


def test_laravel_shaped(server, php_fpm, app_copy):
    base = app_copy("laravel")
    root = os.path.join(base, "public")
    fpm = php_fpm(children=3)
    srv = server(fcgi_yaml([fpm.addr], root=root, static=FRONT))
    c = client(srv)

    def call(path, method="GET", body=None, headers=None):
        status, _, _, data = get(c, path, method, body, headers)
        return status, json.loads(data)

    assert call("/users/42") == (200, {"user": 42, "script": "/index.php"})
    assert call("/search?q=x&page=2") == (200, {"q": "x", "page": "2"})
    assert call("/search?q=caf%C3%A9+au+lait") == (200, {"q": "café au lait", "page": None})
    assert call("/nope")[0] == 404
    # The app's code is outside the document root: not served.
    assert get(c, "/../app.php")[0] in (400, 404)
    assert get(c, "/app.php")[0] == 404
    status, _, _, css = get(c, "/css/app.css")
    assert (status, css) == (200, b"h1 { margin: 0; }\n")

    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert call("/users", "POST", b"_token=tok-123&name=Ada+L", form) == \
        (201, {"created": "Ada L"})
    assert call("/users", "POST", b"_token=wrong&name=x", form) == (419, {"error": "csrf"})

    data = bytes(range(256)) * 4096 + b"tail"
    body, ctype = multipart({"_token": "tok-123"}, {"avatar": ("me.png", "image/png", data)})
    status, out = call("/avatars", "POST", body, {"Content-Type": ctype})
    assert status == 200, out
    assert out == {"stored": "me.png", "size": len(data),
                   "sha1": hashlib.sha1(data).hexdigest(), "type": "image/png"}
    with open(os.path.join(base, "storage", "me.png"), "rb") as f:
        assert f.read() == data
    # Seven requests reached PHP: not the CSS, nor /app.php and /../app.php
    # (no such script under public/: our 404).
    assert len(fpm.access()) == 7
