"""Never root by accident (issue 30, point 2): scalwsd started as root
without `user:` runs its workers (and its status process) as the package's
`scalws` user or `nobody`, says so, and they keep working through reloads
and log reopening even where that user cannot read the Python installation
(they import everything first); `user: root` is a choice --check-config
warns about, as it does about a document root the workers' user cannot
read.
"""
from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import urllib.request

import pytest

from scalws.config import users
from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the user switch needs root")

CONF = """
workers: 2
{user}
log: {{access: "{tmp}/access.log"}}
status: {{listen: "127.0.0.1:{port2}"}}
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /, static: {{root: "{tmp}/www"}}}}
"""


def _uid(pid) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])   # real uid
    raise AssertionError(pid)


def _get(port, path="/a.txt"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.status, r.read()


def _check(path):
    return subprocess.run([sys.executable, "-m", "scalws", "--check-config", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture
def www(tmp_path):
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "a.txt").write_text("a\n")


def test_root_without_user_runs_the_workers_unprivileged(server, www, tmp_path):
    expected = users.default_user()
    uid = pwd.getpwnam(expected).pw_uid
    assert uid != 0
    srv = server(CONF, user="")
    assert f"the workers run as {expected} (started as root without user:)" in srv.log()
    master_uid = _uid(srv.pid)
    assert master_uid == 0
    for pid in srv.workers():   # two workers and the status process
        assert _uid(pid) == uid, (pid, open(f"/proc/{pid}/cmdline").read())
    assert _get(srv.port) == (200, b"a\n")
    # what they run after the switch needs no import: reloads, USR1, a stop
    for n in (1, 2):
        srv.kill(signal.SIGHUP)
        srv.wait_log("reloaded", count=n)
        assert _get(srv.port) == (200, b"a\n")
    os.rename(tmp_path / "access.log", tmp_path / "access.log.1")
    srv.kill(signal.SIGUSR1)
    srv.wait_log("logs reopened", count=2)
    assert _get(srv.port) == (200, b"a\n")
    for pid in srv.workers():
        assert _uid(pid) == uid
    assert srv.stop() == 0
    log = srv.log()
    assert "cannot start" not in log and "failed to start" not in log, log
    assert "GET /a.txt" in (tmp_path / "access.log").read_text()


def test_user_root_is_a_choice_that_check_config_warns_about(server, www, tmp_path):
    srv = server(CONF, user="user: root", start=False)
    out = _check(srv.config_path)
    assert out.returncode == 0, out.stderr
    assert "user: the workers run as root" in out.stderr, out.stderr
    srv.start()
    assert "warn" in srv.log() and "the workers run as root" in srv.log()
    assert all(_uid(pid) == 0 for pid in srv.workers())
    assert _get(srv.port) == (200, b"a\n")


def test_check_config_warns_about_a_root_the_user_cannot_read(server, www, tmp_path):
    os.chmod(tmp_path / "www", 0o700)
    srv = server(CONF, user="", start=False)
    out = _check(srv.config_path)
    assert out.returncode == 0, out.stderr
    expected = users.default_user()
    assert (f"the workers run as {expected}, who cannot read the document root "
            f"{tmp_path}/www (mode 0700, root:root)") in out.stderr, out.stderr


def test_check_config_warns_about_an_app_that_would_run_as_root(tmp_path):
    cfg = tmp_path / "apps.yaml"
    cfg.write_text("apps:\n  a: {command: [/bin/sleep, '100'], dir: /tmp}\n"
                   "  b: {command: [/bin/sleep, '100'], dir: /tmp, user: nobody}\n"
                   "sites:\n  - listen: 127.0.0.1:1\n    routes:\n"
                   "      - {path: /a/, app: a}\n      - {path: /b/, app: b}\n")
    out = _check(cfg)
    assert out.returncode == 0, out.stderr
    assert ("apps.a: the app runs as root (scalwsd runs as root and neither the app nor "
            "the top level names a user)") in out.stderr, out.stderr
    assert "apps.b" not in out.stderr
