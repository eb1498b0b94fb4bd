"""The engine's C floors call only downward (tools/check_layers.py, ADR 0005)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_calls_and_includes_go_down_the_floors():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_layers.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all downward" in r.stdout
