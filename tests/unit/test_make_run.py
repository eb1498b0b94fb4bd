"""`make run` on a tree already built (issue 37, point 3): it recompiles
nothing and installs nothing, so it starts serving at once; and it installs
only what building and running need, not the test packages."""
from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(*args) -> str:
    out = subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_a_second_build_for_make_run_compiles_and_installs_nothing():
    make("build-run")  # whatever this tree needed
    again = make("build-run")
    assert "pip install" not in again, again
    assert "Compiling" not in again and "gcc" not in again, again


def test_make_run_installs_the_packages_above_the_tests_line_only():
    # the rule's own command, read from make's dry run of a missing stamp
    dry = make("-n", "-W", "requirements-dev.txt", ".venv/.run-deps-stamp")
    cmd = next(l for l in dry.splitlines() if l.startswith("sed "))
    wanted = subprocess.run(cmd.split(">")[0], shell=True, cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    names = {w.split(">")[0].split("<")[0].split("=")[0].lower() for w in wanted}
    assert {"uvloop", "pyyaml", "cython", "pyopenssl"} <= names, names
    assert not names & {"pytest", "httpx", "hypothesis", "matplotlib", "uvicorn"}, names
