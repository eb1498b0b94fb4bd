"""`scalwsd --version`: the version, and how the compiled modules were built
(scalws/_buildinfo.py, which setup.py writes): commit, compiler, -march, PGO,
BOLT.

What the line claims is checked against the modules themselves: gcc records
its options in each compilation unit's DWARF producer string."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import scalws
from tests.e2e.conftest import ROOT

SCALWSD = str(Path(sys.executable).with_name("scalwsd"))
LINE = re.compile(r"^scalwsd (?P<version>\S+) \(commit (?P<commit>[^,]+), "
                  r"(?P<cc>(?:gcc|clang) \S+), (?P<march>-march=[^,]+), "
                  r"PGO (?P<pgo>off|on: .+?|gen .+?), "
                  r"BOLT (?P<bolt>off|on: .+|instrumented .+)\)$")


def version_line():
    r = subprocess.run([SCALWSD, "--version"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    m = LINE.match(r.stdout.strip())
    assert m, f"unexpected --version output: {r.stdout!r}"
    return m


def test_version_names_the_commit_of_head():
    m = version_line()
    assert m["version"] == scalws.__version__
    if os.environ.get("SCALWS_COMMIT"):
        assert m["commit"] == os.environ["SCALWS_COMMIT"]
        return
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert m["commit"] in (head, head + "-dirty"), \
        f"the modules were built at {m['commit']}, HEAD is {head}: make build"


def _producers(path):
    """The DWARF producer strings of the compilation units of ours in `path`."""
    out = subprocess.run(["readelf", "--debug-dump=info", path],
                         capture_output=True, text=True, check=True).stdout
    return [p for p in re.findall(r"DW_AT_producer\s*:.*?: (GNU C.*)$", out, re.M)
            if "-std=gnu11" in p]


@pytest.mark.skipif(not shutil.which("readelf"), reason="readelf (binutils) not installed")
def test_version_names_the_march_and_pgo_of_the_modules():
    m = version_line()
    march = m["march"].split()
    name = march[0].removeprefix("-march=")
    if name == "native":  # "-march=native (rocketlake)": gcc records what native was
        resolved = re.search(r"\((\S+)\)", m["march"])
        assert resolved, m["march"]
        name = resolved.group(1)
    checked = 0
    for mod in ("scalws.server.engine", "scalws.http.parser"):
        for p in _producers(importlib.util.find_spec(mod).origin):
            assert f"-march={name} " in p + " ", (mod, p)
            assert ("-msse4.2" in march) <= ("-msse4.2" in p), (mod, p)
            assert ("-fprofile-use" in p) == m["pgo"].startswith("on"), (mod, m["pgo"], p)
            assert ("-fprofile-generate" in p) == m["pgo"].startswith("gen"), (mod, m["pgo"], p)
            checked += 1
    if not checked:
        pytest.skip("the modules carry no debug information (stripped)")


def test_version_says_whether_bolt_rewrote_the_engine():
    """llvm-bolt marks what it rewrote with a .note.bolt_info section:
    present exactly when the line says BOLT on (or instrumented)."""
    m = version_line()
    with open(importlib.util.find_spec("scalws.server.engine").origin, "rb") as f:
        rewritten = b".note.bolt_info" in f.read()
    assert rewritten == (m["bolt"] != "off"), m["bolt"]


def test_version_without_build_information(tmp_path):
    """A source tree that was never built: the version, and no crash."""
    src = Path(ROOT, "scalws")
    for f in src.rglob("*.py"):
        if f.name != "_buildinfo.py" and "__pycache__" not in f.parts:
            dest = tmp_path / "scalws" / f.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    # -S: no site-packages, whose editable install of this checkout would
    # find ROOT's _buildinfo.py
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-S", "-m", "scalws", "--version"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"scalwsd {scalws.__version__} (build information unavailable)\n"
