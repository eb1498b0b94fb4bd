# The upstream side of the Engine (included by engine.pyx): upstream
# groups (servers, balancing, keep-alive, health checks, client TLS) and
# the proxy and fastcgi handlers that use them (docs/configuration.md,
# "upstreams", "proxy", "fastcgi"). Functions take the Engine as `self`,
# as its methods did.


def _fcgi_pairs(pairs):
    """FastCGI name-value pairs (FastCGI 1.0 §3.4), as csrc/http/fcgi.c writes them."""
    out = bytearray()
    for name, value in pairs:
        nb, vb = name.encode(), value.encode()
        for n in (len(nb), len(vb)):
            out += bytes([n]) if n < 128 else (0x80000000 | n).to_bytes(4, "big")
        out += nb + vb
    return bytes(out)


def _fcgi_record(rtype, content):
    return bytes([1, rtype, 0, 1, len(content) >> 8, len(content) & 0xFF, 0, 0]) + content


def _fastcgi_check(path):
    """The active health check of a FastCGI group: GET `path` (PHP-FPM's
    ping.path answers it itself), on a connection that is then closed."""
    params = _fcgi_pairs([("SCRIPT_NAME", path), ("SCRIPT_FILENAME", path),
                          ("REQUEST_URI", path), ("DOCUMENT_URI", path),
                          ("REQUEST_METHOD", "GET"), ("QUERY_STRING", ""),
                          ("SERVER_SOFTWARE", "scalws"), ("GATEWAY_INTERFACE", "CGI/1.1"),
                          ("HTTP_USER_AGENT", "scalws-health-check")])
    begin = bytes([0, 1, 0, 0, 0, 0, 0, 0])          # role Responder, no FCGI_KEEP_CONN
    return (_fcgi_record(1, begin) + _fcgi_record(4, params) + _fcgi_record(4, b"")
            + _fcgi_record(5, b""))

def _resolved(cfg):
    """A group's servers that have an address (a cache peers' name may have
    none yet: model.UpstreamServer.resolve)."""
    return [s for s in cfg.servers if s.kind != "tcp" or s.host]


cdef build_upstreams(Engine self, config):
    """Compiles config.upstreams (model.Upstream) into sws_upstream_t
    groups registered with the engine; runtime state starts zeroed."""
    cdef sws_upstream_t *u
    cdef sws_upstream_server_t *srv
    cdef uint16_t *expect
    cdef bytes b
    cdef sws_cidr_t *cidrs
    cdef size_t n_trusted
    for name, cfg in config.upstreams.items():
        u = <sws_upstream_t *>PyMem_Calloc(1, sizeof(sws_upstream_t))
        self._keep.append(_Block(<size_t>u))
        servers = _resolved(cfg)
        srv = <sws_upstream_server_t *>PyMem_Calloc(max(1, len(servers)),
                                                    sizeof(sws_upstream_server_t))
        self._keep.append(_Block(<size_t>srv))
        if u == NULL or srv == NULL:
            raise MemoryError()
        b = self._bytes(name)
        u.name = b
        u.conf = srv
        u.n_conf = len(servers)
        names = fill_servers(srv, name, cfg)  # copied by add_upstream below
        u.balance = {"round_robin": SWS_BAL_RR, "least_conn": SWS_BAL_LEAST_CONN,
                     "hash": SWS_BAL_HASH}[cfg.balance]
        key = cfg.hash_key
        if key == "uri":
            u.hash_key = SWS_HASH_URI
        elif key.startswith("header:"):
            u.hash_key = SWS_HASH_HEADER
            b = self._bytes(key[7:].strip().lower())
            u.hash_header = b
            u.hash_header_len = len(b)
        else:
            u.hash_key = SWS_HASH_CLIENT
        u.keepalive = cfg.keepalive
        u.keepalive_timeout_ms = _ms(cfg.keepalive_timeout)
        u.keepalive_requests = cfg.keepalive_requests
        u.keepalive_time_ms = _ms(getattr(cfg, "keepalive_time", 3600.0))
        # A burst of HTTP/2 streams needs more connections at once than
        # the pool keeps: the extra ones live through the burst (ADR 0020).
        # Not to FastCGI: an idle connection holds a PHP-FPM child.
        u.excess_ms = 0 if cfg.protocol == "fastcgi" else min(POOL_EXCESS_MS, u.keepalive_timeout_ms)
        u.queue_at_max = cfg.protocol == "fastcgi"
        h = cfg.health
        if h is not None and cfg.protocol == "fastcgi":
            b = self._bytes(_fastcgi_check(h.path))
            u.hc_fastcgi = 1
        elif h is not None:
            host = h.host or names[0].decode("latin-1")
            b = self._bytes(f"GET {h.path} HTTP/1.1\r\nHost: {host}\r\n"
                            "User-Agent: scalws-health-check\r\nConnection: close\r\n\r\n")
        if h is not None:
            u.hc_request = b
            u.hc_request_len = len(b)
            u.hc_interval_ms = _ms(h.interval)
            u.hc_timeout_ms = _ms(h.timeout)
            u.hc_rise = h.rise
            u.hc_fall = h.fall
            expect = <uint16_t *>PyMem_Calloc(2 * len(h.expect_status) + 2, sizeof(uint16_t))
            self._keep.append(_Block(<size_t>expect))
            if expect == NULL:
                raise MemoryError()
            for i, (lo, hi) in enumerate(h.expect_status):
                expect[2 * i] = lo
                expect[2 * i + 1] = hi
            u.hc_expect = expect
            u.hc_n_expect = len(h.expect_status)
        if cfg.tls is not None:
            u.tls = uptls(self, name, cfg.tls)
        # The group's counters follow the routes' histograms in the slot.
        u.st = <sws_stats_group_t *>(self._stats + sizeof(sws_stats_head_t)
                                     + self._nroutes * sizeof(sws_hist_t)
                                     + len(self._upstreams) * sizeof(sws_stats_group_t))
        if sws_engine_add_upstream(self.e, u) != 0:
            raise MemoryError()
        self._upstreams[name] = <size_t>u
    cidrs = self._cidrs(config.trusted_proxies, &n_trusted)
    sws_engine_set_trusted(self.e, cidrs, n_trusted)

cdef list fill_servers(sws_upstream_server_t *srv, name, cfg):
    """The config halves of cfg.servers into srv[]; returns the bytes its
    names point into, which must live until the engine has copied them."""
    cdef bytes b
    keep = []
    for i, s in enumerate(_resolved(cfg)):
        if s.kind == "unix":
            b = s.path.encode("latin-1")
            rc = sws_upstream_server_set_addr(&srv[i], NULL, 0, b)
            label = "unix:" + s.path
        else:
            b = s.host.encode("latin-1")
            rc = sws_upstream_server_set_addr(&srv[i], b, s.port, NULL)
            label = f"[{s.host}]:{s.port}" if ":" in s.host else f"{s.host}:{s.port}"
        if rc != 0:
            raise ValueError(f"upstream {name!r}: bad address {s.address!r}")
        b = label.encode("latin-1")
        keep.append(b)
        srv[i].name = b
        if cfg.tls is not None:
            b = s.tls_name.encode()
            keep.append(b)
            srv[i].tls_name = b
        srv[i].weight = s.weight
        srv[i].max_fails = s.max_fails
        srv[i].fail_timeout_ms = _ms(s.fail_timeout)
        srv[i].max_conns = s.max_connections
        srv[i].backup = s.backup
        srv[i].self = s.host in cfg.self_hosts and s.port in cfg.self_ports
    return keep


cdef sws_uptls_t *uptls(Engine self, name, t) except NULL:
    """The client TLS context of a group (model.UpstreamTLS), freed
    after the engine (self._keep)."""
    cdef sws_uptls_conf_t conf
    cdef sws_uptls_t *ctx
    cdef char err[512]
    cdef bytes b
    versions = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
    conf.verify = t.verify
    conf.ca = NULL
    conf.cert = NULL
    conf.key = NULL
    if t.ca:
        b = self._bytes(os.fsencode(t.ca))
        conf.ca = b
    if t.cert:
        b = self._bytes(os.fsencode(t.cert))
        conf.cert = b
        b = self._bytes(os.fsencode(t.key))
        conf.key = b
    conf.min_version = min(versions[p] for p in t.protocols)
    conf.max_version = max(versions[p] for p in t.protocols)
    conf.sni = t.sni
    ctx = sws_uptls_new(&conf, err, sizeof(err))
    if ctx == NULL:
        f, line, col = t.mark
        raise ValueError(f"{f}:{line}:{col}: upstreams.{name}.tls: "
                         f"{err.decode(errors='replace')}")
    self._keep.append(_UpTLS(<size_t>ctx))
    return ctx


cdef fill_proxy(Engine self, sws_proxy_t *p, cfg):
    """Compiles a config.model.Proxy; its upstream group is built already."""
    cdef bytes b
    p.up = <sws_upstream_t *><size_t>self._upstreams[cfg.upstream]
    b = self._bytes(cfg.path_prefix or "")
    p.path_prefix = b
    p.path_prefix_len = len(b)
    b = self._bytes(cfg.strip_prefix or "")
    p.strip_prefix = b
    p.strip_prefix_len = len(b)
    if cfg.host:
        b = self._bytes(cfg.host)
        p.host = b
        p.host_len = len(b)
    p.connect_timeout_ms = _ms(cfg.connect_timeout)
    p.read_timeout_ms = _ms(cfg.read_timeout)
    p.send_timeout_ms = _ms(cfg.send_timeout)
    p.retries = cfg.retries
    # A set header replaces the client's (or upstream's) field of that name.
    p.req_drop = <sws_hname_t *><size_t>self._hnames(
        [n for n, _ in cfg.request_headers], &p.n_req_drop)
    b = self._bytes("".join(f"{n}: {v}\r\n" for n, v in cfg.request_headers if v is not None))
    p.req_set = b
    p.req_set_len = len(b)
    p.resp_drop = <sws_hname_t *><size_t>self._hnames(
        [n for n, _ in cfg.response_headers], &p.n_resp_drop)
    b = self._bytes("".join(f"{n}: {v}\r\n" for n, v in cfg.response_headers if v is not None))
    p.resp_set = b
    p.resp_set_len = len(b)
    p.buffer_size = cfg.buffer_size
    p.unavailable_503 = cfg.unavailable_503

cdef fill_fastcgi(Engine self, sws_fastcgi_t *f, cfg):
    """Compiles a config.model.FastCGI; its upstream group is built already."""
    cdef bytes b
    cdef regex_t *rx
    f.up = <sws_upstream_t *><size_t>self._upstreams[cfg.upstream]
    fd = os.open(cfg.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    self._fds.append(fd)
    f.root_fd = fd
    b = self._bytes(os.fsencode(cfg.root.rstrip("/")))
    f.root = b
    f.root_len = len(b)
    b = self._bytes(cfg.index or "")
    f.index = b
    f.index_len = len(b)
    if cfg.split_path_info:
        rx = <regex_t *>PyMem_Calloc(1, sizeof(regex_t))
        if rx == NULL:
            raise MemoryError()
        b = cfg.split_path_info.encode()
        if regcomp(rx, b, REG_EXTENDED) != 0:
            PyMem_Free(rx)
            raise ValueError(f"split_path_info {cfg.split_path_info!r}: cannot compile")
        self._regexes.append(<size_t>rx)
        f.split = rx
    f.check_script = cfg.check_script
    f.fc_flags = {"off": _FC_NOFOLLOW, "owner": _FC_OWNER}.get(cfg.follow_symlinks, 0)
    f.keep_conn = cfg.keep_conn
    f.pipeline = cfg.pipeline
    b = self._bytes(_fcgi_pairs(cfg.params))
    f.params = b
    f.params_len = len(b)
    f.connect_timeout_ms = _ms(cfg.connect_timeout)
    f.read_timeout_ms = _ms(cfg.read_timeout)
    f.send_timeout_ms = _ms(cfg.send_timeout)
    f.retries = cfg.retries
    f.resp_drop = <sws_hname_t *><size_t>self._hnames(
        [n for n, _ in cfg.response_headers], &f.n_resp_drop)
    b = self._bytes("".join(f"{n}: {v}\r\n" for n, v in cfg.response_headers if v is not None))
    f.resp_set = b
    f.resp_set_len = len(b)
    f.buffer_size = cfg.buffer_size
