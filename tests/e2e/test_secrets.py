"""Secrets out of the workers' reach (issue 30, point 1), tried as an attacker
who can put symlinks in a served folder: with the default configuration
(`follow_symlinks: on`, `sandbox: on`, no `user:`), links to the site's TLS
key, the configuration, the logs, the ticket key file, the OCSP file, a file
of the Python installation and /proc/self/environ never come back with
their content, over HTTP/1.1, HTTPS and HTTP/2, from a static route, its
listing, try_files, and fastcgi's script check. A certificate replaced on
disk is still served after a HUP (the workers read it before they confine
themselves).
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess

import pytest
import yaml

from scalws.control import sandbox
from tests.e2e.conftest import traversable
from tests.tlspki import PKI, ocsp_response

SUPPORT = sandbox.probe()
needs_landlock = pytest.mark.skipif(
    not SUPPORT["landlock"], reason="needs Landlock (Linux >= 5.13 with landlock in lsm=)")

SECRET_ENV = "SCALWS_TEST_SECRET"
ENV_MARKER = "environ-marker-6d1f0c9e"

CONF = """
# config-marker-2f6a1b77: the configuration file's own words
log: {{access: "{tmp}/logs/access.log", level: info}}
tls_tickets: {{key_file: "{tmp}/etc/tickets.key"}}
sites:
  - listen: ["127.0.0.1:{port}", "127.0.0.1:{port2} tls"]
    server_names: [localhost]
    tls:
      certificates:
        - {{cert: "{tmp}/etc/site.pem", key: "{tmp}/etc/site.key",
           ocsp_file: "{tmp}/etc/site.ocsp"}}
    routes:
      - {{path: "~ \\\\.php$", fastcgi: {{connect: "{fpm}", root: "{tmp}/www"}}}}
      - {{path: /try/, static: {{root: "{tmp}/www", try_files: ["$uri", "=404"]}}}}
      - {{path: /, static: {{root: "{tmp}/www", autoindex: on}}}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def _install(pki, etc, leaf):
    """The site's certificate (with its issuer, for OCSP), key and OCSP file,
    readable by the workers' user: as under the package's unit, where the
    workers run as the `scalws` user that must read its key, so the file's
    mode protects nothing and the sandbox must."""
    with open(leaf.cert_path, "rb") as f, open(pki.ca.cert_path, "rb") as ca:
        (etc / "site.pem").write_bytes(f.read() + ca.read())
    with open(leaf.key_path, "rb") as f:
        (etc / "site.key").write_bytes(f.read())
    (etc / "site.ocsp").write_bytes(ocsp_response(leaf, pki.ca, "good"))
    for name in ("site.pem", "site.key", "site.ocsp"):
        os.chmod(etc / name, 0o644)


def _open_to_all(path):
    """Lets every user read `path` (the test's folder is pytest's 0700) and
    walk to it: the file modes must not be what keeps the workers out."""
    os.chmod(path, os.stat(path).st_mode | 0o005)
    traversable(path)


@pytest.fixture
def site(server, tmp_path, pki, php_fpm):
    """A server whose document root holds links to every secret it has."""
    etc, www, logs = tmp_path / "etc", tmp_path / "www", tmp_path / "logs"
    for d in (etc, www, logs, www / "try"):
        d.mkdir()
    _install(pki, etc, pki.ec)
    (etc / "tickets.key").write_bytes(os.urandom(80))
    (www / "public.html").write_text("the public page\n")
    (www / "try" / "public.txt").write_text("public\n")
    (logs / "access.log").write_text("127.0.0.1 - - [04/Dec/2026:10:00:00 +0000] \"GET /yesterday HTTP/1.1\" 200 3\n")
    fpm = php_fpm()
    srv = server(CONF, start=False, fpm=fpm.addr)
    _open_to_all(tmp_path)
    targets = {
        "key": etc / "site.key",
        "conf": srv.config_path,
        "errorlog": srv.log_path,
        "accesslog": logs / "access.log",
        "tickets": etc / "tickets.key",
        "ocsp": etc / "site.ocsp",
        "stdlib": os.__file__,
        "python": yaml.__file__,
        "environ": "/proc/self/environ",
    }
    for name, target in targets.items():
        for folder in (www, www / "try"):
            os.symlink(target, folder / f"{name}.txt")
        os.symlink(target, www / f"{name}.php")
    srv.start(env={SECRET_ENV: ENV_MARKER})
    srv.targets = targets
    srv.pki = pki
    srv.fpm = fpm
    # something of every target exists by now: the logs have lines
    with open(srv.config_path, "a") as f:
        f.write("# " + "padding " * 4 + "\n")
    return srv


def _marker(target) -> bytes:
    """Bytes of the target's content that an answer must never carry."""
    if str(target) == "/proc/self/environ":
        return ENV_MARKER.encode()
    with open(target, "rb") as f:
        data = f.read()
    assert len(data) >= 24, target
    return data[:24]


def _curl(url, *opts, ca=None):
    if url.startswith("https://localhost:"):
        port = url.split(":")[2].split("/")[0]
        opts = ("--resolve", f"localhost:{port}:127.0.0.1", *opts)
    out = subprocess.run(["curl", "-sS", "-m", "10", *(["--cacert", ca] if ca else []),
                          *opts, "-o", "-", "-w", "\n%{http_code} %{http_version}", url],
                         capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr.decode()
    body, _, tail = out.stdout.rpartition(b"\n")
    status, version = tail.decode().split()
    return int(status), version, body


@needs_landlock
def test_links_to_secrets_are_never_served(site):
    http = f"http://127.0.0.1:{site.ports[0]}"
    https = f"https://localhost:{site.ports[1]}"
    ca = site.pki.ca.cert_path
    clients = [
        ("HTTP/1.1", http, ["--http1.1"], "1.1"),
        ("HTTPS/1.1", https, ["--http1.1"], "1.1"),
        ("HTTP/2", https, ["--http2"], "2"),
    ]
    # the same server serves its public files, on every protocol
    for what, base, opts, version in clients:
        status, got_version, body = _curl(base + "/public.html", *opts, ca=ca)
        assert (status, got_version, body) == (200, version, b"the public page\n"), what
    seen = []
    for name, target in site.targets.items():
        marker = _marker(target)
        for what, base, opts, _version in clients:
            for path in (f"/{name}.txt", f"/try/{name}.txt", f"/{name}.php"):
                status, _, body = _curl(base + path, *opts, ca=ca)
                assert marker not in body, (name, what, path, status)
                assert status in (403, 404), (name, what, path, status, body[:200])
                seen.append(status)
            # the listing shows nothing of what the links point at
            status, _, body = _curl(base + "/", *opts, ca=ca)
            assert status == 200 and b"public.html" in body, what
            assert marker not in body, (name, what)
    assert len(seen) == len(site.targets) * 3 * 3
    # fastcgi's script check refused the links: PHP-FPM saw none of them
    assert not [line for line in site.fpm.access() if ".php" in line]


@needs_landlock
def test_certificate_replaced_on_disk_is_served_after_hup(site, tmp_path):
    port = site.ports[1]

    def served_cert():
        ctx = ssl.create_default_context(cafile=site.pki.ca.cert_path)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                return t.getpeercert(binary_form=True)

    def first_cert(path):
        with open(path) as f:
            pem = f.read()
        end = "-----END CERTIFICATE-----"
        return ssl.PEM_cert_to_DER_cert(pem[:pem.index(end) + len(end)] + "\n")

    assert served_cert() == first_cert(site.pki.ec.cert_path)
    new = site.pki.leaf(site.pki.ca, ["localhost"], key="ec", name="ec-renewed")
    _install(site.pki, tmp_path / "etc", new)
    site.kill(signal.SIGHUP)
    site.wait_log("reloaded")
    assert served_cert() == first_cert(new.cert_path)
    # and the key it now uses is still out of reach
    status, _, body = _curl(f"http://127.0.0.1:{site.ports[0]}/key.txt")
    assert status in (403, 404) and _marker(tmp_path / "etc" / "site.key") not in body
