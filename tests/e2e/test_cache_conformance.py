"""The http-cache-tests suite (cache-tests.fyi) against a ScalWS caching
proxy in front of the suite's own origin (issue 17, point 7).

tests/cache_conformance/run.py does the work: it installs the pinned suite
(`npm ci`) when node_modules lacks it, starts the origin and scalwsd on free
ports with the configuration in run.SCALWS_CONF, runs the suite's CLI and
classifies each result as cache-tests.fyi does (README.md in that folder).
The suite takes 13 to 20 s.
"""
from __future__ import annotations

import sys

import pytest

from tests.cache_conformance import run

# The passed count of the last measured run against ScalWS (recorded in
# tests/cache_conformance/README.md): a change that passes fewer tests fails
# here. Raise it to the new count when a change passes more.
PASS_FLOOR = 255  # 258 measured on 2026-12-06; a few tests are timing-sensitive

# No required test fails us but the 9 Age tests whose pinned expectation
# RFC 9111 section 5.1 contradicts (run.CONTRARY_RFC9111: an Age that is a
# list counts by its first member, an invalid one is ignored; the suite
# wants both stale), reported apart from the harmful ones.

pytestmark = [
    pytest.mark.skipif(run.node_tools() is None,
                       reason="needs node and npm (make sysdeps installs them)"),
    pytest.mark.timeout(150),
]


def test_cache_conformance(tmp_path):
    try:
        report = run.run_suite("scalws", str(tmp_path), python=sys.executable, timeout=120)
    except run.RunError as e:
        report, error = None, str(e)
    if report is None:
        pytest.fail(error, pytrace=False)
    summary = run.format_summary(report)
    with open(tmp_path / "scalws.log", errors="replace") as f:
        log = f.read()
    assert "Traceback" not in log, log
    assert report["meta"]["exit"] == 0, f"scalwsd exited {report['meta']['exit']} at its stop:\n{log}"
    # No required test failed (class fail, ⛔ on cache-tests.fyi): README.md,
    # "Harmful failures".
    assert report["summary"]["harmful"] == [], summary
    assert set(report["summary"]["fail_contrary"]) <= set(run.CONTRARY_RFC9111), summary
    assert not report["summary"]["served_stored"], summary
    assert report["summary"]["passed"] >= PASS_FLOOR, summary
