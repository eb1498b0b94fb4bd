"""What the proxy's configuration tests share (test_proxy_config.py,
test_proxy_tls_config.py): a route's and a group's sample files, their
problems with the file shown as F. (The `addresses` fixture is in
tests/unit/conftest.py.)"""
import os
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config
from scalws.config.model import Proxy, Upstream

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Two groups, then one route whose proxy mapping's keys start at line 9,
# column 11.
ROUTE_HEAD = """\
upstreams:
  api: {servers: ["127.0.0.1:3000"]}
  web: {servers: ["127.0.0.1:3001"]}
sites:
  - listen: 80
    routes:
      - path: /
        proxy:
"""
P = "sites[0].routes[0].proxy"

# One route naming `api`, then the group `api` (after the sites, on purpose),
# whose keys start at line 7, column 5.
GROUP_HEAD = """\
sites:
  - listen: 80
    routes:
      - {path: /, proxy: api}
upstreams:
  api:
"""
G = "upstreams.api"


def write(tmp_path, text):
    path = tmp_path / "scalws.yaml"
    path.write_text(text)
    return path


def problems_of(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one(lines):
    assert len(lines) == 1, lines
    return lines[0]


def route_text(body):
    return ROUTE_HEAD + textwrap.indent(textwrap.dedent(body), " " * 10)


def group_text(body):
    return GROUP_HEAD + textwrap.indent(textwrap.dedent(body), " " * 4)


def load_proxy(tmp_path, body):
    cfg = load_config(write(tmp_path, route_text(body)))
    route = cfg.sites[0].routes[0]
    assert route.kind == "proxy"
    return route.handler, cfg


def route_problem(tmp_path, body):
    return one(problems_of(tmp_path, route_text(body)))


def load_group(tmp_path, body) -> Upstream:
    cfg = load_config(write(tmp_path, group_text(body)))
    assert cfg.sites[0].routes[0].handler == Proxy(upstream="api")
    return cfg.upstreams["api"]


def group_problem(tmp_path, body):
    return one(problems_of(tmp_path, group_text(body)))


def flow(value, upstreams=""):
    """A file whose only route is {path: /, proxy: VALUE} (VALUE at 4:26)."""
    return ("sites:\n  - listen: 80\n    routes:\n"
            f"      - {{path: /, proxy: {value}}}\n" + upstreams)
