#!/bin/bash
# The worker's user and system CPU per request, apart: how much of a
# request's CPU is ScalWS's own code (what compiler options such as PGO can
# change) and how much the kernel's (docs/benchmarks/2026-12-04-intel-pgo.md).
#
#   bench/user_sys.sh [SCALWSD] [respond|static]...
#
# For each scenario: a one-worker scalwsd on CPU 0 (`respond` answers a fixed
# 14-byte body, `static` a 1 KiB file), wrk -t1 -c64 on CPU 1, a 3 s warm-up,
# then the worker's utime and stime (/proc/PID/stat) around a 10 s run.
# Prints: scenario, user µs/req, system µs/req, rps.
# Env: PORT (18500), DURATION (10).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../.venv/bin/scalwsd}
shift || true
scenarios=${*:-respond static}
port=${PORT:-18500}
duration=${DURATION:-10}
tmp=$(mktemp -d)
master=
trap '[ -n "$master" ] && kill -TERM $master 2>/dev/null; wait; rm -rf "$tmp"' EXIT

mkdir -p "$tmp/static"
head -c 768 /dev/urandom | base64 -w0 | head -c 1024 >"$tmp/static/1k.html"
cat >"$tmp/cfg.yaml" <<EOF
workers: 1
sites:
  - listen: "127.0.0.1:$port"
    routes:
      - {path: "= /respond", respond: {status: 200, body: "Hello, world!\n"}}
      - {path: "^~ /static/", static: {root: $tmp}}
EOF
hz=$(getconf CLK_TCK)

for scen in $scenarios; do
    case $scen in
        respond) url=http://127.0.0.1:$port/respond ;;
        static) url=http://127.0.0.1:$port/static/1k.html ;;
        *) echo "user_sys: unknown scenario $scen (respond, static)" >&2; exit 2 ;;
    esac
    taskset -c 0 "$bin" --config "$tmp/cfg.yaml" 2>"$tmp/error.log" &
    master=$!
    ok=
    for _ in $(seq 200); do
        if curl -sf -o /dev/null "$url"; then ok=1; break; fi
        sleep 0.05
    done
    [ -n "$ok" ] || { cat "$tmp/error.log" >&2; echo "user_sys: scalwsd did not answer $url" >&2; exit 1; }
    worker=$(awk '{print $1}' /proc/$master/task/$master/children)
    taskset -c 1 wrk -t1 -c64 -d3s "$url" >/dev/null
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$worker/stat)
    out=$(taskset -c 1 wrk -t1 -c64 -d"${duration}s" "$url")
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$worker/stat)
    kill -TERM $master; wait $master || true; master=
    req=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -v s="$scen" -v u=$((u1 - u0)) -v k=$((s1 - s0)) -v hz="$hz" -v n="$req" -v d="$duration" \
        'BEGIN { printf "%s %.3f %.3f %.0f\n", s, u / hz * 1e6 / n, k / hz * 1e6 / n, n / d }'
done
