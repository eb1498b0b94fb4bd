"""tools/gen_man.py: the man pages say what the docs say, render without
groff warnings, and are the same bytes for the same SOURCE_DATE_EPOCH."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def generate(out, epoch="1764806400"):
    env = {**os.environ, "SOURCE_DATE_EPOCH": epoch}
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_man.py"), "--out", str(out)],
                   check=True, env=env, cwd="/")
    return {name: (out / name).read_text() for name in ("scalwsd.8", "scalws.yaml.5")}


def test_every_documented_key_and_option_is_in_the_pages(tmp_path):
    pages = generate(tmp_path)
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        md = f.read()
    keys = set(re.findall(r"^\| `([a-z_]+)`", md, re.M))
    assert {"workers", "sites", "shutdown_timeout", "tls_tickets"} <= keys
    missing = [k for k in keys if f"\\fB{k.replace('-', chr(92) + '-')}\\fR" not in pages["scalws.yaml.5"]]
    assert not missing, missing
    for opt in ("config", "check\\-config", "version"):
        assert f"\\fB\\-\\-{opt}\\fR" in pages["scalwsd.8"]
    assert '.SH "SIGNALS (TO THE MASTER)"' in pages["scalwsd.8"]
    assert pages["scalwsd.8"].count('.TH "SCALWSD" "8" "2025-12-04"') == 1


def test_same_epoch_same_bytes(tmp_path):
    a = generate(tmp_path / "a")
    b = generate(tmp_path / "b")
    assert a == b
    c = generate(tmp_path / "c", epoch="0")
    assert '"1970-01-01"' in c["scalwsd.8"]


def test_groff_renders_without_warnings(tmp_path):
    generate(tmp_path)
    for name in ("scalwsd.8", "scalws.yaml.5"):
        r = subprocess.run(["man", "--warnings=all", "-l", str(tmp_path / name)],
                           capture_output=True, text=True,
                           env={**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8"})
        assert r.returncode == 0, r.stderr
        # A code line wider than the page is the only thing groff may note.
        warnings = [l for l in r.stderr.splitlines() if l and "can't break line" not in l]
        assert not warnings, warnings
        assert len(r.stdout.splitlines()) > 100
