"""OCSP for stapling: ask a certificate's responder whether the certificate
is still good, check the answer, and decide when to ask again.

    url = responder_url(cert)                      # from the certificate's AIA
    der = fetch(url, build_request(cert, issuer))  # HTTP POST, DER both ways
    result = validate(der, cert, issuer)           # OcspResult, or OcspError
    next_try = refresh_at(result, time.time())

    result = load_file(path, cert, issuer)         # a response the operator keeps

`cert` and `issuer` are cryptography x509.Certificate objects (PEM or DER
bytes are accepted too). Every failure is an OcspError whose message says
what went wrong in words an operator can act on, and whose `reason` is a
short machine-readable kind:

    "io"          the response file cannot be read
    "url"         the responder URL is not http:// or https://
    "network"     the responder cannot be reached, or did not answer in time
    "http"        the responder answered, but not 200 with a response
    "parse"       the bytes are not an OCSP response
    "status"      the responder refused (malformed request, tryLater, ...)
    "mismatch"    the response is not about this certificate
    "signature"   the signature does not verify, or the signer is not allowed
    "future"      thisUpdate is more than MAX_SKEW in the future
    "stale"       nextUpdate has passed

A response is accepted when it is signed either by the issuer itself or by a
delegated responder: a certificate included in the response, issued (its
signature verified) by the issuer, carrying the OCSP Signing extended key
usage, and valid now (RFC 6960 section 4.2.2.2). RSA (PKCS#1 v1.5), ECDSA
and Ed25519 signatures are verified.

This is the control plane's half: the master fetches and validates, and
hands the DER bytes to the workers, which staple them as they are.
"""
from __future__ import annotations

import datetime
import http.client
import socket
import time
import urllib.error
import urllib.request
from scalws.config.record import dataclass
from typing import Optional

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID

__all__ = ["OcspError", "OcspResult", "MAX_SKEW", "responder_url", "build_request",
           "fetch", "validate", "load_file", "refresh_at"]

MAX_SKEW = 300.0               # seconds thisUpdate may lie in the future (clock skew)
MAX_RESPONSE_BYTES = 1 << 20   # larger answers are refused (real ones are ~0.5-4 KiB)
REFRESH_MIN = 60.0             # never ask again sooner than this
REFRESH_MAX = 3600.0           # ask at least hourly (as nginx does)


class OcspError(Exception):
    """An OCSP request or response that cannot be used; `reason` says which
    kind of failure (see the module docstring)."""

    def __init__(self, message: str, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


@dataclass
class OcspResult:
    """A validated response. Times are wall-clock seconds (time.time())."""
    der: bytes                             # the response, exactly as received
    cert_status: str                       # "good" | "revoked" | "unknown"
    this_update: float
    next_update: Optional[float]           # None: the responder gave none
    produced_at: float
    revocation_time: Optional[float] = None        # when cert_status is "revoked"
    revocation_reason: Optional[str] = None        # "key_compromise", ... or None
    signer: str = "issuer"                 # "issuer" or the delegated responder's subject


# --------------------------------------------------------------------------

def _as_cert(value) -> x509.Certificate:
    if isinstance(value, x509.Certificate):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    raise TypeError(f"expected a certificate, got {type(value).__name__}")


def _subject(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string() or "(empty subject)"


def _ts(when: Optional[datetime.datetime]) -> Optional[float]:
    return None if when is None else when.timestamp()


def _fmt(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def responder_url(cert) -> Optional[str]:
    """The OCSP responder URL of the certificate's Authority Information
    Access extension (the first one, preferring http://), or None."""
    cert = _as_cert(cert)
    try:
        aia = cert.extensions.get_extension_for_class(x509.AuthorityInformationAccess)
    except x509.ExtensionNotFound:
        return None
    urls = [d.access_location.value for d in aia.value
            if d.access_method == AuthorityInformationAccessOID.OCSP
            and isinstance(d.access_location, x509.UniformResourceIdentifier)]
    for url in urls:
        if url.lower().startswith("http://"):
            return url
    return urls[0] if urls else None


def build_request(cert, issuer) -> bytes:
    """A DER OCSP request for `cert`, with a SHA-1 CertID (what responders
    expect; RFC 5019) and no nonce (a stapled answer is shared by clients)."""
    builder = ocsp.OCSPRequestBuilder().add_certificate(
        _as_cert(cert), _as_cert(issuer), hashes.SHA1())
    return builder.build().public_bytes(serialization.Encoding.DER)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirected POST would come back as a GET without its body."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def fetch(url: str, request_der: bytes, timeout: float = 5.0) -> bytes:
    """POST `request_der` to `url` (Content-Type application/ocsp-request)
    and return the body of a 200 answer; raise OcspError otherwise."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise OcspError(f"the OCSP responder URL '{url}' is not an http:// URL", "url")
    req = urllib.request.Request(url, data=request_der, method="POST", headers={
        "Content-Type": "application/ocsp-request",
        "Accept": "application/ocsp-response",
        "User-Agent": "scalws",
    })
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as resp:
            status = resp.status
            body = resp.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        where = e.headers.get("Location") if e.headers else None
        extra = f" (a redirect to {where}; OCSP requests are not redirected)" \
            if where and 300 <= e.code < 400 else ""
        raise OcspError(f"the OCSP responder {url} answered HTTP {e.code} "
                        f"{e.reason}{extra}", "http") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise OcspError(f"the OCSP responder {url} did not answer within "
                            f"{timeout:g}s", "network") from None
        text = getattr(reason, "strerror", None) or str(reason)
        raise OcspError(f"cannot reach the OCSP responder {url}: {text}", "network") from None
    except (socket.timeout, TimeoutError):
        raise OcspError(f"the OCSP responder {url} did not answer within {timeout:g}s",
                        "network") from None
    except (OSError, http.client.HTTPException) as e:
        text = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise OcspError(f"the OCSP responder {url} failed: {text}", "network") from None
    if status != 200:
        raise OcspError(f"the OCSP responder {url} answered HTTP {status}", "http")
    if len(body) > MAX_RESPONSE_BYTES:
        raise OcspError(f"the OCSP responder {url} sent more than "
                        f"{MAX_RESPONSE_BYTES} bytes", "http")
    if not body:
        raise OcspError(f"the OCSP responder {url} answered with an empty body", "http")
    return body


# --------------------------------------------------------------------------
# Validation

def _verify_signature(public_key, signature: bytes, data: bytes, hash_alg) -> None:
    """Raise InvalidSignature, or OcspError for a key type we do not verify."""
    if isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(signature, data, padding.PKCS1v15(), hash_alg)
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        public_key.verify(signature, data, ec.ECDSA(hash_alg))
    elif isinstance(public_key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        public_key.verify(signature, data)
    else:
        raise OcspError(f"cannot verify a signature made with a "
                        f"{type(public_key).__name__} key", "signature")


def _is_responder(resp, cert: x509.Certificate) -> bool:
    """Does the response's ResponderID name `cert` (by name or key hash)?"""
    if resp.responder_name is not None:
        return resp.responder_name == cert.subject
    key_hash = x509.SubjectKeyIdentifier.from_public_key(cert.public_key()).digest
    return resp.responder_key_hash == key_hash


def _responder_text(resp) -> str:
    if resp.responder_name is not None:
        return f"'{resp.responder_name.rfc4514_string()}'"
    return f"the key with hash {resp.responder_key_hash.hex()}"


def _cert_id_hashes(cert, issuer, algorithm):
    """(issuerNameHash, issuerKeyHash) of `cert`'s CertID with `algorithm`."""
    req = ocsp.OCSPRequestBuilder().add_certificate(cert, issuer, algorithm).build()
    return req.issuer_name_hash, req.issuer_key_hash


def _single_for(resp, cert, issuer):
    """The SingleResponse about `cert` (issued by `issuer`), or OcspError."""
    hashes_by_alg = {}
    others = []
    for single in resp.responses:
        try:
            alg = single.hash_algorithm
        except UnsupportedAlgorithm:
            continue
        key = alg.name
        if key not in hashes_by_alg:
            try:
                hashes_by_alg[key] = _cert_id_hashes(cert, issuer, alg)
            except (ValueError, TypeError, UnsupportedAlgorithm):
                hashes_by_alg[key] = None
        expected = hashes_by_alg[key]
        if (single.serial_number == cert.serial_number and expected is not None
                and (single.issuer_name_hash, single.issuer_key_hash) == expected):
            return single
        others.append(single)
    if not others:
        raise OcspError("the OCSP response holds no status this server can read", "mismatch")
    about = others[0]
    if about.serial_number != cert.serial_number:
        raise OcspError(f"the OCSP response is for another certificate (serial "
                        f"{about.serial_number:x}), not for this one (serial "
                        f"{cert.serial_number:x}, {_subject(cert)})", "mismatch")
    raise OcspError(f"the OCSP response is for serial {cert.serial_number:x} of another "
                    f"issuer, not of '{_subject(issuer)}'", "mismatch")


def _signer(resp, issuer, now):
    """The certificate whose key must have signed `resp`: the issuer, or a
    delegated responder certificate included in the response."""
    if _is_responder(resp, issuer):
        return issuer, "issuer"
    candidates = [c for c in resp.certificates if _is_responder(resp, c)]
    if not candidates:
        raise OcspError(f"the OCSP response is signed by {_responder_text(resp)}, which "
                        f"is neither the issuer '{_subject(issuer)}' nor a responder "
                        "certificate included in the response", "signature")
    delegate = candidates[0]
    name = _subject(delegate)
    try:
        delegate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        raise OcspError(f"the OCSP responder certificate '{name}' is not issued by the "
                        f"certificate's issuer '{_subject(issuer)}'", "signature") from None
    try:
        eku = delegate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        eku = ()
    if ExtendedKeyUsageOID.OCSP_SIGNING not in eku:
        raise OcspError(f"the OCSP responder certificate '{name}' lacks the OCSP "
                        "Signing extended key usage", "signature")
    before = delegate.not_valid_before_utc.timestamp()
    after = delegate.not_valid_after_utc.timestamp()
    if now < before - MAX_SKEW or now > after:
        raise OcspError(f"the OCSP responder certificate '{name}' is not valid now (valid "
                        f"from {_fmt(before)} to {_fmt(after)})", "signature")
    return delegate, name


def validate(der: bytes, cert, issuer, now: Optional[float] = None) -> OcspResult:
    """Check an OCSP response for `cert` (issued by `issuer`) and return what
    it says; raise OcspError when it cannot be stapled (see the module
    docstring). A "revoked" or "unknown" status is a valid answer: it is
    returned, not raised."""
    cert, issuer = _as_cert(cert), _as_cert(issuer)
    now = time.time() if now is None else now
    try:
        resp = ocsp.load_der_ocsp_response(bytes(der))
    except ValueError as e:
        raise OcspError(f"not an OCSP response (DER): {e}", "parse") from None
    if resp.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        raise OcspError(f"the OCSP responder refused the request: "
                        f"{resp.response_status.name.lower()}", "status")

    single = _single_for(resp, cert, issuer)

    signer, signer_name = _signer(resp, issuer, now)
    try:
        hash_alg = resp.signature_hash_algorithm
    except UnsupportedAlgorithm:
        raise OcspError("the OCSP response uses a signature algorithm this server "
                        f"cannot verify ({resp.signature_algorithm_oid.dotted_string})",
                        "signature") from None
    try:
        _verify_signature(signer.public_key(), resp.signature, resp.tbs_response_bytes,
                          hash_alg)
    except InvalidSignature:
        who = "the issuer" if signer is issuer else f"the responder '{signer_name}'"
        raise OcspError(f"the OCSP response's signature does not verify with the key "
                        f"of {who} (tampered, or signed by another key)",
                        "signature") from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise OcspError(f"the OCSP response's signature cannot be verified: {e}",
                        "signature") from None

    this_update = _ts(single.this_update_utc)
    next_update = _ts(single.next_update_utc)
    if this_update > now + MAX_SKEW:
        raise OcspError(f"the OCSP response is from the future: thisUpdate "
                        f"{_fmt(this_update)} (check the clock)", "future")
    if next_update is not None and next_update < now:
        raise OcspError(f"the OCSP response is stale: its nextUpdate "
                        f"{_fmt(next_update)} has passed", "stale")

    status = single.certificate_status
    result = OcspResult(
        der=bytes(der),
        cert_status={ocsp.OCSPCertStatus.GOOD: "good",
                     ocsp.OCSPCertStatus.REVOKED: "revoked"}.get(status, "unknown"),
        this_update=this_update, next_update=next_update,
        produced_at=_ts(resp.produced_at_utc), signer=signer_name)
    if status == ocsp.OCSPCertStatus.REVOKED:
        result.revocation_time = _ts(single.revocation_time_utc)
        reason = single.revocation_reason
        result.revocation_reason = reason.name if reason is not None else None
    return result


def load_file(path, cert, issuer, now: Optional[float] = None) -> OcspResult:
    """Read a DER OCSP response from `path` and validate it."""
    try:
        with open(path, "rb") as f:
            der = f.read(MAX_RESPONSE_BYTES + 1)
    except OSError as e:
        raise OcspError(f"cannot read {path}: {e.strerror or e}", "io") from None
    if not der:
        raise OcspError(f"{path} is empty", "parse")
    if len(der) > MAX_RESPONSE_BYTES:
        raise OcspError(f"{path} is larger than {MAX_RESPONSE_BYTES} bytes: not an "
                        "OCSP response", "parse")
    if der.lstrip().startswith(b"-----BEGIN"):
        raise OcspError(f"{path} is PEM text; an OCSP response file is DER (as "
                        "written by openssl ocsp -respout)", "parse")
    try:
        return validate(der, cert, issuer, now)
    except OcspError as e:
        raise OcspError(f"{path}: {e}", e.reason) from None


def refresh_at(result: OcspResult, now: float) -> float:
    """When to fetch a fresh response for `result`, as wall-clock seconds.

    With a nextUpdate: three quarters of the way through the response's
    validity window (nextUpdate - (nextUpdate - thisUpdate) / 4), so that a
    failing responder leaves a quarter of the window for retries, but no
    later than an hour from now (as nginx, which asks hourly: a revocation
    shows within the hour). Without a nextUpdate (the responder promises
    nothing): an hour from now. Never sooner than a minute from now, so that
    a response that is already due is not asked for in a loop.
    """
    if result.next_update is None:
        when = now + REFRESH_MAX
    else:
        window = max(0.0, result.next_update - result.this_update)
        when = min(result.next_update - window / 4, now + REFRESH_MAX)
    return max(when, now + REFRESH_MIN)
