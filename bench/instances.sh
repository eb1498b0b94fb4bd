#!/usr/bin/env bash
# One instance against N: N separate server instances (one worker each), each
# capped to the same CPU share with a cgroup v1 cpu quota, so that the server
# side (N x QUOTA_PCT % of CPU_SERVER) stays below what the load generator on
# CPU_LOAD can drive. efficiency = rps(N) / (N x rps(1)).
#
#   SERVERS="scalws nginx" SCENARIOS="respond static-small" INSTANCES=3 QUOTA_PCT=25 bench/instances.sh
#
# Instance i listens on 127.0.0.i:PORT; the load is N wrk processes of
# CONNS/N connections, wrk i on instance i (the same total connections for 1
# and N). Env: SERVERS, SCENARIOS, INSTANCES (3), QUOTA_PCT (25), CONNS (64),
# MODE quick|release (2+5 s | 10+30 s), RUNS (1; medians when more),
# NAME, RESULTS, CPU_SERVER, CPU_LOAD. Needs root and /sys/fs/cgroup/cpu.
# Output: results/<NAME>/instances.csv and instances.md.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$BENCH_DIR/lib/servers.sh"

MODE=${MODE:-quick}
case $MODE in
    quick) WARMUP=${WARMUP:-2} DURATION=${DURATION:-5} ;;
    release) WARMUP=${WARMUP:-10} DURATION=${DURATION:-30} ;;
    *) die "MODE must be quick or release" ;;
esac
SERVERS=${SERVERS:-scalws nginx}
SCENARIOS=${SCENARIOS:-respond static-small}
INSTANCES=${INSTANCES:-3}
QUOTA_PCT=${QUOTA_PCT:-25}
CONNS=${CONNS:-64}
RUNS=${RUNS:-1}
NAME=${NAME:-instances-$(date +%Y%m%d-%H%M%S)-$MODE}
RESULTS=${RESULTS:-$REPO_DIR/results}
DEST=$RESULTS/$NAME
CSV=$DEST/instances.csv
CG_ROOT=${CG_ROOT:-/sys/fs/cgroup/cpu}
CFS_PERIOD_US=${CFS_PERIOD_US:-10000}   # short period: throttling in small slices, not 75 ms stalls

[ -w "$CG_ROOT" ] || die "needs a writable cgroup v1 cpu controller at $CG_ROOT (run as root)"
[ $((INSTANCES * QUOTA_PCT)) -le 100 ] || die "INSTANCES x QUOTA_PCT must fit in one CPU (<= 100)"
for s in $SCENARIOS; do case $s in tls-h2-*) die "instances.sh measures HTTP/1.1 scenarios only" ;; esac; done
[ -e "$CSV" ] && die "$CSV exists (choose another NAME)"
mkdir -p "$DEST"

CG_BASE=$CG_ROOT/scalws-bench-$$
BENCH_CLEANUP_EXTRA='for d in "$CG_BASE"/inst-*; do [ -d "$d" ] && rmdir "$d"; done; [ -d "$CG_BASE" ] && rmdir "$CG_BASE"'
bench_setup inst
mkdir -p "$CG_BASE"

# upstream for proxy / cache-* if asked for
if [[ " $SCENARIOS " == *" proxy "* || " $SCENARIOS " == *" cache-"* ]]; then
    upstream_start || die "upstream nginx did not start"
fi

{
    echo "# ScalWS instances: bench/instances.sh"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git_commit: $(git -C "$REPO_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo none), $(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l) uncommitted paths"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) CPUs; kernel: $(uname -sr)"
    echo "# pinning: every instance on CPU $CPU_SERVER, each in its own cgroup with cpu.cfs_quota_us = $QUOTA_PCT % of cfs_period_us $CFS_PERIOD_US; wrk on CPU $CPU_LOAD"
    echo "# mode: $MODE, warm-up ${WARMUP}s + measurement ${DURATION}s, $RUNS run(s) (median); wrk -t1, $CONNS connections in total split over the instances"
    v=""
    for s in $SERVERS; do v+="$s: $(srv_version "$s"); "; done
    echo "# versions: ${v}wrk: $($WRK -v 2>&1 | head -1 | awk '{print $2}')"
    echo "# command: $(printf 'SERVERS="%s" SCENARIOS="%s" INSTANCES=%s QUOTA_PCT=%s MODE=%s RUNS=%s bench/instances.sh' "$SERVERS" "$SCENARIOS" "$INSTANCES" "$QUOTA_PCT" "$MODE" "$RUNS")"
    "$BENCH_PY" "$BENCHLIB" inst-columns
} >"$CSV"

row_na() { printf '%s,%s,%s,%s,%s,,,,,,,,"%s"\n' "$1" "$2" "$3" "$QUOTA_PCT" "$4" "${5//\"/\'}" | tee -a /dev/stderr >>"$CSV"; }

load_n() {  # load_n SCENARIO N SECONDS OUTPREFIX: N wrk processes, wrk i -> instance i
    local scen=$1 n=$2 secs=$3 prefix=$4 i pids=()
    for ((i = 1; i <= n; i++)); do
        "$WRK" -t1 -c$((CONNS / n)) -d"${secs}s" --timeout 5s -s "$BENCH_DIR/lib/report.lua" \
            "$(scen_url "$scen" "127.0.0.$i")" >"$prefix-$i.txt" 2>&1 &
        pids+=("$!")
        BENCH_PIDS+=("$!")
    done
    for i in "${pids[@]}"; do wait "$i" || true; stop_pid "$i"; done
}

measure_n() {  # measure_n SERVER SCENARIO N RUN
    local srv=$1 scen=$2 n=$3 run=$4 i pids=() reason before after outs=()
    for ((i = 1; i <= n; i++)); do
        mkdir -p "$CG_BASE/inst-$i"
        echo "$CFS_PERIOD_US" >"$CG_BASE/inst-$i/cpu.cfs_period_us"
        echo $((QUOTA_PCT * CFS_PERIOD_US / 100)) >"$CG_BASE/inst-$i/cpu.cfs_quota_us"
        srv_reset_opts
        S_TAG=inst$i S_ADDRS=127.0.0.$i S_CGROUP=$CG_BASE/inst-$i
        if ! srv_start "$srv" "$scen"; then
            row_na "$srv" "$scen" "$n" failed "instance $i did not start: $(srv_start_failure)"
            for i in "${pids[@]}"; do stop_pid "$i"; done
            return
        fi
        pids+=("$LAST_PID")
        if ! reason=$(preflight "$scen" "127.0.0.$i"); then
            row_na "$srv" "$scen" "$n" failed "instance $i: $reason"
            for i in "${pids[@]}"; do stop_pid "$i"; done
            return
        fi
    done
    log "$srv $scen: $n instance(s) x $QUOTA_PCT % CPU, run $run"
    lock_acquire
    load_n "$scen" "$n" "$WARMUP" "$RUN_DIR/warm"
    before=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" "${pids[@]}")
    load_n "$scen" "$n" "$DURATION" "$RUN_DIR/$srv-$scen-$n-$run"
    after=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" "${pids[@]}")
    lock_release
    for i in "${pids[@]}"; do stop_pid "$i"; done
    for ((i = 1; i <= n; i++)); do outs+=("$RUN_DIR/$srv-$scen-$n-$run-$i.txt"); done
    "$BENCH_PY" "$BENCHLIB" inst-row --server "$srv" --scenario "$scen" --instances "$n" \
        --quota_pct "$QUOTA_PCT" --before "$before" --after "$after" "${outs[@]}" | tee -a /dev/stderr >>"$CSV"
}

# Run by run, every server in turn (the order rotated each run), not each
# server's runs as a block: on a VM whose speed drifts within minutes,
# blocks put the drift between the servers (docs/benchmarks/2026-12-05-tls.md).
for scen in $SCENARIOS; do
    able=()
    for srv in $SERVERS; do
        srv_reset_opts
        if ! reason=$(srv_supports "$srv" "$scen"); then
            row_na "$srv" "$scen" 1 n/a "$reason"
            row_na "$srv" "$scen" "$INSTANCES" n/a "$reason"
        else
            able+=("$srv")
        fi
    done
    [ ${#able[@]} -gt 0 ] || continue
    for ((r = 1; r <= RUNS; r++)); do
        for srv in $(rotate_list "$((r - 1))" "${able[@]}"); do
            for n in 1 "$INSTANCES"; do measure_n "$srv" "$scen" "$n" "$r"; done
        done
    done
done
"$BENCH_PY" "$BENCHLIB" inst-report "$CSV"
echo "results: $DEST"
