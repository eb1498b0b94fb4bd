#!/usr/bin/env bash
# ADR 0001 measurement: `respond` on (a) a uvloop BufferedProtocol prototype,
# (b) the C engine on uvloop readiness (scalwsd), and nginx `return 200`.
# Each server pinned to CPU 0, wrk -t1 -c64 on CPU 1; RUNS rounds with the
# order rotated; prints per-run figures and the medians. CPU per request is
# utime+stime of each server's process tree over the wrk window.
#   RUNS=5 DURATION=10 bench/prototypes/adr0001.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5} DURATION=${DURATION:-10}
PY=.venv/bin/python
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
$PY -c "
from setuptools import setup, Extension; from Cython.Build import cythonize
setup(script_args=['build_ext','--build-lib','$TMP','--build-temp','$TMP/b','-q'],
      ext_modules=cythonize([Extension('proto_a',['bench/prototypes/proto_a.pyx','csrc/http/http1.c'],
      include_dirs=['csrc/include'],extra_compile_args=['-O3','-msse4.2'])],language_level=3,quiet=True,include_path=['.']))" >/dev/null 2>&1
cp bench/prototypes/run_proto_a.py "$TMP/"
cat > "$TMP/nginx.conf" <<NGX
worker_processes 1; daemon off; error_log $TMP/nginx-error.log; pid $TMP/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:18391; location / { default_type text/plain; return 200 "hello world"; } } }
NGX
cat > "$TMP/scalws.yaml" <<YML
workers: 1
limits: {keepalive_requests: 1000000}
sites:
  - listen: "127.0.0.1:18392"
    routes: [{path: /, respond: {status: 200, body: "hello world"}}]
YML
taskset -c 0 nginx -c "$TMP/nginx.conf" & NGX=$!
taskset -c 0 $PY -m scalws --config "$TMP/scalws.yaml" 2>/dev/null & SWS=$!
taskset -c 0 $PY "$TMP/run_proto_a.py" 18393 & PRA=$!
for p in 18391 18392 18393; do
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
names=(nginx scalws-engine proto-a-transport) pids=($NGX $SWS $PRA) ports=(18391 18392 18393)
echo "server,run,rps,cpu_us_per_req,p99" | tee "$TMP/runs.csv"
for run in $(seq "$RUNS"); do
  for k in 0 1 2; do
    i=$(( (k + run) % 3 ))
    c0=$(tree_ticks "${pids[$i]}")
    out=$(flock /tmp/scalws-bench.lock taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" --latency "http://127.0.0.1:${ports[$i]}/")
    c1=$(tree_ticks "${pids[$i]}")
    req=$(echo "$out" | awk '/requests in/{print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    p99=$(echo "$out" | awk '$1=="99%"{print $2}')
    echo "${names[$i]},$run,$rps,$(awk -v c=$((c1 - c0)) -v r="$req" -v hz="$HZ" 'BEGIN{printf "%.2f", c*1e6/hz/r}'),$p99"
  done
done | tee -a "$TMP/runs.csv"
echo
echo "medians:"
python3 - "$TMP/runs.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for name in sorted({r["server"] for r in rows}):
    rs = [r for r in rows if r["server"] == name]
    print(f"{name:18s} rps {statistics.median(float(r['rps']) for r in rs):10.0f}"
          f"  cpu/req {statistics.median(float(r['cpu_us_per_req']) for r in rs):.2f} us")
PY
