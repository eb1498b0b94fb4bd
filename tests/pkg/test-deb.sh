#!/bin/bash
# Installs, upgrades, removes and purges a scalws .deb in a clean Debian 12
# root, the way an operator would on a machine without systemd as PID 1
# (this one): debootstrap makes the root once (cached in build/deb12-base),
# each run works on a fresh copy, apt-get installs the package with its
# dependencies, and tests/pkg/inside.sh then runs inside the root, in its
# own network, PID and mount namespaces (so the package's server can bind
# port 80 and every process it starts ends with the run).
#
#   tests/pkg/test-deb.sh dist/scalws_VERSION_amd64.deb
set -euo pipefail

deb=$(readlink -f "${1:?usage: $0 PACKAGE.deb}")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
base=${PKGTEST_BASE:-$repo/build/deb12-base}
root=$repo/build/deb12-pkgtest
mirror=${PKGTEST_MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "test-deb: needs root (debootstrap, chroot, namespaces)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "test-deb: debootstrap is not installed (make debdeps)" >&2; exit 1; }

if [ ! -x "$base/usr/bin/apt-get" ]; then
    echo "test-deb: debootstrap bookworm into $base"
    rm -rf "$base.tmp"
    debootstrap --variant=minbase bookworm "$base.tmp" "$mirror" >"$repo/build/debootstrap.log" 2>&1 \
        || { tail -20 "$repo/build/debootstrap.log" >&2; exit 1; }
    mv "$base.tmp" "$base"
fi

cleanup() {
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root"
}
# PKGTEST_KEEP=1 keeps the root of a failed run for a look.
trap 'rc=$?; if [ $rc != 0 ] && [ "${PKGTEST_KEEP:-}" = 1 ]; then umount "$root/proc" 2>/dev/null; echo "test-deb: kept $root" >&2; else cleanup; fi' EXIT
cleanup
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"

# The upgrade: the same package as version V+1 (repacked, maintainer
# scripts and all), as an operator would get from the next release.
version=$(dpkg-deb -f "$deb" Version)
next="${version%-*}-$(( ${version##*-} + 1 ))"
work=$(mktemp -d)
dpkg-deb -R "$deb" "$work/pkg"
sed -i "s/^Version: .*/Version: $next/" "$work/pkg/DEBIAN/control"
dpkg-deb -b "$work/pkg" "$root/root/scalws-next.deb" >/dev/null
rm -rf "$work"
cp "$deb" "$root/tmp/scalws.deb"
cp "$here/inside.sh" "$root/tmp/inside.sh"

echo "test-deb: apt-get install ./scalws.deb ($version) in a clean bookworm root"
mount -t proc proc "$root/proc"
# systemd and man-db only for systemd-analyze below (systemd is not PID 1).
chroot "$root" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends systemd man-db logrotate /tmp/scalws.deb \
    >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }'

# The unit as installed: `verify` must print nothing, and the exposure
# score must stay at or under 2.0 (docs/operations.md quotes both).
echo "test-deb: systemd-analyze verify scalws.service"
out=$(chroot "$root" systemd-analyze verify scalws.service 2>&1) || true
if [ -n "$out" ]; then echo "$out" >&2; echo "test-deb: FAIL: verify is not clean" >&2; exit 1; fi
chroot "$root" systemd-analyze security --offline=true scalws.service >"$repo/build/unit-security.txt" 2>&1 || true
score=$(sed -n 's/.*Overall exposure level for scalws.service: \([0-9.]*\).*/\1/p' "$repo/build/unit-security.txt")
echo "test-deb: exposure $score (build/unit-security.txt)"
if [ -z "$score" ] || ! awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }'; then
    cat "$repo/build/unit-security.txt" >&2; echo "test-deb: FAIL: exposure '$score' above 2.0" >&2; exit 1
fi
umount "$root/proc"

# The unit under systemd as PID 1: the root booted with systemd-nspawn, a
# oneshot unit running tests/pkg/systemd-check.sh after scalws.service,
# then powering the container off.
echo "test-deb: booting the root with systemd (systemd-nspawn) for tests/pkg/systemd-check.sh"
if [ ! -e /sys/fs/cgroup/cgroup.controllers ] && ! mountpoint -q /sys/fs/cgroup/systemd; then
    # A cgroup v1 host without systemd: nspawn needs systemd's named hierarchy.
    mkdir -p /sys/fs/cgroup/systemd
    mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd 2>/dev/null || true
    mountpoint -q /sys/fs/cgroup/systemd || { echo "test-deb: cannot mount the name=systemd cgroup" >&2; exit 1; }
fi
cp "$here/systemd-check.sh" "$root/root/systemd-check.sh"
cat >"$root/etc/systemd/system/pkgcheck.service" <<UNIT
[Unit]
Description=scalws package checks under systemd
After=scalws.service

[Service]
Type=oneshot
ExecStart=/bin/bash /root/systemd-check.sh $next
ExecStopPost=/bin/systemctl --no-block poweroff
UNIT
ln -sf /etc/systemd/system/pkgcheck.service "$root/etc/systemd/system/multi-user.target.wants/pkgcheck.service"
timeout 180 systemd-nspawn -q -D "$root" --boot --private-network --register=no --keep-unit \
    >"$repo/build/nspawn.log" 2>&1 </dev/null || true
cat "$root/root/systemd-check.out" 2>/dev/null || { tail -30 "$repo/build/nspawn.log" >&2; }
grep -q "^systemd-check: all passed" "$root/root/systemd-check.out" 2>/dev/null \
    || { echo "test-deb: FAIL: the checks under systemd failed (build/nspawn.log)" >&2; exit 1; }
rm -f "$root/etc/systemd/system/multi-user.target.wants/pkgcheck.service"
# The sysvinit checks start from a fresh install: purged (the systemd
# checks changed the configuration), then installed again.
chroot "$root" /bin/sh -c 'dpkg -P scalws && dpkg -i /tmp/scalws.deb' >"$repo/build/reinstall.log" 2>&1 \
    || { cat "$repo/build/reinstall.log" >&2; exit 1; }

echo "test-deb: running tests/pkg/inside.sh in the root"
unshare --net --pid --mount --fork /bin/sh -c "
    ip link set lo up
    mount -t proc proc '$root/proc'
    exec chroot '$root' /bin/bash /tmp/inside.sh '$version' '$next'"
echo "test-deb: passed"
