#!/bin/bash
# Runs the OCI image (make image) with podman as an orchestrator would and
# checks what issue 34 asks of it:
#   - it serves, with a read-only root filesystem, as the user scalws, its
#     workers sandboxed (no_new_privs, a seccomp filter);
#   - /ready and /live answer on the status port;
#   - a HUP reloads a changed configuration, and so does a change alone
#     (watch_config, as a ConfigMap update would);
#   - TERM drains it and it exits 0 within shutdown_timeout;
#   - its output (both logs, log.format and error_format json) is JSON lines.
#
#   tests/pkg/test-image.sh [IMAGE]        (default localhost/scalws:VERSION)
#
# The container shares the host's network (ports chosen free here; a bridge
# needs CNI plugins this box lacks) and gets explicit ulimits: podman's
# defaults (nofile 1048576) exceed this box's hard limits. PODMAN_RUNTIME
# (default runc: crun refuses this box's hybrid cgroup v1 layout).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$repo/scalws/__init__.py")
image=${1:-localhost/scalws:$version}
runtime=${PODMAN_RUNTIME:-runc}
name=scalws-imagetest-$$
dir=$(mktemp -d /tmp/scalws-imagetest.XXXXXX)
fail() { echo "test-image: FAIL: $*" >&2; podman logs "$name" 2>&1 | tail -n 30 >&2 || true; exit 1; }
ok() { echo "test-image: ok: $*"; }
cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT

podman image exists "$image" || { echo "test-image: no image $image (make image)" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http=$(port) status=$(port)
conf() {
    cat >"$dir/scalws.yaml.new" <<EOC
workers: 2
watch_config: 500ms
shutdown_timeout: 10s
log: {access: /dev/stdout, format: json, error_format: json}
status: {listen: "127.0.0.1:$status"}
sites:
  - listen: "127.0.0.1:$http"
    routes:
      - {path: /html/, static: {root: /usr/share/scalws}}
      - {path: /, respond: {body: "$1"}}
EOC
    mv "$dir/scalws.yaml.new" "$dir/scalws.yaml"
}
body() { curl -s --max-time 3 "http://127.0.0.1:$http/" || true; }
wait_for() {  # wait_for WHAT CMD...: until CMD succeeds, 30 s at most
    local what=$1; shift
    for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done
    fail "$what"
}
serves() { [ "$(body)" = "$1" ]; }
chmod 755 "$dir"
conf one

podman --runtime "$runtime" run -d --name "$name" --read-only --network host \
    --ulimit nofile=16384:16384 --ulimit nproc=4096:4096 \
    -v "$dir:/etc/scalws:ro" "$image" >/dev/null
wait_for "the container did not answer" serves one
ok "serves (GET / -> one)"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/html/index.html")
[ "$code" = 200 ] || fail "the package's welcome page: $code"
ok "the package's files are served (welcome page: 200)"

[ "$(curl -s "http://127.0.0.1:$status/ready")" = ready ] || fail "/ready"
[ "$(curl -s "http://127.0.0.1:$status/live")" = "live: ready" ] || fail "/live"
ok "/ready and /live"

[ "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$name")" = true ] || fail "root not read-only"
pid=$(podman inspect -f '{{.State.Pid}}' "$name")
want=$(podman run --rm --runtime "$runtime" --network host --ulimit nofile=1024:1024 \
    --ulimit nproc=4096:4096 --entrypoint id "$image" -u scalws)
[ "$want" != 0 ] || fail "the image's scalws user is root"
workers=$(cat "/proc/$pid/task/$pid/children")
[ "$(wc -w <<<"$workers")" -ge 2 ] || fail "fewer than 2 children: $workers"
for p in "$pid" $workers; do
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$p/status")
    [ "$uid" = "$want" ] || fail "process $p runs as uid $uid, not scalws ($want)"
done
ok "every process runs as scalws (uid $want in the image), the root filesystem read-only"
sandboxed=0
for p in $workers; do
    if grep -q 'worker' "/proc/$p/cmdline" 2>/dev/null; then
        grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$p/status" || fail "worker $p: no no_new_privs"
        grep -q '^Seccomp:[[:space:]]*2' "/proc/$p/status" || fail "worker $p: no seccomp filter"
        sandboxed=$((sandboxed + 1))
    fi
done
[ "$sandboxed" = 2 ] || fail "found $sandboxed sandboxed workers, not 2"
ok "both workers sandboxed (no_new_privs, seccomp filter)"

conf two
podman kill -s HUP "$name" >/dev/null
wait_for "a HUP did not bring the new configuration" serves two
ok "HUP reloads"
conf three
wait_for "watch_config did not reload the changed file" serves three
logs() { podman logs "$name" 2>&1; }   # whole, then grep: grep -q would cut the pipe
[[ $(logs) == *"changed: reloading (watch_config)"* ]] || fail "no watch_config line"
ok "a changed file alone reloads (watch_config)"

start=$(date +%s%N)
podman stop -t 30 "$name" >/dev/null
took=$((($(date +%s%N) - start) / 1000000))
[ "$(podman inspect -f '{{.State.ExitCode}}' "$name")" = 0 ] || fail "exit code $(podman inspect -f '{{.State.ExitCode}}' "$name") on TERM"
[[ $(logs) == *"scalws stopped"* ]] || fail "no 'scalws stopped' in its log"
[ "$took" -lt 10000 ] || fail "TERM took ${took} ms, more than shutdown_timeout"
ok "TERM: drained and exited 0 in ${took} ms"
logs >"$dir/output"
python3 - "$dir/output" <<'EOC' || fail "its output is not all JSON lines"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
kinds = {"error": 0, "access": 0}
for line in lines:
    obj = json.loads(line)
    kinds["error" if "level" in obj else "access"] += 1
assert kinds["error"] and kinds["access"], kinds
print(f"test-image: ok: its output is {len(lines)} JSON lines ({kinds['error']} error log, "
      f"{kinds['access']} access log)")
EOC
echo "test-image: all checks passed ($image)"
