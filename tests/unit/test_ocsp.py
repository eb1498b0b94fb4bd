"""OCSP for stapling (scalws/control/ocsp.py) against a real responder:
`openssl ocsp` started by tests/tlspki.py on a free port of 127.0.0.1, with
an index of good and revoked certificates. Responses that openssl will not
give (unsuccessful, from an impostor) are made with cryptography."""
import http.server
import os
import socket
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import ocsp as x509_ocsp

from scalws.config import tlscheck
from scalws.control import ocsp
from scalws.control.ocsp import OcspError, OcspResult
from tests.tlspki import DAY, HOUR, PKI, ocsp_response, start_ocsp_responder

pytestmark = pytest.mark.skipif(
    not any(os.access(os.path.join(d, "openssl"), os.X_OK)
            for d in os.environ.get("PATH", "").split(os.pathsep)),
    reason="needs the openssl command")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = PKI(tmp_path_factory.mktemp("ocsp"))
    p.ca = p.root()
    p.inter = p.intermediate(p.ca)
    p.good = p.leaf(p.inter, ["good.example"], name="good", ocsp_url="http://127.0.0.1:1/")
    p.revoked = p.leaf(p.inter, ["revoked.example"], name="revoked", key="rsa")
    p.stranger = p.leaf(p.inter, ["stranger.example"], name="stranger")
    p.signer = p.ocsp_signer(p.inter)
    return p


@pytest.fixture(scope="module")
def responder(pki):
    """Signed by the issuer itself; answers for an hour (-nmin 60)."""
    with start_ocsp_responder(pki.folder, pki.inter, None, name="direct",
                              statuses=[(pki.good, "good"),
                                        (pki.revoked, "revoked", pki.now - DAY)],
                              nmin=60) as r:
        yield r


@pytest.fixture(scope="module")
def delegated(pki):
    """Signed by a delegated responder certificate (EKU OCSPSigning)."""
    with start_ocsp_responder(pki.folder, pki.inter, pki.signer, name="delegated",
                              statuses=[(pki.good, "good")], ndays=1) as r:
        yield r


def ask(responder, leaf, issuer):
    return ocsp.fetch(responder.url, ocsp.build_request(leaf.cert, issuer.cert))


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


# --------------------------------------------------------------------------
# Good answers

def test_good_response_from_the_issuer(pki, responder):
    before = time.time()
    der = ask(responder, pki.good, pki.inter)
    result = ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert isinstance(result, OcspResult)
    assert result.der == der
    assert result.cert_status == "good"
    assert result.signer == "issuer"
    assert before - 5 <= result.this_update <= time.time() + 1
    assert result.next_update == pytest.approx(result.this_update + 3600, abs=2)
    assert result.produced_at == pytest.approx(result.this_update, abs=2)
    assert result.revocation_time is None


def test_delegated_responder(pki, delegated):
    der = ask(delegated, pki.good, pki.inter)
    result = ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert result.cert_status == "good"
    assert result.signer == "CN=ScalWS Test OCSP Responder"
    assert result.next_update == pytest.approx(result.this_update + DAY, abs=2)


def test_revoked_status_is_reported(pki, responder):
    der = ask(responder, pki.revoked, pki.inter)
    result = ocsp.validate(der, pki.revoked.cert, pki.inter.cert)
    assert result.cert_status == "revoked"
    assert result.revocation_time == pytest.approx(pki.now - DAY, abs=2)


def test_unknown_status_is_reported(pki, responder):
    der = ask(responder, pki.stranger, pki.inter)      # not in the index
    assert ocsp.validate(der, pki.stranger.cert, pki.inter.cert).cert_status == "unknown"


def test_pem_certificates_are_accepted(pki, responder):
    der = ask(responder, pki.good, pki.inter)
    assert ocsp.validate(der, pki.good.pem, pki.inter.pem).cert_status == "good"


def test_responder_reads_a_changed_index(pki, tmp_path):
    # A certificate revoked while the responder runs (e2e tests do this).
    leaf = pki.leaf(pki.inter, ["later.example"], name="later")
    with start_ocsp_responder(tmp_path, pki.inter, statuses=[(leaf, "good")],
                              name="changing") as r:
        assert ocsp.validate(ask(r, leaf, pki.inter), leaf.cert,
                             pki.inter.cert).cert_status == "good"
        r.update([(leaf, "revoked")])
        assert ocsp.validate(ask(r, leaf, pki.inter), leaf.cert,
                             pki.inter.cert).cert_status == "revoked"


# --------------------------------------------------------------------------
# Refused answers

def test_response_for_another_certificate_is_refused(pki, responder):
    der = ask(responder, pki.revoked, pki.inter)
    with pytest.raises(OcspError) as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert info.value.reason == "mismatch"
    assert str(info.value) == (
        f"the OCSP response is for another certificate (serial {pki.revoked.serial:x}), "
        f"not for this one (serial {pki.good.serial:x}, CN=good.example)")


def test_response_about_the_same_serial_of_another_issuer_is_refused(pki, responder):
    der = ask(responder, pki.good, pki.inter)
    with pytest.raises(OcspError, match="of another issuer") as info:
        ocsp.validate(der, pki.good.cert, pki.ca.cert)
    assert info.value.reason == "mismatch"


def test_stale_response_is_refused(pki, responder, delegated):
    der = ask(responder, pki.good, pki.inter)             # nextUpdate in an hour
    ocsp.validate(der, pki.good.cert, pki.inter.cert, now=time.time() + 50 * 60)
    with pytest.raises(OcspError, match=r"^the OCSP response is stale: its nextUpdate "
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC has passed$") as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert, now=time.time() + 2 * HOUR)
    assert info.value.reason == "stale"
    der = ask(delegated, pki.good, pki.inter)             # -ndays 1
    with pytest.raises(OcspError, match="stale"):
        ocsp.validate(der, pki.good.cert, pki.inter.cert, now=time.time() + 2 * DAY)


def test_response_from_the_future_is_refused(pki, responder):
    der = ask(responder, pki.good, pki.inter)
    # Within the 5 minutes allowed for clock skew: fine.
    ocsp.validate(der, pki.good.cert, pki.inter.cert, now=time.time() - 240)
    with pytest.raises(OcspError, match="from the future") as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert, now=time.time() - HOUR)
    assert info.value.reason == "future"


def test_tampered_signature_is_refused(pki, responder):
    der = ask(responder, pki.good, pki.inter)
    sig = x509_ocsp.load_der_ocsp_response(der).signature
    at = der.index(sig) + len(sig) // 2
    with pytest.raises(OcspError) as info:
        ocsp.validate(flip(der, at), pki.good.cert, pki.inter.cert)
    assert info.value.reason in ("signature", "parse")


def test_tampered_content_is_refused(pki, responder):
    der = ask(responder, pki.good, pki.inter)
    resp = x509_ocsp.load_der_ocsp_response(der)
    tbs = resp.tbs_response_bytes
    # The last digit of producedAt (a GeneralizedTime, tag 0x18): still a
    # well-formed response, but not the one that was signed.
    produced = der.index(tbs) + tbs.index(b"\x18\x0f") + 2 + 13
    with pytest.raises(OcspError) as info:
        ocsp.validate(flip(der, produced), pki.good.cert, pki.inter.cert)
    assert info.value.reason == "signature"
    assert "signature does not verify with the key of the issuer" in str(info.value)


def test_garbage_is_refused(pki):
    for data in (b"", b"not an OCSP response", b"\x30\x03\x0a\x01\x00"):
        with pytest.raises(OcspError) as info:
            ocsp.validate(data, pki.good.cert, pki.inter.cert)
        assert info.value.reason == "parse"


def test_response_signed_by_an_unrelated_key_is_refused(pki, tmp_path):
    # A responder whose signing certificate was issued by another CA.
    other_root = pki.root(name="Unrelated Root")
    rogue = pki.ocsp_signer(other_root, name="Rogue Responder")
    with start_ocsp_responder(tmp_path, pki.inter, rogue, name="rogue",
                              statuses=[(pki.good, "good")], nmin=10) as r:
        der = ask(r, pki.good, pki.inter)
    with pytest.raises(OcspError) as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert info.value.reason == "signature"
    assert str(info.value) == (
        "the OCSP responder certificate 'CN=Rogue Responder' is not issued by the "
        "certificate's issuer 'CN=ScalWS Test Intermediate CA'")


def test_response_signed_by_an_impostor_of_the_issuer_is_refused(pki, tmp_path):
    # Same name as the issuer, another key: the ResponderID names the issuer,
    # and the signature does not verify with the issuer's key.
    impostor = pki.root(name="ScalWS Test Intermediate CA")
    with start_ocsp_responder(tmp_path, pki.inter, impostor, name="impostor",
                              statuses=[(pki.good, "good")], nmin=10) as r:
        der = ask(r, pki.good, pki.inter)
    with pytest.raises(OcspError) as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert info.value.reason == "signature"
    assert "does not verify with the key of the issuer" in str(info.value)


def test_delegated_responder_without_ocsp_signing_is_refused(pki, tmp_path):
    plain = pki.ocsp_signer(pki.inter, name="No EKU Responder", eku=False)
    with start_ocsp_responder(tmp_path, pki.inter, plain, name="noeku",
                              statuses=[(pki.good, "good")], nmin=10) as r:
        der = ask(r, pki.good, pki.inter)
    with pytest.raises(OcspError) as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert str(info.value) == ("the OCSP responder certificate 'CN=No EKU Responder' "
                               "lacks the OCSP Signing extended key usage")


def test_delegated_responder_of_the_root_is_refused(pki, tmp_path):
    # Issued by the root, not by the leaf's issuer (the intermediate).
    uncle = pki.ocsp_signer(pki.ca, name="Root's Responder")
    with start_ocsp_responder(tmp_path, pki.inter, uncle, name="uncle",
                              statuses=[(pki.good, "good")], nmin=10) as r:
        der = ask(r, pki.good, pki.inter)
    with pytest.raises(OcspError, match="is not issued by the certificate's issuer"):
        ocsp.validate(der, pki.good.cert, pki.inter.cert)


def test_expired_delegated_responder_is_refused(pki):
    old = pki.ocsp_signer(pki.inter, name="Old Responder", not_before=-10 * DAY,
                          not_after=-DAY)
    der = ocsp_response(pki.good, pki.inter, signer=old)
    with pytest.raises(OcspError, match="'CN=Old Responder' is not valid now"):
        ocsp.validate(der, pki.good.cert, pki.inter.cert)


def test_delegated_responder_not_included_is_refused(pki):
    der = ocsp_response(pki.good, pki.inter, signer=pki.signer, include_signer=False)
    with pytest.raises(OcspError, match="neither the issuer 'CN=ScalWS Test "
                       "Intermediate CA' nor a responder certificate included"):
        ocsp.validate(der, pki.good.cert, pki.inter.cert)


@pytest.mark.parametrize("status", [x509_ocsp.OCSPResponseStatus.UNAUTHORIZED,
                                    x509_ocsp.OCSPResponseStatus.TRY_LATER,
                                    x509_ocsp.OCSPResponseStatus.MALFORMED_REQUEST])
def test_unsuccessful_response_is_refused(pki, status):
    der = x509_ocsp.OCSPResponseBuilder.build_unsuccessful(status).public_bytes(
        serialization.Encoding.DER)
    with pytest.raises(OcspError) as info:
        ocsp.validate(der, pki.good.cert, pki.inter.cert)
    assert info.value.reason == "status"
    assert str(info.value) == ("the OCSP responder refused the request: "
                               f"{status.name.lower()}")


def test_rsa_signed_response(pki, tmp_path):
    rsa_ca = pki.root(name="RSA Root", key="rsa")
    leaf = pki.leaf(rsa_ca, ["rsa.example"], name="under-rsa")
    with start_ocsp_responder(tmp_path, rsa_ca, name="rsa",
                              statuses=[(leaf, "good")], nmin=10) as r:
        der = ask(r, leaf, rsa_ca)
    assert ocsp.validate(der, leaf.cert, rsa_ca.cert).cert_status == "good"
    sig = x509_ocsp.load_der_ocsp_response(der).signature
    with pytest.raises(OcspError, match="signature does not verify"):
        ocsp.validate(flip(der, der.index(sig) + 10), leaf.cert, rsa_ca.cert)


# --------------------------------------------------------------------------
# Requests, URLs, fetching

def test_build_request(pki):
    req = x509_ocsp.load_der_ocsp_request(ocsp.build_request(pki.good.cert, pki.inter.cert))
    assert req.serial_number == pki.good.serial
    assert isinstance(req.hash_algorithm, hashes.SHA1)
    assert req.issuer_key_hash == x509.SubjectKeyIdentifier.from_public_key(
        pki.inter.cert.public_key()).digest


def test_responder_url(pki):
    assert ocsp.responder_url(pki.good.cert) == "http://127.0.0.1:1/"
    assert ocsp.responder_url(pki.stranger.cert) is None


def test_fetch_refused_connection():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OcspError, match=rf"^cannot reach the OCSP responder "
                       rf"http://127.0.0.1:{port}/: ") as info:
        ocsp.fetch(f"http://127.0.0.1:{port}/", b"0")
    assert info.value.reason == "network"


def test_fetch_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)                    # accepts, never answers
        port = s.getsockname()[1]
        with pytest.raises(OcspError) as info:
            ocsp.fetch(f"http://127.0.0.1:{port}/", b"0", timeout=0.3)
    assert info.value.reason == "network"
    assert str(info.value) == (f"the OCSP responder http://127.0.0.1:{port}/ did not "
                               "answer within 0.3s")


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 500

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append((self.path, self.headers.get("Content-Type")))
        self.send_response(self.server.status)
        if self.server.status in (301, 302):
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
        body = b"no" if self.server.status != 200 else b""
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_answer():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_fetch_http_error(http_answer):
    url = f"http://127.0.0.1:{http_answer.server_port}/ocsp"
    http_answer.status = 500
    with pytest.raises(OcspError) as info:
        ocsp.fetch(url, b"request")
    assert info.value.reason == "http"
    assert str(info.value) == f"the OCSP responder {url} answered HTTP 500 Internal Server Error"
    assert http_answer.seen == [("/ocsp", "application/ocsp-request")]


def test_fetch_does_not_follow_redirects(http_answer):
    url = f"http://127.0.0.1:{http_answer.server_port}/"
    http_answer.status = 302
    with pytest.raises(OcspError, match="a redirect to http://127.0.0.1:1/elsewhere; "
                       "OCSP requests are not redirected"):
        ocsp.fetch(url, b"request")


def test_fetch_empty_answer(http_answer):
    http_answer.status = 200
    with pytest.raises(OcspError, match="empty body"):
        ocsp.fetch(f"http://127.0.0.1:{http_answer.server_port}/", b"request")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://ocsp.example/", "ocsp"])
def test_fetch_only_http(url):
    with pytest.raises(OcspError, match="is not an http:// URL") as info:
        ocsp.fetch(url, b"request")
    assert info.value.reason == "url"


# --------------------------------------------------------------------------
# Files

def test_load_file(pki, responder, tmp_path):
    der = ask(responder, pki.good, pki.inter)
    path = tmp_path / "good.der"
    path.write_bytes(der)
    assert ocsp.load_file(path, pki.good.cert, pki.inter.cert).der == der
    # What --check-config says about the same file.
    result = tlscheck.check_certificate(pki.good.cert_path, pki.good.key_path,
                                        ocsp_file=path)
    assert (result.errors, result.warnings) == ([], [])


def test_load_file_problems(pki, tmp_path):
    with pytest.raises(OcspError) as info:
        ocsp.load_file(tmp_path / "missing.der", pki.good.cert, pki.inter.cert)
    assert info.value.reason == "io"
    assert str(info.value) == (f"cannot read {tmp_path}/missing.der: No such file or "
                               "directory")
    pem = tmp_path / "response.pem"
    pem.write_text("-----BEGIN OCSP RESPONSE-----\n")
    with pytest.raises(OcspError, match="is PEM text; an OCSP response file is DER"):
        ocsp.load_file(pem, pki.good.cert, pki.inter.cert)
    stale = tmp_path / "stale.der"
    stale.write_bytes(ocsp_response(pki.good, pki.inter, this_update=-2 * DAY,
                                    next_update=-DAY))
    with pytest.raises(OcspError) as info:
        ocsp.load_file(stale, pki.good.cert, pki.inter.cert)
    assert info.value.reason == "stale"
    assert str(info.value).startswith(f"{stale}: the OCSP response is stale")


# --------------------------------------------------------------------------
# When to ask again

def result(this_update, next_update):
    return OcspResult(der=b"", cert_status="good", this_update=this_update,
                      next_update=next_update, produced_at=this_update)


@pytest.mark.parametrize("this_update, next_update, now, expected", [
    # A week-long response: hourly.
    (0, 7 * DAY, 100, 100 + HOUR),
    # A two-hour response fetched at once: at 1.5 h the hour cap wins; at
    # 1h10 three quarters of the window (1.5 h) comes first.
    (0, 2 * HOUR, 0, HOUR),
    (0, 2 * HOUR, 70 * 60, 90 * 60),
    # Already past three quarters: a minute from now, never a loop.
    (0, 2 * HOUR, 100 * 60, 101 * 60),
    # Past nextUpdate (it could not be refreshed): still a minute.
    (0, HOUR, 2 * HOUR, 2 * HOUR + 60),
    # No nextUpdate: hourly.
    (0, None, 500, 500 + HOUR),
])
def test_refresh_at(this_update, next_update, now, expected):
    assert ocsp.refresh_at(result(this_update, next_update), now) == expected


def test_refresh_at_with_a_real_response(pki, responder):
    now = time.time()
    res = ocsp.validate(ask(responder, pki.good, pki.inter), pki.good.cert, pki.inter.cert)
    # -nmin 60: three quarters of the hour.
    assert ocsp.refresh_at(res, now) == pytest.approx(res.this_update + 45 * 60, abs=1)
