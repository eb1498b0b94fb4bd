"""The validated configuration, as the rest of ScalWS sees it.

The loader (loader.py) turns a YAML document into these objects or refuses it
with a ConfigError that names file:line:column and the key path. Everything
here is plain data with defaults filled in and units converted (sizes in
bytes, durations in seconds as float); nothing here imports compiled code.

Every object that came from the file keeps `mark`, the (file, line, column)
of its key, so that later stages (binding a socket, opening a log) can report
errors against the line that asked for them.
"""
from __future__ import annotations

import os
from scalws.config.record import dataclass, field

Mark = tuple  # (file: str, line: int, column: int), 1-based


@dataclass
class Limits:
    max_header_bytes: int = 16 * 1024      # request line + header block -> 431
    max_headers: int = 100                 # header field count -> 431
    max_uri_bytes: int = 8 * 1024          # request-target length -> 414
    max_body_bytes: int = 10 * 1024 * 1024  # Content-Length or chunked total -> 413
    header_timeout: float = 10.0           # first byte to end of head -> 408
    body_timeout: float = 60.0             # between two reads of a request body -> 408
    keepalive_timeout: float = 75.0        # idle between requests -> close
    send_timeout: float = 60.0             # no write progress -> close
    keepalive_requests: int = 10000        # requests (HTTP/2: streams) per connection, then close
    max_connections: int = 10000           # per worker


@dataclass
class Http2:
    """`http2:`: HTTP/2's settings and DoS budgets, every HTTP/2 connection
    of the server (docs/configuration.md, docs/adr/0016-h2-dos-budgets.md).
    A budget is a token bucket: `*_burst` frames at once, `*_rate` more a
    second; past it the connection ends with GOAWAY ENHANCE_YOUR_CALM."""
    max_concurrent_streams: int = 128      # SETTINGS_MAX_CONCURRENT_STREAMS
    stream_window: int = 256 * 1024        # SETTINGS_INITIAL_WINDOW_SIZE: request body per stream
    connection_window: int = 1024 * 1024   # request body per connection
    max_header_list_size: int | None = None     # None: limits.max_header_bytes + 32 x max_headers
    header_table_size: int = 4096          # HPACK dynamic table, both directions
    max_continuations: int = 8             # CONTINUATION frames after a HEADERS
    unsent_limit: int = 16 * 1024          # TCP_NOTSENT_LOWAT (ADR 0019); 0: the kernel's (none)
    reset_burst: int = 1000                # RST_STREAM from the client (rapid reset)
    reset_rate: int = 33                   # ... per second
    frame_burst: int = 1000                # SETTINGS, PING, WINDOW_UPDATE, PRIORITY, empty DATA
    frame_rate: int = 100                  # ... per second


@dataclass
class Http3:
    """`http3:`: HTTP/3's settings, every QUIC listener of the server
    (docs/configuration.md, "http3"; docs/adr/0032-http3-quic.md)."""
    max_concurrent_streams: int = 100      # initial_max_streams_bidi: requests at once
    stream_window: int = 256 * 1024        # request body a stream may send ahead
    connection_window: int = 1024 * 1024   # ... and the connection
    idle_timeout: float = 30.0             # max_idle_timeout, seconds
    handshake_timeout: float = 10.0        # a handshake not done by then is dropped
    max_connections: int = 10_000          # QUIC connections per worker; more are not accepted
    qpack_table: int = 4096                # QPACK: our decoder's dynamic table
    qpack_blocked_streams: int = 100       # streams that may wait on it
    qpack_encoder_table: int = 0           # the client's table our encoder may fill (0: static only)
    # handshakes under way per worker from which a new client proves its
    # address first (a Retry); 0: always; None (`off`): never
    retry_above: int | None = 100
    alt_svc_max_age: int = 86400           # Alt-Svc's ma= on the site's TLS answers; 0: no Alt-Svc
    early_data: bool = False               # 0-RTT: GET/HEAD before the handshake ends (RFC 8470)
    early_data_window: float = 10.0        # its anti-replay window, seconds
    gso: bool = True                       # UDP GSO: a connection's packets in one sendmsg


@dataclass
class LogConfig:
    access: str | None = None              # path; None = access log off
    format: str = "combined"               # "combined" | "json"
    error: str | None = None               # path; None = stderr
    error_format: str = "text"             # "text" (nginx's) | "json" (one object per line)
    level: str = "notice"                  # debug|info|notice|warn|error|crit
    buffer: int = 64 * 1024                # access-log buffer per worker
    flush: float = 1.0                     # seconds between flushes


@dataclass
class Listen:
    kind: str                              # "tcp" | "unix" | "quic" (UDP: HTTP/3)
    host: str = ""                         # "0.0.0.0", "127.0.0.1", "::1", ...
    port: int = 0
    path: str = ""                         # unix socket path
    tls: bool = False                      # `tls` option: TLS is terminated here
    h2c: bool = False                      # `h2c`: cleartext HTTP/2 with prior knowledge too
    http2: bool = True                     # `http2=off`: ALPN never offers h2 (TLS listeners)
    default: bool = False                  # default site for this address
    backlog: int = 511
    text: str = ""                         # as written in the file
    mark: Mark = ("<default>", 0, 0)

    @property
    def serves_h2(self) -> bool:
        """Whether HTTP/2 may be spoken here: ALPN h2 on TLS, prior knowledge on h2c."""
        return self.http2 if self.tls else self.h2c

    @property
    def key(self) -> tuple:
        """Identity of the socket: two sites naming the same key share it."""
        if self.kind == "unix":
            return ("unix", self.path)
        return (self.kind, self.host, self.port)


@dataclass
class Respond:
    status: int = 200
    body: bytes = b""
    headers: list = field(default_factory=list)   # [(name, value)] in order
    content_type: str | None = "text/plain"       # None = no Content-Type


@dataclass
class Route:
    # "exact" (= /p), "prefix" (/p), "prefix_noregex" (^~ /p),
    # "regex" (~ re), "regex_icase" (~* re)
    match: str
    pattern: str
    kind: str                              # handler kind: "respond", ...
    handler: object                        # Respond, ...
    mark: Mark = ("<default>", 0, 0)


# ---- TLS (config half: directives/tls.py; checks: config/tlscheck.py) ----

# Defaults (docs/configuration.md, "TLS"): Mozilla's "intermediate" profile.
TLS_PROTOCOLS = ["TLSv1.2", "TLSv1.3"]
TLS_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
               "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
               "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
TLS_CIPHERSUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
TLS_CURVES = ["X25519", "prime256v1", "secp384r1"]


@dataclass
class Certificate:
    """One certificate of a site: PEM files, the leaf first in `cert`, then
    its chain (intermediates, issuer first)."""
    cert: str                              # absolute path
    key: str                               # absolute path
    ocsp_file: str | None = None           # DER OCSP response the operator keeps fresh
    # Filled by config/tlscheck.py at load: "ECDSA P-256", "RSA 2048", ...
    key_type: str = ""
    names: list = field(default_factory=list)   # DNS names the certificate covers
    not_after: float = 0.0                 # wall seconds
    ocsp_url: str | None = None            # the responder named in the certificate
    mark: Mark = ("<default>", 0, 0)


@dataclass
class SiteTLS:
    certificates: list                     # [Certificate], at least one; one per key type
    protocols: list = field(default_factory=lambda: list(TLS_PROTOCOLS))
    ciphers: str = TLS_CIPHERS             # TLS 1.2 (OpenSSL cipher list)
    ciphersuites: str = TLS_CIPHERSUITES   # TLS 1.3
    curves: list = field(default_factory=lambda: list(TLS_CURVES))  # preference order
    ocsp_stapling: bool = True             # staple: from ocsp_file, else fetched by the master
    hsts: str | None = None                # Strict-Transport-Security value; None = off
    redirect: bool = False                 # the site's plain listeners answer 301 to https
    mark: Mark = ("<default>", 0, 0)


@dataclass
class TicketKeys:
    """Session tickets (TLS 1.2 and 1.3): keys made by the master, shared by
    every worker, kept across reloads, rotated every `rotation`; or, with
    `key_file`, the operator's keys (shared by several servers), read at
    load and published again on each reload, never rotated by us."""
    enabled: bool = True
    rotation: float = 3600.0               # seconds a key encrypts; accepted twice as long
    key_file: list = field(default_factory=list)   # [encrypting, previous] paths
    keys: list = field(default_factory=list)       # their 80-byte sws_ticket_key_t, same order


@dataclass
class Site:
    listen: list                           # [Listen]
    server_names: list                     # ["example.com", "*.example.com"]
    routes: list                           # [Route] in file order
    tls: SiteTLS | None = None             # required when a listen has `tls`
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Resolver:
    """`resolver:`: how upstream host names are resolved at load and then
    again by the master while it runs (scalws/dns.py, control/resolver.py).
    nameservers, search and ndots are /etc/resolv.conf's unless written."""
    enabled: bool = True                   # off: getaddrinfo() once, at load
    nameservers: list = field(default_factory=list)  # [(ip, port)]
    search: list = field(default_factory=list)
    ndots: int = 1
    timeout: float = 2.0                   # per try of a nameserver
    attempts: int = 2                      # rounds over the nameservers
    ipv6: bool = True                      # ask AAAA too
    min_interval: float = 1.0              # the TTL, bounded by these, is when
    max_interval: float = 30.0             # a name is asked again
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Config:
    source: str = "<default>"              # file the config came from
    workers: int = 1                       # resolved: "auto" -> CPUs we may use
    cpus: list = field(default_factory=list)  # CPU ids worker i is pinned to
    user: str | None = None                # None: as root, users.default_user()
    user_mark: Mark = ("<default>", 0, 0)
    sandbox: str = "on"                    # "on" | "off" | "required" (control/sandbox.py)
    server_header: str | None = "scalws"     # None = no Server header
    shutdown_timeout: float = 30.0
    # Reload by itself when the file's content changes, checked this often
    # (control/watch.py); 0 = off. source_digest: sha256 of the bytes loaded.
    watch_config: float = 0.0
    source_digest: bytes = b""
    # With several proxied requests in flight to slow upstreams, poll every
    # this long instead of being woken by each answer (docs/adr/0003); 0 = off.
    batch_window: float = 20e-6
    # Before a worker sleeps, it polls for events for up to this long, as
    # long as its idle gaps have been that short (docs/adr/0004); 0 = off.
    # Resolved at load: `auto` is 50 us on a virtual machine, 0 on bare metal
    # or under a cgroup CPU quota of less than a CPU per worker (ADR 0021);
    # busy_poll_auto says which and why, "" when not auto.
    busy_poll: float = 0.0
    busy_poll_auto: str = ""
    pid: str | None = None                 # pid file path
    log: LogConfig = field(default_factory=LogConfig)
    limits: Limits = field(default_factory=Limits)
    http2: Http2 = field(default_factory=Http2)
    http3: Http3 = field(default_factory=Http3)
    sites: list = field(default_factory=list)  # [Site]
    upstreams: dict = field(default_factory=dict)  # name -> Upstream (reverse proxy)
    trusted_proxies: list = field(default_factory=list)  # CIDR strings whose X-Forwarded-* we believe
    tickets: TicketKeys = field(default_factory=TicketKeys)
    resolver: "Resolver" = field(default_factory=lambda: Resolver())
    apps: dict = field(default_factory=dict)  # name -> App (managed applications)
    instances: Instances | None = None       # `instances:` (scalws-controller only)
    status: "Status | None" = None  # the metrics listener (`status:`), None: none
    cache_zones: dict = field(default_factory=dict)  # name -> CacheZone (`cache_zones:` and implicit)
    # Problems that do not refuse the file (a certificate expiring soon):
    # (file, line, column, key path, message), printed by --check-config and
    # logged at start and reload.
    warnings: list = field(default_factory=list)


@dataclass
class Instances:
    """`instances:`: what scalws-controller runs (docs/configuration.md,
    docs/adr/0013-controller.md). Fractions are 0..1, times seconds."""
    min: int = 1
    max: int = 1
    cpus_per_instance: int = 1
    cpus: list = field(default_factory=list)   # CPU ids shared out, in order
    memory_limit: int | None = None            # bytes per instance; None = no limit
    cpu_quota: float | None = None             # CPUs' worth per instance (cfs quota); None = none
    scale_up_busy: float = 0.75                # busy fraction of the instances' CPUs
    scale_down_busy: float = 0.30
    scale_up_queue: int = 128                  # queued connections on the listeners, in all
    scale_up_p99: float | None = None          # seconds; None = not a signal
    samples: int = 3                           # consecutive samples before acting
    sample_interval: float = 2.0
    cooldown: float = 30.0                     # after a scale action, before the next
    start_timeout: float = 15.0                # an instance's READY, after start or HUP
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Status:
    """The `status:` listener (scalws/control/statusd.py): /metrics and
    /status over the shared counters (scalws/control/stats.py)."""
    host: str = "127.0.0.1"
    port: int = 9145
    allow: list = field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])  # CIDR strings
    file: str | None = None              # the counters file (else --stats-file, else anonymous)
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Static:
    """A `static` route: files under `root` (config half: directives/static.py)."""
    root: str                              # absolute path of an existing folder
    index: list = field(default_factory=lambda: ["index.html"])  # file names, in order
    # try_files: candidates tried in order, each "$uri", "$uri/" or "/path"
    # (relative to root); then the fallback, at most one of try_status (an
    # error status) and try_uri (a URI routed again). Empty: serve $uri.
    try_files: list = field(default_factory=list)
    try_status: int | None = None
    try_uri: str | None = None
    autoindex: bool = False
    expires: float | None = None           # seconds; None = off; "max" = 315360000
    cache_control: str | None = None       # verbatim Cache-Control; excludes expires
    headers: list = field(default_factory=list)   # [(name, value)] in order
    precompressed: bool = True             # serve FILE.br / FILE.gz when accepted
    follow_symlinks: str = "on"            # "on" | "off" | "owner"
    deny_hidden: bool = True               # 404 for any path segment starting "."
    mime_types: dict = field(default_factory=dict)  # ext -> type, merged (config/mime.py)
    charset: str | None = None             # appended to text types; None = off
    default_type: str = "application/octet-stream"
    open_file_cache_valid: float = 1.0     # seconds before a cached stat is rechecked
    open_file_cache_max: int = 10000       # entries per worker
    memory_cache_max: int = 64 * 1024      # largest file kept in memory; 0 = none
    sendfile_chunk: int = 2 * 1024 * 1024  # most bytes per sendfile call


# ---- reverse proxy (config half: directives/proxy.py, loader's `upstreams`) ----

@dataclass
class UpstreamServer:
    """One server of an upstream group; `address` is as written in the file."""
    address: str                           # "127.0.0.1:3000", "[::1]:3000", "unix:/run/a.sock"
    kind: str = "tcp"                      # "tcp" | "unix"
    host: str = ""                         # numeric IP (names are resolved at load)
    port: int = 0
    path: str = ""                         # unix socket path
    # The host name this address came from, when the master re-resolves it
    # (control/resolver.py); "" for a numeric address or `resolver: off`.
    # host "" with resolve set: a cache peers' name with no address yet (no
    # server in the engine until it resolves).
    resolve: str = ""
    entry: int = 0                         # its item's index in the group's `servers`
    weight: int = 1
    max_fails: int = 1                     # failures within fail_timeout that mark it down; 0 = never
    fail_timeout: float = 10.0             # seconds: the failure window and how long it stays down
    backup: bool = False                   # used only when every primary is down
    max_connections: int = 0               # per worker; 0 = unlimited
    # TLS groups: the name expected in the server's certificate and sent as
    # SNI (unless an IP address): UpstreamTLS.name, else the route's `host:`
    # (url: routes), else the host as written in `address`.
    tls_name: str = ""
    mark: Mark = ("<default>", 0, 0)


@dataclass
class UpstreamTLS:
    """TLS to the servers of a group (`https://` servers or url, or `tls:`)."""
    verify: bool = True                    # the certificate chain and the expected name
    ca: str | None = None                  # PEM file of trusted CAs; None = the system's store
    name: str | None = None                # expected name; None: see UpstreamServer.tls_name
    sni: bool = True                       # send the name as SNI (never an IP address)
    cert: str | None = None                # client certificate (PEM, then its chain)
    key: str | None = None                 # its private key
    protocols: list = field(default_factory=lambda: list(TLS_PROTOCOLS))
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Health:
    """Active health checks of an upstream group (per worker)."""
    path: str = "/"
    interval: float = 5.0
    timeout: float = 2.0
    expect_status: list = field(default_factory=lambda: [(200, 399)])  # [(lo, hi)] inclusive
    rise: int = 2                          # passes that bring a down server back
    fall: int = 3                          # failures that take a server down
    host: str | None = None                # Host header; None = the server's address


@dataclass
class Upstream:
    name: str
    servers: list                          # [UpstreamServer], at least one
    balance: str = "round_robin"           # "round_robin" (weighted) | "least_conn" | "hash"
    hash_key: str = "client_addr"          # "client_addr" | "uri" | "header:<Name>" (balance: hash)
    keepalive: int = 32                    # idle connections kept per worker (whole group); 0 = none
    keepalive_timeout: float = 60.0        # idle pooled connection closed after this
    keepalive_requests: int = 1000         # requests per upstream connection, then close
    keepalive_time: float = 3600.0         # a connection older than this is not pooled again
    health: Health | None = None
    tls: UpstreamTLS | None = None         # None: plain TCP (or unix)
    protocol: str = "http"                 # "http" | "fastcgi": what its routes speak (loader)
    # Cache peers' group: a server is this node when its host is one of
    # self_hosts and its port one of self_ports (directives/cache_peers.py)
    self_hosts: list = field(default_factory=list)
    self_ports: list = field(default_factory=list)
    written: tuple = field(default=(), compare=False)  # keys the file gave (fastcgi defaults differ)
    mark: Mark = ("<default>", 0, 0)


@dataclass
class Proxy:
    """A `proxy` route. `url:` is turned into an implicit Upstream named
    "url:<address>" (added to Config.upstreams) plus `path_prefix`."""
    upstream: str                          # key into Config.upstreams
    path_prefix: str = ""                  # from url's path: prepended after strip_prefix
    strip_prefix: str = ""                 # removed from the start of the request path
    host: str | None = None                # Host sent upstream; None = the client's
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    send_timeout: float = 60.0
    retries: int = 1                       # further servers tried (idempotent, before any response byte)
    request_headers: list = field(default_factory=list)   # [(name, value)]; value None = remove
    response_headers: list = field(default_factory=list)  # [(name, value)]; value None = remove
    buffer_size: int = 64 * 1024           # bytes buffered per direction per proxied request
    cache: RouteCache | None = None        # `cache:` (issue 17); None: not cached
    unavailable_503: bool = False          # an `app:` route: no worker up -> 503 + Retry-After


# ---- managed applications (config half: directives/app.py; runtime: control/apps.py) ----

@dataclass
class App:
    """An application the master runs and supervises: `workers` processes,
    each listening on its own unix socket (made by the master, per reload
    generation), proxied to from `app:` routes through the implicit
    upstream group "app:<name>" (its servers are filled in by the master)."""
    name: str
    argv: list                             # resolved command line, without the socket
    asgi: str | None = None                # "module:callable" (run by uvicorn); None: argv is a command
    dir: str = ""                          # working folder (absolute)
    workers: int = 1
    env: dict = field(default_factory=dict)  # added to the clean environment
    user: str | None = None                # None: the master's user (unchanged)
    restart: str = "always"                # "always" | "on-failure" | "never"
    start_timeout: float = 10.0            # until the socket accepts connections
    stop_timeout: float = 10.0             # TERM, then KILL after this
    allocator: str = "system"              # "system" | "jemalloc" | "mimalloc"
    preload: str | None = None             # LD_PRELOAD path for the allocator
    cpus: list = field(default_factory=list)  # CPU ids the workers are pinned to; [] = no pinning
    mark: Mark = ("<default>", 0, 0)


# An app's workers are the servers of an implicit upstream group of this name
# (filled in by control/apps.py, routed to by `app:` routes).
GROUP_PREFIX = "app:"


def group_name(app: str) -> str:
    return GROUP_PREFIX + app


def clean_path() -> str:
    """PATH of an app's environment unless its env sets one."""
    return os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin"


@dataclass
class FastCGI:
    """A `fastcgi` route (config half: directives/fastcgi.py). `connect:` is
    turned into an implicit Upstream named "fastcgi:<address>"."""
    upstream: str                          # key into Config.upstreams
    root: str                              # DOCUMENT_ROOT: absolute path of an existing folder
    index: str = "index.php"               # appended to a script path ending in '/'
    split_path_info: str | None = None     # POSIX ERE, two groups: the script, PATH_INFO
    check_script: bool = True              # 404 unless root + SCRIPT_NAME is a file
    follow_symlinks: str = "on"            # for that check, as static's
    keep_conn: bool = True                 # FCGI_KEEP_CONN: pooled connections
    pipeline: bool = True                  # a GET/HEAD that would wait may go behind another
    params: list = field(default_factory=list)   # [(name, value)], sent after ours
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    send_timeout: float = 60.0
    retries: int = 1
    response_headers: list = field(default_factory=list)  # [(name, value)]; value None = remove
    buffer_size: int = 64 * 1024           # the response head must fit
    cache: RouteCache | None = None        # `cache:` (issue 17); None: not cached


# ---- the response cache (config half: directives/cache.py; runtime: csrc/cache/) ----

@dataclass
class CacheZone:
    """One shared-memory store (`cache_zones: NAME: {...}`, or the implicit
    zone "route:<file>:<line>" of a route's `cache:` that gives max_size
    instead of zone). The master maps it once for its life (reloads keep
    it while name and max_size stay the same)."""
    name: str
    max_size: int = 64 << 20               # bytes of shared memory: entries, keys, heads, bodies
    max_object_size: int = 8 << 20         # larger responses pass through uncached
    peers: CachePeers | None = None        # nodes sharing its keys (directives/cache_peers.py)
    mark: Mark = ("<default>", 0, 0)


@dataclass
class CachePeers:
    """`cache_zones.NAME.peers`: the nodes that share the zone's keys by
    consistent hashing of the cache key; `upstream` names the implicit group
    "peers:NAME" of their servers (balance hash, re-resolved like any)."""
    upstream: str
    secret: str                            # the marker's and the PURGE's shared secret
    connect_timeout: float = 1.0
    read_timeout: float = 60.0
    mark: Mark = ("<default>", 0, 0)


@dataclass
class CachePurge:
    """PURGE requests on a cached route: the URL (`PURGE /a`), a prefix
    (`PURGE /a/*`) or tags (`PURGE` with `Cache-Tag: t1 t2`)."""
    allow: list = field(default_factory=list)  # CIDR strings; [] = trusted_proxies


@dataclass
class RouteCache:
    """A proxy or fastcgi route's `cache:`. Times are seconds."""
    zone: str                              # key into Config.cache_zones
    max_object_size: int | None = None     # None: the zone's; at most the zone's
    # The key template, split at load: [("lit", "text") | ("var", "scheme" |
    # "host" | "request_uri" | "uri" | "args" | "is_args" | "request_method")
    # | ("http", "lowercase-name") | ("cookie", "name") | ("arg", "name")].
    key: list = field(default_factory=lambda: [("var", "scheme"), ("var", "host"),
                                               ("var", "request_uri")])
    key_text: str = "$scheme$host$request_uri"
    methods: list = field(default_factory=lambda: ["GET", "HEAD"])  # GET always; HEAD from GET
    # Freshness for responses that give none (no s-maxage, max-age, Expires):
    # [(status or 0 for "any", seconds)], first match wins; [] = heuristic
    # freshness only where RFC 9111 4.2.2 allows it.
    valid: list = field(default_factory=list)
    # Request conditions (the same templates as key, each a list of parts):
    # bypass = a non-empty value other than "0" answers from upstream
    # without a lookup (the response may still be stored); no_store = the
    # response is not stored.
    bypass: list = field(default_factory=list)
    no_store: list = field(default_factory=list)
    # Response header fields whose cache meaning is ignored (lowercase):
    # "cache-control", "expires", "set-cookie", "vary".
    ignore: list = field(default_factory=list)
    lock: bool = True                      # collapse concurrent misses for one key
    lock_timeout: float = 5.0              # a waiter then goes upstream itself
    stale_while_revalidate: float = 0.0    # route defaults; the response's Cache-Control wins
    stale_if_error: float = 0.0
    tag_headers: list = field(default_factory=lambda: ["cache-tag", "surrogate-key"])
    purge: CachePurge | None = None        # None: PURGE is not handled (goes upstream)
    # RFC 9213's target list, most precedent first (lowercase field names):
    # the route's own targeted field (`targeted_field`), then
    # cdn-cache-control unless `cdn_cache_control: off`. The first of them
    # a response carries validly replaces its Cache-Control and Expires.
    targeted: list = field(default_factory=lambda: ["cdn-cache-control"])
    # Those of `targeted` removed from the responses clients get (and from
    # what is stored): by default the route's own field, which targets us.
    targeted_remove: list = field(default_factory=list)
    mark: Mark = ("<default>", 0, 0)
