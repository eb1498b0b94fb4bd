"""One version (scalws/__init__.py), and build information without anything
that differs between two builds of one commit."""
import os
import re
import socket
import tomllib

import pytest

import scalws

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pyproject_version_is_scalws_version():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["version"] == scalws.__version__


def test_buildinfo_holds_no_path_host_or_time():
    path = os.path.join(ROOT, "scalws", "_buildinfo.py")
    if not os.path.exists(path):
        pytest.skip("not built (make build writes scalws/_buildinfo.py)")
    text = open(path, encoding="utf-8").read()
    names = {}
    exec(compile(text, path, "exec"), names)
    assert sorted(k for k in names if not k.startswith("__")) == \
        ["BOLT", "CC", "COMMIT", "MARCH", "PGO", "VERSION"]
    assert names["VERSION"] == scalws.__version__
    assert ROOT not in text and os.path.expanduser("~") + "/" not in text
    host = socket.gethostname()
    assert len(host) < 4 or host not in text
    assert not re.search(r"\b20\d\d-\d\d-\d\d|\d\d:\d\d:\d\d", text)
