"""The shared counters: the Python layout against the C structs, the
`status:` key's validation, and the renderers (scalws/control/stats.py)."""
from __future__ import annotations

import json
import struct
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config
from scalws.control import stats

SITE = """\
upstreams:
  app: {servers: ["127.0.0.1:9"]}
sites:
  - listen: "127.0.0.1:8080"
    server_names: [example.org]
    routes:
      - {path: /, respond: 204}
      - {path: /api/, proxy: {upstream: app}}
"""


def load(tmp_path, text):
    p = tmp_path / "scalws.yaml"
    p.write_text(textwrap.dedent(text))
    return load_config(p)


def problems(tmp_path, text):
    p = tmp_path / "scalws.yaml"
    p.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigError) as info:
        load_config(p)
    return [line.replace(str(p), "F", 1) for line in str(info.value).splitlines()]


def test_layout_matches_the_c_structs():
    engine = pytest.importorskip("scalws.server.engine")
    lay = engine.stats_layout()
    assert lay["head"] == stats.HEAD_BYTES
    assert lay["hist"] == 8 * stats.HIST_WORDS
    assert lay["buckets"] == stats.N_BUCKETS
    assert lay["group"] == 8 * len(stats.GROUP_FIELDS)
    assert lay["slot_1_1"] == stats.slot_size(1, 1)


def test_status_defaults_and_keys(tmp_path):
    cfg = load(tmp_path, SITE + "status: {listen: ':9200', allow: [10.0.0.0/8], file: s.bin}\n")
    assert (cfg.status.host, cfg.status.port) == ("127.0.0.1", 9200)
    assert cfg.status.allow == ["10.0.0.0/8"]
    assert cfg.status.file == str(tmp_path / "s.bin")
    cfg = load(tmp_path, SITE + "status:\n")
    assert (cfg.status.host, cfg.status.port) == ("127.0.0.1", 9145)
    assert cfg.status.allow == ["127.0.0.0/8", "::1/128"]
    assert load(tmp_path, SITE).status is None


def test_status_errors_have_file_line_column(tmp_path):
    assert problems(tmp_path, SITE + "status: {listen: 'x:y', allow: [nope], lisen: 1}\n") == [
        "F:9:18: status.listen: 'x' is a host name: scalws resolves no names when loading; "
        "use an IP address (or localhost)",
        "F:9:33: status.allow[0]: 'nope' is not an IP address or a network (such as "
        "10.0.0.0/8 or ::1); names are not accepted",
        "F:9:40: status.lisen: unknown key 'lisen'; did you mean 'listen'?",
    ]
    assert problems(tmp_path, SITE + "status: [1]\n") == [
        'F:9:9: status: expected a mapping such as {listen: "127.0.0.1:9145"}, got a list']


def test_block_read_and_render(tmp_path):
    cfg = load(tmp_path, SITE)
    block = stats.Block(cfg, 2, str(tmp_path / "s.bin"))
    # Worker 1 answers two requests on route 1 (the proxy): 2 ms and 30 ms.
    slot = block.slot(1)
    words = len(stats.HEAD_FIELDS)
    struct.pack_into("<Q", slot, 8 * stats.HEAD_FIELDS.index("requests"), 2)
    struct.pack_into("<Q", slot, 8 * stats.HEAD_FIELDS.index("status_5xx"), 2)
    route1 = stats.HEAD_BYTES + 8 * stats.HIST_WORDS
    struct.pack_into("<Q", slot, route1 + 8 * 1, 1)           # le 2.5 ms
    struct.pack_into("<Q", slot, route1 + 8 * 5, 1)           # le 50 ms
    struct.pack_into("<QQ", slot, route1 + 8 * stats.N_BUCKETS, 32, 2)
    groups = stats.HEAD_BYTES + 2 * 8 * stats.HIST_WORDS
    group = {"requests": 3, "errors": 1, "servers_up": 1, "servers_down": 0,
             "conns_busy": 1, "conns_idle": 2, "capacity": 4, "queued": 5,
             "queue_waits": 7, "queue_wait_ms": 1500, "queue_timeouts": 1, "pipelined": 9}
    assert list(group) == stats.GROUP_FIELDS
    struct.pack_into(f"<{len(group)}Q", slot, groups, *group.values())
    # Worker 0's share: one of each (its servers_down is its own view).
    struct.pack_into(f"<{len(group)}Q", block.slot(0), groups, *([1] * len(group)))
    assert words == 32
    d = stats.read(str(tmp_path / "s.bin"))
    assert d["requests"] == 2 and d["requests_by_class"]["5xx"] == 2
    r = d["routes"]["example.org/api/"]
    assert r["requests"] == 2 and r["upstream"] == "app"
    assert r["duration"]["buckets"][1] == (0.0025, 1)
    assert r["duration"]["buckets"][-1] == (float("inf"), 2)
    up = d["upstreams"]["app"]
    assert up["requests"] == 4 and up["errors"] == 2 and up["queue_waits"] == 8
    assert (up["conns_busy"], up["conns_idle"], up["capacity"], up["queued"]) == (2, 3, 5, 6)
    assert (up["queue_wait_ms"], up["queue_timeouts"], up["pipelined"]) == (1501, 2, 10)
    assert up["duration"]["count"] == 2
    text = stats.render_prometheus([d, d], instance_labels=[{"instance": "a"}, {"instance": "b"}])
    assert 'scalws_requests_total{instance="b",status_class="5xx"} 2' in text
    summed = stats.render_prometheus([d, d])
    assert 'scalws_requests_total{status_class="5xx"} 4' in summed
    for line in ('scalws_upstream_capacity{upstream="app"} 10',
                 'scalws_upstream_queue{upstream="app"} 12',
                 'scalws_upstream_connections{upstream="app",state="idle"} 6',
                 'scalws_upstream_queued_total{upstream="app"} 16',
                 'scalws_upstream_queue_wait_seconds_total{upstream="app"} 3.002',
                 'scalws_upstream_queue_timeouts_total{upstream="app"} 4',
                 'scalws_upstream_pipelined_total{upstream="app"} 20'):
        assert line in summed.splitlines(), line
    assert json.loads(stats.render_json([d]))["requests"] == 2
    block.remove()
    assert not (tmp_path / "s.bin").exists()


def test_read_refuses_other_files(tmp_path):
    p = tmp_path / "junk"
    p.write_bytes(b"x" * 4096)
    with pytest.raises(ValueError):
        stats.read(str(p))
