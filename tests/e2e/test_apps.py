"""Managed applications end to end (scalws/control/apps.py): real scalwsd
running real uvicorn and Node.js workers (tests/e2e/apps/), reached through
`app:` routes over unix sockets."""
from __future__ import annotations

import http.client
import os
import shutil
import signal
import threading
import time

import pytest

from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.timeout(90)

APPS = os.path.join(ROOT, "tests", "e2e", "apps")


def conf(apps: str, top: str = "") -> str:
    """A site on {port} with /api/ -> app api and /node/ -> app node when
    defined; `apps` is the body of the `apps:` key."""
    # Braces doubled: the server fixture fills {port} with str.format.
    return f"""
workers: 1
{top}
log: {{{{level: info}}}}
apps:
{apps}
sites:
  - listen: "127.0.0.1:{{port}}"
    routes:
      - {{{{path: /api/, app: api}}}}
"""


def asgi(extra: str = "", name: str = "api") -> str:
    return f"""  {name}:
    asgi: "asgi_app:app"
    dir: {APPS}
{extra}"""


def get(port, path, timeout=5.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        c.close()


def app_pids(port, n=20):
    pids = set()
    for _ in range(n):
        status, _, body = get(port, "/api/pid")
        assert status == 200, body
        pids.add(int(body.split()[0]))
    return pids


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_asgi_app_served_by_several_workers(server):
    srv = server(conf(asgi("    workers: 2")))
    status, headers, body = get(srv.port, "/api/pid")
    assert status == 200 and body.endswith(" pid\n"), body
    # Round robin over the two uvicorn processes.
    pids = app_pids(srv.port)
    assert len(pids) == 2, pids
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        assert b"uvicorn" in cmd and b"--uds" in cmd and b"uvloop" in cmd and b"httptools" in cmd
        # Children of the master, in their own process group.
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        assert int(fields[1]) == srv.pid and int(fields[2]) == pid


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_node_app_via_command(server):
    srv = server(conf(asgi() + f"""  node:
    command: [node, server.js]
    dir: {APPS}
""").replace("      - {{path: /api/, app: api}}",
             "      - {{path: /api/, app: api}}\n      - {{path: /node/, app: node}}"))
    status, _, body = get(srv.port, "/node/hello?x=1")
    assert status == 200 and " node /node/hello?x=1" in body, body
    srv.wait_log("app node[0] stdout: listening on ")


def test_killed_worker_is_restarted_and_the_others_keep_serving(server):
    srv = server(conf(asgi("    workers: 2")))
    pids = app_pids(srv.port)
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    # Every request succeeds meanwhile: the proxy tries the other worker.
    for _ in range(30):
        assert get(srv.port, "/api/pid")[0] == 200
    srv.wait_log("app api[", timeout=10)
    srv.wait_log("killed by signal 9 (SIGKILL); restarting")
    wait_for(lambda: len(app_pids(srv.port) - {victim}) == 2, what="a new worker")


def test_no_worker_up_answers_503_at_once(server):
    srv = server(conf(asgi("    restart: never")))
    (pid,) = app_pids(srv.port, 2)
    srv.expect_crashes = True
    try:
        get(srv.port, "/api/crash")
    except (http.client.HTTPException, OSError):
        pass
    srv.wait_log("not restarted (restart: never)")
    for _ in range(5):
        t0 = time.monotonic()
        status, headers, _ = get(srv.port, "/api/pid")
        assert status == 503 and headers.get("Retry-After") == "1", (status, headers)
        assert time.monotonic() - t0 < 0.5
    assert not alive(pid)


def test_crash_loop_backs_off(server):
    srv = server(conf(asgi("    restart: on-failure")))
    srv.expect_crashes = True
    for _ in range(3):
        try:
            get(srv.port, "/api/crash")
        except (http.client.HTTPException, OSError):
            pass
        srv.wait_log("exited with code 3; restarting", count=_ + 1)
        wait_for(lambda: get(srv.port, "/api/pid")[0] == 200, what="the restart")
    assert "crash loop" in srv.log()


def test_output_goes_to_the_error_log_tagged(server):
    srv = server(conf(asgi()))
    get(srv.port, "/api/print?hello%20there")
    srv.wait_log("app api[0] stdout: hello there")
    srv.wait_log("app api[0] stderr: hello there")
    line = next(l for l in srv.log().splitlines() if "stderr: hello there" in l)
    assert "[warn]" in line, line


class Hammer(threading.Thread):
    """Requests on keep-alive connections and on new ones, until stopped.

    As test_process.py's Hammer: an idle keep-alive connection the old
    generation closes while the next request is on its way gets no byte of
    an answer, a race no HTTP/1.1 server closes on its own; RFC 9112 9.3.1
    lets the client retry it, once, on a new connection, and that retry
    must succeed (`races` counts them). Anything else is a failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.ok = 0
        self.failed = []
        self.races = []
        self.stop = threading.Event()

    def run(self):
        keep = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        n = used = 0
        while not self.stop.is_set():
            n += 1
            try:
                if n % 2:
                    try:
                        keep.request("GET", "/api/pid")
                        r = keep.getresponse()
                        body = r.read()
                        used += 1
                    except (http.client.RemoteDisconnected, ConnectionResetError,
                            BrokenPipeError) as exc:
                        if not used:
                            raise
                        self.races.append(repr(exc))
                        keep.close()
                        keep = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                        used = 0
                        keep.request("GET", "/api/pid")
                        r = keep.getresponse()
                        body = r.read()
                        used = 1
                else:
                    status, _, body = get(self.port, "/api/pid", timeout=10)
                    r = type("R", (), {"status": status})
                if r.status != 200:
                    self.failed.append((r.status, body))
                else:
                    self.ok += 1
            except (http.client.HTTPException, OSError) as exc:
                self.failed.append(repr(exc))
                keep.close()
                keep = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                used = 0
        keep.close()


def test_reload_under_load_fails_no_request(server):
    srv = server(conf(asgi("    workers: 2")))
    before = app_pids(srv.port)
    hammers = [Hammer(srv.port) for _ in range(2)]
    for h in hammers:
        h.start()
    time.sleep(0.3)
    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded", timeout=20)
    # The old apps stop once the old web workers are gone.
    wait_for(lambda: not any(alive(p) for p in before), timeout=20, what="old apps to stop")
    time.sleep(0.3)
    for h in hammers:
        h.stop.set()
    for h in hammers:
        h.join(10)
    failed = [f for h in hammers for f in h.failed]
    assert not failed, failed[:5]
    # a hammer's keep-alive connection is closed at most once per old worker
    assert all(len(h.races) <= 2 for h in hammers), [h.races for h in hammers]
    assert sum(h.ok for h in hammers) > 50
    after = app_pids(srv.port)
    assert len(after) == 2 and not after & before, (before, after)
    log = srv.log()
    # Order: the new generation ready before the new web workers start.
    assert log.index("generation 2, socket") < log.index("reloaded")


def test_term_stops_apps_after_the_web_workers_drained(server):
    srv = server(conf(asgi()))
    (pid,) = app_pids(srv.port, 2)
    result = []
    t = threading.Thread(target=lambda: result.append(get(srv.port, "/api/slow?1.0")))
    t.start()
    time.sleep(0.3)                      # the request is with the app
    assert srv.stop() == 0
    t.join(5)
    assert result and result[0][0] == 200, result
    assert not alive(pid)
    log = srv.log()
    assert log.index("worker 0 (pid") < log.index("app api[0] (pid"), log


@pytest.mark.parametrize("allocator, lib", [("jemalloc", "libjemalloc.so.2"),
                                            ("mimalloc", "libmimalloc.so.2")])
def test_allocator_is_preloaded(server, allocator, lib):
    if not os.path.exists(f"/usr/lib/x86_64-linux-gnu/{lib}"):
        pytest.skip(f"{lib} is not installed")
    srv = server(conf(asgi(f"    allocator: {allocator}")))
    (pid,) = app_pids(srv.port, 2)
    with open(f"/proc/{pid}/maps") as f:
        assert lib in f.read()
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert f"LD_PRELOAD=/usr/lib/x86_64-linux-gnu/{lib}".encode() in f.read().split(b"\0")


def test_cpus_pin_the_workers(server):
    srv = server(conf(asgi("    cpus: [0]")))
    (pid,) = app_pids(srv.port, 2)
    assert os.sched_getaffinity(pid) == {0}


def test_app_that_never_gets_ready_stops_scalwsd(server):
    srv = server(conf("""  api:
    command: [sleep, "30"]
    start_timeout: 0.5s
"""), start=False)
    srv.start(wait=False)
    code = srv.proc.wait(15)
    assert code != 0
    log = srv.log()
    assert "app 'api' worker 0 did not accept connections" in log and "start_timeout" in log, log
    assert "scalws started" not in log


def test_app_that_exits_at_start_stops_scalwsd(server):
    srv = server(conf("""  api:
    command: [sh, -c, "echo no database >&2; exit 2"]
"""), start=False)
    srv.start(wait=False)
    assert srv.proc.wait(15) != 0
    log = srv.log()
    assert "app api[0] stderr: no database" in log, log
    assert "app 'api' worker 0 exited with code 2 before it was ready" in log, log


def test_reload_whose_apps_cannot_start_keeps_the_old_ones(server):
    srv = server(conf(asgi()))
    (pid,) = app_pids(srv.port, 2)
    with open(srv.config_path) as f:
        text = f.read()
    with open(srv.config_path, "w") as f:
        f.write(text.replace('asgi: "asgi_app:app"', 'command: [sh, -c, "exit 4"]'))
    srv.kill(signal.SIGHUP)
    srv.wait_log("reload failed, keeping the current configuration: app 'api' worker 0 "
                 "exited with code 4 before it was ready")
    assert app_pids(srv.port, 4) == {pid}
