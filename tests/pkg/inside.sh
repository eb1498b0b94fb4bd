#!/bin/bash
# Runs inside the clean Debian 12 root that tests/pkg/test-deb.sh made, with
# the package installed: what it installed, the server it runs, an operator's
# change to the configuration, log rotation, an upgrade with the server
# running, remove and purge. Each step prints what it checks; the first
# failure stops the run with the server's error log.
#
#   inside.sh VERSION NEXT_VERSION     (/root/scalws-next.deb is NEXT_VERSION)
set -eu   # no pipefail: `producer | grep -q` would fail when grep stops reading early
version=$1 next=$2
step() { echo "  - $*"; }
fail() {
    echo "FAIL: $*" >&2
    [ -r /var/log/scalws/error.log ] && { echo "--- error.log" >&2; tail -30 /var/log/scalws/error.log >&2; }
    exit 1
}

# GET URL [expected body text]: prints "STATUS BODY"; exit 1 if unreachable.
get() {
    python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status, r.read().decode(errors="replace").replace("\n", " "))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors="replace").replace("\n", " "))
except OSError as e:
    print("unreachable", e)
    sys.exit(1)
PY
}

# Polls COMMAND (a shell string) for up to 10 s.
wait_for() {
    local what=$1 cmd=$2 i
    for i in $(seq 100); do
        if eval "$cmd" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    fail "timed out waiting for $what"
}

master_pid() { cat /run/scalws/scalwsd.pid; }

echo "inside: scalws $version installed"

# This root now acts as a booted sysvinit machine at runlevel 2, so that
# invoke-rc.d (the package's maintainer scripts) acts on the service as it
# would there: the runlevel is 2, and local policy (policy-rc.d, Debian's
# switch for chroots) allows every action. In a bare chroot invoke-rc.d
# refuses to start or restart anything.
printf '#!/bin/sh\necho "N 2"\n' >/sbin/runlevel
printf '#!/bin/sh\nexit 0\n' >/usr/sbin/policy-rc.d
chmod 755 /sbin/runlevel /usr/sbin/policy-rc.d

step "files, user, log folder"
[ -x /usr/sbin/scalwsd ] || fail "/usr/sbin/scalwsd missing"
[ -x /usr/sbin/scalws-controller ] || fail "/usr/sbin/scalws-controller missing"
dpkg-query -W -f='${Conffiles}\n' scalws | grep -q '^ /etc/scalws/scalws.yaml ' \
    || fail "/etc/scalws/scalws.yaml is not a conffile"
getent passwd scalws | grep -q ':/usr/sbin/nologin$' || fail "no system user scalws"
getent group scalws >/dev/null || fail "no group scalws"
[ "$(stat -c '%U:%G %a' /var/log/scalws)" = "scalws:adm 750" ] \
    || fail "/var/log/scalws is $(stat -c '%U:%G %a' /var/log/scalws)"
[ -r /etc/logrotate.d/scalws ] || fail "no logrotate configuration"
[ -r /lib/systemd/system/scalws.service ] || fail "no systemd unit"
[ -x /etc/init.d/scalws ] || fail "no init script"
zcat /usr/share/man/man8/scalwsd.8.gz | grep -q '^\.TH "SCALWSD" "8"' || fail "man page scalwsd(8)"
zcat /usr/share/man/man5/scalws.yaml.5.gz | grep -q '^\.TH "SCALWS.YAML" "5"' || fail "man page scalws.yaml(5)"
zcat /usr/share/man/man8/scalws-controller.8.gz | grep -q '^\.TH "SCALWS-CONTROLLER" "8"' \
    || fail "man page scalws-controller(8)"
zcat /usr/share/man/man5/scalws.yaml.5.gz | grep -q '^\\fBshutdown_timeout\\fR$' || fail "scalws.yaml(5) lacks the keys"
ls /usr/share/doc/scalws/configuration.md* /usr/share/doc/scalws/operations.md* \
   /usr/share/doc/scalws/copyright >/dev/null || fail "/usr/share/doc/scalws incomplete"
[ -n "$(find /usr/lib/scalws/python/scalws -name '*.pyc' | head -1)" ] \
    || fail "the private tree was not byte-compiled (py3compile)"

step "scalwsd --version, --check-config"
v=$(/usr/sbin/scalwsd --version)
echo "$v" | grep -q "^scalwsd ${version%-*} (commit [0-9a-f]\{12\}\(-dirty\)\{0,1\}, gcc [0-9.]*, -march=x86-64-v2, PGO \(off\|on: trained .*\), BOLT \(off\|on: trained .*\))$" \
    || fail "version: $v"
/usr/sbin/scalwsd --check-config /etc/scalws/scalws.yaml >/dev/null || fail "the shipped config does not check"
/usr/sbin/scalws-controller --help | grep -q -- "--config" || fail "scalws-controller --help"

step "start (init script: as scalws, only CAP_NET_BIND_SERVICE, waits until ready)"
/etc/init.d/scalws start >/dev/null || fail "init script start"
out=$(get http://127.0.0.1/) || fail "port 80: $out"
case "$out" in "200 "*"Welcome to ScalWS"*) ;; *) fail "welcome page: $out" ;; esac
pid=$(master_pid)
uid=$(awk '/^Uid:/ {print $2}' /proc/$pid/status)
[ "$uid" = "$(id -u scalws)" ] || fail "master runs as uid $uid"
capeff=$(awk '/^CapEff:/ {print $2}' /proc/$pid/status)
[ "$capeff" = 0000000000000400 ] || fail "master's effective capabilities are $capeff"
for w in $(cat /proc/$pid/task/$pid/children); do
    [ "$(awk '/^Uid:/ {print $2}' /proc/$w/status)" = "$(id -u scalws)" ] || fail "worker $w not scalws"
done

step "an operator's change, checked then reloaded (HUP)"
cat >>/etc/scalws/scalws.yaml <<'YAML'
      - path: "= /healthz"
        respond: {status: 200, body: "healthy"}
YAML
/etc/init.d/scalws reload >/dev/null || fail "reload"
wait_for "the reloaded route" 'get http://127.0.0.1/healthz | grep -q "^200 healthy"'
[ "$(master_pid)" = "$pid" ] || fail "reload replaced the master"
cp /etc/scalws/scalws.yaml /tmp/good.yaml
echo "wrokers: 2" >>/etc/scalws/scalws.yaml
/etc/init.d/scalws reload >/tmp/reload.out 2>&1 && fail "a bad file was reloaded"
grep -q "unknown key 'wrokers'" /tmp/reload.out || fail "reload refusal: $(cat /tmp/reload.out)"
get http://127.0.0.1/healthz | grep -q "^200 healthy" || fail "bad reload broke the server"
cp /tmp/good.yaml /etc/scalws/scalws.yaml

step "logrotate (USR1: logs reopened)"
get http://127.0.0.1/?before-rotation >/dev/null
wait_for "the access log line" 'grep -q before-rotation /var/log/scalws/access.log'
logrotate -f /etc/logrotate.d/scalws || fail "logrotate"
[ -e /var/log/scalws/access.log.1 ] || fail "access.log not rotated"
get http://127.0.0.1/?after-rotation >/dev/null
wait_for "a line in the new access log" 'grep -q after-rotation /var/log/scalws/access.log'
grep -q after-rotation /var/log/scalws/access.log.1 && fail "still writing the rotated file"
[ "$(stat -c '%U:%G %a' /var/log/scalws/access.log)" = "scalws:adm 640" ] \
    || fail "new access.log is $(stat -c '%U:%G %a' /var/log/scalws/access.log)"

step "upgrade to $next with the server running: restarted, configuration kept"
dpkg -i /root/scalws-next.deb >/tmp/upgrade.log 2>&1 || { cat /tmp/upgrade.log; fail "dpkg -i $next"; }
[ "$(dpkg-query -W -f='${Version}' scalws)" = "$next" ] || fail "version after upgrade"
wait_for "the restarted server" 'get http://127.0.0.1/healthz | grep -q "^200 healthy"'
[ "$(master_pid)" != "$pid" ] || fail "the server was not restarted by the upgrade"
grep -q healthz /etc/scalws/scalws.yaml || fail "the operator's configuration was lost"

step "remove: server stopped, configuration and logs kept"
dpkg -r scalws >/tmp/remove.log 2>&1 || { cat /tmp/remove.log; fail "dpkg -r"; }
get http://127.0.0.1/ >/dev/null && fail "the server still answers after remove"
[ ! -e /usr/sbin/scalwsd ] || fail "/usr/sbin/scalwsd left after remove"
[ ! -e /usr/sbin/scalws-controller ] || fail "/usr/sbin/scalws-controller left after remove"
[ ! -e /usr/lib/scalws ] || fail "/usr/lib/scalws left after remove: $(find /usr/lib/scalws | head -5)"
[ -e /etc/scalws/scalws.yaml ] || fail "remove deleted the configuration"
[ -d /var/log/scalws ] || fail "remove deleted the logs"

step "purge: configuration and logs gone, the system user kept"
dpkg -P scalws >/tmp/purge.log 2>&1 || { cat /tmp/purge.log; fail "dpkg -P"; }
[ ! -e /etc/scalws ] || fail "/etc/scalws left after purge: $(ls -A /etc/scalws)"
[ ! -e /var/log/scalws ] || fail "/var/log/scalws left after purge"
[ ! -e /etc/logrotate.d/scalws ] || fail "logrotate configuration left after purge"
getent passwd scalws >/dev/null || fail "purge removed the user (Debian keeps system users)"
echo "inside: all checks passed"
