"""`log.error_format: json` (issue 34: logs a container platform ships):
every line of the error log is one JSON object with the same fields, from
the master and the status process (Python), from a worker's engine (C),
client bytes and a multi-line refusal included, and from the SIGSYS handler
that reports a system call the sandbox refused."""
import json
import os
import signal
import socket

from scalws.control import sandbox

SECCOMP = sandbox.probe()["seccomp"]

CONF = """
workers: 1
log: {{error_format: json, level: info}}
status: {{listen: "127.0.0.1:{port2}"}}
upstreams:
  dead: {{servers: ["127.0.0.1:{port3}"]}}
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /up, proxy: {{upstream: dead}}}}
      - {{path: /, respond: {{body: "hi"}}}}
"""
FIELDS = {"time", "level", "pid", "worker", "msg"}
LEVELS = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"}


def lines(srv):
    out = []
    for raw in srv.log().splitlines():
        obj = json.loads(raw)  # every line: one object, or this raises
        assert set(obj) == FIELDS, raw
        assert obj["level"] in LEVELS and isinstance(obj["pid"], int), raw
        assert len(obj["time"]) == 25 and obj["time"][10] == "T", raw
        out.append(obj)
    return out


def ask(port, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        return s.recv(200)


def test_every_line_is_one_json_object(server, tmp_path):
    probe = tmp_path / "probe.txt"
    probe.write_text("")
    srv = server(CONF, start=False)
    srv.start(env={sandbox.PROBE_ENV: str(probe)})
    # the engine's line, with a client's quote, backslash and non-ASCII bytes
    assert ask(srv.port, b'GET /up?a="\\\xff HTTP/1.1\r\nHost: x\r\n\r\n').startswith(b"HTTP/1.1 502")
    srv.wait_log("connect() failed")
    # a refused reload: a message of several lines in one object
    good = open(srv.config_path).read()
    with open(srv.config_path, "w") as f:
        f.write(good.replace("workers: 1", "workers: many"))
    srv.kill(signal.SIGHUP)
    srv.wait_log("reload failed")
    with open(srv.config_path, "w") as f:
        f.write(good)
    # a system call the sandbox refuses: the SIGSYS handler's line
    srv.expect_crashes = True
    (pid,) = [p for p in srv.workers()
              if b"worker" in open(f"/proc/{p}/cmdline", "rb").read()]
    if SECCOMP:
        probe.write_text("exec /bin/true\n")
        os.kill(pid, signal.SIGUSR2)
        srv.wait_log("killed by signal 31 (SIGSYS)")
    assert srv.stop() == 0

    got = lines(srv)
    engine = [o for o in got if "connect() failed" in o["msg"]]
    assert engine and engine[0]["worker"] == 0 and engine[0]["level"] == "error", got
    # the client's bytes as sent: a quote, a backslash, 0xff (as U+00FF)
    assert 'request: "GET /up?a="\\\u00ff", client' in engine[0]["msg"], engine[0]
    refused = [o for o in got if "reload failed" in o["msg"]]
    assert refused and f"{srv.config_path}:2:" in refused[0]["msg"] and "\n" in refused[0]["msg"]
    assert any(o["worker"] == "-" and "scalws started" in o["msg"] for o in got)
    assert any(o["worker"] == "-" and o["msg"] == "scalws stopped" for o in got)
    if SECCOMP:
        sigsys = [o for o in got if "seccomp: system call execve" in o["msg"]]
        assert sigsys and sigsys[0]["level"] == "crit" and sigsys[0]["pid"] == pid, got
