"""`watch_config`: scalwsd reloads by itself when its configuration file's
content changes (scalws/control/watch.py), as a Kubernetes ConfigMap volume
changes it (a `..data` symlink swapped to a new folder), with SIGHUP's
checks: a broken file is refused with file:line and the running
configuration keeps serving."""
import http.client
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT

CONF = """
workers: 1
watch_config: 200ms
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /, respond: {{body: "%s"}}}}
"""


def body(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/")
        return c.getresponse().read().decode()
    finally:
        c.close()


def serves(port, want, timeout=15.0):
    """Waits until GET / answers `want` (a new generation is ready)."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = body(port)
        if got == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"GET / still answers {got!r}, not {want!r}")


def replace(path, text):
    """As an editor or a deployment tool writes: a new file renamed over."""
    tmp = f"{path}.new"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def test_a_changed_file_is_loaded(server):
    srv = server(CONF % "one")
    assert body(srv.port) == "one"
    text = open(srv.config_path).read()
    replace(srv.config_path, text.replace('"one"', '"two"'))
    serves(srv.port, "two")
    srv.wait_log("changed: reloading (watch_config)")
    srv.wait_log("reloaded")


def test_a_touch_without_change_reloads_nothing(server):
    srv = server(CONF % "one")
    os.utime(srv.config_path)
    replace(srv.config_path, open(srv.config_path).read())  # same bytes, new inode
    # then a real change: the reload it makes is the first and only one
    text = open(srv.config_path).read()
    replace(srv.config_path, text.replace('"one"', '"three"'))
    serves(srv.port, "three")
    srv.wait_log("reloaded")
    assert srv.log().count("changed: reloading (watch_config)") == 1, srv.log()


def test_a_configmap_symlink_swap_is_followed(server, tmp_path):
    """A ConfigMap volume: scalws.yaml -> ..data/scalws.yaml, ..data -> a
    timestamped folder; kubelet writes a new folder and renames a new
    ..data link over the old one."""
    vol = tmp_path / "configmap"
    first = vol / "..2026_12_05_10_00_00.1"
    first.mkdir(parents=True)
    srv = server(CONF % "one", start=False)
    text = open(srv.config_path).read()
    (first / "scalws.yaml").write_text(text)
    os.symlink(first.name, vol / "..data")
    os.symlink("..data/scalws.yaml", vol / "scalws.yaml")
    srv.config_path = str(vol / "scalws.yaml")
    srv.start()
    assert body(srv.port) == "one"

    second = vol / "..2026_12_05_10_05_00.2"
    second.mkdir()
    (second / "scalws.yaml").write_text(text.replace('"one"', '"two"'))
    os.symlink(second.name, vol / "..data_tmp")
    os.replace(vol / "..data_tmp", vol / "..data")
    (first / "scalws.yaml").unlink()
    first.rmdir()
    serves(srv.port, "two")
    srv.wait_log("changed: reloading (watch_config)")


def test_a_broken_file_is_refused_once_and_the_old_one_serves(server):
    srv = server(CONF % "one")
    text = open(srv.config_path).read()
    broken = text.replace("workers: 1", "workers: many")
    replace(srv.config_path, broken)
    srv.wait_log("reload failed, keeping the current configuration")
    log = srv.log()
    line = broken.splitlines().index("workers: many") + 1
    assert f"{srv.config_path}:{line}:" in log and "workers" in log, log
    assert body(srv.port) == "one"
    # tried once: ten more intervals later, still one refusal
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert body(srv.port) == "one"
        time.sleep(0.1)
    assert srv.log().count("reload failed") == 1, srv.log()
    # and the next change of content is tried again
    replace(srv.config_path, text.replace('"one"', '"fixed"'))
    serves(srv.port, "fixed")


def test_a_missing_file_is_said_once_and_nothing_stops(server):
    srv = server(CONF % "one")
    text = open(srv.config_path).read()
    os.unlink(srv.config_path)
    srv.wait_log("watch_config: cannot read")
    assert body(srv.port) == "one"
    with open(srv.config_path, "w") as f:
        f.write(text.replace('"one"', '"back"'))
    serves(srv.port, "back")
    assert srv.log().count("watch_config: cannot read") == 1, srv.log()


def test_off_by_default(server):
    srv = server(CONF.replace("watch_config: 200ms\n", "") % "one")
    text = open(srv.config_path).read()
    replace(srv.config_path, text.replace('"one"', '"two"'))
    deadline = time.monotonic() + 3.0  # the longest a 2 s watch would take, and more
    while time.monotonic() < deadline:
        assert body(srv.port) == "one"
        time.sleep(0.1)
    srv.kill(signal.SIGHUP)
    serves(srv.port, "two")


@pytest.mark.parametrize("value, message", [
    ("10ms", "watch_config: expected at least 100ms"),
    ("2h", "watch_config: must be between 0s and 3600s"),
    ("often", "watch_config: expected a duration"),
])
def test_bad_values_are_refused_with_the_line(tmp_path, value, message):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"watch_config: {value}\nsites:\n  - listen: '127.0.0.1:1'\n"
                   "    routes: [{path: /, respond: {body: x}}]\n")
    r = subprocess.run([sys.executable, "-m", "scalws", "--check-config", str(cfg)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r
    assert f"{cfg}:1:15: {message}" in r.stderr + r.stdout, r
