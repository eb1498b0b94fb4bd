"""The conformance cases: RFC 9113 sections 3 to 8 and RFC 7541 (HPACK).

Each case is a function of `connect` (which opens a Conn, handshake done
unless told otherwise) registered with the section it checks and the
behaviour the RFC requires. A case passes when it returns; it fails with
client.Failed. The server must serve, on any authority:
  /     a 200 with a short body,
  /big  a 200 with a body of at least 70 000 bytes (more than the default
        stream window).
Where the RFC asks for a stream error and ScalWS answers with a connection
error of the same code (§5.4: "an endpoint MAY choose to treat a stream
error as a connection error"), the case asserts the connection error and
its comment says so; README.md lists them.

The cases are in cases_frames.py (RFC 9113 sections 3.4 to 7) and
cases_messages.py (section 8, RFC 7541), registered in that order by
importing them; the registry and the helpers they share are caselib.py's.
"""
from . import cases_frames, cases_messages  # noqa: F401 (importing them registers their cases)
from .caselib import CASES

__all__ = ["CASES"]
