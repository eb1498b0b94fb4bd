#!/usr/bin/env bash
# Profile-guided build of the native modules (docs/operations.md,
# "Profile-guided build").
#
#   tools/pgo-build.sh [--bolt] [--march M] [--duration SECONDS] [--python PY]
#                      [--install venv|none] [--skip-tests]
#
# 1. builds the C and Cython modules in place, instrumented (SCALWS_PGO=gen);
# 2. trains them: a temporary scalwsd (one worker, CPU 0) with respond, static
#    (1 KiB and 1 MiB), a proxy route to an upstream nginx and a TLS listener,
#    driven by wrk (CPU 1) for SECONDS per scenario with bench/'s tools; every
#    answer must be a 200 and the load error-free; a graceful stop (TERM)
#    makes the workers write their profiles, and every translation unit must
#    have one (build/pgo/*.gcda);
# 3. rebuilds with the profiles (SCALWS_PGO=use: -fprofile-use
#    -fprofile-partial-training; a missing or mismatched profile is an error);
# 3b. with --bolt (Debian's bolt-16): rebuilds that with the engine linked
#    for BOLT and instrumented by llvm-bolt (SCALWS_BOLT=instrument), trains
#    it with the same load, merges the workers' profiles into
#    build/pgo/bolt/engine.fdata (with build/pgo/bolt/STAMP), and rebuilds
#    with the engine laid out by them (SCALWS_BOLT=use);
# 4. runs the test suite on that build (not with --skip-tests);
# 5. --install venv (default): leaves that build in place (scalws/**/*.so),
#    where .venv imports it. --install none: puts back the modules that were
#    in place before and leaves build/pgo/ (the profiles and STAMP) for a
#    later `SCALWS_PGO=use [SCALWS_BOLT=use] [SCALWS_MARCH=M] PY setup.py
#    build_ext` in this folder with the same PY (make deb PGO=1 [BOLT=1]).
#
# Options:
#   --bolt           also BOLT (3b): the engine's code laid out by where the
#                    training load ran it
#   --march M        -march for both builds (native, ivybridge, ...); default:
#                    setup.py's (the compiler's own plus SSE4.2 when the CPU has it)
#   --duration S     seconds of load per scenario (default 10)
#   --python PY      interpreter to build, train and test with (default
#                    .venv/bin/python, made with `make build` if missing). One
#                    that is not a virtual environment's gets one under
#                    build/pgo-venv/ with requirements-dev.txt's packages
#                    (kept for the next run): profiles fit only the Python
#                    whose headers they were built with.
#   --install venv|none
#   --skip-tests
# Env: PORT_BASE (18400: HTTP, +1 HTTPS, +10 the upstream), CPU_SERVER (0),
# CPU_LOAD (1), BENCH_LOCK (bench/'s lock; the load waits for a benchmark).
# CFLAGS/CPPFLAGS/CC in the environment go into both builds, and the later
# `use` build must have the same (build/pgo/STAMP records them): for a
# Debian package build, export dpkg-buildflags' first (its -D_FORTIFY_SOURCE=2
# changes the control flow of functions the profiles describe).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CALLER_PWD=$PWD
cd "$ROOT"
START=$SECONDS

log() { echo "[pgo-build $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2; exit 2; }

MARCH= DURATION=10 PY_ARG= INSTALL=venv SKIP_TESTS=0 BOLT=
while [ $# -gt 0 ]; do
    case $1 in
        --march) [ $# -ge 2 ] || usage; MARCH=$2; shift 2 ;;
        --march=*) MARCH=${1#*=}; shift ;;
        --duration) [ $# -ge 2 ] || usage; DURATION=$2; shift 2 ;;
        --duration=*) DURATION=${1#*=}; shift ;;
        --python) [ $# -ge 2 ] || usage; PY_ARG=$2; shift 2 ;;
        --python=*) PY_ARG=${1#*=}; shift ;;
        --install) [ $# -ge 2 ] || usage; INSTALL=$2; shift 2 ;;
        --install=*) INSTALL=${1#*=}; shift ;;
        --skip-tests) SKIP_TESTS=1; shift ;;
        --bolt) BOLT=1; shift ;;
        -h | --help) usage ;;
        *) log "unknown argument: $1"; usage ;;
    esac
done
case $INSTALL in venv | none) ;; *) die "--install must be venv or none, not '$INSTALL'" ;; esac
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "--duration must be a whole number of seconds, not '$DURATION'"
[[ -z $MARCH || $MARCH =~ ^[A-Za-z0-9._+-]+$ ]] || die "--march '$MARCH' is not a -march value"

# ---------------------------------------------------------------- tools
for t in wrk openssl taskset curl git; do
    command -v "$t" >/dev/null || die "$t is not installed (make sysdeps installs what the bench needs)"
done
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || die "nginx is not installed (the proxy scenario's upstream; apt-get install nginx-light)"
WHAT=PGO${BOLT:+ + BOLT}
if [ "$BOLT" = 1 ]; then
    for t in llvm-bolt merge-fdata; do
        command -v "$t" >/dev/null || command -v "$t-16" >/dev/null ||
            die "--bolt: $t is not installed (apt-get install bolt-16)"
    done
    MERGE_FDATA=$(command -v merge-fdata || command -v merge-fdata-16)
fi

# ---------------------------------------------------------------- the interpreter
# Prints "venv" when PY runs inside a virtual environment.
is_venv() { "$1" -c 'import sys; print("venv" if sys.prefix != sys.base_prefix else "base")'; }

# requirements-dev.txt up to the "# Tests" line (building and running), or up
# to "# Benchmarks" (and the tests).
requirements() {
    local upto="# Tests"
    [ "$SKIP_TESTS" = 1 ] || upto="# Benchmarks"
    grep -qx "$upto.*" requirements-dev.txt ||
        die "requirements-dev.txt has no '$upto' line: cannot tell which packages a build needs"
    sed -n "1,/^$upto/p" requirements-dev.txt | grep -v '^#' | grep -v '^[[:space:]]*$'
}

make_venv() {  # make_venv BASE_PY: build/pgo-venv from BASE_PY, reused while it fits
    local base=$1 dir=build/pgo-venv want
    want="$("$base" -c 'import sys; print(sys.executable, sys.version.split()[0])') $(requirements | sha256sum | cut -c1-16) $ROOT"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.pgo-stamp" 2>/dev/null)" = "$want" ]; then
        log "using the virtual environment $dir ($want)"
    else
        log "making a virtual environment for $base in $dir (requirements-dev.txt)"
        rm -rf "$dir"
        "$base" -m venv "$dir" || die "$base -m venv failed (Debian: apt-get install python3-venv)"
        requirements >"$dir/requirements.txt"
        { "$dir/bin/python" -m pip install -q --upgrade pip &&
            "$dir/bin/python" -m pip install -q -r "$dir/requirements.txt"; } >"$dir/pip.log" 2>&1 || {
            tail -n 20 "$dir/pip.log" >&2
            die "pip could not install requirements-dev.txt's packages into $dir (whole output: $dir/pip.log)"
        }
        # this checkout importable from anywhere, and its console scripts, as
        # `pip install -e .` would make them (which would also build the
        # modules, in a temporary folder whose profiles would not fit)
        "$dir/bin/python" - "$ROOT" <<'EOF' || die "could not add $ROOT to $dir"
import os, sys, sysconfig
root = sys.argv[1]
with open(os.path.join(sysconfig.get_path("purelib"), "scalws-checkout.pth"), "w") as f:
    f.write(root + "\n")
for name, func in (("scalwsd", "scalwsd_main"), ("scalws-controller", "controller_main")):
    path = os.path.join(os.path.dirname(sys.executable), name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\nimport sys\nfrom scalws.cli import {func}\nsys.exit({func}())\n")
    os.chmod(path, 0o755)
EOF
        echo "$want" >"$dir/.pgo-stamp"
    fi
    PY=$ROOT/$dir/bin/python
}

if [ -z "$PY_ARG" ]; then
    PY=$ROOT/.venv/bin/python
    if [ ! -x "$PY" ] || [ ! -x "$ROOT/.venv/bin/scalwsd" ]; then
        log "no .venv with scalws installed: make build"
        make build >&2 || die "make build failed"
    fi
else
    case $PY_ARG in
        /*) ;;
        */*) PY_ARG=$CALLER_PWD/$PY_ARG ;;   # not resolved: a venv's python is a link
        *) found=$(command -v "$PY_ARG") || die "--python: no interpreter '$PY_ARG' on PATH"
           PY_ARG=$found ;;
    esac
    [ -x "$PY_ARG" ] || die "--python: $PY_ARG is not an executable"
    if [ "$(is_venv "$PY_ARG")" = venv ]; then PY=$PY_ARG; else make_venv "$PY_ARG"; fi
fi
"$PY" -c 'import Cython, setuptools, uvloop, yaml' 2>/dev/null ||
    die "$PY cannot import Cython, setuptools, uvloop and yaml (pip install -r requirements-dev.txt)"
if [ "$SKIP_TESTS" = 0 ]; then
    "$PY" -c 'import pytest' 2>/dev/null || die "$PY has no pytest (pip install -r requirements-dev.txt), or use --skip-tests"
fi
PY_DESC=$("$PY" -c 'import sys; print(sys._base_executable, sys.version.split()[0])')

# ---------------------------------------------------------------- state to restore
# The modules in place now, put back after --install none and after any failure.
SAVED=build/pgo-saved
RESTORE=1 RUN_DIR= SERVER_PID= UP_PID=
save_in_place() {
    rm -rf "$SAVED"
    mkdir -p "$SAVED"
    local f
    while IFS= read -r -d '' f; do
        mkdir -p "$SAVED/$(dirname "$f")"
        cp -p "$f" "$SAVED/$f"
    done < <(find scalws -name '*.so' -print0; [ -e scalws/_buildinfo.py ] && printf '%s\0' scalws/_buildinfo.py)
    # Not build/: setup.py's record of the flags each module in build/lib.*
    # was last built with (scalws-flags.json) stays that of the PGO build, so
    # the next plain build rebuilds them instead of copying those in place.
    return 0
}
restore_in_place() {
    [ -d "$SAVED" ] || return 0
    find scalws -name '*.so' -delete
    rm -f scalws/_buildinfo.py
    (cd "$SAVED" && find . -type f -print0) | while IFS= read -r -d '' f; do
        mkdir -p "$(dirname "$f")"
        cp -p "$SAVED/$f" "$f"
    done
    rm -rf "$SAVED"
}

PORT_BASE=${PORT_BASE:-18400}        # not bench/'s 18300: a benchmark may be running
source "$ROOT/bench/lib/common.sh"   # kill_tree, start_bg, wait_port, prepare_content, make_cert, render, locks
source "$ROOT/bench/lib/servers.sh"  # scen_url, preflight
log() { echo "[pgo-build $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    lock_release
    [ -n "$SERVER_PID" ] && kill_tree "$SERVER_PID" 5
    [ -n "$UP_PID" ] && kill_tree "$UP_PID" 5
    if [ "$RESTORE" = 1 ]; then
        restore_in_place
        [ "$rc" = 0 ] || log "the modules that were in place before are back"
    fi
    rm -rf "$SAVED"
    if [ -n "$RUN_DIR" ] && [ -d "$RUN_DIR" ]; then
        if [ "$rc" = 0 ]; then rm -rf "$RUN_DIR"; else log "training files kept in $RUN_DIR"; fi
    fi
    [ "$rc" = 0 ] || log "failed after $((SECONDS - START)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

save_in_place
export SCALWS_MARCH=$MARCH
[ -n "$MARCH" ] || unset SCALWS_MARCH

# ---------------------------------------------------------------- 1. instrumented build
build() {  # build gen|use LOGFILE [instrument|use]: the last, SCALWS_BOLT
    log "building with SCALWS_PGO=$1${3:+ SCALWS_BOLT=$3} ($PY_DESC${MARCH:+, -march=$MARCH})"
    # no -j: both modules compile csrc/http/http1*.c into the same objects
    if ! SCALWS_PGO=$1 SCALWS_BOLT=${3:-} "$PY" setup.py build_ext --inplace >"$2" 2>&1; then
        grep -E 'error|setup.py:|^  ' "$2" | grep -v '^gcc ' | head -40 >&2 || true
        die "the SCALWS_PGO=$1${3:+ SCALWS_BOLT=$3} build failed (whole output: $2)"
    fi
}
RUN_DIR=$(mktemp -d /tmp/scalws-pgo.XXXXXX)
chmod 755 "$RUN_DIR"
build gen "$RUN_DIR/build-gen.log"
[ -s build/pgo/GEN ] || die "the SCALWS_PGO=gen build wrote no build/pgo/GEN"

# ---------------------------------------------------------------- 2. training
CPU_SERVER=${CPU_SERVER:-0} CPU_LOAD=${CPU_LOAD:-1}
if [ "$(getconf _NPROCESSORS_ONLN)" -lt 2 ]; then CPU_LOAD=$CPU_SERVER; fi
WWW=$RUN_DIR/www CERT=$RUN_DIR/cert.pem KEY=$RUN_DIR/key.pem
BENCH_PY=$PY
prepare_content "$RUN_DIR"
make_cert "$RUN_DIR"
for p in "$HTTP_PORT" "$HTTPS_PORT" "$UP_PORT"; do require_free_port 127.0.0.1 "$p"; done

mkdir -p "$RUN_DIR/upstream/tmp"
SDIR=$RUN_DIR/upstream UP_PORT=$UP_PORT WWW=$WWW \
    render "$BENCH_DIR/configs/upstream-nginx.conf.tmpl" "$RUN_DIR/upstream/nginx.conf"
start_bg "$CPU_LOAD" "$RUN_DIR/upstream.log" "$NGINX" -p "$RUN_DIR/upstream/" -e "$RUN_DIR/upstream/error.log" \
    -c "$RUN_DIR/upstream/nginx.conf"
UP_PID=$LAST_PID
wait_port 127.0.0.1 "$UP_PORT" "$UP_PID" 20 ||
    die "the upstream nginx did not start: $(tail -n 3 "$RUN_DIR/upstream.log" "$RUN_DIR/upstream/error.log" 2>/dev/null | tr '\n' ' ')"

# The hot paths of today's engine in one site: respond, static, proxy, the
# same over TLS, with an access log (/dev/null: the formatting runs, nothing
# fills the disk). The worker writes its counters into build/pgo/ at exit:
# without the sandbox (which lets a worker write nowhere) and as the user
# running this script (as root, the workers would otherwise be nobody).
cat >"$RUN_DIR/scalws.yaml" <<EOF
# tools/pgo-build.sh: the training server
workers: 1
sandbox: off
user: $(id -un)
shutdown_timeout: 10s
log: {access: /dev/null, level: info}
limits: {keepalive_requests: 1000000}
upstreams:
  up: {servers: ["127.0.0.1:$UP_PORT"], keepalive: 64}
sites:
  - listen: ["127.0.0.1:$HTTP_PORT", "127.0.0.1:$HTTPS_PORT tls"]
    tls: {cert: "$CERT", key: "$KEY"}
    routes:
      - {path: "= /respond", respond: {status: 200, body: "hello world", content_type: text/plain}}
      - {path: /static/, static: {root: "$WWW"}}
      - {path: /proxy/, proxy: {upstream: up}}
EOF
"$PY" -m scalws --check-config "$RUN_DIR/scalws.yaml" >"$RUN_DIR/check.log" 2>&1 ||
    die "scalwsd refused the training configuration: $(cat "$RUN_DIR/check.log")"
# train LABEL: the training server under each scenario's load, then its
# graceful stop: workers finish, write their profiles and exit 0.
train() {
    start_bg "$CPU_SERVER" "$RUN_DIR/scalwsd-$1.log" "$PY" -m scalws --config "$RUN_DIR/scalws.yaml"
    SERVER_PID=$LAST_PID
    wait_port 127.0.0.1 "$HTTPS_PORT" "$SERVER_PID" 30 ||
        die "the training scalwsd did not start: $(tail -n 5 "$RUN_DIR/scalwsd-$1.log")"

    SCENARIOS="respond static-small static-1m proxy tls-respond tls-static-small"
    for s in $SCENARIOS; do
        reason=$(preflight "$s") || die "$s: $reason"
    done
    lock_acquire
    total=0
    for s in $SCENARIOS; do
        out=$RUN_DIR/$1-$s.wrk
        taskset -c "$CPU_LOAD" "$WRK" -t1 -c64 -d"${DURATION}s" --timeout 5s -s "$BENCH_DIR/lib/report.lua" \
            "$(scen_url "$s")" >"$out" 2>&1 || die "$s: wrk failed: $(tail -n 3 "$out")"
        line=$(grep '^BENCH ' "$out") || die "$s: no result line from wrk: $(tail -n 3 "$out")"
        declare -A r=()
        for kv in ${line#BENCH }; do r[${kv%%=*}]=${kv#*=}; done
        non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' "$out")
        errs=$((${r[connect]} + ${r[read]} + ${r[write]} + ${r[timeout]}))
        [ "${r[requests]}" -gt 0 ] || die "$s: no request answered"
        [ "${non2xx:-0}" = 0 ] && [ "${r[status]}" = 0 ] ||
            die "$s: ${non2xx:-${r[status]}} answers were not 2xx (wrk output: $out)"
        [ "$errs" = 0 ] || die "$s: socket errors connect=${r[connect]} read=${r[read]} write=${r[write]} timeout=${r[timeout]}"
        log "$s: ${r[requests]} requests in ${DURATION} s, all 200"
        total=$((total + ${r[requests]}))
        unset r
    done
    lock_release

    # The graceful stop: workers finish, write their profiles and exit 0.
    kill -TERM "$SERVER_PID"
    rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=
    [ "$rc" = 0 ] || die "the training scalwsd exited $rc on TERM: $(tail -n 5 "$RUN_DIR/scalwsd-$1.log")"
    if grep -E 'Traceback|\[(error|crit|alert|emerg)\]|killed by signal|exited with code [1-9]|did not stop in time' \
        "$RUN_DIR/scalwsd-$1.log" >&2; then
        die "the training scalwsd logged the failures above ($RUN_DIR/scalwsd-$1.log)"
    fi
    # os._exit skips the destructors that write profiles: the worker and the TLS
    # keeper write theirs first (scalws/control/profiles.py); both must have ended
    # that way, not by a signal.
    for who in 'worker 0' 'TLS keeper'; do
        grep -q "$who (pid [^)]*) exited with code 0" "$RUN_DIR/scalwsd-$1.log" ||
            die "the training scalwsd's log does not say that its $who exited with code 0 ($RUN_DIR/scalwsd-$1.log)"
    done
}
train pgo

# scalws.http.parser (the tests' wrapper of the HTTP/1 parser) is not on the
# request path: one request and one response, so it has a profile at all.
"$PY" - <<'EOF' || die "the parser module's training call failed"
from scalws.http import parser as p
req = b"GET /static/1k.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
n, method, target, minor, headers = p.parse_request(req)
assert p.analyze(method, minor, headers)[0] == 0
resp = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\n"
n, minor, status, reason, headers = p.parse_response(resp)
assert p.analyze_response(p.M_GET, minor, status, headers)[0] == 0
EOF

missing=()
while read -r name src; do
    [ -s "build/pgo/$name" ] || missing+=("$src (build/pgo/$name)")
done < <(sed -n 's/^profile=//p' build/pgo/GEN)
[ "$(grep -c '^profile=' build/pgo/GEN)" -gt 0 ] || die "build/pgo/GEN names no profile"
if [ ${#missing[@]} -gt 0 ]; then
    printf '  %s\n' "${missing[@]}" >&2
    die "the training left ${#missing[@]} translation units without a profile (above): did a worker exit without writing its counters?"
fi
{
    grep -v '^#' build/pgo/GEN
    echo "interpreter=$PY_DESC"
    echo "scenarios=${SCENARIOS// /, }"
    echo "duration=$DURATION"
    echo "requests=$total"
} >build/pgo/STAMP.new
mv build/pgo/STAMP.new build/pgo/STAMP
log "trained: $total requests, $(grep -c '^profile=' build/pgo/GEN) profiles in build/pgo/"

# ---------------------------------------------------------------- 3. the optimised build
build use "$RUN_DIR/build-use.log"
if grep -iE 'warning:.*(profile|gcda|coverage)' "$RUN_DIR/build-use.log" >&2; then
    die "the SCALWS_PGO=use build warned about its profiles (above)"
fi

# ---------------------------------------------------------------- 3b. BOLT
if [ "$BOLT" = 1 ]; then
    rm -rf build/pgo/bolt
    build use "$RUN_DIR/build-bolt-instrument.log" instrument
    pgo_total=$total
    train bolt
    # one file per process that loaded the engine: the workers' carry the
    # request path (the master's and the TLS keeper's are merged too)
    fdata=(build/pgo/bolt/engine.fdata.*.fdata)
    [ -s "${fdata[0]}" ] || die "the BOLT training wrote no profile (build/pgo/bolt/engine.fdata.PID.fdata)"
    "$MERGE_FDATA" "${fdata[@]}" >build/pgo/bolt/engine.fdata.new 2>"$RUN_DIR/merge-fdata.log" ||
        die "merge-fdata failed: $(tail -n 3 "$RUN_DIR/merge-fdata.log")"
    mv build/pgo/bolt/engine.fdata.new build/pgo/bolt/engine.fdata
    rm -f "${fdata[@]}"
    {
        echo "# tools/pgo-build.sh --bolt: what build/pgo/bolt/engine.fdata was trained with"
        echo "commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
        echo "scenarios=${SCENARIOS// /, }"
        echo "duration=$DURATION"
        echo "requests=$total"
        echo "processes=${#fdata[@]}"
    } >build/pgo/bolt/STAMP
    log "BOLT trained: $total requests, ${#fdata[@]} profiles merged into build/pgo/bolt/engine.fdata"
    build use "$RUN_DIR/build-bolt-use.log" use
    total=$pgo_total
fi
kill_tree "$UP_PID"
UP_PID=
"$PY" -m scalws --version >&2

# ---------------------------------------------------------------- 4. tests
if [ "$SKIP_TESTS" = 0 ]; then
    log "running the test suite on the $WHAT build"
    "$PY" -m pytest -q -x -p no:cacheprovider tests >"$RUN_DIR/tests.log" 2>&1 || {
        tail -n 30 "$RUN_DIR/tests.log" >&2
        die "the tests failed on the $WHAT build (whole output: $RUN_DIR/tests.log)"
    }
    log "tests: $(tail -n 1 "$RUN_DIR/tests.log")"
fi

# ---------------------------------------------------------------- 5. install
if [ "$INSTALL" = venv ]; then
    RESTORE=0
    log "done in $((SECONDS - START)) s: the $WHAT build is in place (scalws/**/*.so)"
    if [ -x .venv/bin/python ] && [ "$("$ROOT/.venv/bin/python" -c 'import sys; print(sys._base_executable, sys.version.split()[0])')" != "$PY_DESC" ]; then
        log "note: it was built for $PY_DESC, and .venv runs another Python"
    fi
else
    log "done in $((SECONDS - START)) s: profiles and build/pgo/STAMP ready for" \
        "SCALWS_PGO=use${BOLT/#1/ SCALWS_BOLT=use}${MARCH:+ SCALWS_MARCH=$MARCH} ${PY_ARG:-$PY} setup.py build_ext ..." \
        "in $ROOT; the modules that were in place are back"
fi
