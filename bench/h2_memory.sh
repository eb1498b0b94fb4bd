#!/usr/bin/env bash
# Peak memory with 1,000 HTTP/2 connections of 8 streams each, beside nginx
# (issue 16 point 7): one worker each, the same TLS setup and content as
# bench/run.sh (bench/lib/servers.sh starts them), h2load -c1000 -m8 over
# TLS (ALPN h2), and the server's whole process tree sampled while it runs.
#
#   bench/h2_memory.sh
#   SERVERS="scalws nginx" TESTS="static slow" bench/h2_memory.sh
#
# Tests:
#   static  /static/1k.html (tls-h2-static-small's file), H2M_STATIC_N
#           requests (default 80000: 80 per connection, so each connection
#           keeps its 8 streams busy for a while); the per-connection cost
#           under load: TLS and HTTP/2 session state, buffers
#   slow    /proxy/slow through tls-h2-proxy's route to the upstream nginx,
#           which sends its 1 KiB at 512 bytes/s (limit_rate: half at once,
#           the rest about a second later), H2M_SLOW_N requests (default
#           16000: two rounds of 8,000 streams held about a second each);
#           the per-stream cost: 8,000 requests in flight at once, each with
#           its upstream connection
# Figures (KiB): idle = Σ VmRSS of the tree before the load; peak = the
# largest Σ VmRSS sampled every 100 ms during it; hwm = Σ VmHWM at its end
# (each process's own peak: an upper bound, peaks need not coincide);
# pss-idle, pss-peak = the same as idle and peak with Σ Pss (smaps_rollup)
# instead of Σ VmRSS: a page shared by several processes of the tree (a
# forked child's untouched copy of its parent's heap, the libraries) counts
# once, split between them, where Σ VmRSS counts it once per process;
# h2load's succeeded / failed requests say the load was what it claims.
# Load tests only against 127.0.0.1. One run, no medians: memory, not speed.
#
# Env: SERVERS (scalws nginx), TESTS (static slow), H2M_STATIC_N,
# H2M_SLOW_N, CPU_SERVER (0), CPU_LOAD (1), PORT_BASE, BENCH_LOCK,
# KEEP_RUN_DIR=1. Needs a hard file limit above 2 × 9,000 (the slow test:
# 1,000 client and 8,000 upstream connections in the server, 8,000 in the
# upstream nginx).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$BENCH_DIR/lib/servers.sh"

SERVERS=${SERVERS:-scalws nginx}
TESTS=${TESTS:-static slow}
H2M_STATIC_N=${H2M_STATIC_N:-80000}
H2M_SLOW_N=${H2M_SLOW_N:-16000}
H2LOAD=${H2LOAD:-$(command -v h2load || true)}
[ -n "$H2LOAD" ] || die "h2load not installed (apt-get install nghttp2-client)"
[ "$(ulimit -Hn)" -ge 18000 ] || die "the hard file limit is $(ulimit -Hn); 1,000 connections of 8 slow streams need 18000"

bench_setup h2mem
lock_acquire
# 1,000 client connections and, in the slow test, 8,000 upstream ones in one worker
S_MAXCONN=16384

tree_pids() { echo "$1"; descendants "$1"; }
sum_status() {  # sum_status FIELD PID...: Σ FIELD (kB) in /proc/PID/status
    local f=$1
    shift
    for p in "$@"; do cat "/proc/$p/status" 2>/dev/null || true; done |
        awk -v f="$f:" '$1 == f { s += $2 } END { print s + 0 }'
}
sum_pss() {  # sum_pss PID...: Σ Pss (kB) in /proc/PID/smaps_rollup
    for p in "$@"; do cat "/proc/$p/smaps_rollup" 2>/dev/null || true; done |
        awk '$1 == "Pss:" { s += $2 } END { print s + 0 }'
}
# sampler ROOT OUT: Σ VmRSS and Σ Pss of ROOT's tree every 100 ms, the
# largest of each in OUT and OUT.pss (which start with the idle figures),
# until OUT.stop exists. Pss needs read access to smaps_rollup: run as root.
sampler() {
    local root=$1 out=$2 peak ppeak v pids
    peak=$(cat "$out") ppeak=$(cat "$out.pss")
    while [ ! -e "$out.stop" ]; do
        pids=$(tree_pids "$root")
        # shellcheck disable=SC2086
        v=$(sum_status VmRSS $pids)
        [ "$v" -gt "$peak" ] && peak=$v && echo "$peak" >"$out"
        # shellcheck disable=SC2086
        v=$(sum_pss $pids)
        [ "$v" -gt "$ppeak" ] && ppeak=$v && echo "$ppeak" >"$out.pss"
        sleep 0.1
    done
}

declare -A ROW
measure() {  # measure SERVER TEST
    local srv=$1 test=$2 scen path n out
    case $test in
        static) scen=tls-h2-static-small path=/static/1k.html n=$H2M_STATIC_N ;;
        slow) scen=tls-h2-proxy path=/proxy/slow n=$H2M_SLOW_N ;;
        *) die "unknown test $test (static, slow)" ;;
    esac
    srv_start "$srv" "$scen" || { ROW[$srv,$test]="did not start: $(srv_start_failure)"; return 0; }
    local root=$LAST_PID
    curl -sk --http2 -o /dev/null --max-time 10 "https://127.0.0.1:$HTTPS_PORT$path" ||
        log "$srv: a first request of $path failed"
    sleep 1
    # shellcheck disable=SC2046
    local idle pidle
    idle=$(sum_status VmRSS $(tree_pids "$root"))
    # shellcheck disable=SC2046
    pidle=$(sum_pss $(tree_pids "$root"))
    out=$RUN_DIR/peak-$srv-$test
    echo "$idle" >"$out"
    echo "$pidle" >"$out.pss"
    sampler "$root" "$out" &
    local sp=$!
    log "$srv $test: h2load -n$n -c1000 -m8 https://127.0.0.1:$HTTPS_PORT$path"
    timeout 300 "$H2LOAD" -n "$n" -c 1000 -m 8 -t 1 "https://127.0.0.1:$HTTPS_PORT$path" \
        >"$RUN_DIR/h2load-$srv-$test.txt" 2>&1 || true
    touch "$out.stop"
    wait "$sp" || true
    local hwm reqs
    # shellcheck disable=SC2046
    hwm=$(sum_status VmHWM $(tree_pids "$root"))
    reqs=$(grep -o '[0-9]* succeeded, [0-9]* failed' "$RUN_DIR/h2load-$srv-$test.txt" || echo "h2load: no summary")
    grep -q "Application protocol: h2" "$RUN_DIR/h2load-$srv-$test.txt" || reqs="not h2! $reqs"
    ROW[$srv,$test]="$(printf '%8s %8s %8s %8s %8s %8s %8s  %s' "$idle" "$(cat "$out")" "$hwm" \
        "$(($(cat "$out") - idle))" "$pidle" "$(cat "$out.pss")" "$(($(cat "$out.pss") - pidle))" "$reqs")"
    stop_pid "$root"
}

UP_STARTED=0
for test in $TESTS; do
    if [ "$test" = slow ] && [ $UP_STARTED = 0 ]; then
        upstream_start || die "the upstream nginx did not start"
        UP_STARTED=1
    fi
    for srv in $SERVERS; do
        srv_supports "$srv" "$( [ "$test" = slow ] && echo tls-h2-proxy || echo tls-h2-static-small)" >/dev/null ||
            { ROW[$srv,$test]="n/a"; continue; }
        measure "$srv" "$test"
    done
done

echo "# bench/h2_memory.sh: h2load -c1000 -m8 over TLS (h2), one worker per server; KiB, Σ over the server's process tree"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -r), $(nproc --all) CPUs; server on CPU $CPU_SERVER, h2load and upstream on CPU $CPU_LOAD"
printf '%-8s %-7s %8s %8s %8s %8s %8s %8s %8s  %s\n' test server idle peak hwm peak-idle \
    pss-idle pss-peak pss-grow "h2load requests"
for test in $TESTS; do
    for srv in $SERVERS; do
        printf '%-8s %-7s %s\n' "$test" "$srv" "${ROW[$srv,$test]}"
    done
done
