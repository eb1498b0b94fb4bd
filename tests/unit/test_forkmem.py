"""scalws/control/forkmem.py: which mappings the master unmaps after its
workers started (and a worker once it serves), and that a process goes on
as before once they are unmapped; scalws/server/__init__.py: GnuTLS is not initialised by loading
the engine (docs/adr/0036-master-load-pages.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from scalws.control import forkmem

SMAPS = """\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
Rss:                 132 kB
Anonymous:           132 kB
7f0000000000-7f0000100000 r--p 00000000 08:01 1234                       /usr/lib/libcrypto.so.3
Size:               1024 kB
Rss:                 852 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r-xp 00100000 08:01 1234                       /usr/lib/libcrypto.so.3
Rss:                 192 kB
Anonymous:             0 kB
7f0000200000-7f0000210000 r--p 00200000 08:01 1234                       /usr/lib/libcrypto.so.3
Rss:                  64 kB
Anonymous:            64 kB
7f0000210000-7f0000212000 rw-p 00210000 08:01 1234                       /usr/lib/libcrypto.so.3
Rss:                   8 kB
Anonymous:             8 kB
7f0000300000-7f0000400000 r--s 00000000 00:01 77                         /memfd:zone (deleted)
Rss:                 400 kB
Anonymous:             0 kB
7f0000400000-7f0000410000 r--p 00000000 08:01 99                         /usr/lib/locale/C.utf8/LC_CTYPE
Rss:                   0 kB
Anonymous:             0 kB
7f0000500000-7f0000501000 r--p 00000000 00:00 0                          [vvar]
Rss:                   4 kB
Anonymous:             0 kB
"""


def test_only_resident_never_copied_private_file_mappings_are_chosen():
    got = forkmem.load_only_mappings(SMAPS.splitlines(keepends=True))
    assert got == [(0x7f0000000000, 0x7f0000100000, 852), (0x7f0000100000, 0x7f0000200000, 192)]


CHILD = textwrap.dedent("""
    import hashlib, json
    import scalws.server.engine
    from scalws.control import forkmem

    def load_only_kb():
        with open("/proc/self/smaps") as f:
            return sum(kb for *_, kb in forkmem.load_only_mappings(f))

    before = load_only_kb()
    n, kb = forkmem.drop_load_pages()
    after = load_only_kb()
    # the libraries work as before: libcrypto (hashlib) and the engine
    digest = hashlib.sha256(b"abc").hexdigest()
    print(json.dumps([before, n, kb, after, digest, scalws.server.engine.__name__]))
""")


def test_a_process_unmaps_its_load_time_pages_and_goes_on():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    before, n, kb, after, digest, name = json.loads(out)
    assert n > 10 and kb > 4000, (n, kb)
    # what the interpreter ran since came back; the libraries' tables did not
    assert after < before - 4000, (before, after)
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert name == "scalws.server.engine"


CONFINED = textwrap.dedent("""
    import hashlib, json
    import scalws.server.engine
    from scalws.control import forkmem, sandbox

    smaps = forkmem.open_smaps()
    sandbox.no_new_privs()
    sandbox.landlock(sandbox.probe()["landlock"], {})  # no file may be opened now
    try:
        open("/proc/self/smaps").close()
        refused = False
    except PermissionError:
        refused = True
    n, kb = forkmem.drop_load_pages(smaps)
    digest = hashlib.sha256(b"abc").hexdigest()
    print(json.dumps([refused, smaps.closed, n, kb, digest]))
""")


def test_a_worker_reads_its_smaps_opened_before_its_sandbox():
    """A worker drops its start-up's pages once it serves, when Landlock
    refuses it /proc: it reads the descriptor it opened before."""
    from scalws.control import sandbox
    if not sandbox.probe()["landlock"]:
        pytest.skip("this kernel has no Landlock (the worker then opens /proc itself)")
    out = subprocess.run([sys.executable, "-c", CONFINED], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    refused, closed, n, kb, digest = json.loads(out)
    assert refused  # the sandbox is what the descriptor is for
    assert closed
    assert n > 10 and kb > 4000, (n, kb)
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


GNUTLS = textwrap.dedent("""
    import os
    import scalws.server.engine
    rss, cur = 0, False
    for line in open("/proc/self/smaps"):
        p = line.split()
        if "-" in p[0] and len(p) >= 5 and ":" in p[3]:
            cur = len(p) > 5 and "libgnutls" in p[5] and p[1] == "r-xp"
        elif cur and p[0] == "Rss:":
            rss += int(p[1])
    print(rss, os.environ.get("GNUTLS_NO_IMPLICIT_INIT"))
""")


def gnutls_child(**env):
    e = {k: v for k, v in os.environ.items() if k != "GNUTLS_NO_IMPLICIT_INIT"}
    out = subprocess.run([sys.executable, "-c", GNUTLS], capture_output=True, text=True,
                         check=True, timeout=30, env={**e, **env}).stdout.split()
    return int(out[0]), out[1]


def test_loading_the_engine_does_not_initialise_gnutls_nor_leaves_the_variable():
    """GnuTLS's start-up runs hundreds of kB of its code; an operator's own
    GNUTLS_NO_IMPLICIT_INIT=0 still has it, and is left as it was."""
    quiet, left = gnutls_child()
    initialised, theirs = gnutls_child(GNUTLS_NO_IMPLICIT_INIT="0")
    assert left == "None"  # children (PHP-FPM, applications) do not inherit ours
    assert theirs == "0"
    assert initialised > quiet + 200, (quiet, initialised)
