#!/usr/bin/env python3
"""Who gets answered: N keep-alive clients each send one request at a time
for D seconds and count their own answers (wrk counts only the total, so a
server that serves some clients and starves the others looks as fast).

    python3 bench/prototypes/fcgi_clients.py [-c 64] [-d 5] [--port 18300] [--path /php/hello.php]

Prints the answers per client (min / median / max, how many got none), the
latency of the answers (p50, p99, max), how many requests were still
unanswered at the end and for how long, and the TCP connections opened on
this machine meanwhile less the clients' own (/proc/net/snmp PassiveOpens:
with the server and its FastCGI application on 127.0.0.1, the connections
the server opened to the application). Used for ADR 0038 against
bench/run.sh's php scenario with PHP_CHILDREN=4 PHP_KEEPALIVE=8: nginx left
24 of 64 clients without an answer for 5 s. A Python client tops out below
the servers' rate: compare servers with it, not with wrk's totals.
"""
import argparse
import asyncio
import time


def passive_opens() -> int:
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("PassiveOpens")])


async def one(a, counts, lat, stuck, i):
    r, w = await asyncio.open_connection(a.host, a.port)
    req = f"GET {a.path} HTTP/1.1\r\nHost: {a.host}\r\n\r\n".encode()
    end = time.monotonic() + a.d
    while time.monotonic() < end:
        t = time.monotonic()
        w.write(req)
        try:
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"),
                                          timeout=max(0.001, end - time.monotonic()))
        except asyncio.TimeoutError:
            stuck.append(time.monotonic() - t)
            break
        lines = head.lower().split(b"\r\n")
        cl = [x for x in lines if x.startswith(b"content-length:")]
        if cl:
            await r.readexactly(int(cl[0].split(b":")[1]))
        else:  # chunked
            while True:
                size = int((await r.readline()).split(b";")[0], 16)
                await r.readexactly(size + 2)
                if size == 0:
                    break
        counts[i] += 1
        lat.append(time.monotonic() - t)
    w.close()


async def main(a):
    counts, lat, stuck = [0] * a.c, [], []
    opens = passive_opens()
    await asyncio.gather(*(one(a, counts, lat, stuck, i) for i in range(a.c)))
    opened = passive_opens() - opens - a.c
    done, lat = sorted(counts), sorted(lat)
    pct = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))] * 1000 if lat else 0.0  # noqa: E731
    print(f"answers {sum(counts)}: per client min {done[0]} median {done[a.c // 2]} "
          f"max {done[-1]}, {sum(1 for c in counts if c == 0)} of {a.c} got none; "
          f"latency p50 {pct(0.5):.1f} ms p99 {pct(0.99):.1f} ms max {pct(1.0):.0f} ms; "
          f"{len(stuck)} unanswered at the end (longest {max(stuck or [0]):.2f} s); "
          f"other connections opened: {opened}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-c", type=int, default=64, help="clients (default 64)")
    p.add_argument("-d", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18300, help="bench/run.sh's HTTP port")
    p.add_argument("--path", default="/php/hello.php")
    asyncio.run(main(p.parse_args()))
