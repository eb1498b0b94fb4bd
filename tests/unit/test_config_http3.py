"""The `quic` listen option and the `http3:` block (docs/configuration.md,
"http3"; scalws/config/loader.py)."""
from __future__ import annotations

import pytest

from tests.tlspki import PKI
from tests.unit.configlib import load, one_problem, problems


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    p = PKI(tmp_path_factory.mktemp("pki"))
    leaf = p.leaf(p.root(), ["localhost"], key="ec", name="ec")
    return f"tls: {{cert: {leaf.cert_path}, key: {leaf.key_path}}}"


def test_quic_listener_beside_tls_and_the_http3_block(tmp_path, certs):
    cfg = load(tmp_path, f"""\
        http3: {{max_concurrent_streams: 64, idle_timeout: 1m, retry_above: off,
                qpack_encoder_table: 4k, alt_svc_max_age: 60, early_data: on,
                early_data_window: 30s, gso: off}}
        sites:
          - listen: [":8443 tls", ":8443 quic"]
            {certs}
            routes: [{{path: /, respond: 204}}]
    """)
    tcp, quic = cfg.sites[0].listen
    assert (tcp.kind, quic.kind) == ("tcp", "quic")
    assert tcp.key == ("tcp", "0.0.0.0", 8443) and quic.key == ("quic", "0.0.0.0", 8443)
    h = cfg.http3
    assert (h.max_concurrent_streams, h.idle_timeout, h.retry_above) == (64, 60.0, None)
    assert (h.qpack_encoder_table, h.alt_svc_max_age) == (4096, 60)
    assert (h.early_data, h.early_data_window, h.gso) == (True, 30.0, False)
    # kept so that files which set it still load, and told it does nothing now
    assert [(w.key_path, w.message) for w in cfg.warnings if w.key_path.startswith("http3")] == [
        ("http3.qpack_encoder_table", "has no effect: our QPACK encoder uses the static table "
         "and literals only (ADR 0034)")]
    defaults = load(tmp_path, f"""\
        sites:
          - listen: [":8443 quic"]
            {certs}
            routes: [{{path: /, respond: 204}}]
    """).http3
    assert defaults.retry_above == 100
    assert (defaults.early_data, defaults.early_data_window, defaults.gso) == (False, 10.0, True)


def test_quic_needs_certificates_and_the_http3_block_its_ranges(tmp_path, certs):
    assert one_problem(tmp_path, """\
        sites:
          - listen: [":8443 quic"]
            routes: [{path: /, respond: 204}]
    """) == ("F:2:14: sites[0].listen[0]: listen option 'quic' needs the site's certificates: "
             "add tls: {cert: FILE, key: FILE} to the site")
    lines = problems(tmp_path, f"""\
        http3: {{max_concurrent_streams: 0, idle_timeout: 0s, bogus: 1, early_data: yes please,
                early_data_window: 0s}}
        sites:
          - listen: [":8443 quic"]
            {certs}
            routes: [{{path: /, respond: 204}}]
    """)
    text = "\n".join(lines)
    assert "http3.max_concurrent_streams" in text and "http3.idle_timeout" in text
    assert "unknown key 'bogus'" in text
    assert "http3.early_data: expected on or off" in text and "http3.early_data_window" in text
