/* Internals shared by the engine's C files (engine.c, proxy.c); not an API.
 * The public contract is scalws/engine.h. */
#ifndef SCALWS_ENGINE_INT_H
#define SCALWS_ENGINE_INT_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/epoll.h>
#include <time.h>

#include "scalws/engine.h"
#include "scalws/http1.h"
#include "scalws/httpdate.h"

#define SWS_INTERNAL __attribute__((visibility("hidden")))

#define EV_BATCH 256          /* events per epoll_wait */
#define RUN_ROUNDS 4          /* epoll_wait rounds per pass (run_pass) */
#define ACCEPT_BATCH 64       /* accepts per listener event */
#define BATCH_MIN_INFLIGHT 4  /* proxied requests in flight for the batching window */
#define BATCH_MIN_PASS 2      /* ... after a pass with at least this many events */
#define BATCH_SHORT_PASS 16   /* ... and fewer than this many */
#define BATCH_WAIT_RATIO 10   /* wait only when upstreams take 10x the wait to answer */
#define TIMER_SLACK_NS 1000   /* the worker's timer slack while batching (prctl) */
#define SPIN_START_NS 5000    /* busy polling: the first poll after short sleeps, then x2 */
#define OUT_BUF (64 * 1024)   /* per-engine response batch */
#define OUT_IOV 64
#define COPY_BODY_MAX 4096    /* bodies up to this are copied into the batch */
#define RANGES_MAX 16         /* more ranges than this in one request: Range ignored */
#define MULTIPART_READ_MAX (1 << 20) /* several ranges of a file on disk: read up to this */
#define COPY_HEAD_MAX 8192    /* head parts up to this too; longer ones are referenced */
#define LINGER_MS 2000        /* wait for the peer's FIN after our last response */
#define LINGER_BYTES (1 << 20)
#define EMFILE_PAUSE_MS 500
#define STOP_GRACE_MS 500    /* see sws_engine_shutdown */
#define IN_EXTRA (64 * 1024)  /* read buffer = max_header_bytes + this */

enum { T_LISTENER = 1, T_CONN = 2, T_UPSTREAM = 3, T_DEAD = 4 };
enum { S_HEAD, S_BODY, S_LINGER };
enum { TL_NONE = -1, TL_HEADER, TL_KEEPALIVE, TL_SEND, TL_LINGER, TL_GRACE, TL_COUNT };

typedef struct {
    int type; /* T_LISTENER: must be first, as in sws_conn */
    int fd;
    int enabled;
    const sws_vhosts_t *vh;
} listener_t;

/* Output the socket did not take: iov[idx..niov) still to write; iovecs
 * point into data[] (copied) or at handler-owned bytes. */
typedef struct {
    int idx, niov;
    struct iovec iov[];
} pend_t;

typedef struct sws_conn sws_conn_t;
struct sws_conn {
    int type; /* T_CONN */
    int fd;
    sws_conn_t *tprev, *tnext; /* timeout list */
    uint64_t deadline;         /* monotonic ms */
    signed char tlist;
    unsigned char state;       /* S_* */
    unsigned char chunked : 1, close_after : 1, in_head : 1, is_unix : 1,
        head_armed : 1, /* the TL_HEADER deadline belongs to the current head */
        resume : 1,     /* the stash may hold whole requests (output stopped us) */
        corked : 1;     /* TCP_CORK set for a file body */
    uint32_t evmask;           /* epoll events asked for */
    uint32_t requests;
    uint64_t req_start;        /* monotonic ms when the current head began */
    uint32_t stash_len;
    char *stash;               /* unparsed input, malloc'd, exact size */
    pend_t *pend;
    sws_file_t *file;          /* referenced by pending output; file_left bytes still to sendfile */
    char *heap;                /* a generated body (folder listing) referenced by pending output */
    uint64_t file_off, file_left;
    size_t file_chunk;
    const sws_vhosts_t *vh;
    struct px *px;             /* the proxied request in progress (csrc/proxy.c) */
    uint64_t body_left;
    uint64_t linger_bytes;
    sws_chunked_decoder_t dec;
    uint16_t peer_port;
    unsigned char peer_family;
    unsigned char peer[16];
};

typedef struct {
    sws_conn_t *head, *tail;
    uint32_t ms;
} tlist_t;

struct sws_engine {
    int epfd;
    int worker_id;
    int shutting_down;
    sws_limits_t lim;
    sws_respond_t err[SWS_ERR_COUNT];
    listener_t *listeners;
    size_t n_listeners;
    int accept_paused;        /* listeners off: EMFILE or max_connections */
    uint64_t accept_resume;   /* monotonic ms to retry after EMFILE */
    tlist_t tl[TL_COUNT];
    sws_counters_t cnt;

    uint64_t now;             /* monotonic ms, read once per run/tick */
    time_t wall;
    char date[SWS_HTTP_DATE_LEN];
    char log_time[SWS_LOG_TIME_LEN];
    char iso_time[SWS_ISO_TIME_LEN];
    char err_time[SWS_ERR_TIME_LEN];

    char *path;               /* normalized path of the current request (max_uri_bytes) */
    char *path2;              /* the path with an index file name appended */
    sws_filecache_t *fc;
    const char *server_line;
    size_t server_line_len;
    char *in;                 /* read buffer */
    size_t in_cap;
    char out[OUT_BUF];        /* response batch */
    size_t out_len;
    struct iovec iov[OUT_IOV];
    int niov;

    int alog_fd, alog_format;
    char *alog;
    size_t alog_len, alog_cap;
    uint32_t alog_flush_ms;
    uint64_t alog_last_flush;
    uint64_t rid_base, rid_seq;
    uint64_t prng;            /* xorshift state for multipart boundaries */

    int elog_fd, elog_level;

    /* reverse proxy (csrc/proxy.c) */
    struct upconn *upconns;    /* every upstream connection: the tick scans deadlines */
    /* Closed connections are freed only after the current batch of events:
     * the proxy closes a peer (client or upstream) whose event may still be
     * in the batch; such an event finds T_DEAD and is skipped. */
    sws_conn_t *dead_conns;    /* linked by tnext */
    uint32_t px_inflight;      /* proxied requests in progress */
    uint64_t up_wait_ns;       /* moving average: request sent to response head, upstreams */
    int last_events;           /* events handled by the previous pass; 0 after an empty wait */
    uint64_t spin_ns;          /* busy polling: how long the next idle wait polls first */
    struct upconn *dead_ups;   /* linked by next */
    sws_upstream_t **upstreams;
    size_t n_upstreams;
    sws_cidr_t *trusted;
    size_t n_trusted;
    struct epoll_event ev[EV_BATCH];
};


typedef struct {
    const char *method, *target;
    size_t method_len, target_len;
    int minor;
    const sws_header_t *h;
    size_t nh;
    const char *host;
    size_t host_len;
    const char *rid;           /* request id to log; NULL: access_log makes one */
    size_t rid_len;
} reqview_t;

struct px;
struct upconn;

/* engine.c */
SWS_INTERNAL void elog(sws_engine_t *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
SWS_INTERNAL void tl_unlink(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void tl_set(sws_engine_t *e, sws_conn_t *c, int which);
SWS_INTERNAL void access_log(sws_engine_t *e, sws_conn_t *c, const reqview_t *r, int status,
                             size_t body_bytes);
SWS_INTERNAL void out_copy(sws_engine_t *e, const char *p, size_t n);
SWS_INTERNAL void out_ref(sws_engine_t *e, const char *p, size_t n);
SWS_INTERNAL void out_str(sws_engine_t *e, const char *s);
SWS_INTERNAL int out_room(const sws_engine_t *e, size_t need);
SWS_INTERNAL int out_flush(sws_engine_t *e, sws_conn_t *c);
/* Sends c->pend: 0 when all of it went (pend freed), 1 when the socket is
 * full, -1 on a socket error (the caller closes). */
SWS_INTERNAL int pend_send(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void out_conn_end(sws_engine_t *e, int minor, int keepalive);
SWS_INTERNAL size_t put_response(sws_engine_t *e, const sws_respond_t *r, int head_only, int minor,
                                 int keepalive);
SWS_INTERNAL size_t response_copy_size(const sws_respond_t *r);
SWS_INTERNAL int err_index(int status);
SWS_INTERNAL int conn_set_mask(sws_engine_t *e, sws_conn_t *c, uint32_t events);
SWS_INTERNAL void conn_close(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void conn_linger(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void conn_settle(sws_engine_t *e, sws_conn_t *c, const char *rest, size_t rest_len);
SWS_INTERNAL const sws_header_t *find_header(const reqview_t *r, const char *name, size_t len);
SWS_INTERNAL char *put_peer(char *p, const sws_conn_t *c);
SWS_INTERNAL uint64_t next_request_id(sws_engine_t *e);

/* proxy.c */
/* Starts proxying the request r (head parsed; path normalized, raw_path the
 * target's path as sent) on c; body_buf holds the bytes that came after the
 * head. Returns 0 with c->px set and *took = the body bytes it took (the
 * rest is the next request): the connection belongs to the proxy until
 * c->px is NULL again. Or returns a status to answer at once (no request
 * was started, nothing written). */
SWS_INTERNAL int px_start(sws_engine_t *e, sws_conn_t *c, const reqview_t *r,
                          const sws_request_info_t *info, const sws_proxy_t *p, const char *path,
                          size_t path_len, const char *raw_path, int keepalive, char *body_buf,
                          size_t body_len, size_t *took);
SWS_INTERNAL void px_client_event(sws_engine_t *e, sws_conn_t *c, uint32_t events);
SWS_INTERNAL void px_upstream_event(sws_engine_t *e, struct upconn *uc, uint32_t events);
/* The client connection closes under the proxy: the upstream side goes too. */
SWS_INTERNAL void px_client_gone(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void px_tick(sws_engine_t *e);
SWS_INTERNAL void px_shutdown(sws_engine_t *e);
SWS_INTERNAL void px_close_all(sws_engine_t *e);
SWS_INTERNAL void px_engine_free(sws_engine_t *e);
/* Frees the connections closed during the last batch of events. */
SWS_INTERNAL void px_bury(sws_engine_t *e);

/* Monotonic nanoseconds (vDSO: no system call). */
static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
