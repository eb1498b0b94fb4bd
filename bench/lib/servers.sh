# shellcheck shell=bash
# Server adapters: what each server under test supports, how it is
# configured and started. Sourced after common.sh.
#
# Inputs (globals): RUN_DIR, WWW, CERT, KEY and
#   S_TAG      instance tag, makes state dirs unique (default main)
#   S_ADDRS    listen addresses, space separated (default 127.0.0.1)
#   S_WORKERS  worker processes / threads (default 1)
#   S_MAXCONN  connections per worker (default 4096)
#   S_CPU      taskset CPU list (default $CPU_SERVER)
#   S_CGROUP   cgroup v1 cpu directory to start the server in (optional)
# srv_start sets LAST_PID (the root of the server's process tree) and S_DIR.

# scalws-base: a second ScalWS build (SCALWSD_BASE, e.g. a clone of the
# commit before a change, built with `make build`), measured beside the
# current one in the same runs: the before/after of a change to the engine.
# scalws-alt: a third (SCALWSD_ALT), for three builds in one run (plain,
# PGO, PGO + BOLT).
KNOWN_SERVERS="scalws scalws-base scalws-alt nginx h2o lighttpd haproxy caddy"

srv_reset_opts() {
    S_TAG=main S_ADDRS=127.0.0.1 S_WORKERS=1 S_MAXCONN=4096 S_CPU=$CPU_SERVER S_CGROUP=
}
srv_reset_opts

# scenario -> URL path, port and expected answer; the same on every server.
# tls-*: HTTPS on HTTPS_PORT with the ECDSA P-256 certificate of make_cert
# (tls-h2-*: HTTP/2 through h2load; the others HTTP/1.1 through wrk).
scen_path() {
    case $1 in
        static-small | tls-static-small | tls-h2-static-small | tls-h3-static-small) echo /static/1k.html ;;
        static-1m) echo /static/1m.bin ;;
        respond | tls-respond | tls-h2-respond) echo /respond ;;
        proxy | tls-h2-proxy | tls-h3-proxy) echo /proxy/ ;;
        cache-hit) echo /cache/1k.html ;;
        cache-1m) echo /cache/1m.bin ;;
        php) echo /php/hello.php ;;
        node) echo /node/ ;;
        python) echo /python/ ;;
        *) return 1 ;;
    esac
}
scen_url() {  # scen_url SCENARIO [ADDR]
    local addr=${2:-127.0.0.1}
    case $1 in
        tls-*) echo "https://$addr:$HTTPS_PORT$(scen_path "$1")" ;;
        *) echo "http://$addr:$HTTP_PORT$(scen_path "$1")" ;;
    esac
}
scen_port() { case $1 in tls-*) echo "$HTTPS_PORT" ;; *) echo "$HTTP_PORT" ;; esac; }
scen_expected_file() {  # the file whose bytes the answer must equal, or "" for "hello world"
    case $1 in
        static-small | tls-static-small | tls-h2-static-small | tls-h3-static-small | cache-hit) echo "$WWW/static/1k.html" ;;
        static-1m | cache-1m) echo "$WWW/static/1m.bin" ;;
        *) echo "" ;;
    esac
}

srv_binary() {
    case $1 in
        scalws) echo "$SCALWSD" ;; scalws-base) echo "${SCALWSD_BASE:-/nonexistent/scalwsd}" ;; scalws-alt) echo "${SCALWSD_ALT:-/nonexistent/scalwsd}" ;; nginx) echo "$NGINX" ;; h2o) echo "$H2O" ;; lighttpd) echo "$LIGHTTPD" ;;
        haproxy) echo "$HAPROXY" ;;
        caddy) echo "$CADDY" ;;
        *) return 1 ;;
    esac
}

srv_version() {
    local b
    b=$(srv_binary "$1") || { echo unknown; return; }
    [ -x "$b" ] || { echo "not installed"; return; }
    case $1 in
        scalws | scalws-base | scalws-alt) "$b" --version 2>/dev/null | head -1 ||
            "$BENCH_PY" -c 'import scalws; print("scalws", scalws.__version__)' 2>/dev/null || echo "scalwsd (no --version)" ;;
        nginx) "$b" -v 2>&1 | sed 's/^nginx version: //' ;;
        h2o) "$b" --version 2>&1 | head -1 ;;
        lighttpd) "$b" -v 2>&1 | head -1 | cut -d' ' -f1 ;;
        haproxy) "$b" -v 2>&1 | head -1 | awk '{print "haproxy/" $3}' ;;
        caddy) "$b" version 2>&1 | head -1 | awk '{print "caddy/" $1}' ;;
    esac
}

scalws_gen() {  # scalws_gen SCENARIO OUTFILE [SERVER]
    local args=() a top=${SCALWS_TOP:-}
    for a in $S_ADDRS; do args+=(--addr "$a"); done
    # SCALWS_TOP / SCALWS_BASE_TOP: JSON top-level keys added to scalws's /
    # scalws-base's configuration, to compare one build with itself, e.g.
    # SCALWSD_BASE=.venv/bin/scalwsd SCALWS_BASE_TOP='{"sandbox": "off"}'
    [ "${3:-}" = scalws-base ] && top=${SCALWS_BASE_TOP:-}
    [ -n "$top" ] && args+=(--top "$top")
    "$BENCH_PY" "$BENCH_DIR/lib/gen_scalws.py" "$1" --www "$WWW" "${args[@]}" \
        --http-port "$HTTP_PORT" --https-port "$HTTPS_PORT" --up-port "$UP_PORT" \
        --php-port "$PHP_PORT" --php-keepalive "$PHP_KEEPALIVE" --node-port "$NODE_PORT" --pyapp-port "$PYAPP_PORT" \
        --status-port "$STATUS_PORT" --cache-size "$CACHE_SIZE" \
        --cert "$CERT" --key "$KEY" --workers "$S_WORKERS" \
        $([ "$S_MAXCONN" != 4096 ] && echo --max-connections "$S_MAXCONN") >"$2"
}

# srv_supports SERVER SCENARIO: exit 0 if it can run it, else print why (n/a).
srv_supports() {
    local srv=$1 scen=$2 b
    b=$(srv_binary "$srv") || { echo "$srv: unknown server (known: $KNOWN_SERVERS)"; return 1; }
    case $srv in
        scalws | scalws-base | scalws-alt)
            if [ ! -x "$b" ]; then echo "scalws: scalwsd not built ($b missing; make build)"; return 1; fi
            # ScalWS declares what it supports through --check-config: the
            # scenario's generated config is either accepted or not (yet).
            local d="$RUN_DIR/scalws-check"
            mkdir -p "$d"
            scalws_gen "$scen" "$d/$scen.yaml" "$srv"
            if ! "$b" --check-config "$d/$scen.yaml" >"$d/$scen.check.log" 2>&1; then
                log "scalws --check-config refused $scen: $(head -c 300 "$d/$scen.check.log" | tr '\n' ' ')"
                if grep -q "http2" "$d/$scen.check.log"; then
                    echo "scalws: HTTP/2 not available yet (listen option http2 refused)"
                else
                    echo "scalws: handler not available yet"
                fi
                return 1
            fi
            ;;
        nginx)
            [ -x "$b" ] || { echo "nginx: not installed"; return 1; }
            case $scen in tls-h3-*) echo "nginx: no HTTP/3 before 1.25 (Debian 12 has 1.22)"; return 1 ;; esac
            ;;
        h2o)
            [ -x "$b" ] || { echo "h2o: not installed (apt-get install h2o)"; return 1; }
            case $scen in cache-*) echo "h2o: no proxy cache in h2o 2.2"; return 1 ;; esac
            case $scen in tls-h3-*) echo "h2o: no HTTP/3 in h2o 2.2"; return 1 ;; esac
            ;;
        caddy)
            [ -x "$b" ] || { echo "caddy: not installed (apt-get install caddy)"; return 1; }
            case $scen in
                tls-*) ;;
                *) echo "caddy: measured on the TLS scenarios (its HTTP/3 with h1 and h2 beside it)"; return 1 ;;
            esac
            ;;
        lighttpd)
            [ -x "$b" ] || { echo "lighttpd: not installed (apt-get install lighttpd)"; return 1; }
            case $scen in tls-*)
                lighttpd_has_tls || { echo "lighttpd: mod_openssl not installed (apt-get install lighttpd-mod-openssl)"; return 1; } ;;
            esac
            case $scen in
                respond | tls-respond | tls-h2-respond) echo "lighttpd: no fixed-response directive (mod_magnet is not packaged)"; return 1 ;;
                cache-*) echo "lighttpd: no proxy cache"; return 1 ;;
            esac
            ;;
        haproxy)
            [ -x "$b" ] || { echo "haproxy: not installed (apt-get install haproxy)"; return 1; }
            case $scen in tls-h3-*) echo "haproxy: Debian's 2.6 is built without QUIC"; return 1 ;; esac
            case $scen in
                respond | proxy | php | node | python) ;;
                *) echo "haproxy: a proxy, measured on respond, proxy, php, node and python"; return 1 ;;
            esac
            ;;
    esac
    return 0
}

# lighttpd's TLS is a separate Debian package (lighttpd-mod-openssl, only
# "recommended" by lighttpd): without it lighttpd still runs the plain scenarios.
LIGHTTPD_MODDIR=${LIGHTTPD_MODDIR:-/usr/lib/lighttpd}
lighttpd_has_tls() { [ -e "$LIGHTTPD_MODDIR/mod_openssl.so" ]; }

_listen_blocks() {  # the LISTEN placeholder for SERVER
    local a first=1
    LISTEN=
    for a in $S_ADDRS; do
        case $1 in
            nginx)
                LISTEN+="        listen $a:$HTTP_PORT reuseport backlog=4096;"$'\n'
                LISTEN+="        listen $a:$HTTPS_PORT ssl http2 reuseport backlog=4096;"$'\n'
                ;;
            h2o)
                LISTEN+="listen:"$'\n'"  host: $a"$'\n'"  port: $HTTP_PORT"$'\n'
                LISTEN+="listen:"$'\n'"  host: $a"$'\n'"  port: $HTTPS_PORT"$'\n'"  ssl:"$'\n'
                LISTEN+="    certificate-file: $CERT"$'\n'"    key-file: $KEY"$'\n'"    ocsp-update-interval: 0"$'\n'
                ;;
            haproxy)
                LISTEN+="    bind $a:$HTTP_PORT"$'\n'
                ;;
            lighttpd)
                if [ $first = 1 ]; then
                    LISTEN+="server.bind = \"$a\""$'\n'"server.port = $HTTP_PORT"$'\n'
                else
                    LISTEN+="\$SERVER[\"socket\"] == \"$a:$HTTP_PORT\" { }"$'\n'
                fi
                if lighttpd_has_tls; then
                    LISTEN+="\$SERVER[\"socket\"] == \"$a:$HTTPS_PORT\" { ssl.engine = \"enable\" ssl.pemfile = \"$CERT\" ssl.privkey = \"$KEY\" }"$'\n'
                fi
                ;;
        esac
        first=0
    done
    export LISTEN
}

# nginx_cache_split SIZE [OBJ_BYTES]: nginx's share of the memory ScalWS's
# zone of SIZE gets, as "KEYS_ZONE_KIB MAX_SIZE_KIB", keys_zone + max_size
# = SIZE. ScalWS keeps keys, heads and bodies in its one mapping; nginx
# keeps a node per key in keys_zone (shared memory, "about 8 thousand keys"
# per MiB: the proxy_cache_path documentation) and each response in a file
# (its header, the key, the response head, then the body; on a tmpfs, whole
# pages of memory), bounded by max_size. max_size alone does not bound a
# busy cache: the cache manager checks it when it wakes, at most every 10 s
# while no entry is inactive, and misses fill the cache meanwhile (measured
# with keys_zone sized for one-page files: 24 383 files, 190 MiB of tmpfs
# against max_size=61m after a 3 s Zipf run). A full keys_zone, on the
# other hand, evicts at once (the least recently used entry, in the worker
# that needs the node). So keys_zone gets room for as many entries as
# max_size holds of OBJ_BYTES answers (0: one-page files, the most a tmpfs
# holds), and both bounds agree; the file of an answer is estimated as
# OBJ_BYTES + NGINX_FILE_HEAD (700: 632 B measured for /cache/zipf/
# answers) rounded up to pages.
NGINX_FILE_HEAD=${NGINX_FILE_HEAD:-700}
nginx_cache_split() {
    local kib file keys kz
    kib=$(($(size_mib "$1") * 1024))
    file=$(((${2:-0} + NGINX_FILE_HEAD + 4095) / 4096 * 4096))
    keys=$((kib * 1024 * 8000 / (file * 8000 + 1048576)))   # SIZE / (file + 1 MiB / 8000)
    kz=$(((keys * 1048576 / 8000 + 1023) / 1024))
    [ "$kz" -ge 64 ] || kz=64                                 # nginx wants 8 pages at least
    [ "$kz" -lt "$kib" ] || die "CACHE_SIZE=$1 is too small to split into keys_zone and max_size"
    echo "$kz $((kib - kz))"
}

# srv_start SERVER SCENARIO: start it, wait until the scenario's port answers.
srv_start() {
    local srv=$1 scen=$2 cmd=() hard
    S_DIR="$RUN_DIR/srv-$srv-$S_TAG"
    rm -rf "$S_DIR"
    mkdir -p "$S_DIR/tmp"
    hard=$(ulimit -Hn)
    export SDIR=$S_DIR WWW CERT KEY UP_PORT PHP_PORT NODE_PORT PYAPP_PORT PHP_KEEPALIVE HTTPS_PORT
    export WORKERS=$S_WORKERS MAXCONN=$S_MAXCONN RLIMIT=$hard
    # servers keep the invoking user (as root: no switch to nobody, which
    # could not read the run dir); the same for every server
    export NGINX_USER_LINE= H2O_USER_LINE=
    if [ "$(id -u)" = 0 ]; then NGINX_USER_LINE="user root;" H2O_USER_LINE="user: root"; fi
    export LT_WORKERS=$([ "$S_WORKERS" = 1 ] && echo 0 || echo "$S_WORKERS")
    case $srv in
        nginx)
            _listen_blocks nginx
            # the cache: fresh for every start, as every server's is, on a
            # tmpfs (nginx_cache_split says why); only the cache scenarios
            # need the tmpfs, the others leave the zone unused
            local split
            split=$(nginx_cache_split "$CACHE_SIZE" "${CACHE_OBJ_SIZE:-0}") || return 1
            export NGINX_CACHE_DIR=$S_DIR/cache NGINX_KEYS_ZONE=${split% *}k NGINX_CACHE_MAX=${split#* }k
            if shm_dir; then
                NGINX_CACHE_DIR=$SHM_DIR/nginx-$S_TAG
                rm -rf "$NGINX_CACHE_DIR"
            else
                case $scen in cache-*)
                    echo "CACHE_TMPFS=$CACHE_TMPFS is not a tmpfs: nginx's cache must live in memory, as ScalWS's" >"$S_DIR/stdout.log"
                    return 1 ;;
                esac
            fi
            mkdir -p "$NGINX_CACHE_DIR"
            render "$BENCH_DIR/configs/nginx.conf.tmpl" "$S_DIR/nginx.conf" || return 1
            cmd=("$NGINX" -p "$S_DIR/" -e "$S_DIR/error.log" -c "$S_DIR/nginx.conf")
            ;;
        h2o)
            _listen_blocks h2o
            render "$BENCH_DIR/configs/h2o.conf.tmpl" "$S_DIR/h2o.conf" || return 1
            cmd=("$H2O" -m worker -c "$S_DIR/h2o.conf")
            ;;
        lighttpd)
            _listen_blocks lighttpd
            export LT_MODULES='"mod_proxy", "mod_fastcgi"'
            if lighttpd_has_tls; then LT_MODULES+=', "mod_openssl"'; fi
            MAXCONN=$((S_MAXCONN < hard / 3 ? S_MAXCONN : hard / 3)) \
                render "$BENCH_DIR/configs/lighttpd.conf.tmpl" "$S_DIR/lighttpd.conf" || return 1
            cmd=("$LIGHTTPD" -D -f "$S_DIR/lighttpd.conf")
            ;;
        haproxy)
            _listen_blocks haproxy
            render "$BENCH_DIR/configs/haproxy.cfg.tmpl" "$S_DIR/haproxy.cfg" || return 1
            cmd=("$HAPROXY" -db -f "$S_DIR/haproxy.cfg")
            ;;
        caddy)
            render "$BENCH_DIR/configs/Caddyfile.tmpl" "$S_DIR/Caddyfile" || return 1
            # Go's scheduler threads as the others' workers (GOMAXPROCS);
            # its state under S_DIR (no writes to the invoking user's home)
            cmd=(env GOMAXPROCS="$S_WORKERS" XDG_DATA_HOME="$S_DIR" XDG_CONFIG_HOME="$S_DIR"
                 HOME="$S_DIR" "$CADDY" run --adapter caddyfile --config "$S_DIR/Caddyfile")
            ;;
        scalws | scalws-base | scalws-alt)
            scalws_gen "$scen" "$S_DIR/scalws.yaml" "$srv" || return 1
            cmd=("$(srv_binary "$srv")" --config "$S_DIR/scalws.yaml")
            ;;
        *) die "unknown server $srv" ;;
    esac
    if [ -n "$S_CGROUP" ]; then
        # enter the cgroup before exec, so every process the server forks is in it
        cmd=(bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$S_CGROUP" "${cmd[@]}")
    fi
    printf '%q ' "${cmd[@]}" >"$S_DIR/command"
    start_bg "$S_CPU" "$S_DIR/stdout.log" "${cmd[@]}"
    local a
    for a in $S_ADDRS; do
        if ! wait_port "$a" "$(scen_port "$scen")" "$LAST_PID" 20; then
            log "$srv did not start for $scen; its log:"
            tail -n 20 "$S_DIR/stdout.log" "$S_DIR/error.log" 2>/dev/null >&2 || true
            stop_pid "$LAST_PID"
            return 1
        fi
    done
    return 0
}

# ------------------------------------------------------- the upstream nginx
# upstream_start: the upstream of the proxy and cache-* scenarios and of
# bench/cache_zipf.sh (bench/configs/upstream-nginx.conf.tmpl) on CPU_LOAD;
# sets UP_PID. Needs RUN_DIR and WWW.
UP_PID=
upstream_start() {
    mkdir -p "$RUN_DIR/upstream/tmp"
    SDIR=$RUN_DIR/upstream UP_PORT=$UP_PORT WWW=$WWW \
        render "$BENCH_DIR/configs/upstream-nginx.conf.tmpl" "$RUN_DIR/upstream/nginx.conf" || return 1
    require_free_port 127.0.0.1 "$UP_PORT"
    start_bg "$CPU_LOAD" "$RUN_DIR/upstream.log" "$NGINX" -p "$RUN_DIR/upstream/" \
        -e "$RUN_DIR/upstream/error.log" -c "$RUN_DIR/upstream/nginx.conf"
    if ! wait_port 127.0.0.1 "$UP_PORT" "$LAST_PID" 20; then
        log "upstream nginx did not start: $(tail -n 3 "$RUN_DIR/upstream.log" "$RUN_DIR/upstream/error.log" 2>/dev/null | tr '\n' ' ')"
        return 1
    fi
    UP_PID=$LAST_PID
}

upstream_count() {  # requests the upstream nginx has served so far (this one included)
    [ -n "$UP_PID" ] || return 0
    curl -s --max-time 2 "http://127.0.0.1:$UP_PORT/__status" | awk 'NR == 3 {print $3}'
}

srv_start_failure() {  # one line explaining why the last srv_start failed
    { cat "$S_DIR/stdout.log" "$S_DIR/error.log" 2>/dev/null || true; } | grep -v '^\s*$' | tail -n 2 | tr '\n,' '  ' | cut -c1-200
}

# ---------------------------------------------------------------- preflight
# cache_verdict HEADFILE: "hit" when the response head in HEADFILE says it
# came from the cache: ScalWS's `Cache-Status: scalws; hit` (RFC 9211; the
# last member is the cache nearest the client) or nginx's `X-Cache: HIT`
# (add_header X-Cache $upstream_cache_status); otherwise what it says, or
# "no Cache-Status or X-Cache header".
cache_verdict() {
    tr -d '\r' <"$1" | awk '
        tolower($0) ~ /^cache-status:/ { v = substr($0, index($0, ":") + 1); n = split(v, m, ",")
                                         cs = m[n]; gsub(/^ +| +$/, "", cs) }
        tolower($0) ~ /^x-cache:/      { xc = substr($0, index($0, ":") + 1); gsub(/ /, "", xc) }
        END {
            if (cs != "") { if (cs ~ /; *hit( *;|$)/) print "hit"; else print "Cache-Status: " cs }
            else if (xc != "") { if (toupper(xc) == "HIT") print "hit"; else print "X-Cache: " xc }
            else print "no Cache-Status or X-Cache header"
        }'
}

# The URL must answer 200 with exactly the expected body (h2 on tls-h2-*,
# h3 on tls-h3-* (bench/lib/h3check.py), HTTP/1.1 everywhere else, TLS
# included: curl offers only http/1.1 there).
preflight() {  # preflight SCENARIO [ADDR]: prints the problem and fails
    local scen=$1 url body="$RUN_DIR/preflight.body" code want
    url=$(scen_url "$scen" "${2:-127.0.0.1}")
    local opts=(-s -o "$body" --max-time 10 -w '%{http_code} %{http_version}')
    case $scen in tls-h3-*)  # curl has no HTTP/3 in Debian: aioquic
        "$BENCH_PY" "$BENCH_DIR/lib/h3check.py" "$url" "$(scen_expected_file "$scen")"
        return ;;
    esac
    case $scen in
        tls-h2-*) opts+=(-k --http2) ;;
        tls-*) opts+=(-k --http1.1) ;;
    esac
    opts+=(-D "$RUN_DIR/preflight.head")
    for _ in 1 2; do  # twice: the first answer fills a cache
        code=$(curl "${opts[@]}" "$url" 2>&1) || { echo "preflight: curl $url failed ($code)"; return 1; }
    done
    case $scen in tls-h2-*) want="200 2" ;; *) want="200 1.1" ;; esac
    [ "$code" = "$want" ] || { echo "preflight: $url answered '$code', expected '$want'"; return 1; }
    case $scen in cache-*)
        code=$(cache_verdict "$RUN_DIR/preflight.head")
        [ "$code" = hit ] || { echo "preflight: the second answer of $url was not a cache hit ($code)"; return 1; } ;;
    esac
    want=$(scen_expected_file "$scen")
    if [ -n "$want" ]; then
        cmp -s "$body" "$want" || { echo "preflight: $url body differs from $(basename "$want")"; return 1; }
    elif [ "$(cat "$body")" != "hello world" ]; then
        echo "preflight: $url body is '$(head -c 60 "$body")', expected 'hello world'"
        return 1
    fi
}

