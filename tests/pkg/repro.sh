#!/bin/bash
# Two builds of the package from one commit give the same bytes: builds the
# committed HEAD in a fresh clone (at a path other than this checkout's) and
# compares it with PACKAGE, the build of this checkout; with uncommitted
# changes here, PACKAGE is not HEAD, so a second clone is built instead.
# On a difference, lists the files that differ.
#
#   tests/pkg/repro.sh dist/scalws_VERSION_amd64.deb
set -euo pipefail
deb=$(readlink -f "${1:?usage: $0 PACKAGE.deb}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
name=$(basename "$deb")
out=$repo/build/repro
rm -rf "$out"; mkdir -p "$out"

build_clone() {  # folder
    git clone -q --no-hardlinks "$repo" "$1"
    (cd "$1" && make -s deb >"$1.log" 2>&1) || { tail -30 "$1.log" >&2; exit 1; }
}

if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    echo "repro: this checkout has uncommitted changes: building HEAD twice"
    build_clone "$out/a"
    first=$out/a/dist/$name
else
    first=$deb
fi
build_clone "$out/second-clone"
second=$out/second-clone/dist/$name

if cmp -s "$first" "$second"; then
    echo "repro: identical: $(sha256sum "$first" | cut -c1-64)  $name"
    rm -rf "$out"
    exit 0
fi
echo "repro: FAIL: $first and $second differ" >&2
mkdir -p "$out/x1" "$out/x2"
dpkg-deb -R "$first" "$out/x1"; dpkg-deb -R "$second" "$out/x2"
diff -rq "$out/x1" "$out/x2" >&2 || true
exit 1
