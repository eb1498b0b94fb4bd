#!/usr/bin/env bash
# Issue 36's floor: `respond` on the least a server can do per request
# (bench/prototypes/floor.c: level- and edge-triggered epoll, and io_uring
# when liburing-dev is installed) beside scalwsd (`busy_poll` auto and 0)
# and nginx `return 200`. Each server pinned to CPU 0, wrk -t1 -c64 on
# CPU 1; RUNS rounds with the order rotated; per-run figures, then the
# medians [ranges] and each one's CPU per request over nginx's of the same
# round. CPU per request is utime+stime of each server's process tree over
# the wrk window, after WARM seconds of the same load (4 by default: long
# enough for `busy_poll: auto` to have measured the load and chosen, which
# takes it about 3 s after a load starts; its choices are printed at the
# end).
#   RUNS=6 DURATION=6 WARM=4 bench/prototypes/floor.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-6} DURATION=${DURATION:-6} WARM=${WARM:-4}
PY=.venv/bin/python
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
modes="lt et"
if [ -r /usr/include/liburing.h ]; then
  gcc -O2 -DWITH_URING -o "$TMP/floor" bench/prototypes/floor.c -luring
  modes="$modes uring"
else
  gcc -O2 -o "$TMP/floor" bench/prototypes/floor.c
  echo "floor.sh: no liburing-dev, io_uring not measured" >&2
fi
cat > "$TMP/nginx.conf" <<NGX
worker_processes 1; daemon off; error_log $TMP/nginx-error.log; pid $TMP/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:18391; location / { default_type text/plain; return 200 "hello world"; } } }
NGX
for poll in auto 0; do
  port=$([ "$poll" = auto ] && echo 18392 || echo 18393)
  cat > "$TMP/scalws-$poll.yaml" <<YML
workers: 1
busy_poll: $poll
log: {access: off, level: info}
limits: {keepalive_requests: 1000000}
sites:
  - listen: "127.0.0.1:$port"
    routes: [{path: /, respond: {status: 200, body: "hello world", content_type: text/plain}}]
YML
done
names=(nginx scalws-poll-auto scalws-poll-0) ports=(18391 18392 18393) pids=()
taskset -c 0 nginx -c "$TMP/nginx.conf" & pids+=($!)
taskset -c 0 .venv/bin/scalwsd --config "$TMP/scalws-auto.yaml" 2>"$TMP/scalws-auto.log" & pids+=($!)
taskset -c 0 .venv/bin/scalwsd --config "$TMP/scalws-0.yaml" 2>/dev/null & pids+=($!)
port=18394
for m in $modes; do
  taskset -c 0 "$TMP/floor" "$m" $port & pids+=($!)
  names+=("floor-$m") ports+=($port)
  port=$((port + 1))
done
for p in "${ports[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/" >/dev/null && break; sleep 0.1; done
done
tree_ticks() {  # utime+stime of $1 and its descendants, in clock ticks
  local t=0 p
  for p in $1 $(pgrep -P "$1"); do
    [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14+$15}' /proc/$p/stat)))
  done
  echo $t
}
HZ=$(getconf CLK_TCK)
N=${#names[@]}
echo "server,run,rps,cpu_us_per_req" > "$TMP/runs.csv"
for run in $(seq "$RUNS"); do
  for k in $(seq 0 $((N - 1))); do
    i=$(( (k + run) % N ))
    taskset -c 1 wrk -t1 -c64 -d"${WARM}s" "http://127.0.0.1:${ports[$i]}/" >/dev/null
    c0=$(tree_ticks "${pids[$i]}")
    out=$(flock /tmp/scalws-bench.lock taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" "http://127.0.0.1:${ports[$i]}/")
    c1=$(tree_ticks "${pids[$i]}")
    req=$(echo "$out" | awk '/requests in/{print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    echo "${names[$i]},$run,$rps,$(awk -v c=$((c1 - c0)) -v r="$req" -v hz="$HZ" 'BEGIN{printf "%.3f", c*1e6/hz/r}')"
  done
done | tee -a "$TMP/runs.csv"
echo
grep -h "busy_poll auto" "$TMP/scalws-auto.log" || true
echo
python3 - "$TMP/runs.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ng = {r["run"]: float(r["cpu_us_per_req"]) for r in rows if r["server"] == "nginx"}
print("| server | rps | CPU µs per request | / nginx's (per round) |")
print("|---|---:|---:|---:|")
for name in dict.fromkeys(r["server"] for r in rows):
    rs = [r for r in rows if r["server"] == name]
    cpu = [float(r["cpu_us_per_req"]) for r in rs]
    rat = [float(r["cpu_us_per_req"]) / ng[r["run"]] for r in rs]
    print(f"| {name} | {statistics.median(float(r['rps']) for r in rs):,.0f} | "
          f"{statistics.median(cpu):.2f} [{min(cpu):.2f}-{max(cpu):.2f}] | "
          f"{statistics.median(rat):.2f} [{min(rat):.2f}-{max(rat):.2f}] |")
PY
