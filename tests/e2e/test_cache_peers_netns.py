"""Cache peers tested as hosts (issue 34): three scalwsd nodes, each in a
network namespace of its own on one bridge, the origin in a fourth, the
client outside (bench/cache_peers.py builds the lab and runs the mix; this
test runs a small one and asserts it). Each node finds which peer it is
from its own addresses (no `self:`), as a pod would."""
import os
import sys

import pytest

from tests.e2e.conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import cache_peers  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def lab(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs as root)")
    os.chmod(tmp_path, 0o755)
    lab = cache_peers.Lab(str(tmp_path))
    try:
        lab.up()
        lab.start_origin()
        yield lab
    finally:
        lab.down()


def test_three_hosts_share_one_cache(lab):
    r = cache_peers.experiment(lab, keys=300, requests=1500, s=1.0, workers=1)
    islands, peers = r["islands"], r["peers"]
    # every answer a 200, both ways
    assert islands["answers"] == {200: 1500} and peers["answers"] == {200: 1500}
    # islands: popular keys reach the origin from each node; peers: once each
    assert islands["origin_fetches"] > r["distinct"] * 1.3, r
    assert peers["origin_fetches"] == r["distinct"], r
    assert peers["fetches_per_key_max"] == 1
    # a PURGE on node 1 is seen on every node: every key is fetched again
    assert r["purge"]["answers"] == {200: 1}
    assert r["purge"]["refetched"] == r["purge"]["keys"]
    # node 3 dies: no request lost, and only its keys move (once each)
    k = r["kill"]
    assert k["answers"] == {200: 1500}, k
    assert k["keys_refetched"] == k["of_which_node3s"] == k["node3_keys"] > 0, k
    assert k["origin_fetches"] == k["keys_refetched"], k
