# HTTP/3's part of the Engine (included by engine.pyx): the http3: block,
# each quic listener's certificates, and the Alt-Svc line that tells TLS
# clients where HTTP/3 is (docs/configuration.md, "http3").


def alt_svc(site, http3):
    """`Alt-Svc: h3=":PORT"; ma=N` for a site with a quic listener (RFC 7838
    §3; the first such port), or "" (none, or alt_svc_max_age 0)."""
    port = next((l.port for l in site.listen if l.kind == "quic"), None)
    if port is None or not http3.alt_svc_max_age:
        return ""
    return f'Alt-Svc: h3=":{port}"; ma={http3.alt_svc_max_age}\r\n'


cdef build_quic(Engine eng, config):
    """The http3: settings, and per quic address the certificates of its
    sites (GnuTLS picks one by the client's SNI; the address's default
    site's first, for a client without SNI)."""
    cdef sws_h3_conf_t c
    cdef sws_quic_certs_t *q
    cdef char err[512]
    h = config.http3
    c.max_streams = h.max_concurrent_streams
    c.stream_window = h.stream_window
    c.conn_window = h.connection_window
    c.idle_ms = _ms(h.idle_timeout)
    c.handshake_ms = _ms(h.handshake_timeout)
    c.max_conns = h.max_connections
    c.qpack_table = h.qpack_table
    c.qpack_blocked = h.qpack_blocked_streams
    c.retry_above = 0xFFFFFFFF if h.retry_above is None else h.retry_above
    c.qpack_encoder_table = h.qpack_encoder_table
    c.early_window_ms = _ms(h.early_data_window) if h.early_data else 0
    c.gso = 1 if h.gso else 0
    if sws_engine_set_h3(eng.e, &c) < 0:
        raise ValueError("http3: invalid settings")
    by_key = {}
    for s in config.sites:
        for listen in s.listen:
            if listen.kind == "quic" and s.tls is not None:
                lst = by_key.setdefault(listen.key, [])
                if listen.default:
                    lst.insert(0, s)
                else:
                    lst.append(s)
    for key, sites in by_key.items():
        text = next(l.text for l in sites[0].listen if l.key == key)
        q = sws_quic_certs_new(err, sizeof(err))
        if q == NULL:
            raise ValueError(f"listen '{text}': {err.decode(errors='replace')}")
        eng._quic[key] = <size_t>q
        for s in sites:
            add_site(q, s)


cdef add_site(sws_quic_certs_t *q, site):
    """A site's certificates and names to q (ValueError with file:line)."""
    cdef char err[512]
    cdef list keep = []
    cdef bytes b
    n = len(site.tls.certificates)
    cdef sws_tls_cert_conf_t *certs = <sws_tls_cert_conf_t *>PyMem_Calloc(n, sizeof(sws_tls_cert_conf_t))
    cdef const char **names = <const char **>PyMem_Calloc(len(site.server_names) + 1, sizeof(char *))
    try:
        if certs == NULL or names == NULL:
            raise MemoryError()
        for i, cf in enumerate(site.tls.certificates):
            b = os.fsencode(cf.cert)
            keep.append(b)
            certs[i].cert = b
            b = os.fsencode(cf.key)
            keep.append(b)
            certs[i].key = b
        for i, name in enumerate(site.server_names):
            b = name.lower().encode()
            keep.append(b)
            names[i] = b
        if sws_quic_certs_add(q, certs, n, names, len(site.server_names), err, sizeof(err)) < 0:
            f, line, col = site.tls.mark
            raise ValueError(f"{f}:{line}:{col}: tls (for HTTP/3): {err.decode(errors='replace')}")
    finally:
        PyMem_Free(certs)
        PyMem_Free(names)
