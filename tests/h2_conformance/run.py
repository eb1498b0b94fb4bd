"""Runs the HTTP/2 conformance cases against a server and prints a table.

    .venv/bin/python tests/h2_conformance/run.py --port N [--host H] [--tls]
        [--cafile CA] [--server-name NAME] [-k SUBSTRING]

Cleartext ports are spoken to with prior knowledge (h2c), TLS ones with
ALPN h2. The server must serve `/` (200, a short body) and `/big` (200, at
least 70 000 bytes) on the authority "localhost". Exit status 0 when every
case passed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: import the package by its path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tests.h2_conformance"

from tests.h2_conformance.cases import CASES  # noqa: E402
from tests.h2_conformance.client import Conn, Failed  # noqa: E402


def case_id(fn) -> str:
    return f"{fn.section}: {fn.title}"


def run_case(fn, host, port, tls=False, cafile=None, server_name="localhost"):
    """None when the case passed, else why it failed."""
    opened = []

    def connect(**kw):
        c = Conn(host, port, tls=tls, cafile=cafile, server_name=server_name, **kw)
        opened.append(c)
        return c

    try:
        fn(connect)
        return None
    except Failed as e:
        return str(e)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        for c in opened:
            c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--cafile")
    ap.add_argument("--server-name", default="localhost")
    ap.add_argument("-k", dest="only", help="only the cases whose section or title contains this")
    a = ap.parse_args(argv)
    cases = [fn for fn in CASES if not a.only or a.only in case_id(fn)]
    failed = 0
    width = max(len(fn.section) for fn in cases)
    t0 = time.monotonic()
    for fn in cases:
        why = run_case(fn, a.host, a.port, a.tls, a.cafile, a.server_name)
        mark = "pass" if why is None else "FAIL"
        failed += why is not None
        print(f"{fn.section:<{width}}  {mark}  {fn.title}")
        if why:
            print(f"{'':<{width}}        {why[:600]}")
    print(f"\n{len(cases) - failed} passed, {failed} failed, {len(cases)} cases "
          f"in {time.monotonic() - t0:.1f}s ({'TLS' if a.tls else 'h2c'} {a.host}:{a.port})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
