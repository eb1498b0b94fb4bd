#!/usr/bin/env bash
# Builds h2spec (the HTTP/2 conformance suite H2O runs in its CI; MIT
# source in ../shared/tools/h2spec, not copied into this tree) with Debian
# 12's Go packages in GOPATH mode, with our own main (tests/h2spec/main.go:
# the copy in ../shared has no cmd/ directory, which its .gitignore left
# out). ../shared/tools/build-h2spec.sh installs the Go packages it needs.
#
#   tools/build-h2spec.sh OUT      writes the binary to OUT (build/h2spec)
#
# Exit status 3 when ../shared/tools/h2spec is not there (make test then
# skips the h2spec tests, saying why).
set -euo pipefail
out=${1:?usage: build-h2spec.sh OUT}
root=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$root/.." && pwd)/shared/tools
if [ ! -f "$shared/h2spec/h2spec.go" ]; then
  echo "build-h2spec: no h2spec source in $shared/h2spec" >&2
  exit 3
fi
# The Go toolchain and the libraries h2spec imports (the shared script's
# list; it installs them when run as root, then fails on the missing cmd/)
"$shared/build-h2spec.sh" "$(mktemp -d)/unused" >/dev/null 2>&1 || true
command -v go >/dev/null || { echo "build-h2spec: no Go toolchain (golang-go)" >&2; exit 2; }
gp=$(mktemp -d)
trap 'rm -rf "$gp"' EXIT
mkdir -p "$gp/src/github.com/summerwind" "$gp/src/scalws/h2spec"
cp -r "$shared/h2spec" "$gp/src/github.com/summerwind/h2spec"
chmod -R u+w "$gp/src"
cp "$root/tests/h2spec/main.go" "$gp/src/scalws/h2spec/"
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
cd "$gp/src/scalws/h2spec"
GO111MODULE=off GOPATH="$gp:/usr/share/gocode" GOCACHE="$gp/cache" go build -o "$out" .
echo "h2spec built: $out"
