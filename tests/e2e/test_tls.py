"""TLS termination end to end: real scalwsd processes, real clients (Python's
ssl, curl, openssl s_client), certificates from tests/tlspki.py, a real
OCSP responder (`openssl ocsp`)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT, read_response, recv_to_close
from tests.tlspki import DAY, PKI, start_ocsp_responder

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    p = PKI(folder)
    p.ca = p.root()
    p.ec = p.leaf(p.ca, ["localhost", "a.test"], key="ec", name="ec")
    p.rsa = p.leaf(p.ca, ["localhost", "a.test"], key="rsa", name="rsa")
    p.b = p.leaf(p.ca, ["*.b.test"], key="ec", name="b")
    return p


def client_ctx(pki, **kw) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca.cert_path)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def tls_connect(port, ctx, name="localhost", session=None, timeout=5.0):
    sock = socket.create_connection((HOST, port), timeout=timeout)
    return ctx.wrap_socket(sock, server_hostname=name, session=session)


def get(s, path="/", host="localhost", extra=b""):
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() +
              b"\r\n" + extra + b"\r\n")
    return read_response(s)


def serving_pid(port, client_port) -> int:
    """The pid of the scalwsd process holding the server side of a connection."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"sport = :{port}",
                          f"dport = :{client_port}"], capture_output=True, text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    assert m, out
    return int(m.group(1))


SITE = """
workers: {workers}
log: {{level: info, access: {tmp}/access.log, format: json}}
limits: {{header_timeout: 2s}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2}"]
    server_names: [localhost, a.test]
    tls:
      certificates:
        - {{cert: {ec_cert}, key: {ec_key}}}
        - {{cert: {rsa_cert}, key: {rsa_key}}}
      hsts: {{max_age: 1y, include_subdomains: on}}
      redirect: on
    routes:
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /
        respond: {{body: "site a\\n"}}
  - listen: ["127.0.0.1:{port} tls"]
    server_names: ["*.b.test"]
    tls: {{cert: {b_cert}, key: {b_key}}}
    routes:
      - path: /
        respond: {{body: "site b\\n"}}
"""


def start_site(server, pki, workers=1, text=SITE, **fmt):
    return server(text, workers=workers, ec_cert=pki.ec.cert_path, ec_key=pki.ec.key_path,
                  rsa_cert=pki.rsa.cert_path, rsa_key=pki.rsa.key_path,
                  b_cert=pki.b.cert_path, b_key=pki.b.key_path, **fmt)


@pytest.fixture
def www(tmp_path):
    (tmp_path / "www" / "files").mkdir(parents=True)
    data = os.urandom(5 * 1024 * 1024 + 12345)
    (tmp_path / "www" / "files" / "big.bin").write_bytes(data)
    (tmp_path / "www" / "files" / "small.txt").write_bytes(b"small file\n")
    return data


def test_https_answers_with_hsts_and_plain_redirects(server, pki, www):
    srv = start_site(server, pki)
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_ctx(pki, minimum_version=version, maximum_version=version)
        with tls_connect(srv.port, ctx) as s:
            assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                   ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            status, headers, body, _ = get(s)
            assert status == 200 and body == b"site a\n"
            assert headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"
            status, headers, body, _ = get(s, "/files/small.txt")  # keep-alive, a second request
            assert status == 200 and body == b"small file\n"
    # The plain listener of the same site redirects, with the TLS port, and
    # never sends HSTS (RFC 6797 section 7.2).
    with socket.create_connection((HOST, srv.ports[1])) as s:
        s.sendall(b"GET /x?y=1 HTTP/1.1\r\nHost: a.test:80\r\n\r\n")
        status, headers, _, _ = read_response(s)
        assert status == 301
        assert headers["location"] == f"https://a.test:{srv.port}/x?y=1"
        assert "strict-transport-security" not in headers
        s.sendall(b"POST /form HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n")
        status, headers, _, _ = read_response(s)
        assert status == 308  # the method is kept
    # The access log carries the protocol and the cipher.
    srv.stop()
    lines = [json.loads(line) for line in (srv.tmp / "access.log").read_text().splitlines()]
    tls_lines = [line for line in lines if "ssl_protocol" in line]
    assert {line["ssl_protocol"] for line in tls_lines} == {"TLSv1.2", "TLSv1.3"}
    assert all(line["ssl_cipher"] for line in tls_lines)
    assert all("ssl_protocol" not in line for line in lines if line["status"] in (301, 308))


def test_sni_picks_the_site_and_its_certificate(server, pki, www):
    srv = start_site(server, pki)
    ctx = client_ctx(pki)
    with tls_connect(srv.port, ctx, name="x.b.test") as s:
        cert = s.getpeercert()
        assert ("DNS", "*.b.test") in cert["subjectAltName"]
        assert get(s, host="x.b.test")[2] == b"site b\n"
    # No SNI (an IP literal is never sent as SNI): the default site's certificate.
    ctx = client_ctx(pki, check_hostname=False)
    with tls_connect(srv.port, ctx, name=None) as s:
        assert ("DNS", "a.test") in s.getpeercert()["subjectAltName"]
    # A name nothing matches also gets the default.
    with tls_connect(srv.port, ctx, name="unknown.test") as s:
        assert ("DNS", "a.test") in s.getpeercert()["subjectAltName"]


def openssl_client(port, *args, data=b"", name="localhost", ca=None):
    cmd = ["openssl", "s_client", "-connect", f"{HOST}:{port}", "-servername", name,
           *args]
    if ca:
        cmd += ["-CAfile", ca]
    return subprocess.run(cmd, input=data, capture_output=True, timeout=20).stdout.decode(
        errors="replace")


def test_ecdsa_and_rsa_chosen_by_what_the_client_supports(server, pki, www):
    srv = start_site(server, pki)
    out = openssl_client(srv.port, "-tls1_3", ca=pki.ca.cert_path)
    assert "Peer signature type: ECDSA" in out
    out = openssl_client(srv.port, "-tls1_3", "-sigalgs", "RSA-PSS+SHA256", ca=pki.ca.cert_path)
    assert "Peer signature type: RSA-PSS" in out
    out = openssl_client(srv.port, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256",
                         ca=pki.ca.cert_path)
    assert "Cipher is ECDHE-RSA-AES128-GCM-SHA256" in out
    assert "Verify return code: 0 (ok)" in out


def test_protocols_and_no_renegotiation(server, pki, www):
    srv = start_site(server, pki)
    for flag in ("-tls1", "-tls1_1"):
        out = openssl_client(srv.port, flag)
        assert "Cipher is (NONE)" in out or "no protocols available" in out or out == ""
    # TLS 1.2 renegotiation is refused (SSL_OP_NO_RENEGOTIATION).
    out = subprocess.run(["openssl", "s_client", "-connect", f"{HOST}:{srv.port}", "-tls1_2",
                          "-CAfile", pki.ca.cert_path, "-servername", "localhost"],
                         input=b"R\n", capture_output=True, timeout=20)
    text = out.stdout.decode() + out.stderr.decode()
    assert "RENEGOTIATING" in text
    assert "no renegotiation" in text or "alert" in text


def test_session_resumes_on_another_worker_and_after_reload(server, pki, www):
    srv = start_site(server, pki, workers=2)
    for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
        ctx = client_ctx(pki, minimum_version=version, maximum_version=version)
        with tls_connect(srv.port, ctx) as s:
            get(s)  # the TLS 1.3 tickets come after the handshake
            session = s.session
            first = serving_pid(srv.port, s.getsockname()[1])
        assert session is not None and session.has_ticket
        other = None
        for _ in range(64):
            with tls_connect(srv.port, ctx, session=session) as s:
                assert s.session_reused, version
                assert get(s)[0] == 200
                pid = serving_pid(srv.port, s.getsockname()[1])
            if pid != first:
                other = pid
                break
        assert other is not None, "every connection went to one worker"
        old_workers = {first, other}
        # A reload: new worker processes, the same ticket keys.
        srv.kill(signal.SIGHUP)
        srv.wait_log("reloaded", count=1 if version == ssl.TLSVersion.TLSv1_3 else 2)
        with tls_connect(srv.port, ctx, session=session) as s:
            assert s.session_reused
            assert get(s)[0] == 200
            assert serving_pid(srv.port, s.getsockname()[1]) not in old_workers


def test_sessions_do_not_cross_sites(server, pki, www):
    srv = start_site(server, pki)
    ctx = client_ctx(pki)
    with tls_connect(srv.port, ctx, name="x.b.test") as s:
        get(s, host="x.b.test")
        session = s.session
    with tls_connect(srv.port, ctx, name="localhost", session=session) as s:
        assert not s.session_reused
        assert get(s)[2] == b"site a\n"


def test_large_file_to_a_slow_reader(server, pki, www):
    srv = start_site(server, pki)
    ctx = client_ctx(pki)
    sock = socket.create_connection((HOST, srv.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    with ctx.wrap_socket(sock, server_hostname="localhost") as s:
        s.sendall(b"GET /files/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        assert length == len(www)
        digest = hashlib.sha256(body)
        got = len(body)
        while got < length:
            if got < 1 << 20:
                time.sleep(0.002)  # a slow start: the server meets a full socket
            chunk = s.recv(65536)
            assert chunk
            digest.update(chunk)
            got += len(chunk)
        assert digest.digest() == hashlib.sha256(www).digest()
        assert get(s, "/files/small.txt")[2] == b"small file\n"


def test_pipelined_requests_over_tls(server, pki, www):
    srv = start_site(server, pki)
    with tls_connect(srv.port, client_ctx(pki)) as s:
        n = 200
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * n)
        rest = b""
        for _ in range(n):
            status, _, body, rest = read_response(s, rest)
            assert status == 200 and body == b"site a\n"


def test_bad_input_closes_cleanly_and_others_are_served(server, pki, www):
    srv = start_site(server, pki)
    # Plain HTTP to the TLS port: a clear answer in plain HTTP, then close.
    with socket.create_connection((HOST, srv.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = recv_to_close(s)
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"The plain HTTP request was sent to HTTPS port" in data
    # Garbage records: closed at once.
    with socket.create_connection((HOST, srv.port), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x00\x05\xff\xff\xff\xff\xff" + os.urandom(64))
        t0 = time.monotonic()
        recv_to_close(s)
        assert time.monotonic() - t0 < 1.0
    # A truncated handshake: the header timeout (2s here) closes it.
    hello = bytearray(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") + os.urandom(40)
    slow = socket.create_connection((HOST, srv.port), timeout=10)
    slow.sendall(bytes(hello))
    # Meanwhile others are served.
    with tls_connect(srv.port, client_ctx(pki)) as s:
        assert get(s)[0] == 200
    t0 = time.monotonic()
    assert recv_to_close(slow) == b""
    assert 0.5 < time.monotonic() - t0 < 5.0
    slow.close()
    srv.wait_log("TLS handshake failed")
    log = srv.log()
    assert "[info]" in log.split("TLS handshake failed")[0].splitlines()[-1]
    assert "plain HTTP request to a TLS port" in log
    assert "[error]" not in log and "[crit]" not in log


def test_reload_with_a_new_certificate_keeps_connections_in_flight(server, pki, www, tmp_path):
    # The site's certificate files are replaced, then HUP: new connections
    # get the new certificate; a download in flight finishes.
    cert = tmp_path / "site.pem"
    key = tmp_path / "site.key"
    cert.write_bytes(open(pki.ec.cert_path, "rb").read())
    key.write_bytes(open(pki.ec.key_path, "rb").read())
    key.chmod(0o600)
    text = SITE.replace("{ec_cert}", str(cert)).replace("{ec_key}", str(key))
    srv = start_site(server, pki, text=text)
    ctx = client_ctx(pki)
    s = tls_connect(srv.port, ctx)
    try:
        _reload_during_a_download(srv, pki, ctx, s, cert, key)
    finally:
        s.close()  # a failure must not leave the old worker waiting on this client


def _reload_during_a_download(srv, pki, ctx, s, cert, key):
    old_serial = int(s.getpeercert()["serialNumber"], 16)
    s.sendall(b"GET /files/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    new = pki.leaf(pki.ca, ["localhost", "a.test"], key="ec", name="renewed")
    cert.write_bytes(open(new.cert_path, "rb").read())
    key.write_bytes(open(new.key_path, "rb").read())
    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded")
    with tls_connect(srv.port, ctx) as s2:
        serial = int(s2.getpeercert()["serialNumber"], 16)
        assert serial != old_serial and serial == new.cert.serial_number
        assert get(s2)[0] == 200
    # The old connection still completes its 5 MB body.
    head, _, body = first.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    got = len(body)
    while got < length:
        chunk = s.recv(65536)
        assert chunk, f"cut short at {got} of {length}"
        got += len(chunk)


def test_check_config_reports_certificate_problems(server, pki, tmp_path):
    import sys
    expired = pki.leaf(pki.ca, ["localhost"], not_before=-2 * DAY, not_after=-DAY, name="expired")
    soon = pki.leaf(pki.ca, ["localhost"], not_after=5 * DAY, name="soon")
    for leaf, code, text in ((expired, 1, "expired"), (soon, 0, "expires in")):
        cfg = tmp_path / f"{leaf.subject}.yaml".replace(" ", "_").replace("=", "")
        cfg.write_text(f"""sites:
  - listen: "127.0.0.1:8443 tls"
    server_names: [localhost]
    tls: {{cert: {leaf.cert_path}, key: {leaf.key_path}}}
    routes:
      - path: /
        respond: {{body: "x"}}
""")
        out = subprocess.run([sys.executable, "-m", "scalws", "--check-config", str(cfg)],
                             capture_output=True, text=True, cwd=os.path.dirname(
                                 os.path.dirname(os.path.dirname(__file__))))
        assert out.returncode == code, out.stderr
        assert text in out.stderr
        assert f"{cfg}:4:" in out.stderr or f"{cfg}:3:" in out.stderr  # file:line


# ---- OCSP stapling ------------------------------------------------------------------------

OCSP_SITE = """
workers: 2
log: {{level: info}}
sites:
  - listen: ["127.0.0.1:{port} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}{extra}}}
    routes:
      - path: /
        respond: {{body: "ok\\n"}}
"""


def stapled(port, ca) -> str:
    return openssl_client(port, "-status", ca=ca)


def test_ocsp_fetched_by_the_master_and_stapled(server, tmp_path):
    pki = PKI(tmp_path / "pki")
    root = pki.root()
    inter = pki.intermediate(root)
    signer = pki.ocsp_signer(inter)
    with start_ocsp_responder(pki.folder, inter, signer, statuses=[], nmin=60) as responder:
        leaf = pki.leaf(inter, ["localhost"], ocsp_url=responder.url, name="stapled")
        responder.update([(leaf, "good")])
        srv = server(OCSP_SITE, cert=leaf.cert_path, key=leaf.key_path, extra="")
        srv.wait_log("OCSP for")
        for _ in range(4):  # both workers staple the same response
            out = stapled(srv.port, root.cert_path)
            assert "OCSP Response Status: successful" in out, out
            assert "Cert Status: good" in out, out
    assert "stapling a response from http://127.0.0.1" in srv.log()


def test_ocsp_from_a_file_and_a_stale_one_is_not_stapled(server, tmp_path):
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509 import ocsp as cocsp
    import datetime
    pki = PKI(tmp_path / "pki")
    root = pki.root()
    inter = pki.intermediate(root)
    leaf = pki.leaf(inter, ["localhost"], name="filed")

    def response(this_update, next_update):
        now = datetime.datetime.now(datetime.timezone.utc)
        b = cocsp.OCSPResponseBuilder().add_response(
            cert=leaf.cert, issuer=inter.cert, algorithm=hashes.SHA1(),
            cert_status=cocsp.OCSPCertStatus.GOOD,
            this_update=now + datetime.timedelta(seconds=this_update),
            next_update=now + datetime.timedelta(seconds=next_update),
            revocation_time=None, revocation_reason=None,
        ).responder_id(cocsp.OCSPResponderEncoding.HASH, inter.cert)
        from cryptography.hazmat.primitives import serialization
        der = b.sign(inter.key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
        return der

    good = tmp_path / "good.der"
    good.write_bytes(response(-60, 3600))
    srv = server(OCSP_SITE, cert=leaf.cert_path, key=leaf.key_path,
                 extra=f", ocsp_file: {good}")
    out = stapled(srv.port, root.cert_path)
    assert "OCSP Response Status: successful" in out and "Cert Status: good" in out
    srv.stop()

    stale = tmp_path / "stale.der"
    stale.write_bytes(response(-7200, -3600))
    srv = server(OCSP_SITE, cert=leaf.cert_path, key=leaf.key_path,
                 extra=f", ocsp_file: {stale}")
    out = stapled(srv.port, root.cert_path)
    assert "OCSP response: no response sent" in out
    assert re.search(r"\[error\].*OCSP for .*filed", srv.log())


def test_nothing_to_staple_is_a_notice_not_a_warning(server, tmp_path):
    # docs/configuration.md: a certificate without a responder and without a
    # file is simply not stapled. A self-signed one (the usual first setup)
    # and a leaf that names no responder start without a [warn] line.
    pki = PKI(tmp_path / "pki")
    for leaf in (pki.self_signed(["localhost"]), pki.leaf(pki.root(), ["localhost"],
                                                          name="plain")):
        srv = server(OCSP_SITE, cert=leaf.cert_path, key=leaf.key_path, extra="")
        srv.wait_log("not stapled")
        log = srv.log()
        assert re.search(r"\[notice\] .*OCSP for .*: .*not stapled", log), log
        assert not re.search(r"\[(warn|error)\] \S+: OCSP for", log), log
        assert srv.stop() == 0


def test_ticket_key_files_let_two_servers_resume_each_others_sessions(server, pki, www,
                                                                     tmp_path):
    # tls_tickets.key_file (nginx's ssl_session_ticket_key): servers behind one
    # balancer share the operator's keys; after the files are replaced and a
    # HUP, the new key encrypts and the previous one still opens tickets.
    (tmp_path / "t1.key").write_bytes(os.urandom(80))
    (tmp_path / "t0.key").write_bytes(os.urandom(80))
    text = SITE.replace("log: {{", f'tls_tickets: {{{{key_file: ["{tmp_path}/t1.key", '
                                   f'"{tmp_path}/t0.key"]}}}}\nlog: {{{{', 1)
    a = start_site(server, pki, text=text)
    b = start_site(server, pki, text=text)
    ctx = client_ctx(pki, minimum_version=ssl.TLSVersion.TLSv1_3)
    with tls_connect(a.port, ctx) as s:
        get(s)
        session = s.session
    assert session is not None and session.has_ticket
    with tls_connect(b.port, ctx, session=session) as s:
        assert s.session_reused
        assert get(s)[0] == 200
    assert "TLS session ticket keys from" in b.log()
    # a key the other server does not have: no resumption there
    (tmp_path / "t0.key").write_bytes(os.urandom(80))
    (tmp_path / "t1.key").write_bytes(os.urandom(80))
    b.kill(signal.SIGHUP)
    b.wait_log("reloaded")
    with tls_connect(b.port, ctx, session=session) as s:
        assert not s.session_reused
        assert get(s)[0] == 200


def test_ticket_key_file_must_be_80_bytes(server, pki, tmp_path):
    (tmp_path / "short.key").write_bytes(os.urandom(48))
    text = SITE.replace("log: {{", f'tls_tickets: {{{{key_file: "{tmp_path}/short.key"}}}}\n'
                                   "log: {{", 1)
    srv = start_site(server, pki, text=text, start=False)
    out = subprocess.run([sys.executable, "-m", "scalws", "--check-config", srv.config_path],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert re.search(r":\d+:\d+: tls_tickets\.key_file: .*short\.key holds 48 bytes; a ticket "
                     r"key file is 80 random bytes", out.stderr), out.stderr
