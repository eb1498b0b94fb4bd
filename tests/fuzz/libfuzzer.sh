#!/bin/bash
# libFuzzer runs of every target in tests/fuzz/ (README.md says what each
# one checks), with clang-14 under ASan/UBSan: `make fuzz` (FUZZ_SECONDS
# each, 60 by default; FUZZ="h2 priority" for some). Each target starts
# from its committed corpus and writes new inputs to a scratch directory
# (FUZZ_DIR, /tmp/scalws-fuzz), never to the corpus: merging is a choice
# made by hand (README.md). A finding stops the target, leaves its input as
# FUZZ_DIR/NAME/crash-* and makes the script exit 1. `make ctest` runs the
# committed corpora under gcc's sanitizers; this script looks for new
# inputs, and clang's UBSan checks some things gcc's does not (an offset
# applied to NULL, found this way in sws_parse_priority).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
CLANG=${CLANG:-clang-14}
SECONDS_EACH=${FUZZ_SECONDS:-60}
OUT=${FUZZ_DIR:-/tmp/scalws-fuzz}
ALL="http1 sni fcgi cachecc vary priority h2 hpack h2sess h3 qpack h3sess"
command -v "$CLANG" >/dev/null || { echo "fuzz: $CLANG not found (make fuzz-deps)"; exit 2; }
[ -f csrc/core/syscall_names.h ] || { echo "fuzz: csrc/core/syscall_names.h missing (make build)"; exit 2; }
FLAGS="-g -O1 -DFUZZING -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Icsrc/include -Icsrc"

# NAME: the sources, the libraries and libFuzzer's options of each target
sources() {
    case $1 in
        http1) echo "-msse4.2 tests/fuzz/fuzz_http1.c csrc/http/http1.c csrc/http/http1_chunked.c" ;;
        sni) echo "tests/fuzz/fuzz_sni.c csrc/net/sni.c" ;;
        fcgi) echo "-msse4.2 tests/fuzz/fuzz_fcgi.c csrc/http/fcgi.c csrc/http/http1.c csrc/http/http1_chunked.c" ;;
        cachecc) echo "tests/fuzz/fuzz_cachecc.c csrc/http/cachecc.c csrc/http/sfv.c" ;;
        vary) echo "tests/fuzz/fuzz_vary.c csrc/handlers/cache_key.c csrc/http/cachecc.c csrc/http/sfv.c" ;;
        priority) echo "tests/fuzz/fuzz_priority.c csrc/http/priority.c csrc/http/sfv.c" ;;
        h2) echo "-msse4.2 tests/fuzz/fuzz_h2.c $(ls csrc/*/*.c csrc/http/h2/*.c) csrc/http/h3/none.c csrc/engine.c -lssl -lcrypto" ;;
        hpack) echo "tests/fuzz/fuzz_hpack.c csrc/http/h2/hpack.c csrc/http/h2/huffman.c -lnghttp2 -lpthread" ;;
        h3sess) echo "tests/fuzz/fuzz_h3sess.c csrc/http/h3/h3sess.c csrc/http/h3/h3sess_recv.c csrc/http/reqcheck.c csrc/http/priority.c csrc/http/sfv.c csrc/http/h3/qpack.c csrc/http/h2/hpack.c csrc/http/h2/huffman.c -lpthread" ;;
        qpack) echo "tests/fuzz/fuzz_qpack.c csrc/http/h3/qpack.c csrc/http/h2/hpack.c csrc/http/h2/huffman.c -lnghttp3 -lpthread" ;;
        h2sess) echo "tests/fuzz/fuzz_h2sess.c csrc/http/h2/session.c csrc/http/h2/session_recv.c csrc/http/reqcheck.c csrc/http/h2/hpack.c csrc/http/h2/huffman.c -lnghttp2" ;;
        h3) echo "-msse4.2 tests/fuzz/fuzz_h3.c $(ls csrc/*/*.c csrc/http/h2/*.c) $(ls csrc/http/h3/*.c | grep -v none.c) csrc/engine.c -lssl -lcrypto -lngtcp2_crypto_gnutls -lngtcp2 -lnghttp3 -lgnutls" ;;
        *) return 1 ;;
    esac
}
options() {
    case $1 in
        http1) echo "-max_len=4096" ;;
        sni) echo "-max_len=600" ;;
        fcgi) echo "-max_len=2048" ;;
        cachecc) echo "-max_len=512" ;;
        vary) echo "-max_len=512" ;;
        priority) echo "-max_len=256" ;;
        h2) echo "-max_len=8192 -dict=$ROOT/tests/fuzz/h2.dict" ;;
        hpack) echo "-max_len=4096" ;;
        qpack) echo "-max_len=4096" ;;
        h3sess) echo "-max_len=4096" ;;
        h2sess) echo "-max_len=4096 -dict=$ROOT/tests/fuzz/h2.dict" ;;
        h3) echo "-max_len=4096" ;;
    esac
}

found=0
for t in ${FUZZ:-$ALL}; do
    src=$(sources "$t") || { echo "fuzz: no target $t (targets: $ALL)"; exit 2; }
    mkdir -p "$OUT/$t/new"
    # shellcheck disable=SC2086 # word splitting of the lists is wanted
    if ! $CLANG $FLAGS $src -o "$OUT/$t/fuzz_$t" 2>"$OUT/$t/build.log"; then
        echo "fuzz $t: build failed:"; tail -5 "$OUT/$t/build.log"; exit 2
    fi
    rm -f "$OUT/$t"/crash-* "$OUT/$t"/leak-* "$OUT/$t"/timeout-*
    # shellcheck disable=SC2046
    (cd "$OUT/$t" && ./fuzz_$t -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
        $(options "$t") new "$ROOT/tests/fuzz/corpus/$t") >"$OUT/$t/run.log" 2>&1
    rc=$?
    runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$OUT/$t/run.log")
    edges=$(grep -o 'cov: [0-9]*' "$OUT/$t/run.log" | tail -1)
    if [ $rc -ne 0 ] || ls "$OUT/$t"/crash-* "$OUT/$t"/leak-* >/dev/null 2>&1; then
        echo "fuzz $t: FINDING after ${runs:-?} inputs (exit $rc): $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$OUT/$t/run.log")"
        echo "  input: $(ls "$OUT/$t"/crash-* "$OUT/$t"/leak-* 2>/dev/null | head -1); log: $OUT/$t/run.log"
        found=1
    else
        echo "fuzz $t: ${runs:-?} inputs in ${SECONDS_EACH} s, ${edges:-cov ?}, no finding ($(ls "$OUT/$t/new" | wc -l) new inputs in $OUT/$t/new)"
    fi
done
exit $found
