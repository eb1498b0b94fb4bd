#!/usr/bin/env bash
# One benchmark pass: every scenario on every server, side by side.
#
#   SERVERS="scalws nginx" SCENARIOS="respond static-small" MODE=quick bench/run.sh
#   OUT=results/x.csv MODE=release bench/run.sh
#
# Env: SERVERS (default "scalws nginx"), SCENARIOS (default all), MODE
# quick|release (2+5 s | 10+30 s; WARMUP=/DURATION= override), CONNS (64),
# CONNS_1M (16: cache-1m's connections), CACHE_SIZE (256m: the cache-*
# scenarios' cache memory; CACHE_TMPFS, /dev/shm, holds nginx's files),
# THREADS (1), H2_CONNS (64), H2_STREAMS (10), H3_GRO (1: h3load reads the
# server's GSO batches whole, UDP_GRO; 0: --no-gro), H2_LOG (1: h2load writes a
# per-request log for p50/p99; 0: none, which saves h2load a third of its
# work), CPU_SERVER (0), CPU_LOAD (1),
# PORT_BASE (18300), ROTATE (rotate server order by this many places),
# OUT (CSV file; default stdout), KEEP_RUN_DIR=1, BENCH_LOCK (or "none"),
# ONLY_WHERE=SERVER (scenarios SERVER cannot run are reported n/a for it and
# `skipped` for the others instead of being measured: make bench-quick),
# APP_IO_OUT (CSV: what the server made the app do per request, php/node/python),
# SERVER_QUOTA_PCT (unset: no cap; N: every server's process tree in a cgroup
# v1 cpu quota of N % of one CPU, 10 ms periods, so that the server and not the
# load tool limits the rate on a box whose client core saturates first;
# root). CPU per request is measured the same way with or without it.
# Output: CSV with '# ' header lines; see docs/benchmarks/README.md.
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
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
CONNS=${CONNS:-64} THREADS=${THREADS:-1} H2_CONNS=${H2_CONNS:-64} H2_STREAMS=${H2_STREAMS:-10}
H3_GRO=${H3_GRO:-1}
# cache-1m: fewer connections than the small scenarios, as suits a 1 MiB
# body: each answer is many socket writes, and what 64 connections add over
# 16 is mostly time queued in socket buffers (an expectation, not measured
# here: server_cpu_pct near 100 says the server was kept busy). static-1m
# keeps CONNS, as in the reports before it; CONNS_1M=64 makes the two
# comparable with each other.
CONNS_1M=${CONNS_1M:-16}
size_mib "$CACHE_SIZE" >/dev/null
WRK_TIMEOUT=${WRK_TIMEOUT:-5}
ROTATE=${ROTATE:-0}
H2_LOG=${H2_LOG:-1}
SERVER_QUOTA_PCT=${SERVER_QUOTA_PCT:-}
OUT=${OUT:-}
PHP_CHILDREN=${PHP_CHILDREN:-$CONNS}  # one child per client connection: no queueing behind kept-alive FastCGI connections
BENCH_COMMAND=${BENCH_COMMAND:-$(printf 'SERVERS="%s" SCENARIOS="%s" MODE=%s CPU_SERVER=%s CPU_LOAD=%s ROTATE=%s bench/run.sh' \
    "$SERVERS" "$SCENARIOS" "$MODE" "$CPU_SERVER" "$CPU_LOAD" "$ROTATE")}
[ -n "$SERVER_QUOTA_PCT" ] && BENCH_COMMAND="SERVER_QUOTA_PCT=$SERVER_QUOTA_PCT $BENCH_COMMAND"
[ "$H2_LOG" = 1 ] || BENCH_COMMAND="H2_LOG=$H2_LOG $BENCH_COMMAND"
case " $SCENARIOS " in *" cache-"*)
    [ "$CACHE_SIZE" = 256m ] || BENCH_COMMAND="CACHE_SIZE=$CACHE_SIZE $BENCH_COMMAND"
    [ "$CONNS_1M" = 16 ] || BENCH_COMMAND="CONNS_1M=$CONNS_1M $BENCH_COMMAND" ;;
esac

for s in $SCENARIOS; do scen_path "$s" >/dev/null || die "unknown scenario $s (known: $ALL_SCENARIOS)"; done
[ -n "$WRK" ] || die "wrk not installed (apt-get install wrk)"
[ -n "$H2LOAD" ] || die "h2load not installed (apt-get install nghttp2-client)"
# h3load (bench/h3load.c): rebuilt when missing or older than its source
case " $SCENARIOS " in *" tls-h3-"*) H3_WANTED=1 ;; *) H3_WANTED=0 ;; esac
if [ "$H3_WANTED" = 1 ] && { [ ! -x "$H3LOAD" ] || [ "$BENCH_DIR/h3load.c" -nt "$H3LOAD" ]; }; then
    mkdir -p "$(dirname "$H3LOAD")"
    gcc -O2 -Wall -o "$H3LOAD.tmp" "$BENCH_DIR/h3load.c" -lngtcp2_crypto_gnutls -lngtcp2 \
        -lnghttp3 -lgnutls || die "cannot build bench/h3load.c (make builddeps)"
    mv "$H3LOAD.tmp" "$H3LOAD"
fi

CG_SERVER=
if [ -n "$SERVER_QUOTA_PCT" ]; then
    [[ $SERVER_QUOTA_PCT =~ ^[0-9]+$ ]] && ((SERVER_QUOTA_PCT >= 5 && SERVER_QUOTA_PCT <= 100)) ||
        die "SERVER_QUOTA_PCT must be a whole percentage from 5 to 100"
    [ -w /sys/fs/cgroup/cpu ] || die "SERVER_QUOTA_PCT needs a writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu (root)"
    CG_SERVER=/sys/fs/cgroup/cpu/scalws-bench-$$
    BENCH_CLEANUP_EXTRA='[ -d "$CG_SERVER" ] && rmdir "$CG_SERVER"'
    mkdir -p "$CG_SERVER"
    echo 10000 >"$CG_SERVER/cpu.cfs_period_us"
    echo $((SERVER_QUOTA_PCT * 100)) >"$CG_SERVER/cpu.cfs_quota_us"
fi

bench_setup bench  # load, upstreams, apps and helpers on CPU_LOAD

if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; exec 3>"$OUT"; else exec 3>&1; fi

has() { case " $SCENARIOS " in *" $1 "*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------- header
tool_versions() {
    local v=()
    for s in $SERVERS; do v+=("$s: $(srv_version "$s")"); done
    v+=("wrk: $($WRK -v 2>&1 | head -1 | awk '{print $2}')")
    v+=("h2load: $($H2LOAD --version 2>&1 | head -1 | awk '{print $2}')")
    case " $SCENARIOS " in *" tls-h3-"*) v+=("h3load: bench/h3load.c (ngtcp2 $(dpkg-query -W -f='${Version}' libngtcp2-9 2>/dev/null || echo '?'))") ;; esac
    v+=("upstream nginx: $($NGINX -v 2>&1 | sed 's/^nginx version: //')")
    [ -n "$PHP_FPM" ] && v+=("php-fpm: $($PHP_FPM -v 2>/dev/null | head -1 | awk '{print $2}')")
    [ -n "$NODE" ] && v+=("node: $($NODE --version 2>/dev/null)")
    [ -x "$UVICORN" ] && v+=("uvicorn: $("$BENCH_PY" -c 'import uvicorn; print(uvicorn.__version__)' 2>/dev/null)")
    v+=("python: $("$BENCH_PY" -c 'import platform; print(platform.python_version())')")
    v+=("openssl: $(openssl version | awk '{print $2}')")
    local IFS=';'
    echo "${v[*]}" | sed 's/;/; /g'
}
git_desc() {
    local c dirty
    c=$(git -C "$REPO_DIR" rev-parse --short=12 HEAD 2>/dev/null) || c="none (no commits yet)"
    dirty=$(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l)
    echo "$c, $dirty uncommitted paths"
}
{
    echo "# ScalWS benchmark: bench/run.sh"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git_commit: $(git_desc)"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) CPUs; mem $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "# kernel: $(uname -sr)"
    echo "# pinning: servers on CPU $CPU_SERVER${SERVER_QUOTA_PCT:+, capped to $SERVER_QUOTA_PCT % of it (cgroup cpu quota, 10 ms periods)}; load generator, upstream, php-fpm, node, uvicorn on CPU $CPU_LOAD"
    echo "# mode: $MODE, warm-up ${WARMUP}s + measurement ${DURATION}s; HTTP/1.1: wrk -t$THREADS -c$CONNS --timeout ${WRK_TIMEOUT}s; h2: h2load -t1 -c$H2_CONNS -m$H2_STREAMS"
    case " $SCENARIOS " in *" tls-h3-"*)
        echo "# h3: bench/h3load -c$H2_CONNS -m$H2_STREAMS, UDP GRO $([ "$H3_GRO" = 1 ] && echo on || echo "off (H3_GRO=0)")" ;;
    esac
    case " $SCENARIOS " in *" cache-"*)
        read -r kz cm <<<"$(nginx_cache_split "$CACHE_SIZE")"
        echo "# cache: $CACHE_SIZE of memory on both; scalws cache_zones bench {max_size: $CACHE_SIZE, max_object_size: 8m}, route cache {zone: bench, valid: {200: 10m}}; nginx proxy_cache_path on tmpfs $CACHE_TMPFS keys_zone=bench:${kz}k max_size=${cm}k, proxy_cache_valid 200 10m, proxy_cache_lock on; upstream Cache-Control: max-age=3600; cache-hit /cache/1k.html wrk -c$CONNS, cache-1m /cache/1m.bin wrk -c$CONNS_1M" ;;
    esac
    case " $SCENARIOS " in *" tls-"*)
        echo "# tls: self-signed ECDSA P-256 certificate (ecdsa-with-SHA256); scalws and nginx alike (TLS 1.2 + 1.3, intermediate ciphers in server order, X25519, tickets on, no session cache), h2o and lighttpd with their defaults; tls-static-small, tls-respond: wrk over HTTPS (keep-alive: one handshake per connection), tls-h2-*: h2load" ;;
    esac
    echo "# versions: $(tool_versions)"
    echo "# command: $BENCH_COMMAND"
    "$BENCH_PY" "$BENCHLIB" columns
} >&3

# ---------------------------------------------------------------- backends
declare -A BACKEND_FAIL=() BACKEND_PID=()
backend() {  # backend NAME HOST PORT CMD...: start on CPU_LOAD, wait for its port
    local name=$1 port=$2
    shift 2
    require_free_port 127.0.0.1 "$port"
    start_bg "$CPU_LOAD" "$RUN_DIR/$name.log" "$@"
    if ! wait_port 127.0.0.1 "$port" "$LAST_PID" 20; then
        log "$name did not start: $(tail -n 3 "$RUN_DIR/$name.log" | tr '\n' ' ')"
        return 1
    fi
    BACKEND_PID[$name]=$LAST_PID
}
if has proxy || has tls-h2-proxy || has tls-h3-proxy || has cache-hit || has cache-1m; then
    if ! upstream_start; then
        for s in proxy tls-h2-proxy tls-h3-proxy cache-hit cache-1m; do BACKEND_FAIL[$s]="upstream nginx did not start"; done
    fi
fi
if has php; then
    if [ -z "$PHP_FPM" ]; then
        BACKEND_FAIL[php]="php-fpm not installed (apt-get install php-fpm)"
    else
        mkdir -p "$RUN_DIR/php-fpm"
        SDIR=$RUN_DIR/php-fpm USER=$(id -un) GROUP=$(id -gn) PHP_CHILDREN=$PHP_CHILDREN PHP_PORT=$PHP_PORT \
            render "$BENCH_DIR/configs/php-fpm.conf.tmpl" "$RUN_DIR/php-fpm/php-fpm.conf"
        root_flag=()
        [ "$(id -u)" = 0 ] && root_flag=(-R)
        backend php-fpm "$PHP_PORT" "$PHP_FPM" -F "${root_flag[@]}" -y "$RUN_DIR/php-fpm/php-fpm.conf" ||
            BACKEND_FAIL[php]="php-fpm did not start"
    fi
fi
if has node; then
    if [ -z "$NODE" ]; then
        BACKEND_FAIL[node]="node not installed (apt-get install nodejs)"
    else
        backend node "$NODE_PORT" "$NODE" "$BENCH_DIR/apps/hello.js" "$NODE_PORT" || BACKEND_FAIL[node]="node did not start"
    fi
fi
if has python; then
    if [ ! -x "$UVICORN" ]; then
        BACKEND_FAIL[python]="uvicorn not installed (.venv/bin/pip install uvicorn)"
    else
        backend uvicorn "$PYAPP_PORT" "$UVICORN" hello_asgi:app --app-dir "$BENCH_DIR/apps" \
            --host 127.0.0.1 --port "$PYAPP_PORT" --no-access-log --log-level warning \
            --timeout-keep-alive 75 || BACKEND_FAIL[python]="uvicorn did not start"
    fi
fi

# ---------------------------------------------------------------- measure
load_run() {  # load_run SCENARIO SECONDS OUTFILE [H2LOGFILE]
    local scen=$1 secs=$2 out=$3 h2log=${4:-} url
    url=$(scen_url "$scen")
    case $scen in
        tls-h2-*)
            local extra=()
            [ -n "$h2log" ] && [ "$H2_LOG" = 1 ] && extra=(--log-file "$h2log")
            "$H2LOAD" -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -D "$secs" "${extra[@]}" "$url" >"$out" 2>&1 & ;;
        tls-h3-*)  # the same connections and streams as h2 (no per-request log)
            local gro=()
            [ "$H3_GRO" = 1 ] || gro=(--no-gro)
            "$H3LOAD" -c"$H2_CONNS" -m"$H2_STREAMS" -D "$secs" --sni localhost "${gro[@]}" "$url" >"$out" 2>&1 & ;;
        *)
            local c=$CONNS
            [ "$scen" = cache-1m ] && c=$CONNS_1M
            "$WRK" -t"$THREADS" -c"$c" -d"${secs}s" --timeout "${WRK_TIMEOUT}s" \
                -s "$BENCH_DIR/lib/report.lua" "$url" >"$out" 2>&1 & ;;
    esac
    # in the background + wait: a TERM/Ctrl-C runs the cleanup trap at once
    local lp=$!
    BENCH_PIDS+=("$lp")
    wait "$lp" || true
    stop_pid "$lp"
}

emit() {
    if [ -n "$OUT" ]; then "$BENCH_PY" "$BENCHLIB" row "$@" | tee -a /dev/stderr >&3
    else "$BENCH_PY" "$BENCHLIB" row "$@" >&3; fi
}

ONLY_WHERE=${ONLY_WHERE:-}
declare -A SKIP=()
if [ -n "$ONLY_WHERE" ]; then
    for scen in $SCENARIOS; do
        if ! reason=$(srv_supports "$ONLY_WHERE" "$scen"); then SKIP[$scen]=$reason; fi
    done
fi

# APP_IO_OUT=FILE: on php, node and python, what the server made the
# application do per request (bench/lib/appio.py), appended to FILE.
APP_IO_OUT=${APP_IO_OUT:-}
if [ -n "$APP_IO_OUT" ] && [ ! -s "$APP_IO_OUT" ]; then "$BENCH_PY" "$BENCH_DIR/lib/appio.py" header >"$APP_IO_OUT"; fi
app_pid() {  # the application process of SCENARIO (its tree), when APP_IO_OUT is set
    [ -n "$APP_IO_OUT" ] || return 0
    case $1 in php) echo "${BACKEND_PID[php-fpm]:-}" ;; node) echo "${BACKEND_PID[node]:-}" ;; python) echo "${BACKEND_PID[uvicorn]:-}" ;; esac
}

measure() {  # measure SERVER SCENARIO ORDER
    local srv=$1 scen=$2 order=$3 reason pid before after ub ua tool=wrk app appb
    local base="$RUN_DIR/$srv-$scen"
    if [ -n "${SKIP[$scen]:-}" ]; then
        if [ "$srv" = "$ONLY_WHERE" ]; then
            emit --server "$srv" --scenario "$scen" --order "$order" --status n/a --reason "${SKIP[$scen]}"
        else
            emit --server "$srv" --scenario "$scen" --order "$order" --status skipped \
                --reason "not measured: $ONLY_WHERE cannot run it (ONLY_WHERE=$ONLY_WHERE)"
        fi
        return
    fi
    if [ -n "${BACKEND_FAIL[$scen]:-}" ]; then
        emit --server "$srv" --scenario "$scen" --order "$order" --status failed --reason "${BACKEND_FAIL[$scen]}"
        return
    fi
    if ! reason=$(srv_supports "$srv" "$scen"); then
        emit --server "$srv" --scenario "$scen" --order "$order" --status n/a --reason "$reason"
        return
    fi
    srv_reset_opts
    S_CGROUP=$CG_SERVER
    if ! srv_start "$srv" "$scen"; then
        emit --server "$srv" --scenario "$scen" --order "$order" --status failed \
            --reason "did not start: $(srv_start_failure)"
        return
    fi
    pid=$LAST_PID
    if ! reason=$(preflight "$scen"); then
        stop_pid "$pid"
        emit --server "$srv" --scenario "$scen" --order "$order" --status failed --reason "$reason"
        return
    fi
    case $scen in tls-h2-* | tls-h3-*) tool=h2load ;; esac
    log "$srv $scen: warm-up ${WARMUP}s, measurement ${DURATION}s"
    lock_acquire
    load_run "$scen" "$WARMUP" "$base.warmup.txt"
    ub= ua=
    case $scen in proxy | tls-h2-proxy | tls-h3-proxy | cache-*) ub=$(upstream_count) ;; esac
    app=$(app_pid "$scen") appb=
    [ -n "$app" ] && appb=$("$BENCH_PY" "$BENCH_DIR/lib/appio.py" snap "$app")
    before=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    load_run "$scen" "$DURATION" "$base.load.txt" "$base.h2log"
    after=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    [ -n "$appb" ] && "$BENCH_PY" "$BENCH_DIR/lib/appio.py" row --server "$srv" --scenario "$scen" \
        --out "$base.load.txt" --conns "$CONNS" --before "$appb" \
        --after "$("$BENCH_PY" "$BENCH_DIR/lib/appio.py" snap "$app")" >>"$APP_IO_OUT"
    case $scen in proxy | tls-h2-proxy | tls-h3-proxy | cache-*) ua=$(upstream_count) ;; esac
    lock_release
    stop_pid "$pid"
    emit --server "$srv" --scenario "$scen" --order "$order" --tool "$tool" --out "$base.load.txt" \
        --h2log "$base.h2log" --before "$before" --after "$after" \
        --upstream-before "$ub" --upstream-after "$ua" --expect-cpus "$CPU_SERVER"
    rm -f "$base.h2log"
}

read -r -a ORDERED <<<"$(rotate_list "$ROTATE" $SERVERS)"
log "run dir $RUN_DIR; servers in order: ${ORDERED[*]}; scenarios: $SCENARIOS"
for scen in $SCENARIOS; do
    i=0
    for srv in "${ORDERED[@]}"; do
        i=$((i + 1))
        measure "$srv" "$scen" "$i"
    done
done
log "done"
