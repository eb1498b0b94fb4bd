# shellcheck shell=bash
# Shared helpers for the bench/*.sh scripts. Sourced, never run.
#
# Conventions: every long-lived process we start goes through start_bg and is
# recorded in BENCH_PIDS; cleanup (trap on EXIT, INT, TERM) stops each of them
# and their descendants by pid. Load runs go through lock_acquire/lock_release
# on $BENCH_LOCK so two benchmark sessions on this machine never overlap.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
BENCH_PY=${BENCH_PY:-$REPO_DIR/.venv/bin/python}
[ -x "$BENCH_PY" ] || BENCH_PY=$(command -v python3)
BENCHLIB="$BENCH_DIR/lib/benchlib.py"

CPU_SERVER=${CPU_SERVER:-0}
CPU_LOAD=${CPU_LOAD:-1}
PORT_BASE=${PORT_BASE:-18300}
HTTP_PORT=$PORT_BASE
HTTPS_PORT=$((PORT_BASE + 1))
UP_PORT=$((PORT_BASE + 10))      # upstream nginx ("hello world")
PHP_PORT=$((PORT_BASE + 11))     # php-fpm
NODE_PORT=$((PORT_BASE + 12))    # node hello.js
PYAPP_PORT=$((PORT_BASE + 13))   # uvicorn hello_asgi
STATUS_PORT=$((PORT_BASE + 14))  # scalwsd's status listener (bench/cache_zipf.sh reads its cache counters)
BENCH_LOCK=${BENCH_LOCK:-/tmp/scalws-bench.lock}
# Idle FastCGI connections each server keeps to PHP-FPM (the php scenario):
# nginx's `keepalive` of `upstream php`, ScalWS's `keepalive` of its php
# upstream; set alike. 8 with PHP_CHILDREN=4 is issue 36's arrangement.
PHP_KEEPALIVE=${PHP_KEEPALIVE:-64}

SCALWSD=${SCALWSD:-$REPO_DIR/.venv/bin/scalwsd}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
H2O=${H2O:-$(command -v h2o || echo /usr/bin/h2o)}
LIGHTTPD=${LIGHTTPD:-$(command -v lighttpd || echo /usr/sbin/lighttpd)}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
PHP_FPM=${PHP_FPM:-$(ls /usr/sbin/php-fpm* 2>/dev/null | sort -V | tail -1)}
NODE=${NODE:-$(command -v node || command -v nodejs || true)}
UVICORN=${UVICORN:-$REPO_DIR/.venv/bin/uvicorn}
WRK=${WRK:-$(command -v wrk || true)}
H2LOAD=${H2LOAD:-$(command -v h2load || true)}
CADDY=${CADDY:-$(command -v caddy || echo /usr/bin/caddy)}
# HTTP/3's load (bench/h3load.c, h2load's output shape): built by run.sh
H3LOAD=${H3LOAD:-$REPO_DIR/build/bench/h3load}

# the TLS ones together: HTTP/1.1 over TLS (tls-static-small, tls-respond:
# static-small and respond over HTTPS), then HTTP/2
ALL_SCENARIOS="static-small static-1m respond proxy cache-hit cache-1m tls-static-small tls-respond tls-h2-static-small tls-h2-respond tls-h2-proxy tls-h3-static-small tls-h3-proxy php node python"

# The response caches of the cache-* scenarios and bench/cache_zipf.sh:
# CACHE_SIZE is ScalWS's zone (`max_size`: keys, heads and bodies in one
# shared mapping); nginx gets the same memory split into keys_zone and the
# files' max_size (nginx_cache_split in servers.sh), its files on a tmpfs
# under CACHE_TMPFS so that both caches live in memory.
CACHE_SIZE=${CACHE_SIZE:-256m}
CACHE_TMPFS=${CACHE_TMPFS:-/dev/shm}

BENCH_PIDS=()
LAST_PID=
SHM_DIR=

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

# descendants PID: every descendant pid of PID (children first, recursively)
descendants() {
    local p
    for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$p"
        descendants "$p"
    done
}

# kill_tree PID [GRACE_S]: TERM to PID (graceful stop for nginx/scalwsd/php-fpm),
# wait up to GRACE_S, then KILL whatever is left of PID and its descendants.
kill_tree() {
    local root=$1 grace=${2:-10} pids i
    kill -0 "$root" 2>/dev/null || return 0
    pids="$root $(descendants "$root" | tr '\n' ' ')"
    kill -TERM "$root" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$root" 2>/dev/null || break
        sleep 0.1
    done
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$root" 2>/dev/null || true
}

# start_bg CPU LOGFILE CMD...: start CMD pinned to CPU (a taskset list) in the
# background; sets LAST_PID and records it for cleanup. taskset execs CMD, so
# LAST_PID is the server's own pid (the root of its process tree).
start_bg() {
    local cpu=$1 logf=$2
    shift 2
    taskset -c "$cpu" "$@" >>"$logf" 2>&1 </dev/null &
    LAST_PID=$!
    BENCH_PIDS+=("$LAST_PID")
}

stop_pid() {   # stop_pid PID: kill_tree and forget it
    local pid=$1 kept=() p
    kill_tree "$pid"
    for p in "${BENCH_PIDS[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
    BENCH_PIDS=("${kept[@]}")
}

bench_cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    lock_release
    for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
        kill_tree "${BENCH_PIDS[i]}" 5
    done
    BENCH_PIDS=()
    if [ -n "${BENCH_CLEANUP_EXTRA:-}" ]; then eval "$BENCH_CLEANUP_EXTRA" || true; fi
    # cache files live in RAM: removed whatever happened (KEEP_RUN_DIR keeps configs and logs only)
    if [ -n "$SHM_DIR" ] && [ -d "$SHM_DIR" ]; then rm -rf "$SHM_DIR"; fi
    if [ -n "${RUN_DIR:-}" ] && [ -d "$RUN_DIR" ] && [ "${KEEP_RUN_DIR:-0}" != 1 ] && [ "$rc" = 0 ]; then
        rm -rf "$RUN_DIR"
    elif [ -n "${RUN_DIR:-}" ] && [ -d "$RUN_DIR" ]; then
        log "run dir kept: $RUN_DIR"
    fi
    exit "$rc"
}
install_traps() {
    trap bench_cleanup EXIT
    trap 'log "interrupted"; exit 130' INT
    trap 'log "terminated"; exit 143' TERM
}

# shm_dir: SHM_DIR, a directory of ours on the tmpfs CACHE_TMPFS (made once,
# removed by bench_cleanup), for nginx's cache files; fails if CACHE_TMPFS
# is not a tmpfs. Call it in the main shell, not in $(...), so that SHM_DIR
# is set where the cleanup runs.
shm_dir() {
    if [ -z "$SHM_DIR" ]; then
        [ "$(stat -f -c %T "$CACHE_TMPFS" 2>/dev/null)" = tmpfs ] || return 1
        SHM_DIR=$(mktemp -d "$CACHE_TMPFS/scalws-bench.XXXXXX") || return 1
        chmod 755 "$SHM_DIR"
    fi
}

# size_mib SIZE: "256m" / "1g" / "65536k" -> MiB (an integer; k rounded up)
size_mib() {
    local n=${1%?}
    [[ $n =~ ^[0-9]+$ ]] || die "size '$1': give it as Nk, Nm or Ng"
    case $1 in
        *[mM]) echo "$n" ;;
        *[gG]) echo $((n * 1024)) ;;
        *[kK]) echo $(((n + 1023) / 1024)) ;;
        *) die "size '$1': give it as Nk, Nm or Ng" ;;
    esac
}

# port_open HOST PORT
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# wait_port HOST PORT PID [TIMEOUT_S]: until HOST:PORT accepts, PID must stay alive.
wait_port() {
    local host=$1 port=$2 pid=$3 t=${4:-15} i
    for ((i = 0; i < t * 20; i++)); do
        port_open "$host" "$port" && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

require_free_port() {  # refuse to start over someone else's server
    if port_open "$1" "$2"; then die "$1:$2 is already in use (set PORT_BASE=...)"; fi
}

# ---- the benchmark lock --------------------------------------------------
# If a parent already holds $BENCH_LOCK (someone ran `flock LOCK bench/run.sh`),
# we run inside its lock instead of deadlocking on it.
lock_held_by_ancestor() {
    local ino holders p
    [ -e "$BENCH_LOCK" ] || return 1
    ino=$(stat -c %i "$BENCH_LOCK")
    holders=$(awk -v ino="$ino" '$2 != "->" && $2 == "FLOCK" { split($6, a, ":"); if (a[3] == ino) print $5 }' /proc/locks)
    [ -n "$holders" ] || return 1
    p=$BASHPID
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        for h in $holders; do [ "$h" = "$p" ] && return 0; done
        p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
    done
    return 1
}
LOCK_HELD=0
lock_acquire() {
    [ "$BENCH_LOCK" = none ] && return 0
    [ "$LOCK_HELD" = 1 ] && return 0
    if lock_held_by_ancestor; then LOCK_HELD=2; return 0; fi
    exec 9>>"$BENCH_LOCK"
    if ! flock -n 9; then
        log "waiting for $BENCH_LOCK (another benchmark is running)"
        flock 9
    fi
    LOCK_HELD=1
}
lock_release() {
    if [ "$LOCK_HELD" = 1 ]; then flock -u 9 2>/dev/null || true; exec 9>&-; fi
    LOCK_HELD=0
}

# ---- shared content ------------------------------------------------------
# prepare_content DIR: the files every server serves (same bytes everywhere).
prepare_content() {
    local d=$1
    mkdir -p "$d/www/static" "$d/www/php" "$d/tmp"
    "$BENCH_PY" - "$d/www/static" <<'PY'
import sys, os
d = sys.argv[1]
line = b"ScalWS benchmark static file: 1 KiB of text, the same on every server.\n"
small = (line * 64)[:1024]
open(os.path.join(d, "1k.html"), "wb").write(small)
block = bytes(range(256)) * 4096          # 1 MiB, deterministic
open(os.path.join(d, "1m.bin"), "wb").write(block)
PY
    cp "$BENCH_DIR/apps/hello.php" "$d/www/php/hello.php"
}

# make_cert DIR: self-signed ECDSA P-256 certificate for 127.0.0.1/localhost
# (DIR/cert.pem, DIR/key.pem; signed with ecdsa-with-SHA256): the one every
# TLS scenario uses.
make_cert() {
    local d=$1
    [ -s "$d/cert.pem" ] && return 0
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$d/key.pem" -out "$d/cert.pem" >/dev/null 2>&1 || die "openssl could not make a certificate"
}

# bench_setup NAME: what every script does before it measures, in the main
# shell (not in $(...): RUN_DIR must be set where the cleanup runs):
# RUN_DIR=/tmp/scalws-NAME.XXXXXX (removed on success, kept on failure or
# with KEEP_RUN_DIR=1), the cleanup traps, the hard file limit, this shell
# and what it starts on CPU_LOAD (servers get their own taskset on
# CPU_SERVER), and the content and ECDSA certificate every server serves
# (WWW, CERT, KEY). A script's BENCH_CLEANUP_EXTRA may be set after it.
bench_setup() {
    RUN_DIR=$(mktemp -d "/tmp/scalws-$1.XXXXXX")
    chmod 755 "$RUN_DIR"
    install_traps
    ulimit -n "$(ulimit -Hn)"
    taskset -pc "$CPU_LOAD" $$ >/dev/null
    WWW=$RUN_DIR/www CERT=$RUN_DIR/cert.pem KEY=$RUN_DIR/key.pem
    prepare_content "$RUN_DIR"
    make_cert "$RUN_DIR"
}

# make_cert_rsa DIR: the same names, an RSA 2048 key (DIR/rsa-cert.pem,
# DIR/rsa-key.pem; sha256WithRSAEncryption): bench/handshakes.sh.
make_cert_rsa() {
    local d=$1
    [ -s "$d/rsa-cert.pem" ] && return 0
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 \
        -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$d/rsa-key.pem" -out "$d/rsa-cert.pem" >/dev/null 2>&1 || die "openssl could not make an RSA certificate"
}

# render TEMPLATE OUT: replace @NAME@ with the value of the shell variable NAME.
render() {
    "$BENCH_PY" "$BENCHLIB" render "$1" >"$2"
}

rotate_list() {  # rotate_list K words...: the words rotated left by K
    local k=$1
    shift
    local a=("$@") n=$# i
    [ "$n" -gt 0 ] || return 0
    for ((i = 0; i < n; i++)); do printf '%s ' "${a[(i + k) % n]}"; done
}
