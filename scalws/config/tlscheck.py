"""The control plane's checks of a site's certificate and private key, made
at every load (--check-config, start, reload) before OpenSSL is given them.

    result = check_certificate(cert_path, key_path, names=("example.com",))
    result.errors      # refuse the configuration: the server could not work
    result.warnings    # tell the operator: it works, but not well or not long
    result.key_type    # "ECDSA P-256", "RSA 2048", "Ed25519", ...
    result.names       # DNS names the certificate covers (lowercase)

Each message is a `Finding`: a str that also says, in `.field`, which file
it is about ("cert", "key" or "ocsp_file"), so that the loader can point at
the configuration line that named that file.

What is checked (all of it reads local files; nothing is fetched):
  - the files can be read, hold PEM (a DER file, a swapped cert and key, a
    truncated block are each named as such), and the key is not encrypted;
  - the private key belongs to the first certificate (the leaf);
  - the chain: each certificate is issued by the next one (name and
    signature), a self-signed root in the file (useless bytes) or a file
    holding only the leaf (an incomplete chain, unless the issuer is a root
    the clients trust) are warned about;
  - validity: expired or not yet valid (leaf or intermediate) is an error,
    fewer than EXPIRY_WARNING days left a warning;
  - names: subjectAltName DNS names (the Common Name only when there is no
    subjectAltName), matched per RFC 6125 against the names given;
  - the key: RSA under 2048 bits and DSA are refused; a key file readable by
    everyone is warned about;
  - the extended key usage allows a TLS server;
  - finally, OpenSSL itself loads the pair (pyOpenSSL), the way the server
    will, so that anything it refuses is refused here first;
  - `ocsp_file`, when given: a readable DER OCSP response, for this
    certificate, signed by its issuer or a delegated responder (see
    scalws.control.ocsp); revoked is an error, stale a warning.

It is fast enough to run on every load: a few parses and one signature
verification per certificate in the chain, no network.
"""
from __future__ import annotations

import base64
import binascii
import ipaddress
import math
import os
import re
import stat
import time
from scalws.config.record import dataclass, field
from typing import Optional

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import SSL

from ..control import ocsp

__all__ = ["CheckResult", "Finding", "check_certificate", "certificate_names",
           "key_type", "name_covered", "EXPIRY_WARNING", "MIN_RSA_BITS"]

EXPIRY_WARNING = 14            # days before expiry that a warning starts
MIN_RSA_BITS = 2048
_DAY = 86400.0

_CURVE_NAMES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}

# A PEM block: its label and its body (no "-----" inside, so that a block
# without its END line does not swallow the next one).
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----((?:(?!-----).)*)-----END \1-----",
                        re.DOTALL)
_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


class Finding(str):
    """A message about one of the files: `field` is "cert", "key" or
    "ocsp_file" (the configuration key that named the file)."""

    field: str

    def __new__(cls, text: str, field: str = "cert"):
        obj = super().__new__(cls, text)
        obj.field = field
        return obj


@dataclass
class CheckResult:
    errors: list = field(default_factory=list)      # [Finding]
    warnings: list = field(default_factory=list)    # [Finding]
    key_type: str = ""                     # "ECDSA P-256", "RSA 2048", "Ed25519", ...
    names: list = field(default_factory=list)       # DNS names covered, lowercase
    not_after: float = 0.0                 # the leaf's, wall seconds
    ocsp_url: Optional[str] = None         # the leaf's OCSP responder (AIA)
    issuer_pem: Optional[bytes] = None     # the leaf's issuer, when it follows it in the file
    ips: list = field(default_factory=list)         # IP addresses in subjectAltName
    must_staple: bool = False              # the leaf has the TLS Feature status_request
    chain_length: int = 0                  # certificates in the file

    @property
    def ok(self) -> bool:
        return not self.errors


# --------------------------------------------------------------------------
# Small helpers, also used by directives/tls.py

def key_type(public_key) -> str:
    """"RSA 2048", "ECDSA P-256", "Ed25519", "Ed448", "DSA 2048", ..."""
    if isinstance(public_key, rsa.RSAPublicKey):
        return f"RSA {public_key.key_size}"
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        name = public_key.curve.name
        return f"ECDSA {_CURVE_NAMES.get(name, name)}"
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return "Ed25519"
    if isinstance(public_key, ed448.Ed448PublicKey):
        return "Ed448"
    if isinstance(public_key, dsa.DSAPublicKey):
        return f"DSA {public_key.key_size}"
    return type(public_key).__name__


def certificate_names(cert: x509.Certificate):
    """(DNS names, IP addresses, has a subjectAltName) of a certificate.
    DNS names are lowercase, without a trailing dot; the Common Name stands
    in only when there is no subjectAltName extension (RFC 6125 6.4.4)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        names = [_norm(str(a.value)) for a in cns if str(a.value)]
        return names, [], False
    names = [_norm(n) for n in san.get_values_for_type(x509.DNSName)]
    ips = [str(a) for a in san.get_values_for_type(x509.IPAddress)]
    return names, ips, True


def _norm(name: str) -> str:
    name = name.strip().lower()
    return name[:-1] if name.endswith(".") and len(name) > 1 else name


def name_covered(server_name: str, dns_names, ips=()) -> bool:
    """Does a certificate with `dns_names` (and `ips`) cover `server_name`?

    RFC 6125: `*.example.com` covers `a.example.com`, neither
    `a.b.example.com` nor `example.com`; only a whole leftmost `*` label is
    a wildcard. A server name that is itself a wildcard is covered only by
    the same wildcard. An IP address (`127.0.0.1`, `[::1]`) is covered by
    the same address among `ips`.
    """
    host = _norm(server_name)
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        addr = ipaddress.ip_address(literal)
    except ValueError:
        addr = None
    if addr is not None:
        for ip in ips:
            try:
                if ipaddress.ip_address(ip) == addr:
                    return True
            except ValueError:
                continue
        return False
    names = [_norm(n) for n in dns_names]
    if host in names:
        return True
    if host.startswith("*."):
        return False
    for pattern in names:
        if pattern.startswith("*.") and "*" not in pattern[1:]:
            suffix = pattern[1:]                  # ".example.com"
            label = host[:-len(suffix)] if host.endswith(suffix) else ""
            if label and "." not in label:
                return True
    return False


def _describe(cert: x509.Certificate) -> str:
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if cns:
        return f"CN={cns[0].value}"
    return cert.subject.rfc4514_string() or "empty subject"


def _fmt_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _spki(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def _issued_by(child: x509.Certificate, parent: x509.Certificate) -> bool:
    if child.issuer != parent.subject:
        return False
    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _self_signed(cert: x509.Certificate) -> bool:
    return _issued_by(cert, cert)


def _looks_der(data: bytes) -> bool:
    return data[:1] == b"\x30" and b"-----BEGIN" not in data[:64]


# --------------------------------------------------------------------------

class _Report:
    def __init__(self, result: CheckResult):
        self.result = result

    def error(self, text, where="cert"):
        self.result.errors.append(Finding(text, where))

    def warning(self, text, where="cert"):
        self.result.warnings.append(Finding(text, where))


def check_certificate(cert_path, key_path, names=(), now=None, ocsp_file=None) -> CheckResult:
    """Check a certificate file (leaf, then its chain) and its private key;
    see the module docstring for what is checked. `names` are server names
    the certificate should cover (a warning for each one it does not);
    `now` is the wall-clock time to check validity against (default: now)."""
    now = time.time() if now is None else now
    cert_path, key_path = os.fspath(cert_path), os.fspath(key_path)
    result = CheckResult()
    report = _Report(result)

    certs = _read_certificates(cert_path, key_path, report)
    key = _read_private_key(key_path, report)
    _check_key_file_mode(key_path, report)
    if certs:
        leaf = certs[0]
        result.chain_length = len(certs)
        result.key_type = key_type(leaf.public_key())
        result.names, result.ips, has_san = certificate_names(leaf)
        result.not_after = leaf.not_valid_after_utc.timestamp()
        result.ocsp_url = ocsp.responder_url(leaf)
        result.must_staple = _must_staple(leaf)
        _check_key_type(leaf, cert_path, report)
        if not has_san:
            cn = ", ".join(result.names) or "none"
            report.warning(f"the certificate ({_describe(leaf)}) in {cert_path} has no "
                           f"subjectAltName: browsers ignore its Common Name ({cn}) and "
                           "refuse it for every name; reissue it with its names in "
                           "subjectAltName")
        _check_server_use(leaf, cert_path, report)
        issuer = _check_chain(certs, cert_path, report)
        if issuer is not None:
            result.issuer_pem = issuer.public_bytes(serialization.Encoding.PEM)
        _check_validity(certs, cert_path, now, report)
        for name in names:
            if not name_covered(name, result.names, result.ips):
                covered = ", ".join(result.names + result.ips) or "no names"
                report.warning(f"the certificate ({_describe(leaf)}) in {cert_path} does "
                               f"not cover the server name '{name}' (it covers {covered})")
        if key is not None:
            _check_key_matches(certs, key, cert_path, key_path, report)
        if not result.errors:
            _check_openssl_loads(cert_path, key_path, report)
        if ocsp_file is not None:
            _check_ocsp_file(os.fspath(ocsp_file), leaf, issuer, now, report)
    return result


# -- reading -------------------------------------------------------------------

def _read(path, report, where):
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError:
        report.error(f"{path} is a folder, expected a PEM file", where)
    except OSError as e:
        report.error(f"cannot read {path}: {e.strerror or e}", where)
    return None


def _pem_der(body: bytes) -> bytes:
    """The DER bytes of a PEM block's body (headers such as Proc-Type left out)."""
    lines = [line.strip() for line in body.strip().splitlines()]
    text = b"".join(line for line in lines if line and b":" not in line)
    return base64.b64decode(text, validate=True)


def _read_certificates(cert_path, key_path, report):
    data = _read(cert_path, report, "cert")
    if data is None:
        return None
    if not data.strip():
        report.error(f"{cert_path} is empty: expected PEM certificates")
        return None
    blocks = list(_PEM_BLOCK.finditer(data))
    cert_blocks = [b for b in blocks if b.group(1) == b"CERTIFICATE"]
    begun = sum(1 for m in _BEGIN.finditer(data) if m.group(1) == b"CERTIFICATE")
    if not cert_blocks:
        labels = sorted({b.group(1).decode() for b in blocks})
        if _looks_der(data):
            report.error(f"{cert_path} is DER (binary), not PEM: convert it with "
                         f"openssl x509 -inform der -in {cert_path} -out {cert_path}.pem")
        elif begun:
            report.error(f"{cert_path}: the certificate has no -----END CERTIFICATE----- "
                         "line (a truncated file?)")
        elif any(label.endswith("PRIVATE KEY") for label in labels):
            report.error(f"{cert_path} holds a private key, not a certificate: are cert "
                         "and key swapped?")
        elif labels:
            report.error(f"{cert_path} holds no certificate (found {', '.join(labels)}); "
                         "expected -----BEGIN CERTIFICATE-----")
        else:
            report.error(f"{cert_path} holds no PEM certificate (a block starting "
                         "-----BEGIN CERTIFICATE-----)")
        return None
    if begun > len(cert_blocks):
        report.error(f"{cert_path}: certificate {len(cert_blocks) + 1} has no -----END "
                     "CERTIFICATE----- line (a truncated file?)")
        return None
    certs = []
    for i, block in enumerate(cert_blocks):
        try:
            der = _pem_der(block.group(2))
        except (binascii.Error, ValueError):
            report.error(f"certificate {i + 1} in {cert_path} is damaged: its text is "
                         "not valid base64")
            return None
        try:
            certs.append(x509.load_der_x509_certificate(der))
        except ValueError as e:
            report.error(f"certificate {i + 1} in {cert_path} is not a valid X.509 "
                         f"certificate: {_short(e)}")
            return None
    if (any(b.group(1).endswith(b"PRIVATE KEY") for b in blocks)
            and os.path.realpath(cert_path) != os.path.realpath(key_path)):
        report.warning(f"{cert_path} also holds a private key: keep the key in the key "
                       "file only (certificate files are often readable by everyone)")
    return certs


def _short(e: Exception) -> str:
    text = str(e).split(". See https://", 1)[0]
    return text or type(e).__name__


_ENCRYPTED = ("is encrypted with a passphrase, which scalws does not support (it "
              "would have to ask for it at every reload): write it without one, "
              "readable by root only, with openssl pkey -in {path} -out NEW_FILE")


def _read_private_key(key_path, report):
    data = _read(key_path, report, "key")
    if data is None:
        return None
    if not data.strip():
        report.error(f"{key_path} is empty: expected a PEM private key", "key")
        return None
    blocks = list(_PEM_BLOCK.finditer(data))
    key_blocks = [b for b in blocks if b.group(1).endswith(b"PRIVATE KEY")]
    if not key_blocks:
        labels = sorted({b.group(1).decode() for b in blocks})
        begun = [m.group(1) for m in _BEGIN.finditer(data)]
        if _looks_der(data):
            report.error(f"{key_path} is DER (binary), not PEM: convert it with openssl "
                         f"pkey -inform der -in {key_path} -out {key_path}.pem", "key")
        elif any(label.endswith(b"PRIVATE KEY") for label in begun):
            report.error(f"{key_path}: the private key has no -----END ... PRIVATE KEY----- "
                         "line (a truncated file?)", "key")
        elif "CERTIFICATE" in labels:
            report.error(f"{key_path} holds a certificate, not a private key: are cert "
                         "and key swapped?", "key")
        else:
            report.error(f"{key_path} holds no PEM private key (a block starting "
                         "-----BEGIN PRIVATE KEY-----)", "key")
        return None
    block = key_blocks[0]
    if block.group(1) == b"ENCRYPTED PRIVATE KEY" or b"ENCRYPTED" in block.group(2):
        report.error(f"the private key in {key_path} " + _ENCRYPTED.format(path=key_path),
                     "key")
        return None
    try:
        # (No RSA consistency check: only the public half is compared here,
        # and it costs tens of milliseconds per 2048-bit key.)
        return serialization.load_pem_private_key(block.group(0), password=None,
                                                  unsafe_skip_rsa_key_validation=True)
    except TypeError:
        report.error(f"the private key in {key_path} " + _ENCRYPTED.format(path=key_path),
                     "key")
    except (ValueError, UnsupportedAlgorithm) as e:
        report.error(f"the private key in {key_path} cannot be read: {_short(e)}", "key")
    return None


def _check_key_file_mode(key_path, report):
    try:
        mode = os.stat(key_path).st_mode
    except OSError:
        return                     # reported by the read
    if mode & stat.S_IROTH:
        report.warning(f"the private key {key_path} is readable by everyone (mode "
                       f"{stat.S_IMODE(mode):04o}): chmod 600 {key_path}", "key")


# -- the certificate -------------------------------------------------------------

def _check_key_type(leaf, cert_path, report):
    pub = leaf.public_key()
    kind = key_type(pub)
    if isinstance(pub, rsa.RSAPublicKey) and pub.key_size < MIN_RSA_BITS:
        report.error(f"the certificate's key in {cert_path} is {kind}: at least "
                     f"{MIN_RSA_BITS} bits are required (clients refuse smaller RSA keys)")
    elif isinstance(pub, dsa.DSAPublicKey):
        report.error(f"the certificate's key in {cert_path} is {kind}: DSA is not "
                     "supported (TLS 1.3 has no DSA, and browsers refuse it); use "
                     "ECDSA P-256 or RSA 2048")
    elif isinstance(pub, ec.EllipticCurvePublicKey) and pub.curve.name not in _CURVE_NAMES:
        report.warning(f"the certificate's key in {cert_path} is {kind}: clients accept "
                       "ECDSA certificates on P-256, P-384 and P-521 only")


def _must_staple(leaf) -> bool:
    try:
        features = leaf.extensions.get_extension_for_class(x509.TLSFeature).value
    except x509.ExtensionNotFound:
        return False
    return x509.TLSFeatureType.status_request in features


def _check_server_use(leaf, cert_path, report):
    try:
        eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    if (ExtendedKeyUsageOID.SERVER_AUTH not in eku
            and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in eku):
        report.error(f"the certificate ({_describe(leaf)}) in {cert_path} is not for TLS "
                     "servers: its extended key usage lacks serverAuth, so clients "
                     "refuse it")


def _check_chain(certs, cert_path, report):
    """Report chain problems; return the leaf's issuer if it follows it."""
    leaf = certs[0]
    if len(certs) == 1:
        if _self_signed(leaf):
            report.warning(f"the certificate ({_describe(leaf)}) in {cert_path} is "
                           "self-signed: clients will not trust it unless told to")
        else:
            report.warning(f"{cert_path} holds only the leaf certificate: append the "
                           f"intermediate certificate(s) of its issuer "
                           f"'{leaf.issuer.rfc4514_string()}', or clients that do not "
                           "have them will fail to verify it (unless that issuer is a "
                           "root they trust)")
        return None
    for i in range(len(certs) - 1):
        child, parent = certs[i], certs[i + 1]
        if _issued_by(child, parent):
            continue
        a = f"certificate {i + 1} ({_describe(child)})"
        b = f"certificate {i + 2} ({_describe(parent)})"
        actual = next((j for j in range(len(certs))
                       if j not in (i, i + 1) and _issued_by(child, certs[j])), None)
        if actual is not None:
            report.error(f"the chain in {cert_path} is out of order: {a} is issued by "
                         f"certificate {actual + 1} ({_describe(certs[actual])}), but {b} "
                         "follows it; write the leaf first, then each certificate's "
                         "issuer right after it")
        elif child.issuer == parent.subject:
            report.error(f"in {cert_path}, {a} names {b} as its issuer, but its signature "
                         "does not verify with that certificate's key (another issuer "
                         "with the same name?)")
        else:
            report.error(f"in {cert_path}, {b} did not issue {a}, whose issuer is "
                         f"'{child.issuer.rfc4514_string()}': put that issuer's "
                         f"certificate after it, or remove {b.split(' (')[0]}")
        break
    for i in range(1, len(certs)):
        if certs[i].issuer == certs[i].subject and _self_signed(certs[i]):
            report.warning(f"certificate {i + 1} ({_describe(certs[i])}) in {cert_path} "
                           "is a self-signed root: clients use their own copy, so "
                           "sending it only adds bytes to every handshake; remove it "
                           "from the file")
    return certs[1] if _issued_by(leaf, certs[1]) else None


def _check_validity(certs, cert_path, now, report):
    for i, cert in enumerate(certs):
        if i > 0 and cert.issuer == cert.subject and _self_signed(cert):
            continue               # a root in the file: clients use their own
        what = (f"the certificate ({_describe(cert)}) in {cert_path}" if i == 0 else
                f"intermediate certificate {i + 1} ({_describe(cert)}) in {cert_path}")
        before = cert.not_valid_before_utc.timestamp()
        after = cert.not_valid_after_utc.timestamp()
        if after < now:
            report.error(f"{what} expired on {_fmt_time(after)}")
        elif before > now:
            report.error(f"{what} is not valid before {_fmt_time(before)}")
        elif after - now < EXPIRY_WARNING * _DAY:
            days = math.ceil((after - now) / _DAY)
            left = f"{days} day{'s' if days != 1 else ''}"
            report.warning(f"{what} expires in {left}, on {_fmt_time(after)}: renew it")


def _check_key_matches(certs, key, cert_path, key_path, report):
    mine = _spki(key.public_key())
    if _spki(certs[0].public_key()) == mine:
        return
    other = next((j for j in range(1, len(certs))
                  if _spki(certs[j].public_key()) == mine), None)
    if other is not None:
        report.error(f"the private key in {key_path} belongs to certificate {other + 1} "
                     f"({_describe(certs[other])}) of {cert_path}, not to the first: the "
                     "leaf certificate must come first", "key")
    else:
        report.error(f"the private key in {key_path} does not match the certificate "
                     f"({_describe(certs[0])}) in {cert_path}: they are not a pair", "key")


def _check_openssl_loads(cert_path, key_path, report):
    """Load the pair as the server will (SSL_CTX_use_certificate_chain_file,
    SSL_CTX_use_PrivateKey_file): anything OpenSSL refuses is refused here."""
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    try:
        ctx.use_certificate_chain_file(cert_path)
    except SSL.Error as e:
        report.error(f"OpenSSL refuses the certificate file {cert_path}: {_ssl_reason(e)}")
        return
    try:
        ctx.use_privatekey_file(key_path)
        ctx.check_privatekey()
    except SSL.Error as e:
        report.error(f"OpenSSL refuses the private key {key_path}: {_ssl_reason(e)}", "key")


def _ssl_reason(e: SSL.Error) -> str:
    reasons = []
    for item in (e.args[0] if e.args and isinstance(e.args[0], list) else []):
        if isinstance(item, tuple) and item and item[-1] and item[-1] not in reasons:
            reasons.append(str(item[-1]))
    return "; ".join(reasons) or str(e)


def _check_ocsp_file(path, leaf, issuer, now, report):
    if issuer is None:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            report.error(f"cannot read {path}: {e.strerror or e}", "ocsp_file")
            return
        report.warning(f"cannot check the OCSP response in {path}: the issuer's "
                       "certificate does not follow the leaf in the certificate file",
                       "ocsp_file")
        return
    try:
        res = ocsp.load_file(path, leaf, issuer, now)
    except ocsp.OcspError as e:
        if e.reason == "stale":
            report.warning(f"{e}: refresh the file (clients ignore a stale response)",
                           "ocsp_file")
        else:
            report.error(str(e), "ocsp_file")
        return
    if res.cert_status == "revoked":
        since = f" on {_fmt_time(res.revocation_time)}" if res.revocation_time else ""
        report.error(f"the OCSP response in {path} says the certificate "
                     f"({_describe(leaf)}) was revoked{since}: replace the certificate",
                     "ocsp_file")
    elif res.cert_status == "unknown":
        report.warning(f"the OCSP response in {path} says the responder does not know "
                       f"the certificate ({_describe(leaf)}): status unknown", "ocsp_file")
