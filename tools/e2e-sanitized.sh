#!/usr/bin/env bash
# The end-to-end tests against an engine built with ASan and UBSan
# (setup.py's SCALWS_SANITIZE=1), in a worktree of HEAD beside this
# checkout, whose own build stays as it is (`make test-sanitized`):
#
#   tools/e2e-sanitized.sh [pytest arguments]     (default: tests/e2e)
#
# tests/c runs the C units and fuzz corpora under the sanitizers in
# `make test`; this runs the paths only a whole server reaches (a FastCGI
# request waiting for a connection, the cache's tee of a response) with
# real clients and applications, in two passes:
#   1. the tests given (default tests/e2e, less those marked in_process),
#      each scalwsd started with libasan preloaded through SCALWS_TEST_WRAP
#      (Python is not built with ASan; pytest itself runs as usual);
#   2. without arguments, the files that start scalwsd themselves (the
#      controller's instances, the CLI's built-in site, bench/soak.py, the
#      cache peers in network namespaces) and the in_process tests, with
#      libasan preloaded into pytest and so into everything it starts
#      (php-fpm, nginx, node too): 5-10x slower, hence only these.
# Both with detect_leaks=0 (Python's own allocations at exit) and seccomp
# left out of the sandbox
# (SCALWS_SANDBOX_FAKE_MISSING=seccomp): a report needs system calls the
# filter refuses (readlink of /proc/self/exe), so with it a finding kills
# the worker with SIGSYS before it says where. Landlock and the rest stay.
#
# Fails when a server's log holds a sanitizer report (ASan reports a crash
# too), and prints each distinct one with the test that made it. pytest's
# own failures are listed but do not fail the run: in this arrangement some
# tests cannot pass: those that want seccomp (test_sandbox), that need
# ../shared or node_modules (h2spec, cache conformance: the worktree has
# neither), time- or memory-bound ones (busy_poll under a quota, the
# footprint, a handshake timeout, the soak's RSS growth under ASan's
# quarantine), and in pass 1 those that pass 2 runs again (the engine does
# not load where libasan is not first). The worktree is removed at the
# end; KEEP=1 keeps it (and the tests' folders) in the printed folder.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
libasan=$(gcc -print-file-name=libasan.so)
[ -e "$libasan" ] || { echo "e2e-sanitized: gcc has no libasan ($libasan)" >&2; exit 2; }
libasan=$(readlink -f "$libasan")
# PASS2=1 runs pass 2 after the tests given too, PASS2=0 never.
second=${PASS2:-0}
if [ $# -eq 0 ]; then
    set -- tests/e2e
    second=${PASS2:-1}
fi
# Pass 2's files: they start scalwsd without SCALWS_TEST_WRAP.
SELF_STARTED="tests/e2e/test_controller.py tests/e2e/test_cli.py tests/e2e/test_soak.py
tests/e2e/test_cache_peers_netns.py"

tmp=$(mktemp -d /tmp/scalws-sanitized.XXXXXX)
tree=$tmp/tree
cleanup() {
    if [ "${KEEP:-0}" = 1 ]; then echo "e2e-sanitized: kept $tmp"; return; fi
    git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$root" worktree add --quiet --detach "$tree" HEAD
echo "e2e-sanitized: building $(git -C "$tree" rev-parse --short HEAD) with ASan and UBSan in $tree"
SCALWS_SANITIZE=1 make -C "$tree" build >"$tmp/build.log" 2>&1 ||
    { tail -30 "$tmp/build.log"; echo "e2e-sanitized: the build failed" >&2; exit 2; }
nm -D "$tree"/scalws/server/engine*.so >"$tmp/engine.syms"
grep -q __asan_init "$tmp/engine.syms" ||
    { echo "e2e-sanitized: the engine was not built with ASan" >&2; exit 2; }

san_env="SCALWS_SANDBOX_FAKE_MISSING=seccomp LD_PRELOAD=$libasan \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1"
rc=0
(cd "$tree" && SCALWS_TEST_WRAP="env $san_env" \
    .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$tmp/pt" \
        -m "not in_process" "$@") || rc=$?
if [ "$second" = 1 ]; then
    echo "e2e-sanitized: pass 2, libasan preloaded into pytest and all it starts"
    # shellcheck disable=SC2086 # san_env and SELF_STARTED are word lists
    (cd "$tree" && env $san_env .venv/bin/python -m pytest -q -p no:cacheprovider \
        --basetemp="$tmp/pt2" $SELF_STARTED) || rc=$?
    (cd "$tree" && env $san_env .venv/bin/python -m pytest -q -p no:cacheprovider \
        --basetemp="$tmp/pt3" -m in_process tests/e2e) || rc=$?
fi

# Every server's log is in its test's folder (error-N.log, soak's scalwsd.out); a report's
# first line names the source line (UBSan) or the kind of access (ASan).
reports=$(grep -rIE -H 'runtime error:|ERROR: AddressSanitizer' \
    "$tmp/pt" "$tmp/pt2" "$tmp/pt3" 2>/dev/null || true)
if [ -n "$reports" ]; then
    echo "e2e-sanitized: sanitizer reports (test folder: first report):"
    echo "$reports" | sed -E "s|^$tmp/pt[23]?/([^/]+)/[^:]*:[0-9/: ]*|\1: |" | sort -u
    exit 1
fi
echo "e2e-sanitized: no sanitizer report in the servers' logs (pytest exit $rc: see the" \
     "header of $0 for the tests that cannot pass here)"
