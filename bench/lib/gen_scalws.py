#!/usr/bin/env python3
"""Write the ScalWS config for one benchmark scenario (YAML on stdout).

The keys follow docs/DESIGN.md's configuration sketch. Handlers that scalwsd
does not implement yet are still generated: bench/lib/servers.sh runs
`scalwsd --check-config` on the result and reports the scenario `n/a`
("scalws: handler not available yet") while scalwsd refuses it, so each
scenario turns on by itself the day its handler lands.

Routes use path "/" so that the URL layout every server shares
(/respond, /static/1k.html, /proxy/, /cache/1k.html, /cache/1m.bin,
/php/hello.php, /node/, /python/) works whatever the static root semantics
turn out to be.
The tls-* scenarios listen on --https-port with `tls` and the site's
`tls: {cert, key}` (--cert, --key; bench/handshakes.sh passes its RSA
one for its RSA measurement).
The cache-* scenarios (and cache-zipf, bench/cache_zipf.sh's) proxy to the
upstream with `cache: {zone: bench, valid: {200: 10m}}` and a top-level
zone `bench` of --cache-size; cache-zipf adds the status listener on
--status-port, whose /status JSON has the cache counters.
"""
import argparse
import json
import os
import sys

APPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "apps")


def q(s):
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(str(s))


def emit(obj, indent=0):
    """A small block-style YAML emitter for dicts, lists and scalars."""
    pad = "  " * indent
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{k}:")
                out.extend(emit(v, indent + 1))
            else:
                out.append(f"{pad}{k}: {scalar(v)}")
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict) and item:
                sub = emit(item, indent + 1)
                first = sub[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {scalar(item)}")
    return out


def scalar(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, dict) and not v:
        return "{}"
    if isinstance(v, list) and not v:
        return "[]"
    if v in ("on", "off"):
        return v
    return q(v)


def build(a):
    hello = {"respond": {"status": 200, "body": "hello world", "content_type": "text/plain"}}
    static = {"static": {"root": a.www}}
    upstreams = {}
    apps = {}
    zones = {}
    status = None
    listen = [f"{h}:{a.http_port}" for h in a.addr]
    site = {"listen": listen}
    s = a.scenario
    if s == "respond":
        route = hello
    elif s in ("static-small", "static-1m"):
        route = static
    elif s.startswith("tls-"):
        # HTTPS with make_cert's ECDSA P-256 certificate and ScalWS's TLS
        # defaults (TLS 1.2 + 1.3, tls_tickets on; ALPN offers h2 first)
        site["listen"] = [f"{h}:{a.https_port} tls" for h in a.addr]
        if s.startswith("tls-h3-"):  # HTTP/3 beside it, as Caddy has it
            site["listen"] += [f"{h}:{a.https_port} quic" for h in a.addr]
        site["tls"] = {"cert": a.cert, "key": a.key}
        if s in ("tls-respond", "tls-h2-respond"):
            route = hello
        elif s in ("tls-h2-proxy", "tls-h3-proxy"):
            upstreams["up"] = {"servers": [f"127.0.0.1:{a.up_port}"], "keepalive": 64}
            route = {"proxy": {"upstream": "up"}}
        elif s in ("tls-static-small", "tls-h2-static-small", "tls-h3-static-small"):
            route = static
        else:
            sys.exit(f"gen_scalws: unknown scenario {s}")
    elif s == "proxy":
        upstreams["up"] = {"servers": [f"127.0.0.1:{a.up_port}"], "keepalive": 64}
        route = {"proxy": {"upstream": "up"}}
    elif s in ("cache-hit", "cache-1m", "cache-zipf"):
        # One zone for the whole cache, max_size the memory nginx gets too
        # (keys_zone + max_size on its tmpfs: bench/lib/servers.sh,
        # nginx_cache_split). valid 200 10m mirrors nginx's
        # proxy_cache_valid; the upstream's max-age=3600 wins on both.
        # The lock (collapsed misses, as nginx's proxy_cache_lock on) is on
        # by default.
        upstreams["up"] = {"servers": [f"127.0.0.1:{a.up_port}"], "keepalive": 64}
        zones["bench"] = {"max_size": a.cache_size, "max_object_size": "8m"}
        route = {"proxy": {"upstream": "up", "cache": {"zone": "bench", "valid": {200: "10m"}}}}
        if s == "cache-zipf":
            status = {"listen": f"127.0.0.1:{a.status_port}"}
    elif s == "php":
        # keepalive as nginx's `upstream php` (PHP_KEEPALIVE, 64); PHP-FPM has a
        # child per client connection by default (bench/run.sh), so pooled
        # connections never starve it.
        # BENCH_FCGI_KEEP_CONN=0: a connection per request (ADR 0009's comparison).
        upstreams["php"] = {"servers": [f"127.0.0.1:{a.php_port}"], "keepalive": a.php_keepalive}
        keep = os.environ.get("BENCH_FCGI_KEEP_CONN", "1") != "0"
        route = {"fastcgi": {"upstream": "php", "root": a.www, "keep_conn": keep}}
    elif s in ("node", "python") and os.environ.get("SCALWS_APPS", "managed") == "managed":
        # ScalWS runs the app itself (`apps:`), one worker pinned to
        # CPU_LOAD like the node / uvicorn the other servers proxy to (the
        # same bench/apps file); SCALWS_APPS=external proxies to those.
        app = {"workers": 1, "dir": APPS, "cpus": [int(os.environ.get("CPU_LOAD", "1"))]}
        if s == "python":
            app["asgi"] = "hello_asgi:app"
            app["allocator"] = os.environ.get("SCALWS_APP_ALLOCATOR", "system")
        else:
            app["command"] = ["node", "hello.js"]
        apps[s] = app
        route = {"app": s}
    elif s == "node":
        upstreams["node"] = {"servers": [f"127.0.0.1:{a.node_port}"], "keepalive": 64}
        route = {"proxy": {"upstream": "node"}}
    elif s == "python":
        upstreams["pyapp"] = {"servers": [f"127.0.0.1:{a.pyapp_port}"], "keepalive": 64}
        route = {"proxy": {"upstream": "pyapp"}}
    else:
        sys.exit(f"gen_scalws: unknown scenario {s}")

    path = "~ \\.php$" if s == "php" else "/"
    site["routes"] = [dict({"path": path}, **route)]
    if len(site["listen"]) == 1:          # the form every scalwsd accepts
        site["listen"] = site["listen"][0]
    cfg = {"workers": a.workers, "log": {"access": False}}
    # h2load does not reconnect after GOAWAY: no per-connection request
    # limit, set alike on every server (nginx keepalive_requests 1000000)
    limits = {"keepalive_requests": 1000000}
    if a.max_connections:
        limits["max_connections"] = a.max_connections
    cfg["limits"] = limits
    if status:
        cfg["status"] = status
    if zones:
        cfg["cache_zones"] = zones
    if upstreams:
        cfg["upstreams"] = upstreams
    if apps:
        cfg["apps"] = apps
    cfg["sites"] = [site]
    return cfg


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario")
    p.add_argument("--www", required=True)
    p.add_argument("--addr", action="append", default=[], help="listen address (repeatable)")
    p.add_argument("--http-port", type=int, default=18300)
    p.add_argument("--https-port", type=int, default=18301)
    p.add_argument("--up-port", type=int, default=18310)
    p.add_argument("--php-port", type=int, default=18311)
    p.add_argument("--php-keepalive", type=int, default=64, help="php: idle FastCGI connections kept")
    p.add_argument("--node-port", type=int, default=18312)
    p.add_argument("--pyapp-port", type=int, default=18313)
    p.add_argument("--status-port", type=int, default=18314, help="cache-zipf: the status listener")
    p.add_argument("--cache-size", default="256m", help="cache-*: the zone's max_size")
    p.add_argument("--cert", default="")
    p.add_argument("--key", default="")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-connections", type=int, default=0)
    p.add_argument("--top", default="", help="JSON mapping of top-level keys to add or replace")
    a = p.parse_args()
    if not a.addr:
        a.addr = ["127.0.0.1"]
    print("# generated by bench/lib/gen_scalws.py for scenario " + a.scenario)
    cfg = build(a)
    if a.top:
        cfg.update(json.loads(a.top))
    print("\n".join(emit(cfg)))


if __name__ == "__main__":
    main()
