#!/usr/bin/env bash
# An OCI image of ScalWS from its Debian package (docs/operations.md,
# "Kubernetes"; make image), without a registry:
#
#   tools/build-image.sh DEB [OUT]
#
# 1. a Debian 12 root (debootstrap --variant=minbase; MIRROR, default
#    http://deb.debian.org/debian);
# 2. the package installed in it with apt (its dependencies from the
#    mirror), services kept from starting (policy-rc.d), then apt's lists
#    and caches, the documentation but the copyrights, and man pages removed;
# 3. /etc/scalws/scalws.yaml from packaging/image/scalws.yaml (port 8080,
#    probes on 9145, logs to the container's output);
# 4. imported into podman's local store as scalws:VERSION (podman import:
#    user scalws, the entry point /usr/sbin/scalwsd, STOPSIGNAL TERM) and
#    saved as an OCI archive OUT (default dist/scalws_VERSION_oci.tar), which
#    `podman load -i` or `skopeo copy oci-archive:...` take elsewhere.
#
# Needs root (debootstrap, chroot), debootstrap and podman.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "[build-image $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2; exit 2; }
DEB=$(realpath "$1")
[ -f "$DEB" ] || die "no package $1 (make deb)"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
for t in debootstrap podman dpkg-deb; do command -v "$t" >/dev/null || die "$t is not installed"; done
VERSION=$(dpkg-deb -f "$DEB" Version)
VERSION=${VERSION%-*}
TAG=localhost/scalws:$VERSION
OUT=${2:-$ROOT/dist/scalws_${VERSION}_oci.tar}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

WORK=$(mktemp -d /var/tmp/scalws-image.XXXXXX)
cleanup() {
    for m in proc dev/pts dev; do umount "$WORK/root/$m" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

log "debootstrap bookworm ($MIRROR)"
debootstrap --variant=minbase bookworm "$WORK/root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }

log "installing $(basename "$DEB")"
cp "$DEB" "$WORK/root/tmp/scalws.deb"
printf '#!/bin/sh\nexit 101\n' >"$WORK/root/usr/sbin/policy-rc.d"   # no service starts in the build
chmod 755 "$WORK/root/usr/sbin/policy-rc.d"
mount -t proc proc "$WORK/root/proc"
chroot "$WORK/root" sh -c '
    set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends /tmp/scalws.deb
    apt-get clean
' >"$WORK/apt.log" 2>&1 || { tail -n 20 "$WORK/apt.log" >&2; die "installing the package failed"; }
umount "$WORK/root/proc"
chroot "$WORK/root" scalwsd --version >&2

log "trimming"
(
    cd "$WORK/root"
    rm -f usr/sbin/policy-rc.d tmp/scalws.deb
    rm -rf var/lib/apt/lists/* var/cache/apt/* var/log/* usr/share/man/* usr/share/info/* \
        usr/share/locale/* var/cache/debconf/*-old
    # documentation: only the copyright files stay (Debian policy 12.5)
    find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
    find usr/share/doc -mindepth 1 -type d -empty -delete
    install -m 0644 "$ROOT/packaging/image/scalws.yaml" etc/scalws/scalws.yaml
    install -d -o "$(chroot . id -u scalws)" -g "$(chroot . id -g scalws)" -m 0755 run/scalws
)

log "importing into podman as $TAG"
podman rmi -f "$TAG" >/dev/null 2>&1 || true
tar -C "$WORK/root" --numeric-owner -c . | podman import \
    --change 'USER scalws' \
    --change 'WORKDIR /' \
    --change 'ENTRYPOINT ["/usr/sbin/scalwsd"]' \
    --change 'CMD ["--config", "/etc/scalws/scalws.yaml"]' \
    --change 'EXPOSE 8080' --change 'EXPOSE 9145' \
    --change 'STOPSIGNAL SIGTERM' \
    --change "LABEL org.opencontainers.image.title=scalws org.opencontainers.image.version=$VERSION" \
    - "$TAG" >/dev/null
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
podman save --format oci-archive -o "$OUT" "$TAG"
log "done: $TAG, $(podman image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec) ($OUT)"
