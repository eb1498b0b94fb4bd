"""The shared TLS memory: the Python layout agrees with the C structs, and
session tickets follow the keys the keeper publishes (the current key
encrypts; the one before still opens tickets; older ones do not), with an
engine serving in this process and Python's ssl as the client."""
from __future__ import annotations

import socket
import ssl
import threading

import pytest

from scalws.config.loader import load_config_text
from scalws.control.tlsshared import OCSP_SLOT, TICKET_KEY, TICKET_KEYS, TICKET_SHM, \
    Generation, Tickets
from tests.tlspki import PKI

engine = pytest.importorskip("scalws.server.engine")


def test_layout_matches_the_c_structs():
    layout = engine.tls_layout()
    assert layout == {"ticket_shm": TICKET_SHM, "ticket_key": TICKET_KEY,
                      "ocsp_slot": OCSP_SLOT, "ticket_keys": TICKET_KEYS}


def test_publish_rotates_and_keeps_the_previous_key():
    t = Tickets()
    t.seed(3600)
    assert t.state()[:2] == (1, 0)
    engine.ticket_publish(t.mm, b"k" * 80, 3600, 1000)
    assert t.state() == (2, 1, 3600, 1000)
    for i in range(4):  # the slots are a ring
        engine.ticket_publish(t.mm, bytes([i]) * 80, 60, 2000 + i)
    assert t.state() == (6, (1 + 4) % TICKET_KEYS, 60, 2003)
    with pytest.raises(ValueError):
        engine.ticket_publish(t.mm, b"short", 60, 0)


class _Serving:
    """An engine on a free port, served by a thread until stop()."""

    def __init__(self, cfg, gen, sock):
        self.engine = engine.Engine(cfg, 0, gen)
        fd = sock.detach()
        self.engine.add_listener(fd, cfg.sites[0].listen[0].key)
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            self.engine.run_blocking(0.05)

    def stop(self):
        self.stopping = True
        self.thread.join()


@pytest.fixture
def tls_engine(tmp_path):
    pki = PKI(tmp_path)
    ca = pki.root()
    leaf = pki.leaf(ca, ["localhost"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    cfg = load_config_text(f"""
sites:
  - listen: "127.0.0.1:{port} tls"
    server_names: [localhost]
    tls: {{cert: {leaf.cert_path}, key: {leaf.key_path}, ocsp_stapling: off}}
    routes:
      - {{path: /, respond: {{body: "hi"}}}}
""")
    tickets = Tickets()
    tickets.seed(cfg.tickets.rotation)
    gen = Generation(cfg, tickets)
    serving = _Serving(cfg, gen, sock)
    ctx = ssl.create_default_context(cafile=ca.cert_path)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # the session is complete after the handshake

    def connect(session=None):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                            server_hostname="localhost", session=session)
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        return s

    yield tickets, connect
    serving.stop()


def test_tickets_follow_the_published_keys(tls_engine):
    tickets, connect = tls_engine
    with connect() as s:
        first = s.session
    with connect(first) as s:
        assert s.session_reused
    # One rotation: the ticket's key is now the previous one: still opened,
    # and a new ticket (with the current key) is issued.
    engine.ticket_publish(tickets.mm, b"\x01" * 80, 3600, 0)
    with connect(first) as s:
        assert s.session_reused
        renewed = s.session
    # Two rotations: the first key is gone; a full handshake.
    engine.ticket_publish(tickets.mm, b"\x02" * 80, 3600, 0)
    with connect(first) as s:
        assert not s.session_reused
    # The renewed ticket (made with key 1, now the previous) still resumes.
    with connect(renewed) as s:
        assert s.session_reused
