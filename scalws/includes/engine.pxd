# Declarations of csrc/include/scalws/engine.h (and the floor headers it
# includes) used by Cython; contracts there.
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from posix.types cimport time_t

from scalws.includes.router cimport sws_vhosts_t


cdef extern from "scalws/tls.h" nogil:
    enum:
        SWS_TICKET_KEYS
        SWS_OCSP_SLOT

    ctypedef struct sws_ticket_key_t:
        unsigned char name[16]
        unsigned char aes[32]
        unsigned char hmac[32]

    ctypedef struct sws_ticket_shm_t:
        uint32_t seq
        uint32_t current
        uint32_t count
        uint32_t lifetime
        int64_t rotated

    ctypedef struct sws_ocsp_slot_t:
        uint32_t seq
        uint32_t len
        int64_t expires

    ctypedef struct sws_tls_site_t:
        pass

    ctypedef struct sws_tls_listen_t:
        pass

    ctypedef struct sws_tls_cert_conf_t:
        const char *cert
        const char *key

    ctypedef struct sws_tls_site_conf_t:
        const sws_tls_cert_conf_t *certs
        size_t n_certs
        int min_version, max_version
        const char *ciphers
        const char *ciphersuites
        const char *groups
        const unsigned char *sid_ctx
        size_t sid_ctx_len
        sws_ocsp_slot_t *ocsp
        int tickets
        uint32_t ticket_lifetime

    sws_tls_site_t *sws_tls_site_new(const sws_tls_site_conf_t *conf, char *err, size_t errlen)
    void sws_tls_site_free(sws_tls_site_t *s)
    sws_tls_listen_t *sws_tls_listen_new(sws_tls_site_t *default_)
    int sws_tls_listen_add_name(sws_tls_listen_t *l, const char *name, size_t len,
                                sws_tls_site_t *s)
    void sws_tls_listen_set_default(sws_tls_listen_t *l, sws_tls_site_t *s)
    void sws_tls_listen_free(sws_tls_listen_t *l)
    void sws_tls_ticket_publish(sws_ticket_shm_t *t, const sws_ticket_key_t *k, uint32_t lifetime,
                                int64_t now)
    void sws_tls_ocsp_publish(sws_ocsp_slot_t *slot, const unsigned char *der, size_t len,
                              int64_t expires)


cdef extern from "scalws/upstream.h" nogil:
    ctypedef struct sws_uptls_t:
        pass

    ctypedef struct sws_uptls_conf_t:
        int verify
        const char *ca
        const char *cert
        const char *key
        int min_version, max_version
        int sni

    sws_uptls_t *sws_uptls_new(const sws_uptls_conf_t *conf, char *err, size_t errlen)
    void sws_uptls_free(sws_uptls_t *t)


cdef extern from "scalws/cachestore.h" nogil:
    enum:
        SWS_CS_HOLDERS
        SWS_CS_MIN_SIZE

    ctypedef struct sws_cs_counters_t:
        uint64_t hits, misses, expired, stale, revalidated, bypassed, purged, evictions
        uint64_t stored, store_failed, lock_waits, updating
        uint64_t entries, bytes_stored, mem_used, mem_size

    ctypedef struct sws_cs_t:
        sws_cs_counters_t c


cdef extern from "scalws/cache.h" nogil:
    enum:
        SWS_CK_LIT, SWS_CK_SCHEME, SWS_CK_HOST, SWS_CK_REQUEST_URI, SWS_CK_URI, SWS_CK_ARGS
        SWS_CK_IS_ARGS, SWS_CK_METHOD, SWS_CK_HTTP, SWS_CK_COOKIE, SWS_CK_ARG
        SWS_CI_CACHE_CONTROL, SWS_CI_EXPIRES, SWS_CI_SET_COOKIE, SWS_CI_VARY

    ctypedef struct sws_ckpart_t:
        int kind
        const char *s
        size_t n

    ctypedef struct sws_cktmpl_t:
        const sws_ckpart_t *parts
        size_t n

    ctypedef struct sws_cvalid_t:
        int status
        int64_t secs

    ctypedef struct sws_cache_peers_t:
        sws_upstream_t *up
        const char *secret
        size_t secret_len

    ctypedef struct sws_cache_route_t:
        int zone
        uint64_t max_object_size
        sws_cktmpl_t key
        const sws_cktmpl_t *bypass
        const sws_cktmpl_t *no_store
        size_t n_bypass, n_no_store
        const sws_cvalid_t *valid
        size_t n_valid
        uint32_t ignore
        int lock
        uint32_t lock_timeout_ms
        uint32_t swr, sie
        const void *tags
        size_t n_tags
        int purge
        const void *purge_allow
        size_t n_purge_allow
        const void *targeted
        size_t n_targeted
        uint32_t targeted_remove


cdef extern from "scalws/engine.h" nogil:
    enum:
        SWS_H_RESPOND
        SWS_H_STATIC
        SWS_H_PROXY
        SWS_H_REDIRECT_HTTPS
        SWS_H_FASTCGI

    ctypedef struct sws_redirect_t:
        uint16_t port
        const char *host
        size_t host_len

    enum:
        SWS_BAL_RR, SWS_BAL_LEAST_CONN, SWS_BAL_HASH
    enum:
        SWS_HASH_CLIENT, SWS_HASH_URI, SWS_HASH_HEADER

    ctypedef struct sws_upstream_server_t:
        const char *name
        uint32_t weight
        uint32_t max_fails
        uint32_t fail_timeout_ms
        uint32_t max_conns
        int backup
        int self
        const char *tls_name

    ctypedef struct sws_stats_group_t:
        uint64_t requests

    ctypedef struct sws_upstream_t:
        const char *name
        const sws_upstream_server_t *conf
        size_t n_conf
        sws_stats_group_t *st
        int balance
        int hash_key
        const char *hash_header
        size_t hash_header_len
        uint32_t keepalive
        uint32_t keepalive_timeout_ms
        uint32_t keepalive_requests
        uint32_t keepalive_time_ms
        uint32_t excess_ms
        int queue_at_max
        const char *hc_request
        size_t hc_request_len
        int hc_fastcgi
        uint32_t hc_interval_ms, hc_timeout_ms, hc_rise, hc_fall
        const uint16_t *hc_expect
        size_t hc_n_expect
        sws_uptls_t *tls
        uint64_t tls_handshakes
        uint64_t tls_resumed

    ctypedef struct sws_hname_t:
        const char *name
        size_t name_len

    ctypedef struct sws_proxy_t:
        sws_upstream_t *up
        const char *path_prefix
        size_t path_prefix_len
        const char *strip_prefix
        size_t strip_prefix_len
        const char *host
        size_t host_len
        uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms
        uint32_t retries
        const sws_hname_t *req_drop
        size_t n_req_drop
        const char *req_set
        size_t req_set_len
        const sws_hname_t *resp_drop
        size_t n_resp_drop
        const char *resp_set
        size_t resp_set_len
        size_t buffer_size
        int unavailable_503

    ctypedef struct regex_t:
        pass

    ctypedef struct sws_fastcgi_t:
        sws_upstream_t *up
        int root_fd
        const char *root
        size_t root_len
        const char *index
        size_t index_len
        const regex_t *split
        int check_script
        int fc_flags
        int keep_conn
        int pipeline
        const char *params
        size_t params_len
        uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms
        uint32_t retries
        const sws_hname_t *resp_drop
        size_t n_resp_drop
        const char *resp_set
        size_t resp_set_len
        size_t buffer_size

    ctypedef struct sws_cidr_t:
        int family
        unsigned char addr[16]
        int bits

    ctypedef struct sws_respond_t:
        int status
        const char *reason
        size_t reason_len
        const char *fields
        size_t fields_len
        const char *body
        size_t body_len
        int has_length

    ctypedef struct sws_handler_t:
        int kind
        void *data
        uint32_t stat_id
        const sws_cache_route_t *cache

    ctypedef struct sws_mime_entry_t:
        const char *ext
        size_t ext_len
        const char *line
        size_t line_len

    ctypedef struct sws_static_t:
        int root_fd
        int fc_flags
        int deny_hidden
        int precompressed
        int autoindex
        const char *const *index
        size_t n_index
        const sws_mime_entry_t *mime
        size_t n_mime
        const char *default_type
        size_t default_type_len
        const char *extra
        size_t extra_len
        int64_t expires
        const char *const *try_items
        size_t n_try
        const sws_respond_t *try_status
        const char *try_uri
        size_t try_uri_len
        int try_args
        size_t sendfile_chunk

    ctypedef struct sws_limits_t:
        size_t max_header_bytes
        size_t max_headers
        size_t max_uri_bytes
        uint64_t max_body_bytes
        uint32_t header_timeout_ms
        uint32_t body_timeout_ms
        uint32_t keepalive_timeout_ms
        uint32_t send_timeout_ms
        uint32_t keepalive_requests
        uint32_t max_connections
        uint32_t batch_window_us
        uint32_t busy_poll_us
        uint32_t busy_poll_measure

    enum:
        SWS_ERR_400, SWS_ERR_403, SWS_ERR_404, SWS_ERR_405, SWS_ERR_408, SWS_ERR_412,
        SWS_ERR_413, SWS_ERR_414, SWS_ERR_417, SWS_ERR_431, SWS_ERR_500, SWS_ERR_501,
        SWS_ERR_502, SWS_ERR_503, SWS_ERR_504, SWS_ERR_505, SWS_ERR_COUNT

    enum:
        SWS_LOG_OFF, SWS_LOG_COMBINED, SWS_LOG_JSON

    ctypedef struct sws_h2_conf_t:
        uint32_t max_streams
        uint32_t stream_window
        uint32_t conn_window
        uint32_t max_header_list
        uint32_t header_table
        uint32_t max_continuations
        uint32_t unsent_limit
        uint32_t reset_burst
        uint32_t reset_rate
        uint32_t frame_burst
        uint32_t frame_rate

    ctypedef struct sws_h3_conf_t:
        uint32_t max_streams
        uint32_t stream_window
        uint32_t conn_window
        uint32_t idle_ms
        uint32_t handshake_ms
        uint32_t max_conns
        uint32_t qpack_table
        uint32_t qpack_blocked
        uint32_t retry_above
        uint32_t qpack_encoder_table
        uint32_t early_window_ms
        uint32_t gso

    ctypedef struct sws_quic_certs_t:
        pass
    sws_quic_certs_t *sws_quic_certs_new(char *err, size_t errlen)
    int sws_quic_certs_add(sws_quic_certs_t *q, const sws_tls_cert_conf_t *certs, size_t n,
                           const char *const *names, size_t n_names, char *err, size_t errlen)
    void sws_quic_certs_free(sws_quic_certs_t *q)

    ctypedef struct sws_counters_t:
        uint64_t accepted
        uint64_t handled
        uint64_t requests
        uint64_t active
        uint64_t timeouts
        uint64_t errors_4xx_close
        uint64_t upstream_conns
        uint64_t upstream_reused
        uint64_t upstream_errors
        uint64_t polls_caught
        uint64_t polls_missed

    ctypedef struct sws_engine_t:
        pass

    sws_engine_t *sws_engine_new(const sws_limits_t *limits, const sws_respond_t *errors_,
                                 int worker_id)
    void sws_engine_free(sws_engine_t *e)
    int sws_engine_fd(const sws_engine_t *e)
    int sws_engine_watch(sws_engine_t *e, int on)
    int sws_engine_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                                const sws_tls_listen_t *tls, int http2)
    void sws_engine_set_tickets(sws_engine_t *e, const sws_ticket_shm_t *keys)
    int sws_engine_set_steering(sws_engine_t *e, void *shm, size_t len, unsigned index,
                                unsigned workers)
    int sws_engine_set_access_log(sws_engine_t *e, int fd, int format, size_t bufsize,
                                  uint32_t flush_ms)
    void sws_engine_set_error_log(sws_engine_t *e, int fd, int level, int json)
    int sws_engine_trap_sigsys(sws_engine_t *e)
    int sws_engine_set_filecache(sws_engine_t *e, size_t max_entries, uint32_t valid_ms,
                                 size_t mem_max)
    void sws_engine_set_server(sws_engine_t *e, const char *line, size_t len)
    int sws_engine_set_h2(sws_engine_t *e, const sws_h2_conf_t *conf)
    int sws_engine_set_h3(sws_engine_t *e, const sws_h3_conf_t *conf)
    int sws_engine_add_quic_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                                     const sws_quic_certs_t *certs, int steer_index,
                                     int steer_key, const uint8_t *secret, size_t secret_len)
    int sws_engine_add_upstream(sws_engine_t *e, sws_upstream_t *u)
    int sws_upstream_set_servers(sws_engine_t *e, sws_upstream_t *up,
                                 const sws_upstream_server_t *conf, size_t n)
    void sws_cache_route_set_peers(sws_cache_route_t *c, const sws_cache_peers_t *p,
                                   void *fwd_http, void *fwd_https, uint32_t stat_id)
    int sws_upstream_server_set_addr(sws_upstream_server_t *s, const char *host, int port,
                                     const char *unix_path)
    void sws_engine_set_trusted(sws_engine_t *e, const sws_cidr_t *list, size_t n)
    int sws_engine_set_cache(sws_engine_t *e, void *const *zones, const size_t *sizes, size_t n,
                             void *registry, const int *efds)
    int sws_engine_run(sws_engine_t *e)
    int sws_engine_serve(sws_engine_t *e, int max_ms)
    void sws_engine_tick(sws_engine_t *e)
    void sws_engine_shutdown(sws_engine_t *e)
    void sws_engine_close_all(sws_engine_t *e)
    void sws_engine_flush(sws_engine_t *e)
    const sws_counters_t *sws_engine_counters(const sws_engine_t *e)
    void sws_engine_set_stats(sws_engine_t *e, void *slot, uint32_t n_routes)
    uint64_t sws_stats_slot_size(uint64_t n_routes, uint64_t n_groups)
    ctypedef struct sws_stats_head_t:
        uint64_t requests
    ctypedef struct sws_hist_t:
        uint64_t count
    enum:
        SWS_STATS_BUCKETS
