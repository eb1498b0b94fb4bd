#!/usr/bin/env bash
# RUNS passes of bench/run.sh with the server order rotated each run, then
# medians: results/<NAME>/run-<i>.csv, aggregate.csv, aggregate.md, charts/.
#
#   NAME=2026-12-02-respond RUNS=5 MODE=release SERVERS="scalws nginx" bench/multi.sh
#
# Env: NAME (default <date>-<MODE>), RUNS (5; rounded up to a multiple of the
# number of servers, so each goes first equally often), RESULTS (default <repo>/results),
# plus everything bench/run.sh reads (SERVERS, SCENARIOS, MODE, ...).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

MODE=${MODE:-quick}
RUNS=${RUNS:-5}
NAME=${NAME:-$(date +%Y%m%d-%H%M%S)-$MODE}
RESULTS=${RESULTS:-$REPO_DIR/results}
DEST=$RESULTS/$NAME
SERVERS=${SERVERS:-scalws nginx}
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
export MODE SERVERS SCENARIOS

# Each server goes first equally often: the first slot of a run is not
# always the same as the second (warm caches, the box's own drift).
NSERVERS=$(wc -w <<<"$SERVERS")
if ((RUNS % NSERVERS)); then
    RUNS=$(((RUNS / NSERVERS + 1) * NSERVERS))
    log "RUNS rounded up to $RUNS, a multiple of the $NSERVERS servers"
fi

[ -e "$DEST/run-1.csv" ] && die "$DEST already has results (choose another NAME)"
mkdir -p "$DEST"
install_traps

CMD=$(printf 'NAME=%s RUNS=%s MODE=%s SERVERS="%s" SCENARIOS="%s" CPU_SERVER=%s CPU_LOAD=%s bench/multi.sh' \
    "$NAME" "$RUNS" "$MODE" "$SERVERS" "$SCENARIOS" "$CPU_SERVER" "$CPU_LOAD")
for ((i = 1; i <= RUNS; i++)); do
    log "run $i/$RUNS -> $DEST/run-$i.csv"
    # run.sh takes the benchmark lock around each measurement itself
    BENCH_COMMAND="$CMD  [run $i: ROTATE=$((i - 1))]" ROTATE=$((i - 1)) OUT="$DEST/run-$i.csv" \
        "$BENCH_DIR/run.sh"
done
"$BENCH_PY" "$BENCHLIB" aggregate "$DEST"
echo "results: $DEST (aggregate.md, aggregate.csv, charts/)"
