/* The HTTP/1.1 connection engine of one worker.
 *
 * The engine owns an epoll instance ("inner epoll") holding the worker's
 * listening sockets and every client connection. The worker registers that
 * one fd with its uvloop loop (loop.add_reader) and calls sws_engine_run()
 * when it is readable, so a loop iteration costs one Python callback however
 * many connections are ready; bytes move with recv/writev called from C on
 * non-blocking sockets (docs/adr/0001-connection-io.md).
 *
 * Time is passed in: sws_engine_run() and sws_engine_tick() take the
 * monotonic and wall clocks read once by the caller (sws_engine_now() reads
 * both). Timeouts live in one list per duration (header, keep-alive, send,
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

#include "scalws/filecache.h"
#include "scalws/router.h"

enum { SWS_H_RESPOND = 1, SWS_H_STATIC = 2 };

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
} sws_limits_t;

/* Error responses the engine sends itself, indexed by SWS_ERR_*. */
enum {
    SWS_ERR_400, SWS_ERR_403, SWS_ERR_404, SWS_ERR_405, SWS_ERR_408, SWS_ERR_412, SWS_ERR_413,
    SWS_ERR_414, SWS_ERR_417, SWS_ERR_431, SWS_ERR_500, SWS_ERR_501, SWS_ERR_505, SWS_ERR_COUNT
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

/* Reads the clocks: monotonic milliseconds and wall seconds. */
void sws_engine_now(uint64_t *mono_ms, time_t *wall);

/* Handles every ready event of the inner epoll (up to a budget, so the outer
 * loop stays fair); returns the number of events handled. */
int sws_engine_run(sws_engine_t *e);
/* Like sws_engine_run, but the first wait blocks up to `ms` milliseconds: for
 * a worker loop without uvloop (bench/prototypes/cloop.py, ADR 0001). */
int sws_engine_run_wait(sws_engine_t *e, int ms);

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
