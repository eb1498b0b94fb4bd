#!/usr/bin/env python3
"""Runs the http-cache-tests suite (cache-tests.fyi) against a caching reverse
proxy on 127.0.0.1 in front of the suite's own origin server, and summarises
the results with the suite's own classification (README.md in this folder).

    run.py --server nginx  [--nginx-profile operator|suite] [--json OUT]
    run.py --server scalws [--json OUT]
    run.py --server nginx --id TEST-ID      one test, with the suite's dump
    run.py --compare A.json B.json          tests whose result differs

The suite comes from node_modules/ here (`npm ci`, package-lock.json);
run.py installs it when it is missing. Exit status: 0 when the suite ran
(failures included; --fail-on-harmful makes a harmful failure exit 1), 2 when
it could not run (no node, a server that did not start, a suite that crashed).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE_DIR = os.path.join(HERE, "node_modules", "http-cache-tests")
LOCK = os.path.join(HERE, "package-lock.json")

# cache-tests.fyi's result classes (lib/display.mjs, determineTestResult), in
# the order the summary prints them, with the site's symbol and meaning.
CLASSES = {
    "pass": ("✅", "passed (a required or optimal test)"),
    "yes": ("Y", "check answered yes (informational)"),
    "fail": ("⛔", "required test failed: conformance problem"),
    "optional_fail": ("⚠", "optimal test failed: a missed optimisation"),
    "no": ("N", "check answered no (informational)"),
    "dependency_fail": ("⚪", "a test it depends on did not pass: not evaluated"),
    "setup_fail": ("🔹", "the harness could not set the test up"),
    "retry": ("↻", "the cache retried a request: to read by hand"),
    "harness_fail": ("⁉", "internal error of the harness"),
    "untested": ("-", "no result"),
}
PASS_CLASSES = ("pass", "yes")
HARMFUL = "fail"
# Suites whose failures do not count as harmful: Surrogate-Control is a W3C
# Note (Edge Architecture), not RFC 9111, and a cache that does not
# implement it fails two of its "required" tests, one of which asks it to
# store a response with Cache-Control: no-store (README.md).
NOT_RFC9111 = ("surrogate-control",)
# Required tests of the pinned suite (0.4.5) whose expectation RFC 9111
# contradicts. Each wants a response whose Age is not one non-negative
# integer (a list, two lines, a sign, a fraction, a parameter) treated as
# stale, where section 5.1 says a cache SHOULD use the first member of a
# list and SHOULD ignore an invalid value, as if absent: the first member
# here is 0, 3600 (max-age 10000) or invalid, so the response is fresh. The
# suite's later versions expect these responses reused. Their fails are
# reported apart (`fail_contrary`) and are not harmful; a failure of the
# other Age tests (the first member is 7200, or 0 before 7200 on one line)
# is.
CONTRARY_RFC9111 = ("age-parse-nonnumeric", "age-parse-negative", "age-parse-float",
                    "age-parse-prefix-twoline", "age-parse-dup-0", "age-parse-dup-0-twoline",
                    "age-parse-dup-old", "age-parse-parameter", "age-parse-numeric-parameter")


class RunError(Exception):
    """The suite could not be run (as opposed to: it ran and tests failed)."""


# ---- the suite ----------------------------------------------------------------

def node_tools() -> tuple[str, str] | None:
    """(node, npm) paths, or None when either is absent."""
    node = shutil.which("node") or shutil.which("nodejs")
    npm = shutil.which("npm")
    return (node, npm) if node and npm else None


def _locked_version() -> str:
    with open(LOCK) as f:
        return json.load(f)["packages"]["node_modules/http-cache-tests"]["version"]


def suite_version() -> str | None:
    try:
        with open(os.path.join(SUITE_DIR, "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def ensure_suite() -> str:
    """Installs the suite with `npm ci` (exactly package-lock.json) unless the
    locked version is already in node_modules; returns that version."""
    tools = node_tools()
    if tools is None:
        raise RunError("node and npm are needed (make sysdeps installs them)")
    want = _locked_version()
    if suite_version() != want:
        proc = subprocess.run([tools[1], "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                              cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0 or suite_version() != want:
            raise RunError(f"npm ci failed in {HERE}:\n{proc.stdout}")
    return want


def load_definitions() -> dict:
    """Test id -> definition (definitions.mjs: suite, name, kind, depends_on, ...)."""
    node = node_tools()[0]
    proc = subprocess.run([node, "--no-warnings", os.path.join(HERE, "definitions.mjs")],
                          cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RunError(f"reading the test definitions failed:\n{proc.stderr}")
    return {t["id"]: t for t in json.loads(proc.stdout)}


def classify(defs: dict, results: dict) -> dict:
    """Test id -> class, by cache-tests.fyi's rule (determineTestResult in the
    suite's lib/display.mjs, ported line for line):
      1. no result: untested;
      2. a test in depends_on whose own class is not pass or yes:
         dependency_fail, whatever this test's result;
      3. a failure thrown as Setup: retry (message 'retry') or setup_fail;
      4. kind required or unset: pass or fail (⛔; harmful outside
         NOT_RFC9111 and CONTRARY_RFC9111);
         kind optimal: pass or optional_fail (⚠);
         kind check: yes or no (informational).
    The suite's harness_fail test is `result === false`, which a result
    never is (true or [error name, message]): a failure thrown as anything
    but Setup (an Assertion, or a TypeError when the origin never saw a
    request the test expected) is judged by kind, as on the site."""
    memo: dict = {}

    def cls(tid):
        if tid in memo:
            return memo[tid]
        test = defs[tid]
        result = results.get(tid)
        if result is None:
            c = "untested"
        elif any(cls(dep) not in PASS_CLASSES for dep in test["depends_on"]):
            c = "dependency_fail"
        elif result is not True and result[0] == "Setup":
            c = "retry" if result[1] == "retry" else "setup_fail"
        elif test["kind"] in (None, "required"):
            c = "pass" if result is True else "fail"
        elif test["kind"] == "optimal":
            c = "pass" if result is True else "optional_fail"
        elif test["kind"] == "check":
            c = "yes" if result is True else "no"
        else:
            raise RunError(f"test {tid}: unknown kind {test['kind']!r}")
        memo[tid] = c
        return c

    return {tid: cls(tid) for tid in results}


STATUS_502 = re.compile(r"^Response (\d+) status is 502, not 200$")


def unmask_999(defs: dict, results: dict) -> tuple[dict, list]:
    """The suite's origin answers a request that should have been conditional
    (expected_type lm_validated or etag_validated) but was not with status 999,
    and the client reports that as "Request N should have been conditional",
    judged by the test's kind. A proxy that refuses a status outside 100-599
    (RFC 9110 section 15: invalid) answers 502 instead, which the client
    counts as a setup failure ("status is 502, not 200"), hiding the failure.
    This gives such results the verdict the suite would have given the 999;
    returns the results and the ids it changed. A 502 on such a request is a
    failure either way: the cache did not deliver the validated response."""
    out, changed = dict(results), []
    for tid, result in results.items():
        if result is True or result[0] != "Setup":
            continue
        m = STATUS_502.match(result[1])
        if not m:
            continue
        n = int(m.group(1))
        reqs = defs[tid]["requests"]
        if n > len(reqs):
            continue
        req = reqs[n - 1]
        if (req["expected_type"] or "").endswith("validated") and not req["status_set"]:
            setup = req["setup"] or "expected_type" in req["setup_tests"]
            out[tid] = ["Setup" if setup else "Assertion",
                        f"Request {n} should have been conditional, but it was not "
                        f"(the proxy answered 502 to the origin's 999)"]
            changed.append(tid)
    return out, changed


# Failure messages that mean the cache answered from storage where the test
# required the origin to see the request.
REUSE = re.compile(r"comes from cache|wasn't sent to server|of undefined \(reading 'request_")


def served_stored(result) -> bool:
    return result is not True and bool(REUSE.search(result[1]))


def summarise(defs: dict, results: dict, classes: dict) -> dict:
    """Counts as the suite's own page counts them (renderTestResults: a test
    passed when its result is true) and by class; `harmful` are the tests of
    class fail outside NOT_RFC9111 (`fail_not_rfc9111`: those inside) and
    CONTRARY_RFC9111 (`fail_contrary`), `served_stored` the harmful ones
    where the cache answered from storage although the test required the
    origin."""
    counts = {c: 0 for c in CLASSES}
    for c in classes.values():
        counts[c] += 1
    passed = sum(1 for r in results.values() if r is True)
    failed = sorted(tid for tid, c in classes.items() if c == HARMFUL)
    harmful = [tid for tid in failed
               if defs[tid]["suite"] not in NOT_RFC9111 and tid not in CONTRARY_RFC9111]
    return {
        "total": len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "classes": counts,
        "harmful": harmful,
        "served_stored": [tid for tid in harmful if served_stored(results[tid])],
        "fail_not_rfc9111": [tid for tid in failed if defs[tid]["suite"] in NOT_RFC9111],
        "fail_contrary": [tid for tid in failed if tid in CONTRARY_RFC9111],
    }


def run_cli(base: str, timeout: float, test_id: str | None = None) -> dict | str:
    """Runs the suite's CLI (cli.mjs, what `npm run cli --base=URL` runs) against
    `base`: every test but the browser-only ones, and the surrogate-control
    suite. Returns its JSON results, or with test_id its text dump of that test.
    The CLI reads its options from the variables `npm run` sets: the
    command line's (npm_config_*), then the package's config
    (npm_package_config_*, where id is ''); an id that is not '' runs that
    one test (cli.mjs compares it with '', so unset would too)."""
    node = node_tools()[0]
    env = {**os.environ, "npm_config_base": base, "npm_config_id": test_id or "",
           "npm_package_config_id": ""}
    try:
        proc = subprocess.run([node, "--no-warnings", "cli.mjs"], cwd=SUITE_DIR, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError(f"the suite did not finish within {timeout:.0f} s")
    if test_id:
        return proc.stdout + proc.stderr
    try:
        results = json.loads(proc.stdout)
    except ValueError:
        raise RunError(f"the suite printed no JSON (exit {proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    if not isinstance(results, dict) or not results:
        raise RunError(f"the suite returned no results:\n{proc.stderr[-4000:]}")
    return results


# ---- processes ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, proc: subprocess.Popen, what: str, log: str, timeout: float = 20.0):
    """Returns once 127.0.0.1:port answers an HTTP request with a status line.
    The probe asks for /state/<id>, which the origin answers 404 and no cache
    stores. Fails early when `proc` exits."""
    deadline = time.monotonic() + timeout
    probe = b"GET /state/readiness-probe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    while True:
        if proc.poll() is not None:
            raise RunError(f"{what} exited ({proc.returncode}) before it answered:\n{tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(probe)
                if s.recv(16).startswith(b"HTTP/1."):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RunError(f"{what} did not answer on 127.0.0.1:{port} within {timeout:.0f} s:\n{tail(log)}")
        time.sleep(0.05)  # poll interval, not synchronisation


def tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Proc:
    """A child process with its output in a log file; `cleanup`, a directory
    to remove once it has stopped."""

    def __init__(self, what, argv, log, cwd=None, env=None, stop_signal=15, cleanup=None):
        self.what, self.log, self.stop_signal, self.cleanup = what, log, stop_signal, cleanup
        self._out = open(log, "ab")
        self.popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self._out,
                                      stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, timeout: float = 20.0) -> int:
        """Sends the stop signal, waits, and returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(self.stop_signal)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            code = None
        self._out.close()
        return code


def start_origin(workdir: str) -> tuple[Proc, int]:
    """The suite's origin (server/server.mjs, what `npm run server --port=N`
    runs), from its package folder, which it serves files from. It listens on
    every address (server.listen(port)); the port is a free one."""
    port = free_port()
    env = {**os.environ, "npm_config_protocol": "http", "npm_config_port": str(port),
           "npm_config_pidfile": os.path.join(workdir, "origin.pid")}
    origin = Proc("the origin (server.mjs)", [node_tools()[0], "server/server.mjs"],
                  os.path.join(workdir, "origin.log"), cwd=SUITE_DIR, env=env)
    try:
        wait_http(port, origin.popen, origin.what, origin.log)
    except RunError:
        origin.stop()
        raise
    return origin, port


# nginx's proxy_cache, two settings profiles (README.md, "nginx"). Both keep
# nginx's defaults otherwise: no proxy_cache_valid (only responses with
# explicit freshness are stored; no heuristic freshness), the default key
# $scheme$proxy_host$request_uri, GET and HEAD cached, HTTP/1.0 upstream.
NGINX_PROFILES = {
    # what an operator would write for a reverse-proxy cache
    "operator": """\
            proxy_cache_revalidate on;
            proxy_cache_lock on;
            proxy_cache_use_stale updating error timeout;
            proxy_cache_background_update on;""",
    # the suite's own nginx setup (docker/nginx/nginx.conf in the package)
    "suite": """\
            proxy_cache_revalidate on;""",
}

NGINX_CONF = """\
# nginx proxy_cache under the http-cache-tests suite (tests/cache_conformance/run.py)
{user_line}
daemon off;
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 1024;
}}

http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/tmp/client;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;

    # on tmpfs: the cache lives in memory, as ScalWS's does
    proxy_cache_path {cache_dir} levels=1:2 keys_zone=conf:8m max_size=64m inactive=60m use_temp_path=off;

    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{origin_port};
            proxy_cache conf;
{profile}
        }}
    }}
}}
"""


def nginx_binary() -> str:
    b = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if b is None:
        raise RunError("nginx is not installed (make sysdeps installs nginx-light)")
    return b


def nginx_version() -> str:
    out = subprocess.run([nginx_binary(), "-v"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    return out.strip().replace("nginx version: nginx/", "")


def start_nginx(workdir: str, origin_port: int, profile: str) -> tuple[Proc, int]:
    """nginx from a generated config, every path under workdir (bench/lib/
    servers.sh does the same: -p, -e, `user root` when root so the workers can
    read the directory); the cache directory is on tmpfs (/dev/shm) when the
    machine has one."""
    port = free_port()
    os.makedirs(os.path.join(workdir, "tmp"), exist_ok=True)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else workdir
    cache_dir = tempfile.mkdtemp(prefix="scalws-cache-conf-nginx-", dir=shm)
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(user_line="user root;" if os.geteuid() == 0 else "",
                                  dir=workdir, cache_dir=cache_dir, port=port,
                                  origin_port=origin_port, profile=NGINX_PROFILES[profile]))
    nginx = Proc("nginx", [nginx_binary(), "-p", workdir + "/", "-e", os.path.join(workdir, "error.log"),
                           "-c", conf], os.path.join(workdir, "nginx.out"),
                 stop_signal=3, cleanup=cache_dir)  # QUIT: graceful stop
    try:
        wait_http(port, nginx.popen, "nginx", os.path.join(workdir, "error.log"))
    except RunError:
        nginx.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)
        raise
    return nginx, port


SCALWS_CONF = """\
workers: 2
sandbox: off
cache_zones:
  conf: {{max_size: 64m}}
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - path: /
        proxy:
          url: "http://127.0.0.1:{origin_port}"
          cache: {{zone: conf, purge: {{allow: ["127.0.0.0/8"]}}}}
"""


def default_python() -> str:
    """The interpreter of this repository's virtual environment (make build)."""
    return os.path.join(ROOT, ".venv", "bin", "python")


def start_scalws(workdir: str, origin_port: int, python: str) -> tuple[Proc, int]:
    """`python -m scalws --config FILE` from the repository root (so the
    package is this checkout's), after --check-config, whose message is
    clearer than a server that does not start."""
    if not os.access(python, os.X_OK):
        raise RunError(f"{python} not found: run `make build` first")
    port = free_port()
    conf = os.path.join(workdir, "scalws.yaml")
    with open(conf, "w") as f:
        f.write(SCALWS_CONF.format(port=port, origin_port=origin_port))
    check = subprocess.run([python, "-m", "scalws", "--check-config", "--config", conf], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check.returncode != 0:
        raise RunError(f"scalws refuses the cache configuration:\n{check.stdout}")
    scalws = Proc("scalws", [python, "-m", "scalws", "--config", conf],
                  os.path.join(workdir, "scalws.log"), cwd=ROOT)
    try:
        wait_http(port, scalws.popen, "scalws", scalws.log)
    except RunError:
        scalws.stop()
        raise
    return scalws, port


def scalws_version(python: str) -> str:
    proc = subprocess.run([python, "-m", "scalws", "--version"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else "?"


# ---- one run ------------------------------------------------------------------

def run_suite(server: str, workdir: str, *, profile: str = "operator", python: str | None = None,
              timeout: float = 180.0, test_id: str | None = None) -> dict:
    """Starts the origin and `server` in front of it, runs the suite, stops
    both, and returns the report: {"meta", "summary", "tests"} (the --json
    file), or with test_id {"dump": text}. The report's meta.exit is the
    cache's exit status at its stop (None when it had to be killed)."""
    python = python or default_python()
    version = ensure_suite()
    defs = load_definitions()
    origin, origin_port = start_origin(workdir)
    cache = None
    try:
        if server == "nginx":
            cache, port = start_nginx(workdir, origin_port, profile)
            meta = {"server": "nginx", "profile": profile, "version": nginx_version()}
        elif server == "scalws":
            cache, port = start_scalws(workdir, origin_port, python)
            meta = {"server": "scalws", "version": scalws_version(python)}
        else:
            raise RunError(f"unknown server {server!r}")
        started = time.monotonic()
        results = run_cli(f"http://127.0.0.1:{port}", timeout, test_id)
        meta["seconds"] = round(time.monotonic() - started, 1)
    finally:
        if cache is not None:
            code = cache.stop()
            if cache.cleanup:
                shutil.rmtree(cache.cleanup, ignore_errors=True)
        origin.stop()
    meta.update({"suite": f"http-cache-tests {version}", "exit": code})
    if test_id:
        return {"meta": meta, "dump": results}
    unknown = sorted(set(results) - set(defs))
    if unknown:
        raise RunError(f"results for tests the definitions lack: {unknown[:5]}")
    judged, meta["unmasked_999"] = unmask_999(defs, results)
    classes = classify(defs, judged)
    tests = {}
    for tid in sorted(results):
        tests[tid] = {"suite": defs[tid]["suite"], "name": defs[tid]["name"], "kind": defs[tid]["kind"],
                      "result": judged[tid], "class": classes[tid]}
        if judged[tid] != results[tid]:
            tests[tid]["suite_result"] = results[tid]
    return {"meta": meta, "summary": summarise(defs, judged, classes), "tests": tests}


def describe(meta: dict) -> str:
    if meta["server"] == "nginx":
        return f"nginx {meta['version']} proxy_cache ({meta['profile']} profile)"
    return f"scalws {meta['version']}"


def message(result) -> str:
    if result is True:
        return ""
    name, text = (result + ["", ""])[:2]
    return text if name == "Assertion" else f"{name}: {text}"


def format_summary(report: dict) -> str:
    meta, s = report["meta"], report["summary"]
    lines = [f"{meta['suite']} against {describe(meta)}, {meta.get('seconds', '?')} s",
             f"total {s['total']}  passed {s['passed']}  failed {s['failed']}  harmful {len(s['harmful'])}"
             f" (of which served a stored response: {len(s['served_stored'])})",
             f"  harmful: class fail (⛔) outside {', '.join(NOT_RFC9111)} "
             f"(not RFC 9111), which adds {len(s['fail_not_rfc9111'])} more ⛔, and the "
             f"{len(CONTRARY_RFC9111)} tests RFC 9111 contradicts, which add "
             f"{len(s.get('fail_contrary', []))} more",
             "by class (cache-tests.fyi):"]
    for c, (symbol, meaning) in CLASSES.items():
        if s["classes"][c] or c in ("pass", "fail", "optional_fail"):
            lines.append(f"  {symbol:2} {c:16} {s['classes'][c]:4}  {meaning}")
    if meta["unmasked_999"]:
        lines.append(f"judged as the origin's 999 (the proxy answered 502): {len(meta['unmasked_999'])}"
                     " tests (--json: meta.unmasked_999)")
    if s["harmful"]:
        lines.append("harmful failures (* served a stored response):")
        for tid in s["harmful"]:
            mark = "*" if tid in s["served_stored"] else " "
            lines.append(f" {mark}{tid}: {message(report['tests'][tid]['result'])}")
    if s["fail_not_rfc9111"]:
        lines.append(f"class fail in {', '.join(NOT_RFC9111)} (not counted as harmful):")
        for tid in s["fail_not_rfc9111"]:
            lines.append(f"  {tid}: {message(report['tests'][tid]['result'])}")
    if s.get("fail_contrary"):
        lines.append("class fail where RFC 9111 section 5.1 contradicts the pinned suite "
                     "(not counted as harmful):")
        for tid in s["fail_contrary"]:
            lines.append(f"  {tid}: {message(report['tests'][tid]['result'])}")
    return "\n".join(lines)


# ---- comparison ---------------------------------------------------------------

def compare(a: dict, b: dict) -> str:
    """A table of the tests whose class or pass/fail differs between two reports."""
    ta, tb = a["tests"], b["tests"]

    def cell(t):
        if t is None:
            return "untested", False
        return t["class"], t["result"] is True

    def label(c, passed):
        # a test that passed but counts as another class (its dependency failed)
        extra = "+" if passed and c not in PASS_CLASSES else ""
        return f"{CLASSES[c][0]} {c}{extra}"

    rows = []
    for tid in sorted(set(ta) | set(tb)):
        ca, pa = cell(ta.get(tid))
        cb, pb = cell(tb.get(tid))
        if (ca, pa) != (cb, pb):
            kind = (ta.get(tid) or tb.get(tid))["kind"] or "required"
            rows.append((tid, kind, label(ca, pa), label(cb, pb)))
    out = [f"A = {describe(a['meta'])}: {a['summary']['passed']}/{a['summary']['total']} passed, "
           f"{len(a['summary']['harmful'])} harmful",
           f"B = {describe(b['meta'])}: {b['summary']['passed']}/{b['summary']['total']} passed, "
           f"{len(b['summary']['harmful'])} harmful",
           f"{len(rows)} tests differ"]
    if rows:
        w = max(len(r[0]) for r in rows)
        out += ["", f"{'test':{w}}  {'kind':8}  {'A':20}  B"]
        out += [f"{tid:{w}}  {kind:8}  {la:20}  {lb}" for tid, kind, la, lb in rows]
        if any("+" in r[2] + r[3] for r in rows):
            out += ["", "+: the test itself passed; its class is that of a dependency that did not"]
    return "\n".join(out)


# ---- command line -------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", choices=("nginx", "scalws"), help="the cache under test")
    p.add_argument("--nginx-profile", choices=sorted(NGINX_PROFILES), default="operator",
                   help="nginx's cache settings (default operator; README.md)")
    p.add_argument("--python", default=None,
                   help="interpreter that runs scalws (default: <repo>/.venv/bin/python)")
    p.add_argument("--json", metavar="OUT", help="write the per-test results and summary here")
    p.add_argument("--id", metavar="TEST", help="run one test and print the suite's dump of it")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds the suite may run")
    p.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs)")
    p.add_argument("--fail-on-harmful", action="store_true", help="exit 1 on a harmful failure")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="print the tests whose result differs between two --json files")
    args = p.parse_args(argv)

    if args.compare:
        reports = []
        for path in args.compare:
            with open(path) as f:
                reports.append(json.load(f))
        print(compare(*reports))
        return 0
    if not args.server:
        p.error("--server or --compare is required")

    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    workdir = tempfile.mkdtemp(prefix=f"scalws-cache-conf-{args.server}-", dir=shm)
    try:
        report = run_suite(args.server, workdir, profile=args.nginx_profile, python=args.python,
                           timeout=args.timeout, test_id=args.id)
    except RunError as e:
        print(f"run.py: {e}\nrun.py: work directory kept: {workdir}", file=sys.stderr)
        return 2
    except BaseException:
        print(f"run.py: work directory kept: {workdir}", file=sys.stderr)
        raise
    if args.keep:
        print(f"run.py: work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.id:
        print(report["dump"])
        return 0
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
            f.write("\n")
    print(format_summary(report), flush=True)
    if report["meta"]["exit"] != 0:
        print(f"run.py: {args.server} exited {report['meta']['exit']} at its stop", file=sys.stderr)
    if args.fail_on_harmful and report["summary"]["harmful"]:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
