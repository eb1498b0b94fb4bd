"""Large libraries stay out of the long-lived processes (issue 37, ADR
0035): the configuration is loaded, and OCSP is fetched, in throwaway
children (scalws/control/cfgload.py, forkcall.py), and the workers and
the status process run on control/loop.py, so that neither the master nor
anything forked from it (workers, the TLS keeper, the status process)
maps PyYAML, cryptography (whose Rust library pyOpenSSL uses), uvloop,
asyncio or Python's ssl module, at start and after reloads, the refused
one included. And the master unmaps the library pages it read only while
loading (scalws/control/forkmem.py, ADR 0036), after each generation's
start; and a worker gives back the free pages of its heap once it has been
idle a second after a burst (csrc/engine.c, trim_when_idle). A worker
drops its start-up's library pages once it serves (forkmem.py)."""
from __future__ import annotations

import http.client
import pathlib
import re
import signal
import ssl
import subprocess

import pytest

from scalws.control import forkmem
from tests.e2e.conftest import until

CONF = """
workers: 2
status: {{listen: "127.0.0.1:{port2}"}}
sites:
  - listen: "127.0.0.1:{port} tls"
    tls: {{cert: "{cert}", key: "{key}"}}
    routes:
      - {{path: /, respond: {{body: "{body}\\n"}}}}
"""
# What their native modules are called on disk.
HEAVY = ("/yaml/_yaml.", "/cryptography/hazmat/bindings/_rust", "/uvloop/loop.",
         "/_asyncio.", "/_ssl.")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.tlspki import PKI
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def heavy_maps(pids) -> dict:
    """pid -> the heavy libraries it maps."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                found = sorted({h for line in f for h in HEAVY if h in line})
        except FileNotFoundError:
            continue  # gone (a worker of the last generation)
        if found:
            out[pid] = found
    return out


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    r = c.getresponse()
    assert r.status == 200
    body = r.read()
    c.close()
    return body


def get(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    c = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
    c.request("GET", "/")
    body = c.getresponse().read()
    c.close()
    return body


def test_no_long_lived_process_maps_the_loaders_libraries(server, pki):
    srv = server(CONF, cert=pki.ec.cert_path, key=pki.ec.key_path, body="one")
    assert get(srv.ports[0]) == b"one\n"
    assert metrics(srv.ports[1]).startswith(b"# HELP")  # the status process serves
    srv.wait_log("OCSP for")  # the keeper made its first attempt (in a child)
    pids = [srv.pid] + srv.workers()
    assert len(pids) == 5  # master, 2 workers, status, TLS keeper
    assert heavy_maps(pids) == {}

    # A refused reload: the loader's child answers with every problem
    # (file:line and key), the master keeps serving without its libraries.
    path = pathlib.Path(srv.config_path)
    good = path.read_text()
    path.write_text(good.replace("workers: 2", "workers: lots"))
    srv.kill(signal.SIGHUP)
    srv.wait_log("reload failed")
    assert f"{srv.config_path}:2:10: workers: " in srv.log()
    assert get(srv.ports[0]) == b"one\n"

    path.write_text(good.replace('"one', '"two'))
    srv.kill(signal.SIGHUP)
    srv.wait_log("(generation 2)", timeout=15)
    until(lambda: get(srv.ports[0]) == b"two\n", what="the new generation's answer")
    pids = [srv.pid] + srv.workers()
    assert heavy_maps(pids) == {}


def proc_kb(pid, name, key):
    """The kB figure `key` of /proc/PID/`name` (smaps_rollup, status)."""
    with open(f"/proc/{pid}/{name}") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def private_clean_kb(pid):
    """The pages of files only this process maps."""
    return proc_kb(pid, "smaps_rollup", "Private_Clean")


PLAIN = """
workers: 2
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /, respond: {{body: "{body}\\n"}}}}
"""


def test_the_master_keeps_no_library_page_only_it_read(server):
    """Relocating and binding the engine's libraries reads their tables in
    the master (1.7 MiB here), which no worker maps: gone once the workers
    run, and again after a reload; the master goes on serving signals."""
    srv = server(PLAIN, body="one")
    until(lambda: http_get(srv.ports[0]) == b"one\n", what="the first answer")
    assert private_clean_kb(srv.pid) < 512
    path = pathlib.Path(srv.config_path)
    path.write_text(path.read_text().replace('"one', '"two'))
    srv.kill(signal.SIGHUP)
    srv.wait_log("(generation 2)", timeout=15)
    until(lambda: http_get(srv.ports[0]) == b"two\n", what="the new generation's answer")
    assert private_clean_kb(srv.pid) < 512


def http_get(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/")
    body = c.getresponse().read()
    c.close()
    return body


def rss_anon_kb(pid):
    return proc_kb(pid, "status", "RssAnon")


TLS1 = """
workers: 1
sites:
  - listen: "127.0.0.1:{port} tls"
    tls: {{cert: "{cert}", key: "{key}"}}
    routes:
      - {{path: /, respond: {{body: "{body}\\n"}}}}
"""


def test_a_worker_gives_back_what_a_burst_left_once_idle(server, pki):
    """64 TLS clients leave about 2 MiB of OpenSSL's state and buffers free
    in the worker's heap, still in its RSS; a second after the last client
    leaves, the worker trims its heap (engine.c, trim_when_idle)."""
    srv = server(TLS1, cert=pki.ec.cert_path, key=pki.ec.key_path, body="one")
    assert get(srv.ports[0]) == b"one\n"
    [worker] = [p for p in srv.workers()
                if pathlib.Path(f"/proc/{p}/comm").read_text().startswith("scalwsd-worker")]
    before = rss_anon_kb(worker)
    subprocess.run(["wrk", "-t1", "-c64", "-d2s", f"https://127.0.0.1:{srv.ports[0]}/"],
                   check=True, capture_output=True, timeout=30)
    after = rss_anon_kb(worker)
    assert after > before + 1024, (before, after)  # what the trim is for
    until(lambda: rss_anon_kb(worker) < before + 512, timeout=5,
          what=f"the worker's heap back near {before} kB (it was {after})")


def load_only_kb(pid):
    """Resident kB of the process's never-written file mappings (forkmem)."""
    with open(f"/proc/{pid}/smaps") as f:
        return sum(kb for *_, kb in forkmem.load_only_mappings(f))


def test_a_worker_keeps_no_page_only_its_start_up_ran(server):
    """The code a worker ran only while starting (its sandbox's set-up, the
    engine's build: about 3 MiB of the interpreter's and the libraries'
    pages here) leaves its RSS once it serves; what it serves with comes
    back. Its sandbox refuses it /proc by then: it reads the smaps it
    opened before (forkmem.open_smaps)."""
    srv = server(PLAIN.replace("workers: 2", "workers: 2\nlog: {{level: debug}}"), body="one")
    until(lambda: http_get(srv.ports[0]) == b"one\n", what="the first answer")
    for i in range(2):
        srv.wait_log(f"worker {i}: ")
    dropped = {int(m[1]): int(m[2]) for m in re.finditer(
        r"worker (\d+): \d+ mappings, (\d+) kB of start-up pages unmapped", srv.log())}
    assert sorted(dropped) == [0, 1], srv.log()
    for _ in range(200):
        assert http_get(srv.ports[0]) == b"one\n"
    for pid in srv.workers():
        comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
        index = int(comm.removeprefix("scalwsd-worker"))
        assert dropped[index] > 2048, dropped
        # serving faulted in a fraction of it again
        assert load_only_kb(pid) < dropped[index] - 1024, (comm, load_only_kb(pid), dropped)
