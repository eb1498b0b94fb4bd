"""Throwaway PKI for tests: certificate authorities, leaf certificates and a
real OCSP responder (`openssl ocsp`), written into a folder the test owns.

    pki = PKI(tmp_path)
    root = pki.root()                                   # self-signed CA
    inter = pki.intermediate(root)                      # optional
    leaf = pki.leaf(inter, ["example.com", "*.example.com"],
                    key="rsa", not_after=5 * DAY,        # expiring soon
                    ocsp_url="http://127.0.0.1:1/")
    leaf.cert_path   # PEM: the leaf, then its chain up to (not including) the root
    leaf.key_path    # PEM (PKCS#8, unencrypted), mode 0600
    root.cert_path   # the root alone: what a client trusts (cafile=...)

    signer = pki.ocsp_signer(inter)                     # EKU OCSPSigning, issued by inter
    with start_ocsp_responder(pki.folder, inter, signer,
                              statuses=[(leaf, "good")], nmin=60) as responder:
        responder.url                                   # http://127.0.0.1:PORT/
        # A leaf naming the responder's URL can only be made once it runs:
        leaf2 = pki.leaf(inter, ["localhost"], ocsp_url=responder.url)
        responder.update([(leaf, "good"), (leaf2, "revoked")])

    der = ocsp_response(leaf, inter, "good")            # made here, no responder

Change a running responder's answers with responder.update(), not by
rewriting its index file alone: openssl rereads a changed index only after
the next request, which would still get the old answer.

Validity is given as offsets in seconds from `pki.now` (the wall clock when
the PKI was made, unless given): `not_before=-3600, not_after=90 * DAY` is the
default; `not_after=-DAY` makes an expired certificate, `not_before=DAY` one
that is not valid yet. Key kinds: "ec" (ECDSA P-256, the default), "p384",
"p521", "rsa" (2048 bits), "rsa1024", "rsa4096", "ed25519".

Everything here is made with `cryptography` in the test process (keys are
generated fresh each time: RSA 2048 costs tens of milliseconds, so share a
PKI across the tests of a module when you can); only the OCSP responder is
an external program, the OpenSSL command-line tool.
"""
from __future__ import annotations

import datetime
import http.client
import ipaddress
import os
import selectors
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = 86400
HOUR = 3600

__all__ = ["DAY", "HOUR", "Issued", "OcspResponder", "PKI", "key_pem", "new_key",
           "ocsp_response", "start_ocsp_responder", "write_index", "write_pem"]


def new_key(kind: str = "ec"):
    """A fresh private key: "ec"/"p256", "p384", "p521", "rsa" (2048),
    "rsa1024", "rsa3072", "rsa4096" or "ed25519"."""
    kind = kind.lower()
    curves = {"ec": ec.SECP256R1, "ecdsa": ec.SECP256R1, "p256": ec.SECP256R1,
              "p384": ec.SECP384R1, "p521": ec.SECP521R1}
    if kind in curves:
        return ec.generate_private_key(curves[kind]())
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind.startswith("rsa") and kind[3:].isdigit():
        return rsa.generate_private_key(public_exponent=65537, key_size=int(kind[3:]))
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(f"unknown key kind {kind!r}")


def _sign_hash(key):
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def key_pem(key, passphrase: Optional[bytes] = None) -> bytes:
    """PKCS#8 PEM of a private key, encrypted when `passphrase` is given."""
    enc = (serialization.BestAvailableEncryption(passphrase) if passphrase
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8, enc)


def write_pem(path, items, mode: int = 0o644) -> str:
    """Write certificates (Issued or x509.Certificate) and/or raw PEM bytes to
    `path`, in the order given, with `mode`; return the path as a string."""
    data = b""
    for item in items:
        if isinstance(item, Issued):
            data += item.pem
        elif isinstance(item, x509.Certificate):
            data += item.public_bytes(serialization.Encoding.PEM)
        else:
            data += bytes(item)
    path = os.fspath(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)           # the umask does not apply to a chosen mode
    return path


@dataclass
class Issued:
    """A certificate and its key, and where they were written."""
    name: str
    cert: x509.Certificate
    key: object                                  # a cryptography private key
    cert_path: str                               # this certificate, then its chain
    key_path: str                                # mode 0600
    issuer: Optional["Issued"] = None            # None: self-signed
    extra: dict = field(default_factory=dict)

    @property
    def pem(self) -> bytes:
        """This certificate alone, PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    @property
    def subject(self) -> str:
        return self.cert.subject.rfc4514_string()

    def chain(self) -> list:
        """[self, its issuer, ..., the root]."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.issuer
        return out


class PKI:
    """Makes certificates into `folder` (created if needed)."""

    def __init__(self, folder, now: Optional[float] = None):
        self.folder = os.fspath(folder)
        os.makedirs(self.folder, exist_ok=True)
        self.now = time.time() if now is None else now
        self._names: set = set()

    # -- building blocks ---------------------------------------------------

    def _time(self, offset: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(int(self.now + offset),
                                               tz=datetime.timezone.utc)

    def _file_name(self, name: str) -> str:
        base = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        candidate, n = base, 1
        while candidate in self._names:
            n += 1
            candidate = f"{base}-{n}"
        self._names.add(candidate)
        return candidate

    def _issue(self, *, name, subject_cn, key, issuer, not_before, not_after,
               ca=False, path_length=None, names=(), ips=(), san=True,
               ocsp_url=None, eku=None, must_staple=False, chain=None,
               include_root=False, key_mode=0o600):
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
        if isinstance(key, str):
            key = new_key(key)
        if issuer is None:
            issuer_name, signing_key = subject, key
        else:
            issuer_name, signing_key = issuer.cert.subject, issuer.key
        builder = (x509.CertificateBuilder()
                   .subject_name(subject)
                   .issuer_name(issuer_name)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(self._time(not_before))
                   .not_valid_after(self._time(not_after))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length),
                                  critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                  critical=False))
        if issuer is not None:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
                critical=False)
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        else:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False,
                key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        if eku:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
        general = [x509.DNSName(n) for n in names]
        general += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
        if san and general:
            builder = builder.add_extension(x509.SubjectAlternativeName(general),
                                            critical=False)
        if ocsp_url:
            builder = builder.add_extension(x509.AuthorityInformationAccess([
                x509.AccessDescription(x509.oid.AuthorityInformationAccessOID.OCSP,
                                       x509.UniformResourceIdentifier(ocsp_url))]),
                critical=False)
        if must_staple:
            builder = builder.add_extension(
                x509.TLSFeature([x509.TLSFeatureType.status_request]), critical=False)
        cert = builder.sign(signing_key, _sign_hash(signing_key))

        base = self._file_name(name)
        cert_path = os.path.join(self.folder, base + ".pem")
        key_path = os.path.join(self.folder, base + ".key")
        issued = Issued(name=base, cert=cert, key=key, cert_path=cert_path,
                        key_path=key_path, issuer=issuer)
        if chain is None:
            chain = [c for c in issued.chain()[1:]
                     if include_root or c.issuer is not None]
        write_pem(cert_path, [issued, *chain])
        write_pem(key_path, [key_pem(key)], mode=key_mode)
        return issued

    # -- what tests ask for --------------------------------------------------

    @classmethod
    def localhost(cls, folder) -> "PKI":
        """A root (`.ca`) and its ECDSA leaf for localhost (`.ec`): what the
        HTTP/2 tests serve with."""
        p = cls(folder)
        p.ca = p.root()
        p.ec = p.leaf(p.ca, ["localhost"], key="ec", name="ec")
        return p

    def root(self, name: str = "ScalWS Test Root CA", key="ec",
             not_before: float = -DAY, not_after: float = 3650 * DAY) -> Issued:
        """A self-signed CA; its cert_path holds it alone (a client's cafile)."""
        return self._issue(name=name, subject_cn=name, key=key, issuer=None,
                           not_before=not_before, not_after=not_after, ca=True)

    def intermediate(self, issuer: Issued, name: str = "ScalWS Test Intermediate CA",
                     key="ec", not_before: float = -DAY,
                     not_after: float = 1825 * DAY, ocsp_url=None) -> Issued:
        """A CA issued by `issuer`; cert_path holds it and its chain (no root)."""
        return self._issue(name=name, subject_cn=name, key=key, issuer=issuer,
                           not_before=not_before, not_after=not_after, ca=True,
                           path_length=0, ocsp_url=ocsp_url)

    def leaf(self, issuer: Issued, names=("localhost",), *, key="ec", ips=(),
             name: Optional[str] = None, cn: Optional[str] = None, san: bool = True,
             not_before: float = -HOUR, not_after: float = 90 * DAY,
             ocsp_url: Optional[str] = None, must_staple: bool = False,
             server_auth: bool = True, chain=None, include_root: bool = False,
             key_mode: int = 0o600) -> Issued:
        """A server certificate for `names` (DNS) and `ips`, issued by `issuer`.

        The certificate file holds the leaf, then `chain` (Issued or
        x509.Certificate items) if given, else the issuer's chain without the
        root (with it when `include_root`). `san=False` leaves out the
        subjectAltName, so only the Common Name (`cn`, default the first
        name) says whom it is for. `server_auth=False` gives it the
        clientAuth extended key usage only.
        """
        names = list(names)
        cn = cn or (names[0] if names else "scalws test")
        eku = [ExtendedKeyUsageOID.SERVER_AUTH] if server_auth else \
            [ExtendedKeyUsageOID.CLIENT_AUTH]
        return self._issue(name=name or (names[0] if names else "leaf"), subject_cn=cn,
                           key=key, issuer=issuer, not_before=not_before,
                           not_after=not_after, names=names, ips=ips, san=san,
                           ocsp_url=ocsp_url, eku=eku, must_staple=must_staple,
                           chain=chain, include_root=include_root, key_mode=key_mode)

    def self_signed(self, names=("localhost",), *, key="ec", name=None,
                    not_before: float = -HOUR, not_after: float = 90 * DAY) -> Issued:
        """A self-signed server certificate (not a CA)."""
        names = list(names)
        return self._issue(name=name or f"self-{names[0]}", subject_cn=names[0], key=key,
                           issuer=None, not_before=not_before, not_after=not_after,
                           names=names, eku=[ExtendedKeyUsageOID.SERVER_AUTH])

    def ocsp_signer(self, issuer: Issued, name: str = "ScalWS Test OCSP Responder",
                    key="ec", eku: bool = True, not_before: float = -DAY,
                    not_after: float = 365 * DAY) -> Issued:
        """A delegated OCSP responder certificate issued by `issuer`, with the
        OCSPSigning extended key usage (without it when eku=False)."""
        return self._issue(name=name, subject_cn=name, key=key, issuer=issuer,
                           not_before=not_before, not_after=not_after,
                           eku=[ExtendedKeyUsageOID.OCSP_SIGNING] if eku else
                           [ExtendedKeyUsageOID.SERVER_AUTH],
                           chain=[])

    def path(self, name: str) -> str:
        """A path in the PKI's folder."""
        return os.path.join(self.folder, name)


# --------------------------------------------------------------------------
# The OCSP responder: `openssl ocsp` serving an index in OpenSSL's CA
# database format.

def _asn1_time(t: float) -> str:
    return time.strftime("%y%m%d%H%M%SZ", time.gmtime(t))


def _index_line(cert: x509.Certificate, status: str, revoked_at: Optional[float],
                reason: Optional[str]) -> str:
    """One line of an OpenSSL CA database (index.txt):
    STATUS, EXPIRY, REVOCATION[,REASON], SERIAL (hex), FILE, SUBJECT, tab-separated."""
    expiry = _asn1_time(cert.not_valid_after_utc.timestamp())
    serial = f"{cert.serial_number:X}"
    if len(serial) % 2:
        serial = "0" + serial              # BN_bn2hex writes whole bytes
    subject = "/" + "/".join(a.rfc4514_string() for a in cert.subject)
    if status in ("good", "V"):
        flag, revocation = "V", ""
    elif status in ("revoked", "R"):
        flag = "R"
        revocation = _asn1_time(time.time() - HOUR if revoked_at is None else revoked_at)
        if reason:
            revocation += "," + reason
    else:
        raise ValueError(f"status must be good or revoked, got {status!r}")
    return "\t".join((flag, expiry, revocation, serial, "unknown", subject)) + "\n"


def write_index(path, statuses) -> str:
    """Write an OpenSSL index.txt. `statuses`: (cert, status) or (cert,
    status, revoked_at, reason) tuples; cert is Issued or x509.Certificate,
    status "good" or "revoked". Serials not listed get the status unknown."""
    lines = []
    for entry in statuses:
        cert, status, revoked_at, reason = (tuple(entry) + (None, None))[:4]
        if isinstance(cert, Issued):
            cert = cert.cert
        lines.append(_index_line(cert, status, revoked_at, reason))
    with open(path, "w") as f:
        f.write("".join(lines))
    return os.fspath(path)


class OcspResponder:
    """A running `openssl ocsp` responder; stop() ends it (also on exit of a
    `with` block). `url` is http://127.0.0.1:PORT/; `log_path` holds what it
    printed (stdout and stderr)."""

    def __init__(self, process, port, folder, index_path, log_path, ca=None):
        self.process = process
        self.ca = ca
        self.port = port
        self.url = f"http://127.0.0.1:{port}/"
        self.folder = folder
        self.index_path = index_path
        self.log_path = log_path

    def update(self, statuses) -> None:
        """Replace the index (see write_index) while the responder runs.

        openssl reads a changed index only at the top of its loop, before it
        waits for the next connection: one request is sent here, answered
        from the old index, so that every request after this returns is
        answered from the new one."""
        write_index(self.index_path, statuses)
        st = os.stat(self.index_path)
        # A distinct mtime even on a clock with a coarse grain.
        os.utime(self.index_path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        _wait_answering("127.0.0.1", self.port, self.process, self.ca, 10.0)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_ocsp_responder(folder, ca: Issued, signer: Optional[Issued] = None,
                         statuses=(), *, nmin: Optional[int] = None,
                         ndays: Optional[int] = None, name: str = "ocsp",
                         digest: Optional[str] = None,
                         timeout: float = 10.0) -> OcspResponder:
    """Start `openssl ocsp` on a free port of 127.0.0.1 answering for
    certificates issued by `ca`, signed by `signer` (a delegated responder
    from PKI.ocsp_signer; default: `ca` itself).

    `statuses` are written to FOLDER/NAME-index.txt (see write_index);
    `nmin`/`ndays` set the responses' nextUpdate that many minutes/days
    ahead (neither: no nextUpdate). Returns once the responder answers:
    openssl prints the port it bound (-port 0) once it listens, and one OCSP
    request is then sent to it and answered. Raises RuntimeError if it exits
    or does not get there within `timeout` seconds.

    `responder.update(statuses)` changes the index while it runs (to revoke
    a certificate in the middle of a test). It
    answers one connection at a time, and OpenSSL 3.0's spins at full CPU
    on a connection closed without a request: never probe it with a bare
    TCP connect.
    """
    folder = os.fspath(folder)
    signer = signer or ca
    index_path = write_index(os.path.join(folder, f"{name}-index.txt"), statuses)
    log_path = os.path.join(folder, f"{name}-responder.log")
    cmd = ["openssl", "ocsp", "-port", "0", "-index", index_path,
           "-CA", ca.cert_path, "-rsigner", signer.cert_path,
           "-rkey", signer.key_path, "-ignore_err"]
    if nmin is not None:
        cmd += ["-nmin", str(nmin)]
    if ndays is not None:
        cmd += ["-ndays", str(ndays)]
    if digest:
        cmd += ["-rmd", digest]
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                stdin=subprocess.DEVNULL, cwd=folder)
    finally:
        log.close()
    try:
        port = _accepted_port(proc, timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    # Keep draining its stdout into the log so that it never blocks on a pipe.
    threading.Thread(target=_drain, args=(proc.stdout, log_path), daemon=True).start()
    responder = OcspResponder(proc, port, folder, index_path, log_path, ca)
    try:
        _wait_answering("127.0.0.1", port, proc, ca, timeout)
    except BaseException:
        responder.stop()
        raise
    return responder


def _accepted_port(proc, timeout: float) -> int:
    """Read openssl's "ACCEPT [::]:PORT PID=N" line (printed once it listens)."""
    deadline = time.monotonic() + timeout
    seen = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise RuntimeError(f"openssl ocsp did not start listening within "
                                   f"{timeout:g}s; it printed {seen!r}")
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                proc.wait()
                raise RuntimeError(f"openssl ocsp exited with status {proc.returncode} "
                                   f"before listening; it printed {seen!r}")
            seen += chunk
    line = seen.split(b"\n", 1)[0].decode(errors="replace")
    words = line.split()
    if len(words) < 2 or words[0] != "ACCEPT":
        raise RuntimeError(f"unexpected first line from openssl ocsp: {line!r}")
    return int(words[1].rpartition(":")[2])


def _drain(pipe, log_path):
    with open(log_path, "ab") as log:
        for chunk in iter(lambda: pipe.read1(4096), b""):
            log.write(chunk)
            log.flush()


def _wait_answering(host: str, port: int, proc, ca: Issued, timeout: float) -> None:
    """Send one OCSP request (about the CA itself) and read the answer.

    This is the readiness check, and it must be a whole request: OpenSSL
    3.0's responder spins at full CPU on a connection that closes without
    sending one. A refused connection is retried until `timeout` (it should
    not happen: openssl listens before it prints ACCEPT).
    """
    request = ocsp.OCSPRequestBuilder().add_certificate(
        ca.cert, ca.cert, hashes.SHA1()).build().public_bytes(serialization.Encoding.DER)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"openssl ocsp exited with status {proc.returncode}")
        conn = http.client.HTTPConnection(host, port,
                                          timeout=max(0.1, deadline - time.monotonic()))
        try:
            conn.request("POST", "/", body=request,
                         headers={"Content-Type": "application/ocsp-request"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"openssl ocsp answered HTTP {resp.status} to the "
                                   "readiness check")
            return
        except (OSError, http.client.HTTPException) as e:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"openssl ocsp on port {port} does not answer: "
                                   f"{e}") from None
            # Wait for the next change instead of a fixed sleep: the
            # process exiting ends the wait early.
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        finally:
            conn.close()


# --------------------------------------------------------------------------
# OCSP responses made here (no responder): for `ocsp_file` tests and for
# answers openssl would not give.

def ocsp_response(cert: Issued, issuer: Issued, status: str = "good", *,
                  signer: Optional[Issued] = None, now: Optional[float] = None,
                  this_update: float = -60, next_update: Optional[float] = DAY,
                  revoked_at: float = -HOUR, include_signer: bool = True) -> bytes:
    """A DER OCSP response about `cert` ("good", "revoked" or "unknown"),
    signed by `signer` (default: `issuer`), with thisUpdate/nextUpdate as
    offsets in seconds from `now` (default: the wall clock; next_update
    None leaves nextUpdate out). With `include_signer` a delegated signer's
    certificate is included in the response (as responders do)."""
    now = time.time() if now is None else now
    signer = signer or issuer

    def at(offset):
        return datetime.datetime.fromtimestamp(int(now + offset), tz=datetime.timezone.utc)

    statuses = {"good": ocsp.OCSPCertStatus.GOOD, "revoked": ocsp.OCSPCertStatus.REVOKED,
                "unknown": ocsp.OCSPCertStatus.UNKNOWN}
    revoked = status == "revoked"
    builder = ocsp.OCSPResponseBuilder().add_response(
        cert=cert.cert, issuer=issuer.cert, algorithm=hashes.SHA1(),
        cert_status=statuses[status], this_update=at(this_update),
        next_update=None if next_update is None else at(next_update),
        revocation_time=at(revoked_at) if revoked else None,
        revocation_reason=x509.ReasonFlags.key_compromise if revoked else None,
    ).responder_id(ocsp.OCSPResponderEncoding.HASH, signer.cert)
    if include_signer and signer is not issuer:
        builder = builder.certificates([signer.cert])
    resp = builder.sign(signer.key, _sign_hash(signer.key))
    return resp.public_bytes(serialization.Encoding.DER)
