"""The scalwsd command line: version, --check-config, start-up failures, the built-in default."""
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Server


# The console script `pip install` made beside this interpreter (make build),
# so the entry point operators run is the one under test.
SCALWSD = str(Path(sys.executable).with_name("scalwsd"))


def scalwsd(*args, **kw):
    return subprocess.run([SCALWSD, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, **kw)


def test_version():
    r = scalwsd("--version")
    assert r.returncode == 0 and r.stdout.startswith("scalwsd 0.")


def test_check_config_ok_and_failed(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("sites:\n  - listen: 127.0.0.1:8081\n    routes: [{path: /, respond: 200}]\n")
    r = scalwsd("--check-config", str(good))
    assert r.returncode == 0 and "test is successful" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: 2\nlimits:\n  max_header_bytes: 16q\nsites:\n"
                   "  - listen: 127.0.0.1:8081\n    routs: []\n")
    r = scalwsd("--check-config", str(bad))
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines == [
        f"{bad}:3:21: limits.max_header_bytes: expected a size such as 16k or 10m, got a string '16q'",
        f"{bad}:5:5: sites[0].routes: required key is missing",
        f"{bad}:6:5: sites[0].routs: unknown key 'routs'; did you mean 'routes'?",
        f"scalwsd: configuration file {bad} test failed",
    ]
    # --config with the same file refuses to start, with the same messages.
    r = scalwsd("--config", str(bad))
    assert r.returncode == 1 and "did you mean 'routes'?" in r.stderr


def test_bind_failure_names_the_config_line(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workers: 1\nsites:\n  - listen: [\"127.0.0.1:{port}\"]\n"
                   "    routes: [{path: /, respond: 200}]\n")
    r = scalwsd("--config", str(cfg))
    busy.close()
    assert r.returncode == 3
    assert f"{cfg}:3:" in r.stderr and "cannot bind" in r.stderr and str(port) in r.stderr


def test_builtin_default_site(tmp_path):
    # `make run` starts exactly this: no --config, 127.0.0.1:8080, a welcome
    # page at / and the folder it was started in under it.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", 8080))
        except OSError:
            pytest.fail("127.0.0.1:8080 is taken (a `make run` left running?): "
                        "the built-in default listens there and nowhere else")
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "hello.txt").write_text("hello from the folder\n")
    (site / "sub" / "a b.txt").write_text("x")
    (site / ".secret").write_text("hidden")
    srv = Server(None, str(tmp_path / "err.log"), [8080], tmp_path)
    log = open(srv.log_path, "ab")
    srv._log = log
    srv.proc = subprocess.Popen([SCALWSD], cwd=site, stdout=log, stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:8080"
    try:
        srv.wait_log("scalws started", timeout=15)
        with urllib.request.urlopen(base + "/", timeout=5) as r:
            body = r.read().decode()
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert "ScalWS is running" in body and "<html" in body
        # the page names the folder and links to its entries, hidden ones left out
        assert f"<code>{site}</code>" in body
        assert '<a href="/sub/">sub/</a>' in body and '<a href="/hello.txt">hello.txt</a>' in body
        assert ".secret" not in body
        with urllib.request.urlopen(base + "/hello.txt", timeout=5) as r:
            assert r.status == 200 and r.read() == b"hello from the folder\n"
            assert r.headers["Content-Type"].startswith("text/plain")
        with urllib.request.urlopen(base + "/sub/", timeout=5) as r:
            listing = r.read().decode()
            assert r.status == 200 and 'href="a%20b.txt"' in listing
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/.secret", timeout=5)
        assert err.value.code == 404
        assert "built-in default site" in srv.log()
    finally:
        assert srv.stop() == 0
