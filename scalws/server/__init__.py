"""The data plane: the engine (engine.pyx on csrc/).

The engine links GnuTLS for HTTP/3 (csrc/http/h3/tls.c), whose library
constructor would initialise it, and p11-kit with it, in every process that
loads the engine, with a quic listener or not: about 0.5 MiB of a 4-worker
install's memory and a few milliseconds of its start for nothing
(docs/adr/0036-master-load-pages.md). GNUTLS_NO_IMPLICIT_INIT, set here
before the engine is loaded, turns the constructor off; sws_quic_certs_new
initialises GnuTLS when a quic listener needs it. The engine's first lines
unset the variable again (when it was ours), so that no process started
from here (PHP-FPM, an application) inherits it.
"""
import os

_GNUTLS_QUIET = "GNUTLS_NO_IMPLICIT_INIT"
_SET_HERE = _GNUTLS_QUIET not in os.environ
if _SET_HERE:
    os.environ[_GNUTLS_QUIET] = "1"
