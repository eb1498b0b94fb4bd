#!/usr/bin/env python3
"""Checks that calls between the engine's C floors only go down.

Compiles every C file of the engine to an object, reads which functions each
defines and which it calls into other files (nm), maps files to floors, and
fails on any call from a floor to one above it (a circle, or a floor that
reaches up). Calls upward happen only through function pointers the upper
floor registered (sws_evobj_t handlers, sws_proto_t, sws_resp_ops_t,
sws_upconn_ops_t, the core's hooks, the dispatcher's), which nm does not see
and which are the design (docs/adr/0005-engine-layering.md).

Two rules more about handlers (issue 32): a handler's files call no other
handler's files, only their own and the shared ones (SHARED); and the
protocols call no handler but through the dispatcher (the shared files
aside): a route's chain is run by csrc/handlers/dispatch.c alone.

    tools/check_layers.py            exit 0 and a summary, or 1 and the offending calls
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Top to bottom. A file may call its own floor and any floor below it.
FLOORS = [
    ("root", ["csrc/engine.c"]),
    ("protocol", ["csrc/http/h1.c", "csrc/http/h1_out.c", "csrc/http/accesslog.c",
                  "csrc/http/h2/conn.c", "csrc/http/h2/input.c", "csrc/http/h2/request.c",
                  "csrc/http/h2/resp.c", "csrc/http/h2/streams.c",
                  "csrc/http/h3/quic.c", "csrc/http/h3/table.c", "csrc/http/h3/conn.c", "csrc/http/h3/request.c",
                  "csrc/http/h3/resp.c", "csrc/http/h3/tls.c", "csrc/http/h3/early.c",
                  "csrc/http/h3/none.c"]),
    # The route's chain: the one file that starts or answers through a handler.
    ("dispatch", ["csrc/handlers/dispatch.c"]),
    ("handlers", ["csrc/handlers/respond.c", "csrc/handlers/static.c",
                  "csrc/handlers/autoindex.c", "csrc/handlers/proxy.c",
                  "csrc/handlers/proxy_head.c", "csrc/handlers/proxy_fields.c",
                  "csrc/handlers/fields.c", "csrc/handlers/fastcgi.c", "csrc/handlers/fastcgi_params.c",
                  "csrc/handlers/fastcgi_queue.c",
                  "csrc/handlers/cache_key.c", "csrc/handlers/cache_serve.c",
                  "csrc/handlers/cache_purge.c", "csrc/handlers/cache_tee.c",
                  "csrc/handlers/cache_reval.c"]),
    ("upstream", ["csrc/upstream/pool.c", "csrc/upstream/balance.c", "csrc/upstream/health.c",
                  "csrc/upstream/uptls.c"]),
    ("net", ["csrc/net/listen.c", "csrc/net/steer.c", "csrc/net/conn.c", "csrc/net/peer.c",
             "csrc/net/tls.c"]),
    ("core", ["csrc/core/core.c", "csrc/core/loop.c", "csrc/core/sandbox.c"]),
    # Leaves: pure functions over caller-owned memory; they call nothing of ours.
    ("leaves", ["csrc/http/h2/session.c", "csrc/http/h2/session_recv.c", "csrc/http/h2/hpack.c",
                "csrc/http/h2/huffman.c", "csrc/http/h3/qpack.c", "csrc/http/h3/h3sess.c", "csrc/http/h3/h3sess_recv.c", "csrc/http/reqcheck.c", "csrc/http/http1.c", "csrc/http/http1_chunked.c", "csrc/http/path.c", "csrc/http/httpcond.c",
                "csrc/http/router.c", "csrc/core/httpdate.c", "csrc/core/filecache.c",
                "csrc/net/sni.c", "csrc/http/fcgi.c", "csrc/http/cachecc.c", "csrc/http/priority.c", "csrc/http/sfv.c",
                "csrc/cache/store.c"]),
]

# Handler files every handler may call: the fixed answers (the error pages,
# which the protocols answer with too) and the request-field helpers.
SHARED = {"csrc/handlers/respond.c", "csrc/handlers/fields.c"}


def handler_of(f: str) -> str:
    """The handler a file of csrc/handlers/ belongs to: its name up to the
    first '_' (cache_tee.c: cache), autoindex.c being static's."""
    name = os.path.basename(f)[:-2].split("_")[0]
    return {"autoindex": "static"}.get(name, name)


# The headers' floors: a header includes only headers of its floor and below.
HEADERS = {
    "engine.h": "root",
    "h1.h": "protocol", "h2.h": "protocol", "h3.h": "protocol", "accesslog.h": "protocol",
    "dispatch.h": "dispatch",
    "response.h": "handlers", "respond.h": "handlers", "static.h": "handlers",
    "proxy.h": "handlers", "fastcgi.h": "handlers", "cache.h": "handlers",
    "upstream.h": "upstream",
    "net.h": "net",
    "tls.h": "net",
    "core.h": "core", "sandbox.h": "core",
    "http1.h": "leaves", "path.h": "leaves", "httpcond.h": "leaves", "router.h": "leaves",
    "httpdate.h": "leaves", "filecache.h": "leaves", "sni.h": "leaves",
    "fcgi.h": "leaves", "stats.h": "leaves", "cachecc.h": "leaves", "priority.h": "leaves", "sfv.h": "leaves", "cachestore.h": "leaves",
}


def header_problems() -> list[str]:
    names = [n for n, _ in FLOORS]
    inc = os.path.join(ROOT, "csrc", "include", "scalws")
    bad = []
    for h in sorted(os.listdir(inc)):
        if h not in HEADERS:
            bad.append(f"csrc/include/scalws/{h} is in no floor (add it to HEADERS)")
            continue
        with open(os.path.join(inc, h)) as f:
            for line in f:
                if line.startswith('#include "scalws/'):
                    dep = line.split("/")[1].split('"')[0]
                    if names.index(HEADERS[dep]) < names.index(HEADERS[h]):
                        bad.append(f"{h} ({HEADERS[h]}) includes {dep} ({HEADERS[dep]})")
    return bad


def symbols(obj: str, defined: bool) -> set[str]:
    args = ["nm", "-g", "--defined-only" if defined else "-u", obj]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def main() -> int:
    files = [f for _, fs in FLOORS for f in fs]
    on_disk = {os.path.relpath(os.path.join(d, f), ROOT)
               for d, _, fs in os.walk(os.path.join(ROOT, "csrc")) for f in fs if f.endswith(".c")}
    missing = on_disk - set(files)
    if missing:
        print("files in no floor (add them to FLOORS):", " ".join(sorted(missing)))
        return 1
    level = {f: i for i, (_, fs) in enumerate(FLOORS) for f in fs}
    owner: dict[str, str] = {}
    calls: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            obj = os.path.join(tmp, f.replace("/", "_") + ".o")
            subprocess.run(["gcc", "-std=gnu11", "-O1", "-msse4.2", "-I", "csrc/include", "-I",
                            "csrc", "-c", f, "-o", obj], cwd=ROOT, check=True)
            for s in symbols(obj, True):
                owner[s] = f
            calls[f] = symbols(obj, False)
    bad = []
    edges = 0
    for f, used in calls.items():
        for s in sorted(used):
            g = owner.get(s)
            if g is None or g == f:
                continue  # libc, or itself
            edges += 1
            if level[g] < level[f]:
                bad.append(f"{f} ({FLOORS[level[f]][0]}) calls {s} of {g} ({FLOORS[level[g]][0]})")
            elif FLOORS[level[g]][0] == "handlers" and g not in SHARED:
                if FLOORS[level[f]][0] == "handlers" and handler_of(f) != handler_of(g):
                    bad.append(f"{f} ({handler_of(f)}) calls {s} of {g}, another handler's: "
                               "a route's chain is the dispatcher's")
                elif FLOORS[level[f]][0] == "protocol":
                    bad.append(f"{f} (protocol) calls {s} of {g}, a handler: through the "
                               "dispatcher (scalws/dispatch.h)")
    hbad = header_problems()
    if hbad:
        print("headers that reach up a floor:")
        print("\n".join("  " + b for b in hbad))
        return 1
    if bad:
        print("calls that go up a floor or between handlers:")
        print("\n".join("  " + b for b in bad))
        return 1
    print(f"{len(files)} files in {len(FLOORS)} floors, {edges} calls between files, all downward, "
          f"none between handlers; {len(HEADERS)} headers, every include downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
