"""The workers' sandbox (ADR 0012), attacked from inside real workers.

The test hook SCALWS_SANDBOX_PROBE=FILE (docs/operations.md: not a
configuration key) makes each worker keep FILE open across its sandbox and,
on SIGUSR2, try every operation FILE lists and log the outcome:
`worker N: sandbox probe: read /etc/shadow: EACCES (Permission denied)`.
"""
from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import tempfile
import time

import pytest

from scalws.control import sandbox

SUPPORT = sandbox.probe()
needs_all = pytest.mark.skipif(
    SUPPORT["landlock"] < 4 or not SUPPORT["seccomp"],
    reason="needs Landlock ABI >= 4 and seccomp filters on x86-64")

CONF = """
workers: {workers}
sandbox: {mode}
log: {{access: "{tmp}/logs/access.log"}}
upstreams:
  up: {{servers: ["127.0.0.1:{upstream}"]}}
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /up/, proxy: {{upstream: up}}}}
      - {{path: /, static: {{root: "{root}", follow_symlinks: on}}}}
"""


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


@pytest.fixture
def outside():
    """A secret outside the document root and outside the config's folder,
    readable by the workers' user: the sandbox, not the file's mode, keeps
    them out."""
    d = tempfile.mkdtemp(prefix="scalws-outside-")
    os.chmod(d, 0o755)
    with open(os.path.join(d, "secret.txt"), "w") as f:
        f.write("top secret\n")
    yield d
    os.unlink(os.path.join(d, "secret.txt"))
    os.rmdir(d)


@pytest.fixture
def listener():
    """A TCP port that listens: one is the upstream, one is not."""
    socks = []

    def make():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        socks.append(s)
        return s.getsockname()[1]
    yield make
    for s in socks:
        s.close()


def start(server, tmp_path, listener, outside, mode="on", workers=1, env=None, wait=True):
    root = tmp_path / "www"
    root.mkdir(exist_ok=True)
    (root / "inside.txt").write_text("inside\n")
    if not (root / "link.txt").is_symlink():
        os.symlink(os.path.join(outside, "secret.txt"), root / "link.txt")
    (tmp_path / "logs").mkdir(exist_ok=True)
    probe = tmp_path / "probe.txt"
    probe.write_text("")
    srv = server(CONF, start=False, workers=workers, mode=mode, root=str(root),
                 upstream=listener())
    srv.probe = probe
    srv.start(wait=wait, env={sandbox.PROBE_ENV: str(probe), **(env or {})})
    return srv


def probe(srv, pid, lines, expect):
    """Runs `lines` in worker `pid`; returns {line: outcome}."""
    srv.probe.write_text("\n".join(lines) + "\n")
    before = srv.log().count("sandbox probe:")
    os.kill(pid, signal.SIGUSR2)
    srv.wait_log("sandbox probe:", count=before + expect)
    out = {}
    for m in re.finditer(r"sandbox probe: (.*): (ok|E[A-Z]+ \(.*\))$", srv.log(), re.M):
        out[m.group(1)] = m.group(2)
    return out


@needs_all
def test_worker_cannot_read_outside_its_roots(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside)
    assert get(srv.port, "/inside.txt") == (200, b"inside\n")
    status, body = get(srv.port, "/link.txt")  # a symlink in the root, out of it
    assert status != 200 and b"secret" not in body
    (pid,) = srv.workers()
    root = tmp_path / "www"
    out = probe(srv, pid, [
        "read /etc/shadow",
        f"read {outside}/secret.txt",
        f"read {root}/link.txt",
        f"read {root}/{'../' * 12}etc/passwd",
        f"read {root}/inside.txt",
        f"write {root}/new.txt",
        f"write {outside}/new.txt",
    ], 7)
    assert out["read /etc/shadow"].startswith("EACCES")
    assert out[f"read {outside}/secret.txt"].startswith("EACCES")
    assert out[f"read {root}/link.txt"].startswith("EACCES")
    assert [v for k, v in out.items() if "etc/passwd" in k][0].startswith("EACCES")
    assert out[f"read {root}/inside.txt"] == "ok"
    assert out[f"write {root}/new.txt"].startswith("EACCES")
    assert out[f"write {outside}/new.txt"].startswith("EACCES")
    assert not os.path.exists(root / "new.txt")


@needs_all
def test_worker_connects_only_to_upstreams(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside)
    (pid,) = srv.workers()
    up = re.search(r'127\.0\.0\.1:(\d+)"\]', open(srv.config_path).read()).group(1)
    other = listener()
    out = probe(srv, pid, [f"connect 127.0.0.1 {up}", f"connect 127.0.0.1 {other}"], 2)
    assert out[f"connect 127.0.0.1 {up}"] == "ok"
    assert out[f"connect 127.0.0.1 {other}"].startswith("EACCES")


def _killed_by(srv, pid, line, call):
    srv.expect_crashes = True
    srv.probe.write_text(line + "\n")
    os.kill(pid, signal.SIGUSR2)
    srv.wait_log(f"seccomp: system call {call} (")
    srv.wait_log("killed by signal 31 (SIGSYS)")
    assert re.search(rf"\[crit\] {pid}#\d: worker \d: seccomp: system call {call} \(\d+\) "
                     r"is not allowed; exiting", srv.log()), srv.log()


@needs_all
def test_execve_kills_the_worker_and_the_others_serve(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside, workers=2)
    pids = srv.workers()
    assert len(pids) == 2
    _killed_by(srv, pids[0], "exec /bin/true", "execve")
    for _ in range(20):  # the other worker, and the replacement
        assert get(srv.port, "/inside.txt") == (200, b"inside\n")
    deadline = time.monotonic() + 5
    while len(srv.workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids[1] in srv.workers() and len(srv.workers()) == 2


@needs_all
def test_worker_cannot_open_a_listening_socket(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside)
    (pid,) = srv.workers()
    _killed_by(srv, pid, "bind 127.0.0.1 0", "bind")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the replacement serves
        try:
            if get(srv.port, "/inside.txt")[0] == 200:
                break
        except OSError:
            time.sleep(0.05)
    assert get(srv.port, "/inside.txt") == (200, b"inside\n")


@needs_all
def test_reload_adds_a_root(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside)
    new_root = tempfile.mkdtemp(prefix="scalws-newroot-")  # outside every rule so far
    os.chmod(new_root, 0o755)                              # and open to the workers' user
    os.mkdir(os.path.join(new_root, "extra"))
    with open(os.path.join(new_root, "extra", "e.txt"), "w") as f:
        f.write("extra\n")
    (pid,) = srv.workers()
    line = f"read {new_root}/extra/e.txt"
    assert probe(srv, pid, [line], 1)[line].startswith("EACCES")
    text = open(srv.config_path).read().replace(
        "      - {path: /, static:",
        f'      - {{path: /extra/, static: {{root: "{new_root}"}}}}\n      - {{path: /, static:')
    with open(srv.config_path, "w") as f:
        f.write(text)
    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded")
    assert get(srv.port, "/extra/e.txt") == (200, b"extra\n")


@needs_all
def test_usr1_reopens_logs_under_the_sandbox(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside)
    logs = tmp_path / "logs"
    assert get(srv.port, "/inside.txt")[0] == 200
    time.sleep(0.3)
    os.rename(logs / "access.log", logs / "access.log.1")
    srv.kill(signal.SIGUSR1)
    srv.wait_log("logs reopened")
    assert get(srv.port, "/inside.txt")[0] == 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if (logs / "access.log").exists() and "inside.txt" in (logs / "access.log").read_text():
            break
        time.sleep(0.1)
    assert "inside.txt" in (logs / "access.log").read_text()
    assert "reopening logs failed" not in srv.log()


def test_required_refuses_to_start_without_landlock(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside, mode="required", wait=False,
                env={sandbox.FAKE_ENV: "landlock"})
    assert srv.proc.wait(15) != 0
    assert "sandbox: required, but this kernel cannot apply: Landlock" in srv.log()
    assert "not starting" in srv.log()


def test_on_warns_once_and_serves_without_landlock(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside, workers=2,
                env={sandbox.FAKE_ENV: "landlock"})
    assert get(srv.port, "/inside.txt") == (200, b"inside\n")
    log = srv.log()
    assert log.count("[warn]") == 1 and "sandbox: on, but the workers run without Landlock" in log


def test_off_applies_nothing(server, tmp_path, listener, outside):
    srv = start(server, tmp_path, listener, outside, mode="off")
    (pid,) = srv.workers()
    out = probe(srv, pid, [f"read {outside}/secret.txt"], 1)
    assert out[f"read {outside}/secret.txt"] == "ok"
    with open(f"/proc/{pid}/status") as f:
        assert re.search(r"^Seccomp:\s+0$", f.read(), re.M)
