#!/usr/bin/env bash
# G-WAN-style concurrency sweep: 1, 64, 1k, 10k, 20k, 40k concurrent
# keep-alive clients on static-small and respond; rps, CPU per request and
# errors per step, the server tree's RSS and PSS mid-step, a PNG line chart;
# RUNS sweeps (server order rotating), medians and ranges in the report.
#
#   SERVERS="scalws nginx" MODE=quick bench/concurrency.sh
#   RUNS=3 MODE=release bench/concurrency.sh          # issue 35's figures
#
# The hard limit here is 20,000 open files per process (ulimit -Hn), so:
# the server runs SERVER_WORKERS workers (default 4, all on CPU_SERVER, each
# allowed ~19,000 connections), the clients are several wrk processes of at
# most CONNS_PER_WRK connections (default 8,000), and wrk process k connects to
# 127.0.0.<k+1> (N_ADDRS loopback addresses, default 8; the server listens on
# all of them) so that no destination runs out of ephemeral ports (~28k each).
#
# Env: SERVERS, SCENARIOS (static-small respond; tls-static-small: HTTP/1.1
# over TLS, each step's handshakes included), STEPS, RUNS (1), MODE quick|release
# (5 s | 20 s per step; DURATION= overrides), WRK_TIMEOUT (default 5 s),
# SERVER_WORKERS, CONNS_PER_WRK, N_ADDRS, NAME, RESULTS, CPU_SERVER, CPU_LOAD.
# Output: results/<NAME>/concurrency.csv, concurrency.md, concurrency.png
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$BENCH_DIR/lib/servers.sh"

MODE=${MODE:-quick}
case $MODE in
    quick) DURATION=${DURATION:-5} ;;
    release) DURATION=${DURATION:-20} ;;
    *) die "MODE must be quick or release" ;;
esac
SERVERS=${SERVERS:-scalws nginx}
SCENARIOS=${SCENARIOS:-static-small respond}
STEPS=${STEPS:-1 64 1000 10000 20000 40000}
SERVER_WORKERS=${SERVER_WORKERS:-4}
RUNS=${RUNS:-1}
CONNS_PER_WRK=${CONNS_PER_WRK:-8000}
N_ADDRS=${N_ADDRS:-8}
WRK_TIMEOUT=${WRK_TIMEOUT:-5}
STEP_PAUSE=${STEP_PAUSE:-2}
NAME=${NAME:-concurrency-$(date +%Y%m%d-%H%M%S)-$MODE}
RESULTS=${RESULTS:-$REPO_DIR/results}
DEST=$RESULTS/$NAME
CSV=$DEST/concurrency.csv
CONCLIB=$BENCH_DIR/lib/conclib.py

HARD=$(ulimit -Hn)
ulimit -n "$HARD"
MAXCONN=${MAXCONN:-$((HARD - 1000))}   # per server worker; leaves room for files and listeners
[ "$CONNS_PER_WRK" -lt "$((HARD - 100))" ] || die "CONNS_PER_WRK must stay below the open-file limit $HARD"
[ -e "$CSV" ] && die "$CSV exists (choose another NAME)"
mkdir -p "$DEST"

bench_setup conc

ADDRS=""
for ((i = 1; i <= N_ADDRS; i++)); do ADDRS+="127.0.0.$i "; done
read -r -a ADDR_ARR <<<"$ADDRS"

{
    echo "# ScalWS concurrency sweep: bench/concurrency.sh"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git_commit: $(git -C "$REPO_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo none), $(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l) uncommitted paths"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) CPUs; kernel: $(uname -sr)"
    echo "# pinning: server ($SERVER_WORKERS workers, $MAXCONN connections each) on CPU $CPU_SERVER; wrk processes on CPU $CPU_LOAD"
    echo "# limits: nofile hard $HARD per process; somaxconn $(cat /proc/sys/net/core/somaxconn); ip_local_port_range $(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range); tcp_tw_reuse $(cat /proc/sys/net/ipv4/tcp_tw_reuse); loopback destinations: $ADDRS"
    echo "# load: wrk -t1 per process, at most $CONNS_PER_WRK connections each, ${DURATION}s per step, --timeout ${WRK_TIMEOUT}s, no warm-up (connections open at the step start)"
    v=""
    for s in $SERVERS; do v+="$s: $(srv_version "$s"); "; done
    echo "# versions: ${v}wrk: $($WRK -v 2>&1 | head -1 | awk '{print $2}')"
    echo "# command: $(printf 'SERVERS="%s" SCENARIOS="%s" STEPS="%s" RUNS=%s MODE=%s SERVER_WORKERS=%s CONNS_PER_WRK=%s N_ADDRS=%s bench/concurrency.sh' "$SERVERS" "$SCENARIOS" "$STEPS" "$RUNS" "$MODE" "$SERVER_WORKERS" "$CONNS_PER_WRK" "$N_ADDRS")"
    "$BENCH_PY" "$CONCLIB" columns
} >"$CSV"

row_na() {  # row_na SERVER SCENARIO STATUS REASON RUN
    printf '%s,%s,,,%s,,,,,,,,,,,,,,,,%s,"%s"\n' "$1" "$2" "$3" "$5" "${4//\"/\'}" | tee -a /dev/stderr >>"$CSV"
}

established() {  # established PORT: server-side established connections on it
    ss -Htn state established "( sport = :$1 )" 2>/dev/null | wc -l
}

step() {  # step SERVER SCENARIO PID CLIENTS RUN
    local srv=$1 scen=$2 pid=$3 c=$4 run=$5 nw k conns outs=() wpids=() before mid mem after est
    nw=$(((c + CONNS_PER_WRK - 1) / CONNS_PER_WRK))
    before=$("$BENCH_PY" "$BENCHLIB" snapshot "$pid")
    for ((k = 0; k < nw; k++)); do
        conns=$((c / nw + (k < c % nw ? 1 : 0)))
        outs+=("$RUN_DIR/$srv-$scen-$c-$run-$k.txt")
        "$WRK" -t1 -c"$conns" -d"${DURATION}s" --timeout "${WRK_TIMEOUT}s" -s "$BENCH_DIR/lib/report.lua" \
            "$(scen_url "$scen" "${ADDR_ARR[k % N_ADDRS]}")" >"${outs[k]}" 2>&1 &
        wpids+=("$!")
        BENCH_PIDS+=("$!")
    done
    sleep "$(awk -v d="$DURATION" 'BEGIN {print d * 0.6}')"
    est=$(established "$(scen_port "$scen")")
    mid=$("$BENCH_PY" "$BENCHLIB" snapshot "$pid")
    mem=$("$BENCH_PY" "$CONCLIB" pss "$pid")
    for k in "${wpids[@]}"; do wait "$k" || true; stop_pid "$k"; done
    after=$("$BENCH_PY" "$BENCHLIB" snapshot "$pid")
    "$BENCH_PY" "$CONCLIB" row --server "$srv" --scenario "$scen" --clients "$c" --run "$run" \
        --established "$est" --before "$before" --mid "$mid" --mem "$mem" --after "$after" "${outs[@]}" |
        tee -a /dev/stderr >>"$CSV"
}

read -r -a SRV_ARR <<<"$SERVERS"
for ((run = 1; run <= RUNS; run++)); do
    for scen in $SCENARIOS; do
        for ((j = 0; j < ${#SRV_ARR[@]}; j++)); do  # run r starts with server r-1, and so on
            srv=${SRV_ARR[(j + run - 1) % ${#SRV_ARR[@]}]}
            srv_reset_opts
            S_ADDRS=$ADDRS S_WORKERS=$SERVER_WORKERS S_MAXCONN=$MAXCONN
            if ! reason=$(srv_supports "$srv" "$scen"); then row_na "$srv" "$scen" n/a "$reason" "$run"; continue; fi
            if ! srv_start "$srv" "$scen"; then row_na "$srv" "$scen" failed "did not start: $(srv_start_failure)" "$run"; continue; fi
            pid=$LAST_PID
            if ! reason=$(preflight "$scen" "${ADDR_ARR[N_ADDRS - 1]}"); then
                stop_pid "$pid"
                row_na "$srv" "$scen" failed "$reason" "$run"
                continue
            fi
            lock_acquire
            for c in $STEPS; do
                log "run $run/$RUNS: $srv $scen: $c clients for ${DURATION}s"
                step "$srv" "$scen" "$pid" "$c" "$run"
                sleep "$STEP_PAUSE"
            done
            lock_release
            stop_pid "$pid"
        done
    done
done
"$BENCH_PY" "$CONCLIB" report "$CSV"
echo "results: $DEST"
