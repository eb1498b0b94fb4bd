"""scalws/control/profiles.py: where a BOLT-instrumented module's profile
writer is. llvm-bolt points DT_FINI at its runtime's __bolt_instr_fini and
exports nothing, so profiles.elf_fini reads DT_FINI from the module's
dynamic section; checked here against binutils' reading of the same file."""
import importlib.util
import re
import shutil
import subprocess

import pytest

from scalws.control import profiles


@pytest.mark.skipif(not shutil.which("readelf"), reason="readelf (binutils) not installed")
@pytest.mark.parametrize("module", ["scalws.server.engine", "scalws.http.parser"])
def test_elf_fini_is_readelfs_dt_fini(module):
    path = importlib.util.find_spec(module).origin
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\(FINI\)\s+0x([0-9a-f]+)", out)
    assert m, out
    assert profiles.elf_fini(path) == int(m.group(1), 16) != 0


def test_elf_fini_of_what_is_not_an_elf_shared_object(tmp_path):
    script = tmp_path / "x.so"
    script.write_bytes(b"#!/bin/sh\n" + b"\0" * 100)
    assert profiles.elf_fini(str(script)) == 0
    assert profiles.elf_fini(importlib.util.find_spec("scalws").origin) == 0  # Python source


def test_an_ordinary_build_prepares_no_writer():
    """`prepare()` in a plain build (BOLT off, PGO off) finds nothing to call
    and loads no ctypes for it."""
    from scalws import _buildinfo
    if _buildinfo.PGO != "off" or _buildinfo.BOLT != "off":
        pytest.skip("an instrumented or optimised build")
    before = list(profiles._dumps)
    profiles.prepare()
    assert profiles._dumps == before
