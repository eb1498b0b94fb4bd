#!/usr/bin/env bash
# TLS handshake cost, side by side: for each server, new full handshakes/s
# with an ECDSA P-256 certificate and with an RSA 2048 one, resumed
# handshakes/s (session tickets), and the server's CPU time per handshake;
# medians of RUNS runs with the server order rotated each run.
#
#   SERVERS="scalws nginx" MODE=quick bench/handshakes.sh
#   NAME=2026-12-05-handshakes RUNS=5 MODE=release SERVERS="scalws nginx h2o lighttpd" bench/handshakes.sh
#
# The load is bench/tlshs.c (built here into build/bench/tlshs when missing
# or older than its source): HS_CONNS concurrent connections, each one
# connect, handshake (SNI localhost), `GET <scenario path>` with
# `Connection: close`, answer read to EOF, close, again. Tests:
#   ecdsa-full  the server has make_cert's ECDSA P-256 certificate; no resumption
#   rsa-full    the server has an RSA 2048 certificate (same names); no resumption
#   resumed     ECDSA certificate; every connection offers the ticket of its
#               slot's first full handshake (tlshs --resume)
# One certificate per measurement (not both in one config): h2o 2.2 and
# lighttpd cannot pair an ECDSA and an RSA certificate on one listener, so
# this is the setup that is the same for every server; the server is
# restarted for every measurement, as in run.sh.
#
# Env: SERVERS (scalws nginx), RUNS (3), TESTS ("ecdsa-full rsa-full
# resumed"), PROTOS (tls13; "tls13 tls12" measures both), MODE quick|release
# (1+5 s | 3+20 s; WARMUP=/DURATION= override), HS_CONNS (64), SCENARIO
# (tls-static-small: what each connection asks for; tls-respond for the
# fixed answer), NAME, RESULTS, CPU_SERVER (0), CPU_LOAD (1), PORT_BASE,
# BENCH_LOCK, KEEP_RUN_DIR=1, TLSHS (the binary).
# Output: results/<NAME>/handshakes.csv (a row per run × test × server, '# '
# header lines) and handshakes.md (medians, ranges, ratios against nginx).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$BENCH_DIR/lib/servers.sh"

MODE=${MODE:-quick}
case $MODE in
    quick) WARMUP=${WARMUP:-1} DURATION=${DURATION:-5} ;;
    release) WARMUP=${WARMUP:-3} DURATION=${DURATION:-20} ;;
    *) die "MODE must be quick or release" ;;
esac
SERVERS=${SERVERS:-scalws nginx}
RUNS=${RUNS:-3}
TESTS=${TESTS:-ecdsa-full rsa-full resumed}
PROTOS=${PROTOS:-tls13}
HS_CONNS=${HS_CONNS:-64}
SCENARIO=${SCENARIO:-tls-static-small}
NAME=${NAME:-handshakes-$(date +%Y%m%d-%H%M%S)-$MODE}
RESULTS=${RESULTS:-$REPO_DIR/results}
DEST=$RESULTS/$NAME
CSV=$DEST/handshakes.csv
TLSHS=${TLSHS:-$REPO_DIR/build/bench/tlshs}

for t in $TESTS; do
    case $t in ecdsa-full | rsa-full | resumed) ;; *) die "unknown test $t (ecdsa-full rsa-full resumed)" ;; esac
done
for p in $PROTOS; do
    case $p in tls12 | tls13) ;; *) die "unknown protocol $p (tls12 tls13)" ;; esac
done
case $SCENARIO in tls-static-small | tls-respond) ;; *) die "SCENARIO must be tls-static-small or tls-respond" ;; esac
[ "$RUNS" -ge 1 ] || die "RUNS must be at least 1"
[ -e "$CSV" ] && die "$CSV exists (choose another NAME)"

# tlshs: rebuilt when missing or older than its source
if [ ! -x "$TLSHS" ] || [ "$BENCH_DIR/tlshs.c" -nt "$TLSHS" ]; then
    command -v gcc >/dev/null || die "gcc not installed (apt-get install gcc libssl-dev)"
    mkdir -p "$(dirname "$TLSHS")"
    log "building $TLSHS"
    gcc -O2 -Wall -o "$TLSHS.tmp" "$BENCH_DIR/tlshs.c" -lssl -lcrypto ||
        die "cannot build bench/tlshs.c (apt-get install libssl-dev)"
    mv "$TLSHS.tmp" "$TLSHS"
fi

mkdir -p "$DEST"
bench_setup hs  # tlshs on CPU_LOAD
make_cert_rsa "$RUN_DIR"
EC_CERT=$RUN_DIR/cert.pem EC_KEY=$RUN_DIR/key.pem
RSA_CERT=$RUN_DIR/rsa-cert.pem RSA_KEY=$RUN_DIR/rsa-key.pem
CERT=$EC_CERT KEY=$EC_KEY

cert_desc() {  # cert_desc PEM: "ECDSA P-256 (ecdsa-with-SHA256)"-like
    openssl x509 -in "$1" -noout -text | awk '
        /Public-Key:/ { gsub(/[()]/, ""); bits = $2 }
        /NIST CURVE:/ { curve = $3 }
        /Public Key Algorithm:/ { alg = $4 }
        /Signature Algorithm:/ && !sig { sig = $3 }
        END { if (alg == "id-ecPublicKey") printf "ECDSA %s (%s)", curve, sig; else printf "RSA %s (%s)", bits, sig }'
}

{
    echo "# ScalWS TLS handshakes: bench/handshakes.sh"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git_commit: $(git -C "$REPO_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo none), $(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l) uncommitted paths"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) CPUs; kernel: $(uname -sr)"
    echo "# pinning: servers (one worker) on CPU $CPU_SERVER; tlshs on CPU $CPU_LOAD"
    echo "# mode: $MODE, per measurement warm-up ${WARMUP}s + ${DURATION}s; tlshs -c $HS_CONNS, protocols: $PROTOS; each connection: GET $(scen_path "$SCENARIO") ($SCENARIO), Connection: close"
    echo "# certificates (self-signed, CN=localhost): ecdsa $(cert_desc "$EC_CERT"); rsa $(cert_desc "$RSA_CERT"); one per measurement"
    echo "# tls: scalws defaults (tls_tickets on, TLS 1.2 + 1.3); nginx bench/configs/nginx.conf.tmpl (the same ciphers, curves and protocols, ssl_session_tickets on with OpenSSL's per-worker key, no session cache); h2o and lighttpd their defaults"
    echo "# limits: somaxconn $(cat /proc/sys/net/core/somaxconn); ip_local_port_range $(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range); tcp_tw_reuse $(cat /proc/sys/net/ipv4/tcp_tw_reuse); tcp_max_tw_buckets $(cat /proc/sys/net/ipv4/tcp_max_tw_buckets)"
    v=""
    for s in $SERVERS; do v+="$s: $(srv_version "$s"); "; done
    echo "# versions: ${v}openssl: $(openssl version | awk '{print $2}')"
    echo "# command: $(printf 'NAME=%s RUNS=%s MODE=%s SERVERS="%s" TESTS="%s" PROTOS="%s" HS_CONNS=%s SCENARIO=%s WARMUP=%s DURATION=%s bench/handshakes.sh' \
        "$NAME" "$RUNS" "$MODE" "$SERVERS" "$TESTS" "$PROTOS" "$HS_CONNS" "$SCENARIO" "$WARMUP" "$DURATION")"
    "$BENCH_PY" "$BENCHLIB" hs-columns
} >"$CSV"

emit() { "$BENCH_PY" "$BENCHLIB" hs-row "$@" | tee -a /dev/stderr >>"$CSV"; }

tlshs_run() {  # tlshs_run TEST PROTO SECONDS OUTFILE
    local test=$1 proto=$2 secs=$3 out=$4 extra=()
    [ "$test" = resumed ] && extra+=(--resume)
    "$TLSHS" -c "$HS_CONNS" -d "$secs" "--$proto" "${extra[@]}" "$(scen_url "$SCENARIO")" >"$out" 2>&1 &
    local lp=$!
    BENCH_PIDS+=("$lp")
    wait "$lp" || true
    stop_pid "$lp"
}

measure() {  # measure SERVER TEST PROTO RUN ORDER
    local srv=$1 test=$2 proto=$3 run=$4 order=$5 reason pid before after expect
    local base="$RUN_DIR/$srv-$test-$proto-$run" row=(--server "$1" --test "$2" --proto "$3" --run "$4" --order "$5")
    case $test in
        rsa-full) CERT=$RSA_CERT KEY=$RSA_KEY expect=RSA-2048 ;;
        *) CERT=$EC_CERT KEY=$EC_KEY expect=ECDSA-P256 ;;
    esac
    if ! reason=$(srv_supports "$srv" "$SCENARIO"); then
        emit "${row[@]}" --status n/a --reason "$reason"
        return
    fi
    srv_reset_opts
    if ! srv_start "$srv" "$SCENARIO"; then
        emit "${row[@]}" --status failed --reason "did not start: $(srv_start_failure)"
        return
    fi
    pid=$LAST_PID
    if ! reason=$(preflight "$SCENARIO"); then
        stop_pid "$pid"
        emit "${row[@]}" --status failed --reason "$reason"
        return
    fi
    log "run $run: $srv $test $proto: warm-up ${WARMUP}s, measurement ${DURATION}s"
    lock_acquire
    tlshs_run "$test" "$proto" "$WARMUP" "$base.warmup.txt"
    before=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    tlshs_run "$test" "$proto" "$DURATION" "$base.txt"
    after=$("$BENCH_PY" "$BENCHLIB" snapshot --cpu "$CPU_LOAD" --steal-cpus "$CPU_SERVER,$CPU_LOAD" "$pid")
    lock_release
    stop_pid "$pid"
    emit "${row[@]}" --out "$base.txt" --before "$before" --after "$after" --expect-cert "$expect" \
        --expect-proto "$([ "$proto" = tls12 ] && echo TLSv1.2 || echo TLSv1.3)" --expect-cpus "$CPU_SERVER"
}

log "run dir $RUN_DIR; servers: $SERVERS; tests: $TESTS; protocols: $PROTOS; $RUNS runs"
for ((i = 1; i <= RUNS; i++)); do
    read -r -a ORDERED <<<"$(rotate_list "$((i - 1))" $SERVERS)"
    for proto in $PROTOS; do
        for test in $TESTS; do
            k=0
            for srv in "${ORDERED[@]}"; do
                k=$((k + 1))
                measure "$srv" "$test" "$proto" "$i" "$k"
            done
        done
    done
done
"$BENCH_PY" "$BENCHLIB" hs-report "$CSV"
echo "results: $DEST (handshakes.csv, handshakes.md)"
