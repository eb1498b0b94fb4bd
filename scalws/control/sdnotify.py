"""The service manager's readiness protocol (sd_notify(3)), spoken by the master.

systemd (`Type=notify`) and `start-stop-daemon --notify-await` start scalwsd
with NOTIFY_SOCKET naming a unix datagram socket; the master sends one
datagram per state change:

    READY=1            every worker of the first generation is ready
    RELOADING=1        a HUP reload began (with MONOTONIC_USEC, as systemd
                       253's Type=notify-reload wants); READY=1 follows when
                       the new workers are ready, or the reload failed and
                       the old ones still serve
    STOPPING=1         a stop began (TERM, INT or QUIT)
    STATUS=...         one line for `systemctl status`

The variable is taken out of the environment when this module is set up, so
workers and the TLS keeper neither inherit it nor speak for the service
(NotifyAccess=main). Without NOTIFY_SOCKET every call does nothing.
"""
from __future__ import annotations

import os
import socket
import time

_addr = None


def setup() -> bool:
    """Takes NOTIFY_SOCKET from the environment; True when there is one."""
    global _addr
    path = os.environ.pop("NOTIFY_SOCKET", None)
    if not path or path[0] not in "/@":
        return False
    # An address starting with '@' is in the abstract namespace.
    _addr = "\0" + path[1:] if path[0] == "@" else path
    return True


def notify(*fields: str) -> bool:
    """Sends `fields` (each `KEY=value`) as one datagram; False when there is
    no service manager to tell or it could not be reached."""
    if _addr is None:
        return False
    msg = "\n".join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto(msg, _addr)
    except OSError:
        return False
    return True


def ready(status: str) -> bool:
    return notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")


def reloading() -> bool:
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading")


def stopping() -> bool:
    return notify("STOPPING=1", "STATUS=stopping")
