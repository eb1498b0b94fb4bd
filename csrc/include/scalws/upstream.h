/* scalws/upstream.h — upstream groups and connections (csrc/upstream/),
 * for the proxy now and FastCGI next.
 *
 * Owns: groups and their servers (config halves filled by
 * scalws/server/engine.pyx; "runtime" fields are ours, zeroed by the
 * caller), balancing (smooth weighted round robin, least connections,
 * consistent hashing), passive health (max_fails within fail_timeout) and
 * active health checks, non-blocking connect, the keep-alive pool (per
 * group and worker, most recent first, bounded by `keepalive`), and the
 * deadlines of upstream connections, which the tick scans: they are few;
 * TLS to upstreams (upstream/uptls.c): a client context per group, the
 * non-blocking handshake after connect (SNI, peer verification against the
 * expected name), records in and out (uc_recv/uc_send, plain when the
 * connection has no TLS), the last session of each server resumed by its
 * next connection, close_notify on a clean close.
 *
 * May call: the core, and libssl. A connection busy with a request belongs to its
 * owner (the proxy), which gets its events and expired deadlines through
 * the sws_upconn_ops_t it set; idle and health-check connections are
 * handled here. Each worker is its own process, so all of it is per worker.
 */
#ifndef SCALWS_UPSTREAM_H
#define SCALWS_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "scalws/core.h"

enum { SWS_BAL_RR = 0, SWS_BAL_LEAST_CONN = 1, SWS_BAL_HASH = 2 };
enum { SWS_HASH_CLIENT = 0, SWS_HASH_URI = 1, SWS_HASH_HEADER = 2 };

typedef struct {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    const char *name;          /* "127.0.0.1:3000", for logs and the hash ring */
    uint32_t weight;
    uint32_t max_fails;        /* 0: never marked down by failures */
    uint32_t fail_timeout_ms;
    uint32_t max_conns;        /* 0: unlimited */
    int backup;
    int self;                  /* cache peers: this node (never connected to by choice) */
    /* TLS (the group has tls): the name verified in the certificate, and
     * sent as SNI unless it is an IP literal or the group says not to */
    const char *tls_name;
    /* runtime (from here on: zeroed when the group copies a server in) */
    size_t index;              /* its place in up->servers */
    uint32_t conns;            /* upstream connections to it (busy, idle, checks) */
    int removed;               /* no longer in the group's set (DNS): never picked,
                                * freed by the tick once conns is 0 */
    uint32_t active;           /* connections busy with a request */
    /* FastCGI (csrc/handlers/fastcgi_queue.c): the requests on new connections not
     * answered yet, oldest first (perhaps in the application's accept queue); the
     * connections it answers at once, as learned (0: not known); the requests that
     * wait in this worker for a connection, oldest first */
    void *fcgi_new, *fcgi_new_tail;
    uint32_t fcgi_n_new;
    uint32_t fcgi_freed;       /* closed while stalled: a child each, on a new one soon */
    uint32_t fcgi_cap;
    uint64_t fcgi_probe_at;
    void *fcgi_q, *fcgi_q_tail;
    uint32_t fcgi_n_q;
    void *fcgi_open, *fcgi_open_tail; /* requests a waiting one may go behind, oldest first */
    const void *fcgi_drain;    /* the connection that takes none behind while stalled */
    int fcgi_kick_due;
    uint32_t fails;
    uint64_t fail_start;       /* monotonic ms of the first failure counted */
    uint64_t down_until;       /* passive: skipped until then */
    int hc_down;               /* active checks say down (or passive, when checks exist) */
    uint32_t hc_pass, hc_fail;
    uint64_t hc_next;
    int hc_busy;
    int64_t cw;                /* smooth weighted round robin */
    struct ssl_session_st *tls_session; /* the last one the server gave (this worker) */
} sws_upstream_server_t;

typedef struct upconn upconn_t;

/* A group's client TLS context (upstream/uptls.c), made from: */
typedef struct {
    int verify;                /* verify the server's certificate and name */
    const char *ca;            /* PEM file of trusted CAs; NULL: the system's store */
    const char *cert, *key;    /* client certificate (chain) and key; NULL: none */
    int min_version, max_version; /* TLS1_2_VERSION... (0x0303, 0x0304) */
    int sni;                   /* send the server's tls_name (never an IP literal) */
} sws_uptls_conf_t;

typedef struct sws_uptls sws_uptls_t;

/* A client context, or NULL with err set (OpenSSL's reason). */
sws_uptls_t *sws_uptls_new(const sws_uptls_conf_t *conf, char *err, size_t errlen);
void sws_uptls_free(sws_uptls_t *t);

typedef struct {
    const char *name;
    /* The caller's servers (config halves), copied by sws_engine_add_upstream */
    const sws_upstream_server_t *conf;
    size_t n_conf;
    int balance;               /* SWS_BAL_* */
    int hash_key;              /* SWS_HASH_* */
    const char *hash_header;   /* lowercase name for SWS_HASH_HEADER */
    size_t hash_header_len;
    uint32_t keepalive;        /* idle connections kept (this worker, whole group) */
    uint32_t keepalive_timeout_ms;
    uint32_t keepalive_requests;
    uint32_t keepalive_time_ms;  /* a connection older than this is not pooled again */
    uint32_t excess_ms;        /* idle connections beyond `keepalive` close after this
                                * (0: at once, a FastCGI group: each holds a child) */
    int queue_at_max;          /* a server at max_conns is still picked: its requests
                                * wait in the worker for a connection (FastCGI) */
    /* active health checks: hc_request NULL = none */
    const char *hc_request;    /* whole request bytes */
    size_t hc_request_len;
    int hc_fastcgi;            /* the check is a FastCGI request (a group of fastcgi routes):
                                * judged on the answer's "Status:" (none: 200) */
    uint32_t hc_interval_ms, hc_timeout_ms, hc_rise, hc_fall;
    const uint16_t *hc_expect; /* [lo, hi] pairs */
    size_t hc_n_expect;
    sws_uptls_t *tls;          /* NULL: plain TCP (or unix) */
    sws_stats_group_t *st;     /* its shared counters (scalws/stats.h); NULL: e->up.st_none */
    /* runtime */
    sws_upstream_server_t **servers; /* each its own allocation, names included;
                                * sws_upstream_set_servers changes the set */
    size_t n_servers;
    size_t n_removed;          /* of which removed, waiting for their connections */
    uint32_t gen;              /* moves at every sws_upstream_set_servers: indexes a request
                                * kept (its tried servers) mean nothing across it */
    uint64_t tls_handshakes;   /* completed, this worker */
    uint64_t tls_resumed;      /* of which resumed a session */
    upconn_t *idle;            /* pooled connections, most recent first */
    uint32_t n_idle;
    uint64_t *ring;            /* consistent-hash points: hash << 16 | server index */
    size_t ring_len;
} sws_upstream_t;

/* UC_CONNECTING: TCP connect under way; UC_HANDSHAKE: then the TLS
 * handshake (a TLS group), both under the connect timeout; UC_ACTIVE: busy
 * with a request; UC_IDLE: pooled; UC_HEALTH: a health check's exchange. */
enum { UC_CONNECTING, UC_ACTIVE, UC_IDLE, UC_HEALTH, UC_HANDSHAKE };

/* What the owner of a busy connection is told. */
typedef struct {
    void (*event)(sws_engine_t *e, upconn_t *uc, uint32_t events);
    /* uc->deadline passed; dkind says which it was (the owner's D_* kinds). */
    void (*expire)(sws_engine_t *e, upconn_t *uc, int dkind);
    /* The engine stops now: end the request (its client goes too). */
    void (*kill)(sws_engine_t *e, upconn_t *uc);
} sws_upconn_ops_t;

struct upconn {
    sws_evobj_t ev;               /* first: uc_event */
    int fd;
    upconn_t *prev, *next;        /* e->up.upconns */
    upconn_t *iprev, *inext;      /* the group's idle pool */
    sws_upstream_t *up;
    sws_upstream_server_t *srv;
    const sws_upconn_ops_t *ops;  /* the owner's, while busy */
    void *owner;
    int state;                    /* UC_* */
    int hc;                       /* a health check, not traffic */
    uint32_t evmask;
    uint64_t deadline;            /* monotonic ms; 0: none */
    int dkind;                    /* the owner's: what the deadline is for */
    uint64_t created;
    uint32_t requests;            /* requests sent on it */
    size_t hc_sent;               /* health check: request bytes sent, */
    uint32_t hc_skip;             /* (FastCGI) bytes of a record to skip (STDERR before STDOUT), */
    size_t hc_len;                /* response bytes read into hc_buf */
    char hc_buf[24];              /* "HTTP/1.x NNN", or a record header + "Status: NNN" */
    /* TLS: NULL for a plain connection */
    struct ssl_st *ssl;
    uint32_t rd_want;             /* EPOLLOUT: a TLS read waits for the socket to take bytes */
    uint32_t wr_want;             /* EPOLLIN: a TLS write waits for input; else 0 */
    unsigned tls_eof : 1;              /* the end of the stream was read (close_notify or FIN) */
};

/* The upstream floor's part of the engine (e->up). */
typedef struct {
    upconn_t *upconns;            /* every upstream connection: the tick scans deadlines */
    sws_upstream_t **upstreams;
    size_t n_upstreams;
    sws_stats_group_t st_none;    /* the counters of groups added without a slot (C tests) */
} sws_upstreams_t;

/* upstream/pool.c */
/* A non-blocking connect to srv (state UC_ACTIVE, or UC_HEALTH for a
 * check); NULL with errno when it failed at once. */
SWS_INTERNAL upconn_t *uc_connect(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv,
                                  int state);
SWS_INTERNAL void uc_close(sws_engine_t *e, upconn_t *uc);
SWS_INTERNAL int uc_set_mask(sws_engine_t *e, upconn_t *uc, uint32_t events);
/* An idle connection to srv, most recent first, or NULL. */
SWS_INTERNAL upconn_t *pool_take(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv);
/* Why uc may not go back to the pool as far as the pool is concerned
 * (age, request count, stopping), or NULL. */
SWS_INTERNAL const char *pool_refusal(const sws_engine_t *e, const upconn_t *uc);
/* Puts uc in its group's pool, evicting the oldest when full. */
SWS_INTERNAL void pool_put(sws_engine_t *e, upconn_t *uc);
/* Expired deadlines, then due health checks. */
SWS_INTERNAL void sws_up_tick(sws_engine_t *e);
/* Graceful stop: pooled and health-check connections close; busy ones finish. */
SWS_INTERNAL void sws_up_shutdown(sws_engine_t *e);
/* Fast stop: every upstream connection and its request end now. */
SWS_INTERNAL void sws_up_close_all(sws_engine_t *e);
SWS_INTERNAL void sws_up_free(sws_engine_t *e);

/* upstream/uptls.c */
/* Frees s's TLS session. */
SWS_INTERNAL void uptls_session_free(sws_upstream_server_t *s);
/* A new connection of a TLS group gets its SSL (client state, the server's
 * session, SNI, the expected name); -1 when out of memory. */
SWS_INTERNAL int uptls_attach(sws_engine_t *e, upconn_t *uc);
/* Steps the handshake: 1 done, 0 waiting (the mask is set for what it
 * waits for), -1 failed with why[] saying so (for the error log: the
 * verification error and the expected name when that was it). */
SWS_INTERNAL int uc_handshake(sws_engine_t *e, upconn_t *uc, char *why, size_t len);
/* recv/send through TLS when the connection has it: > 0 bytes, 0 the end
 * of the stream (recv), -1 with errno (EAGAIN: wait for the event uc_set_mask
 * adds for it). Input left inside OpenSSL puts uc on the ready list. */
SWS_INTERNAL ssize_t uc_recv(sws_engine_t *e, upconn_t *uc, char *buf, size_t len);
SWS_INTERNAL ssize_t uc_send(sws_engine_t *e, upconn_t *uc, const char *buf, size_t len);
/* Whether OpenSSL holds bytes of uc not read yet (not poolable). */
SWS_INTERNAL int uc_tls_pending(const upconn_t *uc);
/* Before close: close_notify when clean, SSL_free, off the ready list. */
SWS_INTERNAL void uptls_close(sws_engine_t *e, upconn_t *uc);
/* uc_set_mask's part: what the TLS read or write waits for is added. */
SWS_INTERNAL uint32_t uptls_mask(const upconn_t *uc, uint32_t events);

/* upstream/balance.c */
/* The server for a request that already tried the servers in the `tried`
 * bitmask (by index, the first 64), hashing `hash` for SWS_BAL_HASH:
 * primaries first, then backups; -1 when none is usable. */
SWS_INTERNAL int sws_up_pick(sws_engine_t *e, sws_upstream_t *up, uint64_t tried, uint64_t hash);
/* A hash group's first ring point for hash, usable or not (the owner of
 * a key when every server is up); -1 when the ring is empty. */
SWS_INTERNAL int sws_up_owner(const sws_upstream_t *up, uint64_t hash);
/* A failed attempt on s: passive health. */
SWS_INTERNAL void srv_fail(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s);
SWS_INTERNAL uint64_t hash_bytes(const char *p, size_t n);
/* Frees a server of ours (its TLS session too). */
SWS_INTERNAL void srv_free(sws_upstream_server_t *s);
/* Frees the removed servers whose last connection has closed (the tick). */
SWS_INTERNAL void up_sweep_removed(sws_engine_t *e, sws_upstream_t *up);

/* upstream/health.c */
SWS_INTERNAL void hc_start(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s);
SWS_INTERNAL void hc_event(sws_engine_t *e, upconn_t *uc, uint32_t events);
SWS_INTERNAL void hc_done(sws_engine_t *e, upconn_t *uc, int ok, const char *why);

#endif
