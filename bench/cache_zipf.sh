#!/usr/bin/env bash
# Response caches under a Zipf key mix larger than the cache: hit ratio,
# entries held, evictions and memory per stored entry, ScalWS's cache beside
# nginx's proxy_cache (on a tmpfs) with the same memory.
#
#   bench/cache_zipf.sh                                       # scalws nginx, 10 s + 30 s, one run
#   NAME=2026-12-05-zipf RUNS=3 SERVERS="scalws nginx" bench/cache_zipf.sh
#   WARMUP=1 DURATION=2 SERVERS=nginx bench/cache_zipf.sh     # a check of the pipes
#
# Every request is GET /cache/zipf/<k>, k in 0..KEYS-1 drawn from a Zipf law
# of exponent ZIPF_S by bench/lib/zipf.lua (wrk, seeded: every server gets
# the same sequence of keys; the measurement uses another seed than the
# warm-up). The upstream nginx (bench/configs/upstream-nginx.conf.tmpl)
# answers every key with the same OBJ_SIZE body and Cache-Control:
# max-age=3600; the server under test caches it in CACHE_SIZE of memory:
#   scalws  cache_zones bench {max_size: CACHE_SIZE} (bench/lib/gen_scalws.py,
#           scenario cache-zipf), and its status listener on PORT_BASE+14,
#           whose /status JSON gives the cache counters (entries, evictions,
#           bytes: whatever it has is printed)
#   nginx   proxy_cache_path on a tmpfs (CACHE_TMPFS) with keys_zone +
#           max_size = CACHE_SIZE, keys_zone holding as many keys as max_size
#           holds OBJ_SIZE answers (nginx_cache_split in bench/lib/servers.sh)
# Per server: restart, preflight (key 0 twice: 200, the body, the second a
# hit), warm-up WARMUP s (fills the cache and reaches eviction), then the
# measurement DURATION s, in which are counted: the answers by what the cache
# said (Cache-Status / X-Cache), the requests that reached the upstream (its
# stub_status), and afterwards the entries held, evictions and memory per
# entry (ScalWS from /status, nginx from its cache files).
#
# Env: SERVERS (scalws nginx), RUNS (1; the order rotates), KEYS (100000),
# ZIPF_S (1.0), OBJ_SIZE (4096), CACHE_SIZE (64m), WARMUP (10), DURATION
# (30), CONNS (32), SEED (1), NAME, RESULTS, CPU_SERVER (0), CPU_LOAD (1),
# PORT_BASE, BENCH_LOCK, CACHE_TMPFS (/dev/shm), KEEP_RUN_DIR=1.
# Output: results/<NAME>/cache_zipf.csv (a row per run × server, '# '
# header lines), cache_zipf.md, and scalws's /status JSON before and after
# each measurement (status-<server>-<run>-{before,after}.json).
set -euo pipefail
CACHE_SIZE=${CACHE_SIZE:-64m}   # before common.sh, whose default (run.sh's) is 256m
source "$(dirname "$0")/lib/common.sh"
ZIPFLIB=$BENCH_DIR/lib/zipflib.py
source "$BENCH_DIR/lib/servers.sh"

SERVERS=${SERVERS:-scalws nginx}
RUNS=${RUNS:-1}
KEYS=${KEYS:-100000}
ZIPF_S=${ZIPF_S:-1.0}
OBJ_SIZE=${OBJ_SIZE:-4096}
WARMUP=${WARMUP:-10}
DURATION=${DURATION:-30}
CONNS=${CONNS:-32}
SEED=${SEED:-1}
WRK_TIMEOUT=${WRK_TIMEOUT:-5}
NAME=${NAME:-zipf-$(date +%Y%m%d-%H%M%S)}
RESULTS=${RESULTS:-$REPO_DIR/results}
DEST=$RESULTS/$NAME
CSV=$DEST/cache_zipf.csv

[ -n "$WRK" ] || die "wrk not installed (apt-get install wrk)"
[ "$RUNS" -ge 1 ] || die "RUNS must be at least 1"
[[ $KEYS =~ ^[0-9]+$ && $OBJ_SIZE =~ ^[0-9]+$ && $SEED =~ ^[0-9]+$ ]] || die "KEYS, OBJ_SIZE and SEED are integers"
[[ $ZIPF_S =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "ZIPF_S is a number (1.0)"
for s in $SERVERS; do
    case $s in scalws | scalws-base | nginx) ;; *) die "$s has no response cache here (scalws, scalws-base, nginx)" ;; esac
done
CACHE_MIB=$(size_mib "$CACHE_SIZE")
CACHE_OBJ_SIZE=$OBJ_SIZE   # srv_start sizes nginx's keys_zone for as many of these as max_size holds
read -r KZ_KIB CM_KIB <<<"$(nginx_cache_split "$CACHE_SIZE" "$OBJ_SIZE")"
WORKSET_MIB=$((KEYS * OBJ_SIZE / 1048576))
((WORKSET_MIB > 2 * CACHE_MIB)) ||
    log "warning: the working set ($KEYS x $OBJ_SIZE B = $WORKSET_MIB MiB of bodies) is not well above CACHE_SIZE=$CACHE_SIZE: little will be evicted"
[ -e "$CSV" ] && die "$CSV exists (choose another NAME)"

mkdir -p "$DEST"
bench_setup zipf  # the certificate is unused here, but nginx.conf.tmpl names one
head -c "$OBJ_SIZE" /dev/urandom >"$WWW/static/zipf.bin"
upstream_start || die "upstream nginx did not start"

{
    echo "# ScalWS response cache under a Zipf key mix: bench/cache_zipf.sh"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git_commit: $(git -C "$REPO_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo none), $(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l) uncommitted paths"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) CPUs; kernel: $(uname -sr)"
    echo "# pinning: servers (one worker) on CPU $CPU_SERVER; wrk and the upstream nginx on CPU $CPU_LOAD"
    echo "# keys: $KEYS distinct URLs /cache/zipf/<k>, Zipf exponent $ZIPF_S, $OBJ_SIZE B bodies with Cache-Control: max-age=3600 ($WORKSET_MIB MiB of bodies in all); seeds $SEED (warm-up), $((SEED + 1)) (measurement)"
    echo "# cache: $CACHE_SIZE of memory on both; scalws cache_zones bench {max_size: $CACHE_SIZE, max_object_size: 8m}, route cache {zone: bench, valid: {200: 10m}}; nginx proxy_cache_path on tmpfs $CACHE_TMPFS keys_zone=bench:${KZ_KIB}k max_size=${CM_KIB}k inactive=60m, proxy_cache_valid 200 10m, proxy_cache_lock on"
    echo "# load: wrk -t1 -c$CONNS --timeout ${WRK_TIMEOUT}s -s bench/lib/zipf.lua; warm-up ${WARMUP}s + measurement ${DURATION}s, $RUNS run(s)"
    v=""
    for s in $SERVERS; do v+="$s: $(srv_version "$s"); "; done
    echo "# versions: ${v}wrk: $($WRK -v 2>&1 | head -1 | awk '{print $2}'); upstream nginx: $($NGINX -v 2>&1 | sed 's/^nginx version: //')"
    echo "# command: $(printf 'NAME=%s RUNS=%s SERVERS="%s" KEYS=%s ZIPF_S=%s OBJ_SIZE=%s CACHE_SIZE=%s WARMUP=%s DURATION=%s CONNS=%s SEED=%s bench/cache_zipf.sh' \
        "$NAME" "$RUNS" "$SERVERS" "$KEYS" "$ZIPF_S" "$OBJ_SIZE" "$CACHE_SIZE" "$WARMUP" "$DURATION" "$CONNS" "$SEED")"
    "$BENCH_PY" "$ZIPFLIB" columns
} >"$CSV"

emit() {
    "$BENCH_PY" "$ZIPFLIB" row --keys "$KEYS" --zipf-s "$ZIPF_S" --obj-size "$OBJ_SIZE" \
        --budget-mib "$CACHE_MIB" "$@" | tee -a /dev/stderr >>"$CSV"
}

zipf_load() {  # zipf_load SECONDS SEED OUTFILE
    "$WRK" -t1 -c"$CONNS" -d"${1}s" --timeout "${WRK_TIMEOUT}s" -s "$BENCH_DIR/lib/zipf.lua" \
        "http://127.0.0.1:$HTTP_PORT/" -- "$KEYS" "$ZIPF_S" "$2" /cache/zipf/ >"$3" 2>&1 &
    local lp=$!
    BENCH_PIDS+=("$lp")
    wait "$lp" || true
    stop_pid "$lp"
}

zipf_preflight() {  # prints the problem and fails
    local url="http://127.0.0.1:$HTTP_PORT/cache/zipf/0" code verdict
    for _ in 1 2; do
        code=$(curl -s -o "$RUN_DIR/preflight.body" -D "$RUN_DIR/preflight.head" --max-time 10 \
            -w '%{http_code}' "$url" 2>&1) || { echo "preflight: curl $url failed ($code)"; return 1; }
    done
    [ "$code" = 200 ] || { echo "preflight: $url answered $code"; return 1; }
    cmp -s "$RUN_DIR/preflight.body" "$WWW/static/zipf.bin" || { echo "preflight: $url body differs from zipf.bin"; return 1; }
    verdict=$(cache_verdict "$RUN_DIR/preflight.head")
    [ "$verdict" = hit ] || { echo "preflight: the second answer of $url was not a cache hit ($verdict)"; return 1; }
}

status_get() {  # status_get OUTFILE: scalws's /status JSON (a few tries: the listener starts beside the workers)
    local i
    for i in 1 2 3 4 5; do
        curl -s --max-time 2 -o "$1" "http://127.0.0.1:$STATUS_PORT/status" && [ -s "$1" ] && return 0
        sleep 0.2
    done
    rm -f "$1"
    log "no /status from 127.0.0.1:$STATUS_PORT"
}

measure() {  # measure SERVER RUN ORDER
    local srv=$1 run=$2 order=$3 reason pid before after ub0 ub ua
    local base="$RUN_DIR/$srv-$run" row=(--server "$1" --run "$2" --order "$3") extra=()
    if ! reason=$(srv_supports "$srv" cache-zipf); then
        emit "${row[@]}" --status n/a --reason "$reason"
        return
    fi
    srv_reset_opts
    ub0=$(upstream_count)   # from here every upstream request is this server's
    if ! srv_start "$srv" cache-zipf; then
        emit "${row[@]}" --status failed --reason "did not start: $(srv_start_failure)"
        return
    fi
    pid=$LAST_PID
    if ! reason=$(zipf_preflight); then
        stop_pid "$pid"
        emit "${row[@]}" --status failed --reason "$reason"
        return
    fi
    log "run $run: $srv: warm-up ${WARMUP}s, measurement ${DURATION}s"
    lock_acquire
    zipf_load "$WARMUP" "$SEED" "$base.warmup.txt"
    ub=$(upstream_count)
    case $srv in scalws*) status_get "$DEST/status-$srv-$run-before.json" ;; esac
    before=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    zipf_load "$DURATION" "$((SEED + 1))" "$base.txt"
    after=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    ua=$(upstream_count)
    case $srv in
        scalws*)
            status_get "$DEST/status-$srv-$run-after.json"
            extra=(--status-before "$DEST/status-$srv-$run-before.json" --status-after "$DEST/status-$srv-$run-after.json") ;;
        nginx) extra=(--cache-dir "$NGINX_CACHE_DIR" --keys-zone-kib "$KZ_KIB") ;;
    esac
    lock_release
    stop_pid "$pid"
    emit "${row[@]}" --out "$base.txt" --before "$before" --after "$after" --upstream-start "$ub0" \
        --upstream-before "$ub" --upstream-after "$ua" --expect-cpus "$CPU_SERVER" "${extra[@]}"
}

log "run dir $RUN_DIR; servers: $SERVERS; $RUNS run(s); $KEYS keys, s=$ZIPF_S, $OBJ_SIZE B, cache $CACHE_SIZE"
for ((i = 1; i <= RUNS; i++)); do
    read -r -a ORDERED <<<"$(rotate_list "$((i - 1))" $SERVERS)"
    k=0
    for srv in "${ORDERED[@]}"; do
        k=$((k + 1))
        measure "$srv" "$i" "$k"
    done
done
"$BENCH_PY" "$ZIPFLIB" report "$CSV"
echo "results: $DEST (cache_zipf.csv, cache_zipf.md)"
