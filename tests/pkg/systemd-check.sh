#!/bin/bash
# Runs inside the clean Debian 12 root booted with systemd as PID 1
# (systemd-nspawn --boot, from tests/pkg/test-deb.sh), as a oneshot unit
# ordered after scalws.service: the packaged unit itself, every hardening
# option on, started at boot because the package enabled it.
#
#   systemd-check.sh NEXT_VERSION      (/root/scalws-next.deb)
set -u
next=$1
exec >/root/systemd-check.out 2>&1
failed=0
ok()   { echo "ok: $*"; }
bad()  { echo "FAIL: $*"; failed=1; }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }
prop() { systemctl show scalws -p "$1" --value; }
get()  { python3 -c "import sys, urllib.request as u
r = u.urlopen(sys.argv[1], timeout=5); print(r.status, r.read().decode())" "$1" 2>&1; }
wait_active() {
    local i
    for i in $(seq 100); do
        [ "$(prop ActiveState)" = active ] && [ "$(prop SubState)" = running ] && return 0
        sleep 0.1
    done
    return 1
}

check "scalws.service enabled by the package" systemctl is-enabled scalws
check "scalws.service active after boot" wait_active
pid=$(prop MainPID)
status=$(prop StatusText)
case "$status" in *"workers ready"*) ok "READY=1 with STATUS: $status" ;; *) bad "StatusText: '$status'" ;; esac
case "$(get http://127.0.0.1/)" in "200 "*"Welcome to ScalWS"*) ok "welcome page on port 80" ;; *) bad "GET /: $(get http://127.0.0.1/)" ;; esac
st=/proc/$pid/status
[ "$(awk '/^Uid:/ {print $2}' $st)" = "$(id -u scalws)" ] && ok "master runs as scalws" || bad "master uid"
[ "$(awk '/^CapEff:/ {print $2}' $st)" = 0000000000000400 ] && ok "only CAP_NET_BIND_SERVICE" || bad "CapEff $(awk '/^CapEff:/ {print $2}' $st)"
[ "$(awk '/^NoNewPrivs:/ {print $2}' $st)" = 1 ] && ok "NoNewPrivileges" || bad "NoNewPrivs"
[ "$(awk '/^Seccomp:/ {print $2}' $st)" = 2 ] && ok "seccomp filter (SystemCallFilter, MemoryDenyWriteExecute)" || bad "Seccomp $(awk '/^Seccomp:/ {print $2}' $st)"
workers=$(cat /proc/$pid/task/$pid/children)
[ -n "$workers" ] && ok "workers: $workers" || bad "no workers"

# Reload: --check-config first, then HUP; the master reports the new generation.
sed -i 's|^sites:|x-marker: reloaded\nsites:|' /etc/scalws/scalws.yaml
grep -q "x-marker" /etc/scalws/scalws.yaml || bad "could not edit the configuration"
if systemctl reload scalws; then ok "systemctl reload"; else bad "systemctl reload"; fi
for i in $(seq 100); do case "$(prop StatusText)" in *"generation 2"*) break ;; esac; sleep 0.1; done
case "$(prop StatusText)" in *"generation 2"*) ok "reloaded: $(prop StatusText)" ;; *) bad "after reload: $(prop StatusText)" ;; esac
[ "$(prop MainPID)" = "$pid" ] && ok "reload kept the master" || bad "reload changed MainPID"
journalctl -u scalws --no-pager | grep -q "Reloading scalws.service" && ok "journal shows the reload" || bad "no reload in the journal"

# A worker killed: the master replaces it, the service stays up. (Before the
# TLS site: then the master's children would include the TLS keeper.)
workers=$(cat /proc/$pid/task/$pid/children)
w=${workers%% *}
kill -9 "$w" && ok "killed worker $w" || bad "no worker $w to kill"
for i in $(seq 100); do
    now=$(cat /proc/$pid/task/$pid/children 2>/dev/null)
    case " $now " in *" $w "*) ;; *) [ -n "$now" ] && [ "$(echo $now | wc -w)" = "$(echo $workers | wc -w)" ] && break ;; esac
    sleep 0.1
done
case " $(cat /proc/$pid/task/$pid/children) " in *" $w "*) bad "worker $w not replaced" ;; *) ok "killed worker replaced" ;; esac
[ "$(prop NRestarts)" = 0 ] && ok "the service itself never restarted" || bad "NRestarts $(prop NRestarts)"

# TLS under the same sandbox: pyOpenSSL's checks (cffi) in ExecReload's
# --check-config, the TLS keeper process, handshakes in the workers.
install -d -m 0750 -g scalws /etc/ssl/scalws-test
PYTHONPATH=/usr/lib/scalws/python python3 - <<'PY'
import datetime
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256()))
open("/etc/ssl/scalws-test/site.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open("/etc/ssl/scalws-test/site.key", "wb").write(key.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
PY
chgrp scalws /etc/ssl/scalws-test/site.key /etc/ssl/scalws-test/site.pem
chmod 640 /etc/ssl/scalws-test/site.key
cat >>/etc/scalws/scalws.yaml <<'YAML'
  - listen: [":443 tls"]
    server_names: [localhost]
    tls: {cert: /etc/ssl/scalws-test/site.pem, key: /etc/ssl/scalws-test/site.key}
    routes:
      - path: /
        static: {root: /usr/share/scalws/html}
YAML
if systemctl reload scalws; then ok "reload with a TLS site"; else bad "reload with a TLS site"; fi
for i in $(seq 100); do case "$(prop StatusText)" in *"generation 3"*) break ;; esac; sleep 0.1; done
tls=$(python3 -c "import http.client, ssl
c = ssl.create_default_context(cafile='/etc/ssl/scalws-test/site.pem')
conn = http.client.HTTPSConnection('127.0.0.1', 443, context=c, timeout=5)
conn.sock = c.wrap_socket(__import__('socket').create_connection(('127.0.0.1', 443), 5),
                          server_hostname='localhost')
conn.request('GET', '/', headers={'Host': 'localhost'})
r = conn.getresponse(); print(r.status, r.read().decode())" 2>&1)
case "$tls" in "200 "*"Welcome to ScalWS"*) ok "HTTPS on 443 (certificate verified)" ;; *) bad "HTTPS: $tls" ;; esac

# A file that does not check: the reload is refused, the server keeps serving.
cp /etc/scalws/scalws.yaml /tmp/good.yaml
echo "wrokers: 2" >>/etc/scalws/scalws.yaml
if systemctl reload scalws 2>/dev/null; then bad "a bad file was reloaded"; else ok "bad file refused by ExecReload's check"; fi
[ "$(prop ActiveState)" = active ] && ok "still active" || bad "not active after a refused reload"
case "$(get http://127.0.0.1/)" in "200 "*) ok "still serving" ;; *) bad "not serving after a refused reload" ;; esac
cp /tmp/good.yaml /etc/scalws/scalws.yaml

# Upgrade with the service running: restarted (deb-systemd-invoke), config kept.
if DEBIAN_FRONTEND=noninteractive dpkg -i /root/scalws-next.deb >/tmp/upgrade.log 2>&1; then ok "dpkg -i $next"; else bad "dpkg -i: $(tail -5 /tmp/upgrade.log)"; fi
check "active after the upgrade" wait_active
[ "$(prop MainPID)" != "$pid" ] && ok "restarted by the upgrade" || bad "not restarted by the upgrade"
grep -q "x-marker: reloaded" /etc/scalws/scalws.yaml && ok "operator's config kept" || bad "config lost"
case "$(get http://127.0.0.1/)" in "200 "*) ok "serving after the upgrade" ;; *) bad "not serving after the upgrade" ;; esac

# Stop: graceful, clean exit.
systemctl stop scalws
[ "$(prop ActiveState)" = inactive ] && [ "$(prop Result)" = success ] && ok "stopped cleanly" \
    || bad "stop: $(prop ActiveState) $(prop Result)"
grep -q "scalws stopped" /var/log/scalws/error.log && ok "master logged its stop" || bad "no stop in error.log"

if [ $failed = 0 ]; then echo "systemd-check: all passed"; else journalctl -u scalws --no-pager | tail -30; fi
