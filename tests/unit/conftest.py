"""Fixtures the unit tests share."""
import ipaddress
import socket

import pytest

from scalws import dns
from scalws.config.directives import upstreams


@pytest.fixture
def addresses(monkeypatch):
    """Make getaddrinfo answer from a table: {name: [addresses]}."""
    table = {}

    def fake(host, port, family=0, type=0, proto=0, flags=0):
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        out = []
        for addr in table[host]:
            if ":" in addr:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (addr, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, port)))
        return out

    def fake_dns(host, settings):
        if host not in table:
            return ("fail", "no such name")
        return ("ok", dns.sort_addresses(ipaddress.ip_address(a).compressed
                                         for a in table[host]), 30)

    monkeypatch.setattr(upstreams.socket, "getaddrinfo", fake)
    monkeypatch.setattr(upstreams.dns, "resolve", fake_dns)
    return table
