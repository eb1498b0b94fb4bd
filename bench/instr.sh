#!/bin/bash
# Instructions per answer of the worker's C loop, under callgrind.
#
#   bench/instr.sh [SCENARIO]        tls-h2-static-small (default),
#                                    tls-h2-respond, static-small, respond,
#                                    tls-h3-static-small (build/bench/h3load)
#   SCALWSD=path/to/scalwsd          the build to probe (default: this tree's)
#   N1=4000 N2=24000                 the two request counts
#   CONNS=16                         the load tool's connections (-c), 10 requests each
#   KEEP=1                           keep the callgrind outputs (path printed)
#   SPLIT=1                          also print the answer's instructions by
#                                    object (each library; our engine by source file)
#   CACHE=1                          also simulate the caches (--cache-sim=yes):
#                                    data misses per answer, first level and last;
#                                    the last modelled as CACHE_LL (1048576,8,64:
#                                    this guest's L2 of 1 MiB, 8-way), not the L3
#
# A fresh server (one worker, sandbox off, busy_poll 0) serves N1, then a
# second fresh one N2 requests (h2load -cCONNS -m10, or --h1 for the HTTP/1
# scenarios, or bench/h3load -cCONNS -m10 for HTTP/3); the difference of the
# two totals over N2-N1 is the cost of an answer without start-up and
# teardown. Only sws_core_serve and what it calls is counted
# (--toggle-collect): the engine, HTTP, HPACK, TLS and libc work of a
# pass, not uvloop or Python. The cache model's counts depend on what is
# in flight: with CONNS=64 (the bench's load) an HTTP/3 worker's state
# outgrows the L2. Deterministic to a few
# instructions per answer, so small changes show where the rate is noise.
# Builds on two hosts may differ (the default adds SSE4.2 where the CPU
# has it): to compare figures across hosts, build with SCALWS_MARCH=x86-64.
# The HTTP/1 scenarios need such a build: valgrind 3.19 does not decode
# pcmpestri, which the SSE4.2 request parser uses (the worker dies of
# SIGILL under it); the scalar parser it falls back to costs more
# instructions than the one production runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
scen=${1:-tls-h2-static-small}
SCALWSD=${SCALWSD:-$root/.venv/bin/scalwsd}
N1=${N1:-4000}
N2=${N2:-24000}
CONNS=${CONNS:-16}
command -v valgrind >/dev/null || { echo "instr.sh: valgrind is not installed" >&2; exit 2; }
command -v h2load >/dev/null || { echo "instr.sh: h2load is not installed (nghttp2-client)" >&2; exit 2; }

case $scen in static-small | respond)
    if "$SCALWSD" --version 2>/dev/null | grep -q -- -msse4.2; then
        echo "instr.sh: $scen needs a build without SSE4.2 (SCALWS_MARCH=x86-64 make build): valgrind does not decode pcmpestri" >&2
        exit 2
    fi ;;
esac

work=$(mktemp -d /tmp/scalws-instr.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/www"
head -c 1024 /dev/zero | tr '\0' a > "$work/www/1k.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

case $scen in
tls-h2-static-small) tls=1 route="static: {root: $work/www}" path=/1k.html ;;
tls-h2-respond) tls=1 route='respond: {status: 200, body: "hello world"}' path=/respond ;;
tls-h3-static-small) tls=3 route="static: {root: $work/www}" path=/1k.html ;;
static-small) tls=0 route="static: {root: $work/www}" path=/1k.html ;;
respond) tls=0 route='respond: {status: 200, body: "hello world"}' path=/respond ;;
*) echo "instr.sh: unknown scenario $scen" >&2; exit 2 ;;
esac
h3load=$root/build/bench/h3load
if [ $tls = 3 ]; then
    [ -x "$h3load" ] || { echo "instr.sh: $h3load is not built (make bench-deps)" >&2; exit 2; }
    listen="[\"127.0.0.1:$port tls\", \"127.0.0.1:$port quic\"]"
    site_tls="    tls: {cert: $work/cert.pem, key: $work/key.pem}"
    url=https://127.0.0.1:$port$path h2opt=
elif [ $tls = 1 ]; then
    listen="\"127.0.0.1:$port tls\"" site_tls="    tls: {cert: $work/cert.pem, key: $work/key.pem}"
    url=https://127.0.0.1:$port$path h2opt=
else
    listen="\"127.0.0.1:$port\"" site_tls= url=http://127.0.0.1:$port$path h2opt=--h1
fi
cat > "$work/site.yaml" <<EOF
workers: 1
sandbox: off
busy_poll: 0
user: $(id -un)
pid: $work/scalwsd.pid
sites:
  - listen: $listen
$site_tls
    routes:
      - path: /
        $route
EOF

total() {   # the worker's instruction count from one callgrind output
    awk '/^summary:/ {print $2}' "$1"
}

worker_file() {  # $1: a run's folder -> the worker's callgrind file (the largest count)
    local best=0 bf= f c
    for f in "$1"/cg.*; do
        [ -f "$f" ] || continue
        c=$(total "$f"); c=${c:-0}
        [ "$c" -gt "$best" ] && best=$c bf=$f
    done
    echo "$bf"
}

run() {     # $1: requests -> prints the worker's instructions
    local n=$1 out=$work/cg.$1 pid
    mkdir -p "$out"
    valgrind --tool=callgrind --toggle-collect=sws_core_serve \
        $([ "${CACHE:-0}" = 1 ] && echo --cache-sim=yes --LL="${CACHE_LL:-1048576,8,64}") \
        --callgrind-out-file="$out/cg.%p" "$SCALWSD" --config "$work/site.yaml" \
        >"$out/log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        curl -skf -o /dev/null "$url" && break
        sleep 0.1
    done
    if [ $tls = 3 ]; then
        "$h3load" -c"$CONNS" -m10 -n"$n" --sni localhost "$url" >"$out/h2load" 2>&1
    else
        h2load $h2opt -c"$CONNS" -m10 -n"$n" "$url" >"$out/h2load" 2>&1
    fi
    grep -q "succeeded, 0 errored" "$out/h2load" || grep -q "$((n)) succeeded" "$out/h2load" ||
        { cat "$out/h2load" >&2; kill "$pid"; exit 1; }
    kill -TERM "$pid"
    wait "$pid" || true
    # the worker's file is the one with the largest count (the master ran no serve pass)
    local f
    f=$(worker_file "$out")
    [ -n "$f" ] && total "$f" || echo 0
}

a=$(run "$N1")
b=$(run "$N2")
per=$(( (b - a) / (N2 - N1) ))
echo "$scen: $per instructions per answer ($SCALWSD; $N1: $a, $N2: $b)"
if [ "${CACHE:-0}" = 1 ]; then
    # the events line names the columns: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    miss() {    # $1: a callgrind file -> "D1 misses, LL misses" (data, reads and writes)
        awk '/^events:/ {for (i = 2; i <= NF; i++) col[$i] = i}
             /^summary:/ {print $col["D1mr"] + $col["D1mw"], $col["DLmr"] + $col["DLmw"]}' "$1"
    }
    read -r d1a lla < <(miss "$(worker_file "$work/cg.$N1")")
    read -r d1b llb < <(miss "$(worker_file "$work/cg.$N2")")
    echo "$scen: data misses per answer: first level $(( (d1b - d1a) / (N2 - N1) )), last level $(( (llb - lla) / (N2 - N1) )) (valgrind's model of this host's caches)"
fi
if [ "${SPLIT:-0}" = 1 ]; then
    # each function's self count, the difference of the two runs over N2-N1, summed by object
    python3 "$here/lib/instr_split.py" "$(worker_file "$work/cg.$N1")" "$(worker_file "$work/cg.$N2")" \
        $((N2 - N1))
fi
[ "${KEEP:-0}" = 1 ] && echo "callgrind outputs: $work/cg.$N2" || true
