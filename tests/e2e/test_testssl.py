"""testssl.sh (Debian's `testssl`) against a ScalWS TLS listener with an
ECDSA and an RSA certificate from a test CA, stapling from a real OCSP
responder: nothing above LOW but the chain of trust, which fails only
because the test CA is not in the system store. Its summary for the docs
is in docs/benchmarks/2026-12-04-intel-tls/testssl.txt."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.tlspki import PKI, start_ocsp_responder

pytestmark = pytest.mark.skipif(shutil.which("testssl") is None,
                                reason="testssl.sh is installed by `make test` (sysdeps)")

SITE = """
workers: 1
log: {{level: info}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2}"]
    server_names: [localhost]
    tls:
      certificates:
        - {{cert: {ec_cert}, key: {ec_key}}}
        - {{cert: {rsa_cert}, key: {rsa_key}}}
      hsts: {{max_age: 1y, include_subdomains: on}}
      redirect: on
    routes:
      - path: /
        respond:
          body: "hello\\n"
          headers: {{X-Content-Type-Options: nosniff, X-Frame-Options: DENY,
                     Content-Security-Policy: "default-src 'self'", Referrer-Policy: no-referrer}}
"""


def test_testssl_finds_nothing_above_low(server, tmp_path):
    pki = PKI(tmp_path / "pki")
    root = pki.root()
    inter = pki.intermediate(root)
    signer = pki.ocsp_signer(inter)
    with start_ocsp_responder(pki.folder, inter, signer, statuses=[], nmin=120) as responder:
        ec = pki.leaf(inter, ["localhost"], key="ec", name="ec", ocsp_url=responder.url)
        rsa = pki.leaf(inter, ["localhost"], key="rsa", name="rsa", ocsp_url=responder.url)
        responder.update([(ec, "good"), (rsa, "good")])
        srv = server(SITE, ec_cert=ec.cert_path, ec_key=ec.key_path, rsa_cert=rsa.cert_path,
                     rsa_key=rsa.key_path)
        report = tmp_path / "testssl.json"
        out = subprocess.run(["testssl", "--quiet", "--color", "0", "--warnings", "off",
                              "--jsonfile", str(report), f"https://localhost:{srv.port}/"],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    findings = json.loads(report.read_text())
    by_id = {f["id"]: f for f in findings}
    bad = [f for f in findings if f["severity"] in ("MEDIUM", "HIGH", "CRITICAL")
           and not f["id"].startswith("cert_chain_of_trust")]
    assert not bad, bad
    # testssl checks ticket resumption with `openssl s_client -tls1_3 -sess_out
    # </dev/null`, which often closes before the tickets TLS 1.3 sends after
    # the handshake arrive: then it has no session to resume and says
    # "connect problem" (against nginx 1.22 its client got no ticket in 100
    # tries out of 100; against ScalWS in about 25). Resumption itself is
    # tested in test_tls.py.
    flaky = {"sessionresumption_ticket": "check failed because of connect problem"}
    warns = [f for f in findings if f["severity"] == "WARN" and f["id"] != "engine_problem"
             and flaky.get(f["id"]) != f["finding"]]
    assert not warns, warns
    assert by_id["TLS1"]["finding"] == "not offered" and by_id["TLS1_1"]["finding"] == "not offered"
    assert "offered" in by_id["TLS1_3"]["finding"]
    for cert in ("<cert#1>", "<cert#2>"):
        assert by_id[f"OCSP_stapling {cert}"]["finding"] == "offered", out.stdout
    assert by_id["sessionresumption_ticket"]["finding"] in ("supported",
                                                           flaky["sessionresumption_ticket"])
    assert by_id["TLS_session_ticket"]["finding"] == "valid for 3600 seconds only (<daily)"
    assert by_id["HSTS_time"]["severity"] == "OK"
