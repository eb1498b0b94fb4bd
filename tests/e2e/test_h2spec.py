"""h2spec, the HTTP/2 conformance suite H2O runs in its CI (146 tests: RFC
7540/9113 and RFC 7541), against every kind of HTTP/2 listener: TLS with
ALPN h2, and cleartext with prior knowledge (h2c), on a respond route and,
over TLS, on a proxied one.

The binary is build/h2spec, which `make test` builds from ../shared's
source (tools/build-h2spec.sh); without ../shared the tests skip and say
so. On an h2c listener HTTP/1.1 shares the port, so h2spec's "invalid
connection preface" (3.5/2: `INVALID CONNECTION PREFACE\\r\\n\\r\\n`) is an
HTTP/1.1 request there, answered 400 by HTTP/1.1: that one case is the
only failure allowed on h2c, and it is asserted to be the only one."""
from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.tlspki import PKI

ROOT = Path(__file__).resolve().parents[2]
H2SPEC = ROOT / "build" / "h2spec"
SHARED = ROOT.parent / "shared" / "tools" / "h2spec"

SITE = """
workers: 1
limits: {{header_timeout: 5s}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2} h2c"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /up/
        proxy: {{url: "{upstream}", strip_prefix: /up}}
      - path: /
        respond: {{body: "h2spec wants a body of 5 bytes or more\\n"}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def h2spec():
    if not H2SPEC.exists():
        if not SHARED.exists():
            pytest.skip(f"h2spec: its source ({SHARED}) is not there, so it was not built; "
                        "the HTTP/2 conformance suite did not run")
        pytest.fail("build/h2spec is missing: `make h2spec` (part of make test) builds it")
    return H2SPEC


def run(h2spec, tmp_path, port, path="/", tls=True):
    """h2spec's results: {test id: "passed" | "skipped" | "failed"}."""
    report = tmp_path / f"h2spec-{port}.xml"
    args = [str(h2spec), "-h", "127.0.0.1", "-p", str(port), "-P", path, "-o", "3",
            "-j", str(report)]
    if tls:
        args += ["-t", "-k"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", out.stdout)
    assert summary, out.stdout[-3000:] + out.stderr
    results = {}
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            state = "failed" if case.find("failure") is not None or case.find("error") is not None \
                else "skipped" if case.find("skipped") is not None else "passed"
            results[f"{case.get('package')}: {case.get('classname')}"] = state
    assert len(results) == 146, (len(results), out.stdout[-2000:])
    return results, out.stdout


def failures(results):
    return sorted(k for k, v in results.items() if v != "passed")


def test_h2spec_over_tls(server, pki, upstream_app, h2spec, tmp_path):
    up = upstream_app()
    srv = server(SITE, cert=pki.ec.cert_path, key=pki.ec.key_path, upstream=up.url)
    results, out = run(h2spec, tmp_path, srv.port)
    assert failures(results) == [], out[-4000:]
    # ... and in front of a proxied upstream, bodies both ways
    results, out = run(h2spec, tmp_path, srv.port, path="/up/echo")
    assert failures(results) == [], out[-4000:]


def test_h2spec_over_h2c(server, pki, h2spec, tmp_path):
    srv = server(SITE, cert=pki.ec.cert_path, key=pki.ec.key_path, upstream="http://127.0.0.1:9")
    results, out = run(h2spec, tmp_path, srv.ports[1], tls=False)
    bad = failures(results)
    assert len(bad) == 1 and "3.5" in bad[0] and "invalid connection preface" in bad[0], \
        (bad, out[-4000:])
