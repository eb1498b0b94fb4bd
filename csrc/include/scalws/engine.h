/* The HTTP/1.1 connection engine of one worker.
 *
 * The engine owns an epoll instance ("inner epoll") holding the worker's
 * listening sockets and every client connection. The worker registers that
 * one fd with its uvloop loop (loop.add_reader) and calls sws_engine_serve()
 * when it is readable, so a wake-up costs one Python callback however many
 * connections are ready; bytes move with recv/writev called from C on
 * non-blocking sockets (docs/adr/0001-connection-io.md, 0003-serve-loop.md).
 *
 * Time is read once per pass (coarse monotonic and wall clocks, see
 * sws_engine_now()) and by sws_engine_tick(). Timeouts live in one list per
 * duration (header, keep-alive, send,
 * linger): every entry of a list has the same timeout, so appending at the
 * tail keeps it sorted and a tick only looks at heads.
 *
 * Memory: an idle keep-alive connection holds only its sws_conn (about 200
 * bytes). Reads land in one per-engine buffer; only the unparsed tail of a
 * partial request is copied out (malloc, exact size) until more bytes come.
 * Responses are gathered per read batch into one per-engine buffer and iovec
 * list and written with one writev; what the socket does not take is kept
 * per connection (copied, or referenced when the bytes are handler-owned).
 *
 * Handlers: a handler is a `sws_handler_t`; `data` is owned by the caller and
 * must outlive the engine. Return values: 0 / -errno unless stated.
 */
#ifndef SCALWS_ENGINE_H
#define SCALWS_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>

#include "scalws/filecache.h"
#include "scalws/router.h"

enum { SWS_H_RESPOND = 1, SWS_H_STATIC = 2, SWS_H_PROXY = 3 };

/* A prebuilt response: head_a, the Date value, head_b, the connection
 * header, CRLF, body. head_a ends with "Date: ", head_b starts with CRLF and
 * holds every other header line (each CRLF-terminated) but the last CRLF. */
typedef struct {
    int status;
    const char *head_a;
    size_t head_a_len;
    const char *head_b;
    size_t head_b_len;
    const char *body;
    size_t body_len;
} sws_respond_t;

typedef struct {
    int kind; /* SWS_H_* */
    void *data;
} sws_handler_t;

/* A MIME mapping: lowercase extension without the dot, and its whole
 * header line ("Content-Type: text/html; charset=utf-8\r\n"). */
typedef struct {
    const char *ext;
    size_t ext_len;
    const char *line;
    size_t line_len;
} sws_mime_entry_t;

/* A `static` route (config: scalws/config/directives/static.py). Files are
 * looked up by the normalized request path under root_fd through the
 * engine's open-file cache; small files go out from memory with the head in
 * one write, larger ones with sendfile(2). */
typedef struct {
    int root_fd;                  /* O_PATH | O_DIRECTORY; owned by the caller */
    int fc_flags;                 /* SWS_FC_NOFOLLOW when symlinks are refused */
    int deny_hidden;              /* 404 for "/." segments but /.well-known/ */
    int precompressed;            /* serve FILE.br/.zst/.gz when accepted */
    int autoindex;                /* list a folder without an index file */
    const char *const *index;     /* index file names, NUL-terminated */
    size_t n_index;
    const sws_mime_entry_t *mime; /* sorted by (ext_len, ext) */
    size_t n_mime;
    const char *default_type;     /* whole Content-Type line */
    size_t default_type_len;
    const char *extra;            /* header lines added to 200/304 answers */
    size_t extra_len;
    int64_t expires;              /* seconds, or -1: no Expires/Cache-Control from us */
    const char *const *try_items; /* try_files candidates: "$uri", "$uri/" or "/path" */
    size_t n_try;                 /* 0: serve the path itself (folder redirect, index) */
    const sws_respond_t *try_status; /* try_files fallback "=NNN", or NULL */
    const char *try_uri;          /* try_files fallback URI (normalized path), routed again */
    size_t try_uri_len;
    size_t sendfile_chunk;        /* most bytes per sendfile call */
} sws_static_t;

/* ---- reverse proxy (csrc/proxy.c) -----------------------------------------
 * Config halves are filled by the caller (scalws/server/engine.pyx) and must
 * outlive the engine; fields under "runtime" are the engine's (zero them).
 * Each worker is its own process, so runtime state is per worker. */

enum { SWS_BAL_RR = 0, SWS_BAL_LEAST_CONN = 1, SWS_BAL_HASH = 2 };
enum { SWS_HASH_CLIENT = 0, SWS_HASH_URI = 1, SWS_HASH_HEADER = 2 };

typedef struct {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    const char *name;          /* "127.0.0.1:3000", for logs */
    uint32_t weight;
    uint32_t max_fails;        /* 0: never marked down by failures */
    uint32_t fail_timeout_ms;
    uint32_t max_conns;        /* 0: unlimited */
    int backup;
    /* runtime */
    uint32_t active;           /* connections busy with a request */
    uint32_t fails;
    uint64_t fail_start;       /* monotonic ms of the first failure counted */
    uint64_t down_until;       /* passive: skipped until then */
    int hc_down;               /* active checks say down (or passive, when checks exist) */
    uint32_t hc_pass, hc_fail;
    uint64_t hc_next;
    int hc_busy;
    int64_t cw;                /* smooth weighted round robin */
} sws_upstream_server_t;

typedef struct {
    const char *name;
    sws_upstream_server_t *servers;
    size_t n_servers;
    int balance;               /* SWS_BAL_* */
    int hash_key;              /* SWS_HASH_* */
    const char *hash_header;   /* lowercase name for SWS_HASH_HEADER */
    size_t hash_header_len;
    uint32_t keepalive;        /* idle connections kept (this worker, whole group) */
    uint32_t keepalive_timeout_ms;
    uint32_t keepalive_requests;
    uint32_t keepalive_time_ms;  /* a connection older than this is not pooled again */
    /* active health checks: hc_request NULL = none */
    const char *hc_request;    /* whole request bytes */
    size_t hc_request_len;
    uint32_t hc_interval_ms, hc_timeout_ms, hc_rise, hc_fall;
    const uint16_t *hc_expect; /* [lo, hi] pairs */
    size_t hc_n_expect;
    /* runtime */
    struct upconn *idle;       /* pooled connections, most recent first */
    uint32_t n_idle;
    uint64_t *ring;            /* consistent-hash points: hash << 16 | server index */
    size_t ring_len;
} sws_upstream_t;

/* A header name (lowercase) and, for "set", its whole line "Name: v\r\n". */
typedef struct {
    const char *name;
    size_t name_len;
} sws_hname_t;

typedef struct {
    sws_upstream_t *up;
    const char *path_prefix;   /* prepended after strip_prefix */
    size_t path_prefix_len;
    const char *strip_prefix;
    size_t strip_prefix_len;
    const char *host;          /* Host sent upstream; NULL: the client's */
    size_t host_len;
    uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms;
    uint32_t retries;
    const sws_hname_t *req_drop;   /* client headers not passed (removed or set) */
    size_t n_req_drop;
    const char *req_set;           /* header lines added upstream */
    size_t req_set_len;
    const sws_hname_t *resp_drop;
    size_t n_resp_drop;
    const char *resp_set;
    size_t resp_set_len;
    size_t buffer_size;            /* upstream read buffer: the response head must fit */
} sws_proxy_t;

/* A network prefix: family AF_INET or AF_INET6, address bytes, prefix bits. */
typedef struct {
    int family;
    unsigned char addr[16];
    int bits;
} sws_cidr_t;

typedef struct {
    size_t max_header_bytes; /* request line + headers; over it: 431 (414 if the line alone) */
    size_t max_headers;      /* header fields; over it: 431 */
    size_t max_uri_bytes;    /* request-target; over it: 414 */
    uint64_t max_body_bytes; /* declared or chunked total; over it: 413 */
    uint32_t header_timeout_ms;
    uint32_t keepalive_timeout_ms; /* 0: no keep-alive */
    uint32_t send_timeout_ms;
    uint32_t keepalive_requests;
    uint32_t max_connections;
    uint32_t batch_window_us;      /* see batch_due() in engine.c; 0: off */
    uint32_t busy_poll_us;         /* longest poll before sleeping (spin_* in engine.c); 0: off */
} sws_limits_t;

/* Error responses the engine sends itself, indexed by SWS_ERR_*. */
enum {
    SWS_ERR_400, SWS_ERR_403, SWS_ERR_404, SWS_ERR_405, SWS_ERR_408, SWS_ERR_412, SWS_ERR_413,
    SWS_ERR_414, SWS_ERR_417, SWS_ERR_431, SWS_ERR_500, SWS_ERR_501, SWS_ERR_502, SWS_ERR_503,
    SWS_ERR_504, SWS_ERR_505, SWS_ERR_COUNT
};

enum { SWS_LOG_OFF = 0, SWS_LOG_COMBINED = 1, SWS_LOG_JSON = 2 };
/* Error-log levels, as nginx's. */
enum { SWS_L_EMERG, SWS_L_ALERT, SWS_L_CRIT, SWS_L_ERROR, SWS_L_WARN, SWS_L_NOTICE, SWS_L_INFO, SWS_L_DEBUG };

typedef struct {
    uint64_t accepted;  /* connections accepted */
    uint64_t handled;   /* connections closed */
    uint64_t requests;  /* requests answered */
    uint64_t active;    /* open client connections */
    uint64_t timeouts;  /* closed by a timeout */
    uint64_t errors_4xx_close; /* refused malformed requests */
    uint64_t upstream_conns;   /* upstream connections opened */
    uint64_t upstream_reused;  /* requests sent on a pooled connection */
    uint64_t upstream_errors;  /* failed attempts (connect, reset, timeout, bad response) */
    uint64_t polls_caught;     /* busy polls that found an event: sleeps avoided */
    uint64_t polls_missed;     /* busy polls that ran out: the worker slept after all */
} sws_counters_t;

typedef struct sws_engine sws_engine_t;

/* A new engine; errors_[] are the engine's own error responses (copied by
 * reference: they must outlive the engine). NULL with errno on failure. */
sws_engine_t *sws_engine_new(const sws_limits_t *limits, const sws_respond_t *errors_,
                             int worker_id);
void sws_engine_free(sws_engine_t *e);

/* The inner epoll fd, to register with the outer loop as readable. */
int sws_engine_fd(const sws_engine_t *e);

/* Adds a listening socket (non-blocking, already bound and listening) whose
 * requests are routed with `vhosts`. The engine closes it on shutdown. */
int sws_engine_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts);

/* Access log: fd (-1 = off; the engine does not own it), SWS_LOG_* format,
 * buffer size in bytes; flushed when full, at each tick after `flush_ms`,
 * and by sws_engine_flush(). Switching fd flushes to the old fd first. */
int sws_engine_set_access_log(sws_engine_t *e, int fd, int format, size_t bufsize,
                              uint32_t flush_ms);
/* The open-file cache static routes use (one per engine); call before the
 * first request when any static route exists. 0 or -ENOMEM. */
int sws_engine_set_filecache(sws_engine_t *e, size_t max_entries, uint32_t valid_ms,
                             size_t mem_max);

/* The Server header line for answers built per request ("Server: x\r\n",
 * or empty); the bytes must outlive the engine. */
void sws_engine_set_server(sws_engine_t *e, const char *line, size_t len);

/* Error log for the engine's own messages: fd (-1 = stderr), level (SWS_L_*). */
void sws_engine_set_error_log(sws_engine_t *e, int fd, int level);

/* Registers an upstream group (health checks, hashing ring, pooled
 * connections closed at free); before the first request. 0 or -ENOMEM. */
int sws_engine_add_upstream(sws_engine_t *e, sws_upstream_t *u);

/* Sets s->addr from a numeric IPv4/IPv6 host and port, or from a unix
 * socket path (host NULL). 0, or -EINVAL. */
int sws_upstream_server_set_addr(sws_upstream_server_t *s, const char *host, int port,
                                 const char *unix_path);

/* Peers whose X-Forwarded-For/-Proto/-Host and X-Request-Id are believed;
 * the array must outlive the engine. */
void sws_engine_set_trusted(sws_engine_t *e, const sws_cidr_t *list, size_t n);

/* Reads the clocks: monotonic milliseconds and wall seconds. */
void sws_engine_now(uint64_t *mono_ms, time_t *wall);

/* Handles every ready event of the inner epoll (up to a budget, so the outer
 * loop stays fair), after sleeping the batching window first if it is due;
 * returns the number of events handled. */
int sws_engine_run(sws_engine_t *e);
/* sws_engine_run, then block in the inner epoll itself, handling events as
 * they come, until `max_ms` have passed after the first pass, a signal
 * interrupts a wait (a signal that arrives during a pass is seen at the
 * latest after `max_ms`), or the engine is shutting down; while the batching
 * window is due it sleeps the window and polls instead of blocking, and with
 * `busy_poll` it polls for a while before each blocking wait. The
 * worker calls this when uvloop reports the inner epoll readable: under load
 * the worker then sleeps on the inner epoll alone, and a peer's write wakes
 * it through one epoll callback instead of two nested ones
 * (docs/adr/0003-serve-loop.md). Returns the number of events handled. */
int sws_engine_serve(sws_engine_t *e, int max_ms);

/* Expires timeouts, re-enables accepting after EMFILE, flushes the access
 * log when due; call a few times a second. */
void sws_engine_tick(sws_engine_t *e);

/* Graceful stop: close the listeners, close idle connections now, and let
 * the others finish their current request, answered with Connection: close. */
void sws_engine_shutdown(sws_engine_t *e);

/* Fast stop: close every connection now. */
void sws_engine_close_all(sws_engine_t *e);

/* Writes buffered access-log lines out. */
void sws_engine_flush(sws_engine_t *e);

const sws_counters_t *sws_engine_counters(const sws_engine_t *e);

#endif
