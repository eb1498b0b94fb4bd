#!/usr/bin/env python3
"""Cache peers as hosts: three ScalWS nodes, each in a network namespace of
its own (a veth on one bridge, 10.77.0.11-13), the origin in a fourth
(10.77.0.1, tests/e2e/upstreams/cacheorigin.py, which records who fetched
what), the client in the root namespace (10.77.0.254). Needs root.

    bench/cache_peers.py                     # the report, on stdout (markdown)
    bench/cache_peers.py --keys 5000 --requests 20000 --zipf 1.0 --workers 2

What it does, with peers (`cache_zones.z.peers`, servers the three nodes'
addresses, `self` found by each node from its own addresses) and then as
islands (the same nodes without `peers`):
  1. a Zipf mix of GETs (`--requests` over `--keys`, exponent `--zipf`,
     seeded) sent through the three nodes in turn, 8 client threads;
     counted: requests, errors, origin fetches, keys fetched more than once;
  2. (peers) `PURGE /obj/*` on node 1, then every key once through node 2:
     each key reaches the origin again (every node purged its share);
  3. (peers) node 3 killed (SIGKILL), the mix again through nodes 1 and 2:
     errors, and which keys were fetched again: only node 3's (the origin
     says which node fetched each key first).
tests/e2e/test_cache_peers_netns.py runs a small version and asserts it.
"""
from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NET = "10.77.0"
ORIGIN_IP, CLIENT_IP = f"{NET}.1", f"{NET}.254"
NODE_IPS = [f"{NET}.11", f"{NET}.12", f"{NET}.13"]
PORT, ORIGIN_PORT = 8080, 8000
SECRET = "netns-peers-secret-0123456789"
HOST = "www.example.test"     # what clients behind a load balancer send (part of the key)


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Lab:
    """The namespaces and the bridge; processes started in them."""

    def __init__(self, tmp, tag=None):
        self.tmp = tmp
        self.tag = tag or f"s{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.ns = {"origin": f"{self.tag}o", **{i: f"{self.tag}n{i}" for i in range(3)}}
        self.procs = {}

    def up(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{CLIENT_IP}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        addrs = {"origin": ORIGIN_IP, **{i: ip for i, ip in enumerate(NODE_IPS)}}
        for key, ns in self.ns.items():
            veth = f"{ns}v"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{addrs[key]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", f"{ns}v", check=False)
        sh("ip", "link", "del", self.bridge, check=False)

    def run(self, key, argv, log):
        return subprocess.Popen(["ip", "netns", "exec", self.ns[key]] + argv, cwd=ROOT,
                                stdout=subprocess.PIPE if key == "origin" else log,
                                stderr=log)

    def start_origin(self):
        log = open(os.path.join(self.tmp, "origin.log"), "ab")
        p = self.run("origin", [sys.executable, "-m", "tests.e2e.upstreams.cacheorigin",
                                ORIGIN_IP, str(ORIGIN_PORT)], log)
        line = p.stdout.readline()
        if not line.startswith(b"READY"):
            raise RuntimeError(f"the origin did not start: {line!r}")
        self.procs["origin"] = p

    def start_nodes(self, peers, workers=1):
        for i in range(3):
            old = self.procs.pop(i, None)
            if old is not None and old.poll() is None:
                old.send_signal(signal.SIGTERM)
                old.wait(30)
        for i in range(3):
            cfg = os.path.join(self.tmp, f"node{i}-{'peers' if peers else 'islands'}.yaml")
            with open(cfg, "w") as f:
                f.write(node_config(i, peers, workers, os.path.join(self.tmp, f"node{i}.pid")))
            log_path = os.path.join(self.tmp, f"node{i}.log")
            log = open(log_path, "ab")
            start = os.path.getsize(log_path)
            self.procs[i] = self.run(i, [sys.executable, "-m", "scalws", "--config", cfg], log)
            wait_log(log_path, start, "scalws started", self.procs[i])

    def kill_node(self, i):
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()

    def origin_seen(self):
        c = http.client.HTTPConnection(ORIGIN_IP, ORIGIN_PORT, timeout=10)
        try:
            c.request("GET", "/__seen")
            return json.loads(c.getresponse().read())
        finally:
            c.close()


def node_config(i, peers, workers, pid):
    servers = ", ".join(f'"{ip}:{PORT}"' for ip in NODE_IPS)
    zone = "z: {max_size: 64m}"
    if peers:
        zone = f'z: {{max_size: 64m, peers: {{servers: [{servers}], secret: "{SECRET}"}}}}'
    return f"""
workers: {workers}
pid: {pid}
cache_zones:
  {zone}
sites:
  - listen: "0.0.0.0:{PORT}"
    routes:
      - path: /
        proxy:
          url: "http://{ORIGIN_IP}:{ORIGIN_PORT}"
          cache: {{zone: z, purge: {{allow: ["{CLIENT_IP}/32"]}}}}
"""


def wait_log(path, start, text, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            f.seek(start)
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(path, errors="replace") as f:
        raise RuntimeError(f"no {text!r} in {path}:\n{f.read()[-3000:]}")


def zipf_keys(keys, n, s, seed=1):
    rnd = random.Random(seed)
    weights = [1.0 / (k + 1) ** s for k in range(keys)]
    return rnd.choices(range(keys), weights, k=n)


def target(k):
    return f"/obj/{k}?cc=max-age%3D3600"


def send(seq, nodes, threads=8, method="GET"):
    """Sends seq[j] to nodes[j % len(nodes)] from `threads` threads, each
    with a keep-alive connection per node. -> (answers by status, seconds)."""
    counts = collections.Counter()
    lock = threading.Lock()

    def worker(t):
        conns = {}
        local = collections.Counter()
        for j in range(t, len(seq), threads):
            ip = NODE_IPS[nodes[j % len(nodes)]]
            for attempt in range(2):     # a connection the node closed: once more
                c = conns.get(ip) or http.client.HTTPConnection(ip, PORT, timeout=10)
                conns[ip] = c
                try:
                    c.request(method, target(seq[j]) if isinstance(seq[j], int) else seq[j],
                              headers={"Host": HOST})
                    r = c.getresponse()
                    r.read()
                    local[r.status] += 1
                    break
                except (OSError, http.client.HTTPException):
                    c.close()
                    conns.pop(ip, None)
                    if attempt:
                        local["error"] += 1
        for c in conns.values():
            c.close()
        with lock:
            counts.update(local)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts, time.monotonic() - t0


def fetches(seen, since=0):
    """origin GETs per key from index `since` of /__seen, and who fetched first."""
    per_key, first = collections.Counter(), {}
    for method, path, _, client in seen[since:]:
        if method == "GET" and path.startswith("/obj/"):
            k = int(path[5:].split("?")[0])
            per_key[k] += 1
            first.setdefault(k, client)
    return per_key, first


def experiment(lab, keys, requests, s, workers):
    seq = zipf_keys(keys, requests, s)
    distinct = len(set(seq))
    out = {"keys": keys, "requests": requests, "zipf": s, "distinct": distinct}
    for mode in ("islands", "peers"):
        lab.start_nodes(mode == "peers", workers)
        mark = len(lab.origin_seen())
        # the keys are made distinct per mode: a fresh set of objects
        base = 0 if mode == "islands" else keys
        answers, secs = send([k + base for k in seq], [0, 1, 2])
        seen = lab.origin_seen()
        per_key, first = fetches(seen, mark)
        out[mode] = {"answers": dict(answers), "seconds": round(secs, 2),
                     "origin_fetches": sum(per_key.values()),
                     "keys_fetched_twice_or_more": sum(1 for n in per_key.values() if n > 1),
                     "fetches_per_key_max": max(per_key.values())}
    # PURGE on node 1 (index 0), then every key through node 2
    mark = len(lab.origin_seen())
    purge, _ = send(["/obj/*"], [0], threads=1, method="PURGE")
    ks = sorted(set(k + keys for k in seq))
    again, _ = send(ks, [1])
    per_key, _ = fetches(lab.origin_seen(), mark)
    out["purge"] = {"answers": dict(purge), "keys": len(ks),
                    "refetched": sum(1 for k in ks if per_key[k] >= 1), "get_answers": dict(again)}
    # node 3 dies: the mix through nodes 1 and 2
    owners = fetches(lab.origin_seen())[1]
    lab.kill_node(2)
    mark = len(lab.origin_seen())
    answers, secs = send([k + keys for k in seq], [0, 1])
    per_key, _ = fetches(lab.origin_seen(), mark)
    node3 = {k for k, ip in owners.items() if ip == NODE_IPS[2]}
    moved = set(per_key)
    out["kill"] = {"answers": dict(answers), "seconds": round(secs, 2),
                   "keys_refetched": len(moved), "of_which_node3s": len(moved & node3),
                   "node3_keys": len(node3 & set(k + keys for k in seq)),
                   "origin_fetches": sum(per_key.values())}
    return out


def report(r):
    i, p = r["islands"], r["peers"]
    lines = [
        f"Zipf mix: {r['requests']} GETs over {r['keys']} keys (s = {r['zipf']}), "
        f"{r['distinct']} distinct, sent through the three nodes in turn.",
        "",
        "| | islands | peers |",
        "|---|---|---|",
        f"| answers | {i['answers']} | {p['answers']} |",
        f"| origin fetches | {i['origin_fetches']} | {p['origin_fetches']} |",
        f"| keys fetched more than once | {i['keys_fetched_twice_or_more']} | "
        f"{p['keys_fetched_twice_or_more']} |",
        f"| most fetches of one key | {i['fetches_per_key_max']} | {p['fetches_per_key_max']} |",
        f"| seconds (client in Python, 8 threads) | {i['seconds']} | {p['seconds']} |",
        "",
        f"PURGE /obj/* on node 1: {r['purge']['answers']}; then each of the "
        f"{r['purge']['keys']} keys through node 2: {r['purge']['refetched']} reached the "
        "origin again.",
        "",
        f"Node 3 killed, the mix again through nodes 1 and 2: answers "
        f"{r['kill']['answers']}; keys fetched again {r['kill']['keys_refetched']}, of which "
        f"node 3's {r['kill']['of_which_node3s']} (node 3 owned {r['kill']['node3_keys']} of "
        f"the mix's keys); origin fetches {r['kill']['origin_fetches']}.",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/cache_peers.py needs root (network namespaces)")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        lab = Lab(tmp)
        try:
            lab.up()
            lab.start_origin()
            r = experiment(lab, a.keys, a.requests, a.zipf, a.workers)
        finally:
            lab.down()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    print(report(r))


if __name__ == "__main__":
    main()
