# cython: language_level=3
"""One worker's data plane: the C engine (csrc/engine.c) on the worker's outer
loop (scalws/control/loop.py, or any loop with add_reader and call_later).

The engine keeps its own epoll set of listeners and connections; this class
registers that one fd with the loop, so each loop iteration with ready
sockets costs one Python call (`_on_ready`) whatever the number of requests
it answers, and a single timer (`_tick`, a few times a second) drives every
connection timeout. Nothing in this file runs per request.

Ownership: the C router and the prebuilt responses point into bytes objects
held by `self._keep` for the life of the Engine.
"""
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.errno cimport errno
from libc.stdint cimport uint8_t, uint16_t
from libc.string cimport strerror

from scalws.includes.engine cimport *
from scalws.includes.router cimport *

cdef extern from "<regex.h>" nogil:
    int regcomp(regex_t *preg, const char *regex, int cflags)
    void regfree(regex_t *preg)
    enum:
        REG_EXTENDED

import errno as _errno
import ipaddress
import os
import socket as _socket

from scalws import server as _package
from scalws.config.model import Proxy
from scalws.config.mime import content_type as _content_type
from scalws.handlers import respond as respond_handler

if _package._SET_HERE:  # set for GnuTLS's constructor, which has run (__init__.py)
    os.environ.pop(_package._GNUTLS_QUIET, None)

_AF_INET = _socket.AF_INET
_AF_INET6 = _socket.AF_INET6
_FC_NOFOLLOW = 1  # SWS_FC_NOFOLLOW (csrc/include/scalws/filecache.h)
_FC_OWNER = 2     # SWS_FC_OWNER

_MATCH = {
    "exact": SWS_MATCH_EXACT,
    "prefix": SWS_MATCH_PREFIX,
    "prefix_noregex": SWS_MATCH_PREFIX_NOREGEX,
    "regex": SWS_MATCH_REGEX,
    "regex_icase": SWS_MATCH_REGEX_ICASE,
}
_LOG_FORMATS = {"combined": SWS_LOG_COMBINED, "json": SWS_LOG_JSON}
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "error": 3, "warn": 4, "notice": 5,
           "info": 6, "debug": 7}

TICK_SECONDS = 0.25
# Upstream connections beyond a pool's `keepalive`, idle this long, close (ADR 0020).
POOL_EXCESS_MS = 1000
# How long one outer-loop callback may keep waiting on the engine's own epoll
# before the outer loop runs again (timers, signal handlers); ADR 0003.
SERVE_MS = 10


cdef inline uint32_t _ms(double seconds):
    # Clamped: a float beyond uint32 would be undefined in the cast.
    cdef double ms = seconds * 1000.0 + 0.5
    return <uint32_t>(ms if ms < 4294967295.0 else 4294967295.0)


cdef class Engine:
    cdef sws_engine_t *e
    cdef sws_router_t *router
    cdef sws_respond_t *responds      # one per respond route, then the error pages
    cdef sws_handler_t *handlers
    cdef sws_static_t *statics        # one per static route
    cdef sws_proxy_t *proxies         # one per proxy route
    cdef sws_fastcgi_t *fastcgis      # one per fastcgi route
    cdef list _regexes                # compiled split_path_info (regex_t addresses)
    cdef dict _upstreams              # name -> address of its sws_upstream_t
    cdef dict _peers                  # cache zone name -> address of its sws_cache_peers_t
    cdef list _keep
    cdef list _fds                    # root folders of static routes
    cdef object _server
    cdef dict _vhosts                 # listen key -> index into self._vh
    cdef list _vh
    cdef list _tls_sites              # addresses of sws_tls_site_t, freed with the engine
    cdef dict _tls_listen             # listen key -> address of its sws_tls_listen_t
    cdef dict _h2                     # listen key -> 1 when HTTP/2 is served there
    cdef dict _quic                   # quic listen key -> address of its sws_quic_certs_t
    cdef object _tls
    cdef object loop
    cdef object _tick_handle
    cdef object _on_drained
    cdef bint _stopping
    cdef bint _started
    cdef size_t _stats                # this worker's counters slot (sws_stats_head_t)
    cdef size_t _nroutes

    def __cinit__(self, config, int worker_id, tls=None, stats=None, cache=None):
        """`tls`: the master's shared TLS memory (scalws.control.tlsshared
        .Generation): ticket keys and OCSP slots; None: no tickets, no
        stapling (tests that build an engine alone). `stats`: a writable
        buffer, this worker's slot of the master's counters block
        (scalws.control.stats); None: a private one. `cache`: the master's
        cache memory for this configuration (scalws.control.cacheshared
        .View: zones, registry, eventfds); None with cache zones: private
        ones (an engine alone, in tests)."""
        cdef sws_limits_t lim
        cdef sws_respond_t errors_[SWS_ERR_COUNT]
        self._keep = []
        self._tls_sites = []
        self._tls_listen = {}
        self._h2 = {}
        self._quic = {}
        self._tls = tls
        self._fds = []
        self._vhosts = {}
        self._vh = []
        routes = [route for site in config.sites for route in site.routes]
        self.responds = <sws_respond_t *>PyMem_Calloc(len(routes) + 1, sizeof(sws_respond_t))
        self.handlers = <sws_handler_t *>PyMem_Calloc(len(routes) + 1, sizeof(sws_handler_t))
        self.statics = <sws_static_t *>PyMem_Calloc(len(routes) + 1, sizeof(sws_static_t))
        self.proxies = <sws_proxy_t *>PyMem_Calloc(len(routes) + 1, sizeof(sws_proxy_t))
        self.fastcgis = <sws_fastcgi_t *>PyMem_Calloc(len(routes) + 1, sizeof(sws_fastcgi_t))
        self._regexes = []
        self._upstreams = {}
        self._peers = {}
        if self.responds == NULL or self.handlers == NULL or self.statics == NULL \
                or self.proxies == NULL or self.fastcgis == NULL:
            raise MemoryError()
        server = config.server_header
        for i, status in enumerate(respond_handler.ERROR_STATUSES):
            self._fill(&errors_[i], respond_handler.error_page(status, server))

        limits = config.limits
        lim.max_header_bytes = limits.max_header_bytes
        lim.max_headers = limits.max_headers
        lim.max_uri_bytes = limits.max_uri_bytes
        lim.max_body_bytes = limits.max_body_bytes
        lim.header_timeout_ms = _ms(limits.header_timeout)
        lim.body_timeout_ms = _ms(limits.body_timeout)
        lim.keepalive_timeout_ms = _ms(limits.keepalive_timeout)
        lim.send_timeout_ms = _ms(limits.send_timeout)
        lim.keepalive_requests = limits.keepalive_requests
        lim.max_connections = limits.max_connections
        lim.batch_window_us = <uint32_t>(config.batch_window * 1e6 + 0.5)
        lim.busy_poll_us = <uint32_t>(config.busy_poll * 1e6 + 0.5)
        # `auto` (busy_poll_auto says why it polls): measured per worker (ADR 0027)
        lim.busy_poll_measure = 1 if config.busy_poll_auto and lim.busy_poll_us else 0
        self.e = sws_engine_new(&lim, errors_, worker_id)
        if self.e == NULL:
            raise OSError(errno, "engine: " + strerror(errno).decode())
        self.router = sws_router_new()
        if self.router == NULL:
            raise MemoryError()
        self._set_h2(config.http2)
        self._server = server
        line = f"Server: {server}\r\n".encode("latin-1") if server else b""
        self._keep.append(line)
        sws_engine_set_server(self.e, line, len(line))
        self._set_stats(config, stats)
        self._set_cache(config, cache)
        build_upstreams(self, config)  # upstreams.pxi
        self._build_router(config, server)
        self._build_tls(config, tls)
        build_quic(self, config)  # quic.pxi
        statics = [r.handler for r in routes if r.kind == "static"]
        # FastCGI's script check looks scripts up in the same open-file
        # cache (stat only: no content kept for them unless static wants it).
        checks = [r.handler for r in routes if r.kind == "fastcgi" and r.handler.check_script]
        if statics or checks:
            rc = sws_engine_set_filecache(
                self.e, max([st.open_file_cache_max for st in statics] + [10000]),
                _ms(min([st.open_file_cache_valid for st in statics] + [1.0])),
                max([st.memory_cache_max for st in statics] + [0]))
            if rc < 0:
                raise MemoryError()

    cdef _set_h2(self, http2):
        """HTTP/2's settings and budgets (config.http2, checked by the loader)."""
        cdef sws_h2_conf_t h2
        h2.max_streams = http2.max_concurrent_streams
        h2.stream_window = http2.stream_window
        h2.conn_window = http2.connection_window
        h2.max_header_list = http2.max_header_list_size or 0  # 0: from the limits
        h2.header_table = http2.header_table_size
        h2.max_continuations = http2.max_continuations
        h2.unsent_limit = http2.unsent_limit
        h2.reset_burst = http2.reset_burst
        h2.reset_rate = http2.reset_rate
        h2.frame_burst = http2.frame_burst
        h2.frame_rate = http2.frame_rate
        if sws_engine_set_h2(self.e, &h2) < 0:
            raise MemoryError()

    cdef _set_stats(self, config, stats):
        """Points the engine at its counters slot (csrc/include/scalws/stats.h):
        routes get ids in config order, groups their part in
        config.upstreams order, the order the master wrote in the header."""
        cdef unsigned char[::1] view
        n_routes = sum(len(site.routes) for site in config.sites)
        size = sws_stats_slot_size(n_routes, len(config.upstreams))
        if stats is None:
            stats = bytearray(size)
        view = stats
        if len(view) < size:
            raise ValueError(f"stats slot of {len(view)} bytes, the layout needs {size}")
        self._keep.append(view)
        self._stats = <size_t>&view[0]
        self._nroutes = n_routes
        sws_engine_set_stats(self.e, <void *>self._stats, n_routes)

    cdef _set_cache(self, config, cache):
        """Attaches the cache zones (in config.cache_zones order: routes
        name them by index), the holders' registry and the eventfds."""
        cdef void **zones
        cdef size_t *sizes
        cdef int *efds
        cdef unsigned char[::1] view
        if not config.cache_zones:
            return
        if cache is None:
            from scalws.control.cacheshared import CacheMemory
            cache = CacheMemory().view(config)
            self._keep.append(cache)
        names = list(config.cache_zones)
        n = len(names)
        zones = <void **>PyMem_Calloc(n, sizeof(void *))
        sizes = <size_t *>PyMem_Calloc(n, sizeof(size_t))
        efds = <int *>PyMem_Calloc(SWS_CS_HOLDERS, sizeof(int))
        self._keep.extend([_Block(<size_t>zones), _Block(<size_t>sizes), _Block(<size_t>efds)])
        if zones == NULL or sizes == NULL or efds == NULL:
            raise MemoryError()
        for i, name in enumerate(names):
            view = cache.zones[name]
            self._keep.append(view)
            zones[i] = <void *>&view[0]
            sizes[i] = len(view)
        for i, fd in enumerate(cache.efds):
            efds[i] = fd
        view = cache.registry
        self._keep.append(view)
        if sws_engine_set_cache(self.e, zones, sizes, n, <void *>&view[0], efds) < 0:
            pass  # logged by the engine: cached routes go straight to their handlers

    cdef size_t _templates(self, templates, size_t *count) except 0:
        """Compiles [[(kind, text)]] into sws_cktmpl_t[] (and their parts)."""
        cdef sws_cktmpl_t *arr = <sws_cktmpl_t *>PyMem_Calloc(len(templates) + 1, sizeof(sws_cktmpl_t))
        cdef sws_ckpart_t *parts
        cdef bytes b
        self._keep.append(_Block(<size_t>arr))
        if arr == NULL:
            raise MemoryError()
        kinds = {"scheme": SWS_CK_SCHEME, "host": SWS_CK_HOST, "request_uri": SWS_CK_REQUEST_URI,
                 "uri": SWS_CK_URI, "args": SWS_CK_ARGS, "is_args": SWS_CK_IS_ARGS,
                 "request_method": SWS_CK_METHOD}
        for i, t in enumerate(templates):
            parts = <sws_ckpart_t *>PyMem_Calloc(len(t) + 1, sizeof(sws_ckpart_t))
            self._keep.append(_Block(<size_t>parts))
            if parts == NULL:
                raise MemoryError()
            for k, (kind, text) in enumerate(t):
                if kind == "lit":
                    parts[k].kind = SWS_CK_LIT
                elif kind == "var":
                    parts[k].kind = kinds[text]
                    text = ""
                else:
                    parts[k].kind = {"http": SWS_CK_HTTP, "cookie": SWS_CK_COOKIE,
                                     "arg": SWS_CK_ARG}[kind]
                b = self._bytes(text)
                parts[k].s = b
                parts[k].n = len(b)
            arr[i].parts = parts
            arr[i].n = len(t)
        count[0] = len(templates)
        return <size_t>arr

    cdef const sws_cache_route_t *_cache_route(self, config, handler) except? NULL:
        """A route's `cache:` (model.RouteCache) for the C handler; NULL: none."""
        cdef sws_cache_route_t *c
        cdef sws_cvalid_t *valid
        cdef size_t k
        cdef sws_cktmpl_t *t
        rc = getattr(handler, "cache", None)
        if rc is None:
            return NULL
        c = <sws_cache_route_t *>PyMem_Calloc(1, sizeof(sws_cache_route_t))
        self._keep.append(_Block(<size_t>c))
        if c == NULL:
            raise MemoryError()
        zone = config.cache_zones[rc.zone]
        c.zone = list(config.cache_zones).index(rc.zone)
        c.max_object_size = rc.max_object_size or zone.max_object_size
        t = <sws_cktmpl_t *>self._templates([rc.key], &k)
        c.key = t[0]
        c.bypass = <sws_cktmpl_t *>self._templates(rc.bypass, &c.n_bypass)
        c.no_store = <sws_cktmpl_t *>self._templates(rc.no_store, &c.n_no_store)
        valid = <sws_cvalid_t *>PyMem_Calloc(len(rc.valid) + 1, sizeof(sws_cvalid_t))
        self._keep.append(_Block(<size_t>valid))
        if valid == NULL:
            raise MemoryError()
        for i, (status, secs) in enumerate(rc.valid):
            valid[i].status = status
            valid[i].secs = <int64_t>secs
        c.valid = valid
        c.n_valid = len(rc.valid)
        flags = {"cache-control": SWS_CI_CACHE_CONTROL, "expires": SWS_CI_EXPIRES,
                 "set-cookie": SWS_CI_SET_COOKIE, "vary": SWS_CI_VARY}
        c.ignore = 0
        for name in rc.ignore:
            c.ignore |= flags[name]
        c.lock = rc.lock
        c.lock_timeout_ms = _ms(rc.lock_timeout)
        c.swr = <uint32_t>rc.stale_while_revalidate
        c.sie = <uint32_t>rc.stale_if_error
        c.tags = <const void *><size_t>self._hnames(rc.tag_headers, &c.n_tags)
        if rc.purge is not None:
            c.purge = 1
            c.purge_allow = <const void *>self._cidrs(rc.purge.allow, &c.n_purge_allow)
        c.targeted = <const void *><size_t>self._hnames(rc.targeted, &c.n_targeted)
        c.targeted_remove = 0
        for i, name in enumerate(rc.targeted):
            if name in rc.targeted_remove:
                c.targeted_remove |= <uint32_t>(1 << i)
        return c

    cdef _cache_peers(self, config, zone_name, sws_cache_route_t *c, uint32_t stat_id):
        """A cached route whose zone has `peers`: the zone's sws_cache_peers_t
        (one per zone) and two proxies to them, marked http and https."""
        cdef sws_cache_peers_t *p
        cdef sws_proxy_t *fwd
        peers = config.cache_zones[zone_name].peers
        if peers is None:
            return
        if zone_name not in self._peers:
            p = <sws_cache_peers_t *>PyMem_Calloc(1, sizeof(sws_cache_peers_t))
            self._keep.append(_Block(<size_t>p))
            if p == NULL:
                raise MemoryError()
            p.up = <sws_upstream_t *><size_t>self._upstreams[peers.upstream]
            b = self._bytes(peers.secret)
            p.secret = b
            p.secret_len = len(b)
            self._peers[zone_name] = <size_t>p
        fwd = <sws_proxy_t *>PyMem_Calloc(2, sizeof(sws_proxy_t))
        self._keep.append(_Block(<size_t>fwd))
        if fwd == NULL:
            raise MemoryError()
        for k, scheme in enumerate(("http", "https")):
            fill_proxy(self, &fwd[k], Proxy(
                upstream=peers.upstream, retries=1, connect_timeout=peers.connect_timeout,
                read_timeout=peers.read_timeout, send_timeout=peers.read_timeout,
                request_headers=[("X-Scalws-Peer", f"{peers.secret} {scheme}")]))
        sws_cache_route_set_peers(c, <sws_cache_peers_t *><size_t>self._peers[zone_name],
                                  &fwd[0], &fwd[1], stat_id)

    cdef sws_cidr_t *_cidrs(self, nets, size_t *count) except NULL:
        parsed = [ipaddress.ip_network(t, strict=False) for t in nets]
        cidrs = <sws_cidr_t *>PyMem_Calloc(len(parsed) + 1, sizeof(sws_cidr_t))
        self._keep.append(_Block(<size_t>cidrs))
        if cidrs == NULL:
            raise MemoryError()
        for i, net in enumerate(parsed):
            cidrs[i].family = _AF_INET6 if net.version == 6 else _AF_INET
            packed = net.network_address.packed
            for k in range(len(packed)):
                cidrs[i].addr[k] = packed[k]
            cidrs[i].bits = net.prefixlen
        count[0] = len(parsed)
        return cidrs

    cdef _fill(self, sws_respond_t *r, pre):
        self._keep.append(pre)
        r.status = pre.status
        r.reason = pre.reason
        r.reason_len = len(pre.reason)
        r.fields = pre.fields
        r.fields_len = len(pre.fields)
        r.has_length = pre.has_length
        r.body = pre.body
        r.body_len = len(pre.body)

    cdef _build_router(self, config, server):
        cdef sws_site_t *site
        cdef sws_vhosts_t *vh
        cdef int n = 0
        cdef bytes b
        sites = []
        for s in config.sites:
            site = sws_router_site(self.router)
            if site == NULL:
                raise MemoryError()
            for route in s.routes:
                if route.kind == "respond":
                    self._fill(&self.responds[n], respond_handler.from_config(route.handler, server))
                    self.handlers[n].kind = SWS_H_RESPOND
                    self.handlers[n].data = &self.responds[n]
                elif route.kind == "static":
                    self._fill_static(&self.statics[n], route.handler)
                    self.handlers[n].kind = SWS_H_STATIC
                    self.handlers[n].data = &self.statics[n]
                elif route.kind in ("proxy", "app"):  # an app: a proxy to its workers
                    fill_proxy(self, &self.proxies[n], route.handler)
                    self.handlers[n].kind = SWS_H_PROXY
                    self.handlers[n].data = &self.proxies[n]
                    self.handlers[n].cache = self._cache_route(config, route.handler)
                elif route.kind == "fastcgi":
                    fill_fastcgi(self, &self.fastcgis[n], route.handler)
                    self.handlers[n].kind = SWS_H_FASTCGI
                    self.handlers[n].data = &self.fastcgis[n]
                    self.handlers[n].cache = self._cache_route(config, route.handler)
                else:
                    raise ValueError(f"handler {route.kind!r} has no runtime in this build")
                self.handlers[n].stat_id = n + 1  # the route's counters: index in config order
                if self.handlers[n].cache != NULL:
                    self._cache_peers(config, route.handler.cache.zone,
                                      <sws_cache_route_t *>self.handlers[n].cache, n + 1)
                b = route.pattern.encode()
                rc = sws_site_add_route(site, _MATCH[route.match], b, len(b), &self.handlers[n])
                if rc != 0:
                    raise ValueError(f"route {route.pattern!r}: cannot compile (code {rc})")
                n += 1
            tls_cfg = s.tls
            lines = alt_svc(s, config.http3)  # HTTP/3's address, on TLS answers (quic.pxi)
            if tls_cfg is not None and tls_cfg.hsts:
                lines += f"Strict-Transport-Security: {tls_cfg.hsts}\r\n"
            if lines:
                b = self._bytes(lines)
                sws_site_set_tls_fields(site, b, len(b))
            sites.append(<size_t>site)
        # A site with `tls: {redirect: on}` answers on its plain listeners
        # with a redirect to its TLS port, through a site of one route.
        redirects = {}
        cdef sws_redirect_t *rd
        cdef sws_handler_t *rh
        for idx, s in enumerate(config.sites):
            if s.tls is None or not s.tls.redirect:
                continue
            tls_port = next((l.port for l in s.listen if l.tls), 443)
            site = sws_router_site(self.router)
            rd = <sws_redirect_t *>PyMem_Calloc(1, sizeof(sws_redirect_t))
            rh = <sws_handler_t *>PyMem_Calloc(1, sizeof(sws_handler_t))
            self._keep.append(_Block(<size_t>rd))
            self._keep.append(_Block(<size_t>rh))
            if site == NULL or rd == NULL or rh == NULL:
                raise MemoryError()
            rd.port = tls_port
            first = next((n for n in s.server_names if not n.startswith("*")), "")
            b = self._bytes(first)
            rd.host = b
            rd.host_len = len(b)
            rh.kind = SWS_H_REDIRECT_HTTPS
            rh.data = rd
            if sws_site_add_route(site, SWS_MATCH_PREFIX, b"/", 1, rh) != 0:
                raise MemoryError()
            redirects[idx] = <size_t>site
        # One address table per listen key; the default site is the one marked
        # `default`, else the first site that lists the address.
        for idx, s in enumerate(config.sites):
            for listen in s.listen:
                key = listen.key
                target = sites[idx]
                if not listen.tls and idx in redirects:
                    target = redirects[idx]
                self._h2[key] = 1 if listen.serves_h2 else 0
                if key not in self._vhosts:
                    vh = sws_router_vhosts(self.router)
                    if vh == NULL:
                        raise MemoryError()
                    self._vhosts[key] = len(self._vh)
                    self._vh.append(<size_t>vh)
                    sws_vhosts_set_default(vh, <sws_site_t *><size_t>target)
                vh = <sws_vhosts_t *><size_t>self._vh[self._vhosts[key]]
                if listen.default:
                    sws_vhosts_set_default(vh, <sws_site_t *><size_t>target)
                for name in s.server_names:
                    b = name.lower().encode()
                    if sws_vhosts_add_name(vh, b, len(b), <sws_site_t *><size_t>target) != 0:
                        raise MemoryError()
        sws_router_finish(self.router)

    cdef _build_tls(self, config, shared):
        """One server context per site with a TLS listener, and per TLS
        address a table of them by server name (the default site of the
        address answers clients without SNI)."""
        cdef sws_tls_site_conf_t conf
        cdef sws_tls_cert_conf_t *certs
        cdef sws_tls_site_t *site
        cdef sws_tls_listen_t *tl
        cdef char err[512]
        cdef bytes b
        cdef unsigned char[::1] view
        cdef size_t ocsp_base = 0
        if shared is not None and shared.ocsp is not None:
            view = shared.ocsp
            self._keep.append(view)
            ocsp_base = <size_t>&view[0]
        if shared is not None and shared.tickets is not None:
            view = shared.tickets
            self._keep.append(view)
            sws_engine_set_tickets(self.e, <const sws_ticket_shm_t *>&view[0])
        by_site = {}
        for idx, s in enumerate(config.sites):
            if s.tls is None or not any(l.tls for l in s.listen):
                continue
            t = s.tls
            certs = <sws_tls_cert_conf_t *>PyMem_Calloc(len(t.certificates), sizeof(sws_tls_cert_conf_t))
            self._keep.append(_Block(<size_t>certs))
            if certs == NULL:
                raise MemoryError()
            for i, c in enumerate(t.certificates):
                b = self._bytes(os.fsencode(c.cert))
                certs[i].cert = b
                b = self._bytes(os.fsencode(c.key))
                certs[i].key = b
            conf.certs = certs
            conf.n_certs = len(t.certificates)
            versions = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
            conf.min_version = min(versions[p] for p in t.protocols)
            conf.max_version = max(versions[p] for p in t.protocols)
            b = self._bytes(t.ciphers)
            conf.ciphers = b
            b = self._bytes(t.ciphersuites)
            conf.ciphersuites = b
            b = self._bytes(":".join(t.curves))
            conf.groups = b
            # Sessions resume only on the site that made them. (hashlib here,
            # not at the top: importing it initialises OpenSSL, 3 MiB of
            # libcrypto's pages mapped, which a server without TLS never needs.)
            import hashlib
            b = self._bytes(hashlib.sha256(f"{idx}:{','.join(s.server_names)}".encode()).digest())
            conf.sid_ctx = <const unsigned char *><const char *>b
            conf.sid_ctx_len = 32
            conf.ocsp = NULL
            if ocsp_base and t.ocsp_stapling and idx in shared.ocsp_first:
                slot0 = shared.ocsp_first[idx]
                conf.ocsp = <sws_ocsp_slot_t *>(ocsp_base + <size_t>slot0 * SWS_OCSP_SLOT)
            conf.tickets = config.tickets.enabled
            conf.ticket_lifetime = <uint32_t>config.tickets.rotation
            site = sws_tls_site_new(&conf, err, sizeof(err))
            if site == NULL:
                f, line, col = t.mark
                raise ValueError(f"{f}:{line}:{col}: sites[{idx}].tls: {err.decode(errors='replace')}")
            self._tls_sites.append(<size_t>site)
            by_site[idx] = <size_t>site
        for idx, s in enumerate(config.sites):
            for listen in s.listen:
                if not listen.tls or idx not in by_site:
                    continue
                key = listen.key
                if key not in self._tls_listen:
                    tl = sws_tls_listen_new(<sws_tls_site_t *><size_t>by_site[idx])
                    if tl == NULL:
                        raise MemoryError()
                    self._tls_listen[key] = <size_t>tl
                tl = <sws_tls_listen_t *><size_t>self._tls_listen[key]
                if listen.default:
                    sws_tls_listen_set_default(tl, <sws_tls_site_t *><size_t>by_site[idx])
                for name in s.server_names:
                    b = name.lower().encode()
                    if sws_tls_listen_add_name(tl, b, len(b), <sws_tls_site_t *><size_t>by_site[idx]) != 0:
                        raise MemoryError()

    cdef _fill_static(self, sws_static_t *st, cfg):
        """Compiles a config.model.Static; every byte it points at is kept in
        self._keep, the root folder fd in self._fds."""
        cdef sws_mime_entry_t *mime
        cdef const char **index
        cdef bytes b
        fd = os.open(cfg.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._fds.append(fd)
        st.root_fd = fd
        st.fc_flags = {"off": _FC_NOFOLLOW, "owner": _FC_OWNER}.get(cfg.follow_symlinks, 0)
        st.deny_hidden = cfg.deny_hidden
        st.precompressed = cfg.precompressed
        st.autoindex = cfg.autoindex
        names = [n.encode() for n in cfg.index]
        index = <const char **>PyMem_Calloc(len(names) + 1, sizeof(char *))
        mime = <sws_mime_entry_t *>PyMem_Calloc(len(cfg.mime_types) + 1, sizeof(sws_mime_entry_t))
        self._keep.append(_Block(<size_t>index))
        self._keep.append(_Block(<size_t>mime))
        if index == NULL or mime == NULL:
            raise MemoryError()
        for i, b in enumerate(names):
            self._keep.append(b)
            index[i] = b
        st.index = index
        st.n_index = len(names)
        # Sorted by (length, bytes): the order content_type() in csrc/handlers/static.c searches.
        entries = sorted(((ext.encode(), f"Content-Type: {_content_type(t, cfg.charset)}\r\n".encode())
                          for ext, t in cfg.mime_types.items()),
                         key=lambda kv: (len(kv[0]), kv[0]))
        for i, (ext, line) in enumerate(entries):
            self._keep.append(ext)
            self._keep.append(line)
            mime[i].ext = ext
            mime[i].ext_len = len(ext)
            mime[i].line = line
            mime[i].line_len = len(line)
        st.mime = mime
        st.n_mime = len(entries)
        b = f"Content-Type: {_content_type(cfg.default_type, cfg.charset)}\r\n".encode()
        self._keep.append(b)
        st.default_type = b
        st.default_type_len = len(b)
        extra = "".join(f"{k}: {v}\r\n" for k, v in cfg.headers)
        if cfg.cache_control:
            extra += f"Cache-Control: {cfg.cache_control}\r\n"
        b = extra.encode("latin-1")
        self._keep.append(b)
        st.extra = b
        st.extra_len = len(b)
        st.expires = -1 if cfg.expires is None else <int64_t>cfg.expires
        cdef const char **items = <const char **>PyMem_Calloc(len(cfg.try_files) + 1, sizeof(char *))
        self._keep.append(_Block(<size_t>items))
        if items == NULL:
            raise MemoryError()
        for i, item in enumerate(cfg.try_files):
            b = item.encode()
            self._keep.append(b)
            items[i] = b
        st.try_items = items
        st.n_try = len(cfg.try_files)
        cdef sws_respond_t *fallback
        if cfg.try_status:
            fallback = <sws_respond_t *>PyMem_Calloc(1, sizeof(sws_respond_t))
            self._keep.append(_Block(<size_t>fallback))
            if fallback == NULL:
                raise MemoryError()
            self._fill(fallback, respond_handler.error_page(cfg.try_status, self._server))
            st.try_status = fallback
        if cfg.try_uri:
            uri, _, query = cfg.try_uri.partition("?")
            b = uri.encode()
            self._keep.append(b)
            st.try_uri = b
            st.try_uri_len = len(b)
            st.try_args = query in ("$args", "$query_string")
        st.sendfile_chunk = cfg.sendfile_chunk

    cdef bytes _bytes(self, text):
        """Encodes `text` and keeps the bytes alive as long as the engine."""
        cdef bytes b = text if isinstance(text, bytes) else text.encode("latin-1")
        self._keep.append(b)
        return b

    def set_upstream_servers(self, name, cfg):
        """Group `name` takes the servers of cfg (model.Upstream) now: live
        DNS (control/resolver.py); see sws_upstream_set_servers."""
        cdef sws_upstream_t *u = <sws_upstream_t *><size_t>self._upstreams[name]
        cdef sws_upstream_server_t *srv = <sws_upstream_server_t *>PyMem_Calloc(
            max(1, len(cfg.servers)), sizeof(sws_upstream_server_t))
        if srv == NULL:
            raise MemoryError()
        try:
            keep = fill_servers(srv, name, cfg)  # upstreams.pxi
            rc = sws_upstream_set_servers(self.e, u, srv, len(_resolved(cfg)))
            if rc == -_errno.ENOMEM:
                raise MemoryError()
            if rc != 0:
                raise ValueError(f"upstream {name!r}: no server to set")
        finally:
            PyMem_Free(srv)

    cdef _hnames(self, names, size_t *count):
        cdef sws_hname_t *arr = <sws_hname_t *>PyMem_Calloc(len(names) + 1, sizeof(sws_hname_t))
        cdef bytes b
        self._keep.append(_Block(<size_t>arr))
        if arr == NULL:
            raise MemoryError()
        for i, name in enumerate(names):
            b = self._bytes(name.lower())
            arr[i].name = b
            arr[i].name_len = len(b)
        count[0] = len(names)
        return <size_t>arr

    def __dealloc__(self):
        if self.e != NULL:
            sws_engine_free(self.e)
        for addr in self._regexes or ():
            regfree(<regex_t *><size_t>addr)
            PyMem_Free(<void *><size_t>addr)
        PyMem_Free(self.fastcgis)
        for addr in self._tls_listen.values() if self._tls_listen else ():
            sws_tls_listen_free(<sws_tls_listen_t *><size_t>addr)
        for addr in self._tls_sites or ():
            sws_tls_site_free(<sws_tls_site_t *><size_t>addr)
        for addr in self._quic.values() if self._quic else ():
            sws_quic_certs_free(<sws_quic_certs_t *><size_t>addr)
        if self.router != NULL:
            sws_router_free(self.router)
        PyMem_Free(self.responds)
        PyMem_Free(self.handlers)
        PyMem_Free(self.statics)
        PyMem_Free(self.proxies)
        for fd in self._fds or ():
            os.close(fd)

    def add_listener(self, int fd, key, steer=None):
        """Serves the listening socket `fd` (the engine owns and closes it)
        with the sites that listen on `key` (config.model.Listen.key).
        `steer`: for a quic socket, (index in its reuseport group, key
        byte) when the master steers its packets (each -1 when it does not;
        ADR 0032) and the master's secret (bytes), or None."""
        cdef sws_vhosts_t *vh = <sws_vhosts_t *><size_t>self._vh[self._vhosts[key]]
        cdef size_t tl = self._tls_listen.get(key, 0)
        if key[0] == "quic":
            secret = steer[2] if steer else b""
            rc = sws_engine_add_quic_listener(self.e, fd, vh,
                                              <const sws_quic_certs_t *><size_t>self._quic[key],
                                              steer[0] if steer else -1, steer[1] if steer else -1,
                                              <const uint8_t *><const char *>secret, len(secret))
        else:
            rc = sws_engine_add_listener(self.e, fd, vh, <const sws_tls_listen_t *>tl,
                                         self._h2.get(key, 0))
        if rc < 0:
            raise OSError(-rc, "engine: cannot add listener")

    def set_steering(self, mm, unsigned index, unsigned workers):
        """Fair accept (ADR 0023): `mm` is the master's steering page; this
        worker is `index` of `workers`. After add_listener."""
        cdef unsigned char[::1] view = mm
        self._keep.append(view)
        rc = sws_engine_set_steering(self.e, &view[0], len(mm), index, workers)
        if rc < 0:
            raise OSError(-rc, "engine: steering page")

    def set_access_log(self, int fd, str fmt="combined", size_t bufsize=65536,
                       double flush=1.0):
        rc = sws_engine_set_access_log(self.e, fd, _LOG_FORMATS[fmt], bufsize, _ms(flush))
        if rc < 0:
            raise OSError(-rc, "engine: access log")

    def set_error_log(self, int fd, str level="notice", bint json=False):
        """The error log's descriptor, least level, and format (`json`: one
        object per line, as log.error_format json)."""
        sws_engine_set_error_log(self.e, fd, _LEVELS[level], json)

    def trap_sigsys(self):
        """Sandbox (ADR 0012): a system call the seccomp filter refuses is
        logged by name to this engine's error log, then kills the worker."""
        cdef int rc = sws_engine_trap_sigsys(self.e)
        if rc < 0:
            raise OSError(-rc, strerror(-rc))

    def start(self, loop):
        self.loop = loop
        loop.add_reader(sws_engine_fd(self.e), self._on_ready)
        self._tick_handle = loop.call_later(TICK_SECONDS, self._tick)
        self._started = True

    def _on_ready(self):
        # Handle what is ready, then keep waiting on the inner epoll alone
        # for up to SERVE_MS (ADR 0003); a signal or shutdown returns sooner.
        # Meanwhile the relay the outer loop watches is disarmed: armed, every
        # event on a connection would also run the outer epoll's callback, on the core
        # of whoever sent the bytes (ADR 0004). (Not remove_reader and
        # add_reader: the kernel's checks on adding an epoll to an epoll walk
        # every connection, at each serve call.)
        sws_engine_watch(self.e, 0)
        sws_engine_serve(self.e, SERVE_MS)
        if self._stopping and sws_engine_counters(self.e).active == 0:
            self._drained()
        else:
            sws_engine_watch(self.e, 1)

    def run_blocking(self, double seconds):
        """Experiment (ADR 0001, bench/prototypes/cloop.py) and tests: the
        engine alone, no outer loop, for up to `seconds` (a signal ends it)."""
        cdef int ms = <int>(seconds * 1000)
        with nogil:
            sws_engine_serve(self.e, ms)
        sws_engine_tick(self.e)

    def _tick(self):
        sws_engine_tick(self.e)
        if self._stopping and sws_engine_counters(self.e).active == 0:
            self._drained()
            return
        self._tick_handle = self.loop.call_later(TICK_SECONDS, self._tick)

    def shutdown(self, on_drained):
        """Graceful stop: no new connections; `on_drained()` runs once the
        last in-flight request is answered and its connection closed."""
        self._stopping = True
        self._on_drained = on_drained
        sws_engine_shutdown(self.e)
        if sws_engine_counters(self.e).active == 0:
            self.loop.call_soon(self._drained)

    def _drained(self):
        cb, self._on_drained = self._on_drained, None
        if cb is None:
            return
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        if self._started:
            self.loop.remove_reader(sws_engine_fd(self.e))
        sws_engine_flush(self.e)
        cb()

    def close_all(self):
        sws_engine_close_all(self.e)
        sws_engine_flush(self.e)

    def flush(self):
        sws_engine_flush(self.e)

    def counters(self):
        cdef const sws_counters_t *c = sws_engine_counters(self.e)
        return {"accepted": c.accepted, "handled": c.handled, "requests": c.requests,
                "active": c.active, "timeouts": c.timeouts,
                "refused": c.errors_4xx_close, "upstream_conns": c.upstream_conns,
                "upstream_reused": c.upstream_reused, "upstream_errors": c.upstream_errors,
                "polls_caught": c.polls_caught, "polls_missed": c.polls_missed,
                "upstream_tls_handshakes": sum((<sws_upstream_t *><size_t>u).tls_handshakes
                                               for u in self._upstreams.values()),
                "upstream_tls_resumed": sum((<sws_upstream_t *><size_t>u).tls_resumed
                                            for u in self._upstreams.values())}


cdef class _Block:
    """Owns one PyMem block for as long as the Engine keeps this object."""
    cdef size_t ptr

    def __cinit__(self, size_t ptr):
        self.ptr = ptr

    def __dealloc__(self):
        PyMem_Free(<void *>self.ptr)


cdef class _UpTLS:
    """Owns a group's client TLS context (sws_uptls_t); the Engine keeps it
    in _keep, released after the engine and its connections are freed."""
    cdef size_t ptr

    def __cinit__(self, size_t ptr):
        self.ptr = ptr

    def __dealloc__(self):
        sws_uptls_free(<sws_uptls_t *>self.ptr)


# ---- the master's TLS keeper (scalws/control/tlskeeper.py) writes shared memory ----

def ticket_publish(mm, bytes key, unsigned int lifetime, long long now):
    """Publishes an 80-byte ticket key (name 16, AES 32, HMAC 32) as the
    current one in the ticket memory `mm` (the previous stays accepted)."""
    cdef unsigned char[::1] view = mm
    if len(key) != sizeof(sws_ticket_key_t):
        raise ValueError("a ticket key is 80 bytes")
    sws_tls_ticket_publish(<sws_ticket_shm_t *>&view[0], <const sws_ticket_key_t *><const char *>key,
                           lifetime, now)


def ocsp_publish(mm, unsigned int slot, bytes der, long long expires):
    """Publishes an OCSP response (b"": none) in slot `slot` of `mm`."""
    cdef unsigned char[::1] view = mm
    if (slot + 1) * SWS_OCSP_SLOT > len(mm):
        raise IndexError("no such OCSP slot")
    sws_tls_ocsp_publish(<sws_ocsp_slot_t *>(&view[0] + slot * SWS_OCSP_SLOT),
                         <const unsigned char *><const char *>der, len(der), expires)


def stats_layout():
    """Sizes scalws/control/stats.py must agree with."""
    return {"head": sizeof(sws_stats_head_t), "hist": sizeof(sws_hist_t),
            "group": sizeof(sws_stats_group_t),
            "buckets": SWS_STATS_BUCKETS, "slot_1_1": sws_stats_slot_size(1, 1)}


def tls_layout():
    """Sizes the Python side of the shared memory must agree with."""
    return {"ticket_shm": sizeof(sws_ticket_shm_t), "ticket_key": sizeof(sws_ticket_key_t),
            "ocsp_slot": SWS_OCSP_SLOT, "ticket_keys": SWS_TICKET_KEYS}


def cache_layout():
    """Where scalws/control/cacheshared.py finds a zone's counters."""
    cdef sws_cs_t z
    return {"counters": <size_t>&z.c - <size_t>&z, "holders": SWS_CS_HOLDERS,
            "counters_size": sizeof(sws_cs_counters_t)}


include "quic.pxi"
include "upstreams.pxi"
