"""HTTP/2 conformance (issue 16, point 6): every case of tests/h2_conformance
(RFC 9113 sections 3 to 8, RFC 7541) against one real scalwsd, on its h2c
listener (prior knowledge) and on its TLS listener (ALPN h2). Each case
asserts the frame and error code the RFC requires for one bad input, or that
a valid exchange is served; tests/h2_conformance/README.md lists them and
the known deviations. After all of them the worker must still be the first
one (no crash, no restart) and stop cleanly."""
from __future__ import annotations

import textwrap

import pytest

from tests.e2e.conftest import Server, free_port
from tests.h2_conformance.cases import CASES
from tests.h2_conformance.run import case_id, run_case
from tests.tlspki import PKI

HOST = "127.0.0.1"

CONF = """
workers: 1
log: {{level: info}}
sites:
  - listen: ["127.0.0.1:{h2c} h2c", "127.0.0.1:{tls} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: "= /big"
        respond: {{body: "{big}"}}
      - path: /
        respond: {{body: "hello over h2\\n"}}
"""


@pytest.fixture(scope="module")
def conformance_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("h2conf")
    pki = PKI(tmp / "pki")
    pki.ca = pki.root()
    pki.ec = pki.leaf(pki.ca, ["localhost"], key="ec", name="ec")
    ports = [free_port(), free_port()]
    cfg = tmp / "scalws.yaml"
    cfg.write_text(textwrap.dedent(CONF).format(h2c=ports[0], tls=ports[1], cert=pki.ec.cert_path,
                                                key=pki.ec.key_path, big="b" * 100000))
    srv = Server(str(cfg), str(tmp / "error.log"), ports, tmp)
    srv.start()
    srv.ca = pki.ca.cert_path
    first_workers = srv.workers()
    yield srv
    assert srv.workers() == first_workers, f"a worker was replaced:\n{srv.log()}"
    code = srv.stop()
    log = srv.log()
    assert code == 0, log
    assert "Traceback" not in log and "; restarting" not in log, log


@pytest.mark.parametrize("transport", ["h2c", "tls"])
@pytest.mark.parametrize("fn", CASES, ids=[case_id(fn) for fn in CASES])
def test_h2_conformance(conformance_server, fn, transport):
    srv = conformance_server
    if transport == "h2c":
        why = run_case(fn, HOST, srv.ports[0])
    else:
        why = run_case(fn, HOST, srv.ports[1], tls=True, cafile=srv.ca)
    assert why is None, why
