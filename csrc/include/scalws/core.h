/* scalws/core.h — the bottom floor of a worker's data plane (csrc/core/).
 *
 * Owns: the inner epoll, the passes over its events and the serve loop
 * (busy polling, the batching window), the clocks and the time strings read
 * once per pass, the timeout lists, the error log, the counters, and the
 * deferred freeing of event objects closed during a batch of events.
 *
 * May call: libc and scalws/httpdate.h only. It knows nothing of sockets,
 * HTTP or upstreams: every object in the inner epoll starts with an
 * sws_evobj_t whose handler the loop calls, and timeout-list entries are
 * sws_tnode_t's whose expiry goes to the on_expire hook of the floor that
 * owns them. Those are the only ways the core reaches upward.
 *
 * Units: monotonic milliseconds (`now`, deadlines), wall seconds (`wall`),
 * nanoseconds where a name says _ns. Return values: 0 / -errno unless stated.
 */
#ifndef SCALWS_CORE_H
#define SCALWS_CORE_H

#include <stdint.h>
#include <time.h>
#include <sys/epoll.h>

#include "scalws/httpdate.h"
#include "scalws/stats.h"

#define SWS_INTERNAL __attribute__((visibility("hidden")))

#define EV_BATCH 256          /* events per epoll_wait */
#define RBUF_KEEP 32          /* upstream read buffers kept (sws_rbuf_put) */
#define RUN_ROUNDS 4          /* epoll_wait rounds per pass */
#define BATCH_MIN_INFLIGHT 4  /* upstream requests in flight for the batching window */
#define BATCH_MIN_PASS 2      /* ... after a pass with at least this many events */
#define BATCH_SHORT_PASS 16   /* ... and fewer than this many */
#define BATCH_WAIT_RATIO 10   /* wait only when upstreams take 10x the wait to answer */
#define TIMER_SLACK_NS 1000   /* the worker's timer slack while batching (prctl) */
#define SPIN_START_NS 5000    /* busy polling: the first poll after short sleeps, then x2 */
/* `busy_poll: auto` measures whether polling pays (sws_core_poll_tick in
 * core/loop.c; ADR 0027): PROBE_TICKS ticks with polling on and off in
 * turn, then the choice holds PROBE_HOLD_TICKS ticks (30 s), or until the
 * request rate has halved or doubled for PROBE_MOVED_TICKS ticks (one tick
 * after a measurement that found too few requests). */
#define PROBE_TICKS 8
#define PROBE_HOLD_TICKS 120
#define PROBE_MOVED_TICKS 4
#define PROBE_MIN_REQUESTS 200 /* fewer in either mode: too light to tell; poll */
#define PROBE_GAIN 1.10        /* the rate the poll must add to be kept (or cost no more CPU) */

typedef struct {
    size_t max_header_bytes; /* request line + headers; over it: 431 (414 if the line alone) */
    size_t max_headers;      /* header fields; over it: 431 */
    size_t max_uri_bytes;    /* request-target; over it: 414 */
    uint64_t max_body_bytes; /* declared or chunked total; over it: 413 */
    uint32_t header_timeout_ms;    /* a request head: from its first byte to its end */
    uint32_t body_timeout_ms;      /* a request body: between two reads that brought some */
    uint32_t keepalive_timeout_ms; /* 0: no keep-alive */
    uint32_t send_timeout_ms;
    uint32_t keepalive_requests;
    uint32_t max_connections;
    uint32_t batch_window_us;      /* see batch_due() in core/loop.c; 0: off */
    uint32_t busy_poll_us;         /* longest poll before sleeping (spin_* in core/loop.c); 0: off */
    uint32_t busy_poll_measure;    /* `auto`: poll only while measured to pay (ADR 0027) */
} sws_limits_t;

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

/* The error-log budget (elog_folded): a key is a cause and what failed;
 * of its lines one is written per wall-clock second and the rest are
 * counted, the count written with the key's next line or by the tick. */
#define SWS_ELOG_KEYS 64      /* keys tracked at once per worker; more: "others" */
#define SWS_ELOG_TEXT 240     /* the message a count line repeats, cut to this */

typedef struct {
    const char *cause;        /* NULL: a free slot */
    uint64_t who;
    time_t sec;               /* the wall second of the key's last written line */
    uint32_t folded;          /* its lines counted, not written, since that one */
    uint16_t len;             /* text[0..len): that line's message */
    uint8_t level;
    char text[SWS_ELOG_TEXT];
} sws_elog_key_t;

/* Something output references until it is written (net/conn.c keeps a list
 * per connection): release runs once the connection's pending output is
 * all written, or when it closes. */
typedef struct sws_hold {
    struct sws_hold *next;
    void (*release)(struct sws_hold *h);
} sws_hold_t;

/* The head of every object in the inner epoll (listener, client connection,
 * upstream connection): the loop calls handler(e, obj, events). A closed
 * object has handler NULL and waits in the dead list until the batch of
 * events that may still name it is over (sws_core_defer_free). */
typedef void (*sws_evh_t)(sws_engine_t *e, void *obj, uint32_t events);
typedef struct sws_evobj {
    sws_evh_t handler;
    struct sws_evobj *dead_next;
} sws_evobj_t;

/* An object whose input is held where epoll cannot see it (decrypted
 * bytes inside a TLS library), and its epoll mask: it gets EPOLLIN from the
 * ready list once the mask asks for input. */
typedef struct {
    sws_evobj_t *obj;
    const uint32_t *mask;
} sws_ready_t;

/* Timeout lists: one per duration. Every entry of a list has the same
 * timeout, so appending at the tail keeps it sorted and a tick only looks
 * at heads. An entry is embedded in its owner: a client connection, or
 * something a connection carries (`sub` set: net.h's sws_subtimer_t; the
 * core only keeps the bit for on_expire). */
enum { TL_NONE = -1, TL_HEADER, TL_BODY, TL_KEEPALIVE, TL_SEND, TL_LINGER, TL_GRACE, TL_COUNT };

typedef struct sws_tnode {
    struct sws_tnode *tprev, *tnext;
    uint64_t deadline : 55;    /* monotonic ms (2^55 ms: no wrap) */
    uint64_t sub : 1;          /* not a connection's own entry (net.h) */
    int64_t tlist : 8;         /* TL_*, TL_NONE when in no list */
} sws_tnode_t;

typedef struct {
    sws_tnode_t *head, *tail;
    uint32_t ms;
    uint32_t n;                /* entries: the idle-connections gauge reads TL_KEEPALIVE's */
} tlist_t;

/* An upstream read buffer kept for reuse (sws_rbuf_get). */
typedef struct {
    void *p;
    size_t size;
} sws_rbuf_t;

/* The core's part of the engine (e->core). */
typedef struct {
    int epfd;
    int relay_fd;              /* what uvloop watches: an epoll holding epfd alone (sws_core_watch) */
    int worker_id;
    int shutting_down;
    sws_limits_t lim;
    tlist_t tl[TL_COUNT];
    sws_counters_t cnt;

    uint64_t now;             /* monotonic ms, read once per pass and tick */
    time_t wall;
    char date[SWS_HTTP_DATE_LEN];
    char log_time[SWS_LOG_TIME_LEN];
    char iso_time[SWS_ISO_TIME_LEN];
    char err_time[SWS_ERR_TIME_LEN];

    int elog_fd, elog_level;
    int elog_json; /* log.error_format json: one JSON object per line */
    /* The budget (core/core.c): its keys, and the lines of keys that found
     * no slot (every one in use this second), counted as "others". */
    sws_elog_key_t elog_keys[SWS_ELOG_KEYS];
    uint32_t elog_others;
    int elog_others_level;
    time_t elog_others_sec;

    /* Signals from the upstream floor that the batching window reads. */
    uint32_t up_inflight;      /* requests waiting on upstreams */
    uint64_t up_wait_ns;       /* moving average: request sent to response head */
    int last_events;           /* events handled by the previous pass; 0 after an empty wait */
    int in_pass;               /* a pass runs: after_pass comes at its end */
    uint64_t spin_ns;          /* busy polling: how long the next idle wait polls first */
    /* busy_poll auto's measurement (sws_core_poll_tick, core/loop.c):
     * poll_off: no polling now (a window of the measurement without it, or
     * the last choice); poll_chose_off: the last choice; probes: the
     * measurements that found enough requests; probe_tick: ticks into the
     * measurement (< PROBE_TICKS), then into the hold; probe_moved: ticks
     * in a row with the rate 2x off probe_rate (requests per second when
     * the choice was made); probe_at: requests, thread CPU ns and
     * monotonic ns at the last tick; probe_sum: their deltas summed per
     * mode (0: not polling, 1: polling); probe_idle: the last measurement
     * found too few requests to tell (a load that comes is measured at the
     * first tick that sees it); probe_lo, probe_hi: the lowest and highest
     * rate of a tick in this measurement, per mode; probe_again: this one
     * repeats a measurement during which the rate moved. */
    int poll_off;
    int poll_chose_off;
    int probe_idle, probe_again;
    double probe_lo[2], probe_hi[2];
    uint32_t probes;
    uint32_t probe_tick, probe_moved;
    uint64_t probe_at[3];
    uint64_t probe_sum[2][3];
    double probe_rate;

    sws_evobj_t *dead;         /* closed during this batch; freed after it */
    /* The ready list (core/core.c): objects with input epoll cannot see, and
     * the eventfd, made on first use, that wakes the loop for them. */
    sws_ready_t *ready;
    size_t n_ready, cap_ready;
    int ready_fd;
    sws_evobj_t ready_ev;
    /* Upstream read buffers kept for the next exchanges (sws_rbuf_get). */
    sws_rbuf_t rbuf[RBUF_KEEP];
    int n_rbuf;
    /* The heap's trim once idle (engine.c): accepted + requests at the last
     * one, and the ticks without a client connection since. */
    uint64_t trim_mark;
    uint32_t trim_idle;
    /* Hooks of the floors above: an expired timeout-list entry, and the end
     * of each pass (the access log's periodic flush). */
    void (*on_expire)(sws_engine_t *e, sws_tnode_t *n, int which);
    void (*after_pass)(sws_engine_t *e);
    struct epoll_event ev[EV_BATCH];

    /* The shared counters (scalws/stats.h): this worker's slot, or st_own
     * when the engine was given none; the per-route histograms (route id
     * - 1; NULL when none). Busy and idle loop time: update_time adds the
     * time since its previous reading to idle_ns when `waiting` (the loop
     * was about to block), else to busy_ns; no clock read of its own. */
    sws_stats_head_t *st;
    sws_hist_t *st_routes;
    uint32_t st_n_routes;
    int waiting;
    uint64_t clock_ns;         /* the coarse monotonic clock at the last update_time */
    sws_stats_head_t st_own;
} sws_core_t;

/* core/core.c */
SWS_INTERNAL int sws_core_init(sws_engine_t *e, const sws_limits_t *limits, int worker_id);
SWS_INTERNAL void sws_core_free(sws_engine_t *e);
/* Reads the clocks into now/wall; rebuilds the time strings when the second changed. */
SWS_INTERNAL void update_time(sws_engine_t *e);
/* JSON string body of n bytes of s at p: '"' and '\' escaped, other bytes
 * outside 0x20..0x7e as \u00HH (6 bytes a byte at most), so a line is valid
 * JSON whatever a client sent; returns the end. */
SWS_INTERNAL char *sws_json_escape(char *p, const char *s, size_t n);
SWS_INTERNAL void elog(sws_engine_t *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* elog under the budget, for a line that traffic can repeat (per request,
 * per connection): the key is `cause`, a static string naming the failure
 * (compared by address: give the same literal for the same cause), and
 * `who`, what failed (an upstream server's address, a hash of a message
 * from sws_elog_hash, or 0). The first line of a key in a wall-clock second
 * is written, with ` (and N more like this in the last Ns)` when lines of
 * the key were counted before it; the key's other lines that second are
 * only counted (no formatting, no write). A line below the log level is
 * neither written nor counted. */
SWS_INTERNAL void elog_folded(sws_engine_t *e, const char *cause, uint64_t who, int level,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Writes `N more like this in the last Ns: MESSAGE` for each key whose
 * counted lines are from a past second (every key when `all`, at exit), so
 * that a storm's count comes out within a tick of its second's end even
 * when the storm stopped; and `N more lines of other kinds ...` for the
 * lines that found the table full. The tick calls it with all = 0. */
SWS_INTERNAL void sws_elog_flush(sws_engine_t *e, int all);

/* FNV-1a over s[0..n): a `who` for elog_folded from a message's text. */
static inline uint64_t sws_elog_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    while (n--)
        h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
    return h;
}
SWS_INTERNAL void tl_unlink(sws_engine_t *e, sws_tnode_t *n);
/* Puts n at the tail of list `which`, deadline now + that list's timeout. */
SWS_INTERNAL void tl_set(sws_engine_t *e, sws_tnode_t *n, int which);
/* Hands every entry past its deadline to on_expire (which must take it off
 * its list, by tl_set or tl_unlink). */
SWS_INTERNAL void sws_core_expire(sws_engine_t *e);
/* obj is closed (handler set NULL here): freed after the current batch. */
SWS_INTERNAL void sws_core_defer_free(sws_engine_t *e, sws_evobj_t *obj);
SWS_INTERNAL void sws_core_bury(sws_engine_t *e);

/* The ready list. An object that holds input epoll cannot see is added
 * (once; adding again is a no-op) with its epoll mask; while the mask has
 * EPOLLIN the loop gives it an EPOLLIN event, through an eventfd in the
 * inner epoll (no poll, nothing per pass). It leaves the list when it gets
 * that event, or by sws_ready_remove (before it closes: a no-op when not
 * listed). sws_ready_wants: its mask has EPOLLIN again (a no-op when not
 * listed). Owners guard calls with e->core.n_ready where that is cheaper.
 * sws_ready_add returns -1 when the eventfd or memory is lacking (the
 * peer's next bytes then bring the object back through epoll). */
SWS_INTERNAL int sws_ready_add(sws_engine_t *e, sws_evobj_t *obj, const uint32_t *mask);
SWS_INTERNAL void sws_ready_remove(sws_engine_t *e, sws_evobj_t *obj);
SWS_INTERNAL void sws_ready_wants(sws_engine_t *e, sws_evobj_t *obj);

/* The read buffer of one upstream exchange (proxy, FastCGI: their
 * `buffer_size`, 64 KiB by default): malloc(size), or one of the buffers of
 * that size given back with sws_rbuf_put while other exchanges were in
 * flight (at most RBUF_KEEP). Freed, the buffers of a pass's finished
 * exchanges would make the heap's top free space exceed glibc's trim
 * threshold: the heap shrank, and grew again for the next pass's requests
 * (ADR 0030). When the worker's last client connection closes (conn_close)
 * nothing is kept, so an idle worker holds no buffer. sws_rbuf_put takes
 * NULL. */
SWS_INTERNAL void *sws_rbuf_get(sws_engine_t *e, size_t size);
SWS_INTERNAL void sws_rbuf_put(sws_engine_t *e, void *buf, size_t size);
SWS_INTERNAL void sws_rbuf_drain(sws_engine_t *e);

/* Arms (on) or disarms the relay entry: contract as sws_engine_watch. */
SWS_INTERNAL int sws_core_watch(sws_engine_t *e, int on);

/* core/loop.c: contracts as sws_engine_run / sws_engine_serve in engine.h. */
SWS_INTERNAL int sws_core_run(sws_engine_t *e);
SWS_INTERNAL int sws_core_serve(sws_engine_t *e, int max_ms);
/* One pass over what is ready now, without waiting; returns the events handled. */
SWS_INTERNAL int sws_core_pass(sws_engine_t *e);
/* busy_poll auto: one step of the measurement (engine tick, every 250 ms). */
SWS_INTERNAL void sws_core_poll_tick(sws_engine_t *e);

/* A request answered (every path that writes an access-log line): its
 * status class, its duration from the head's first byte (core ms), and its
 * route (1-based id from sws_handler_t.stat_id; 0: no route). */
static inline void sws_stats_request(sws_core_t *k, unsigned route, unsigned status, uint64_t ms)
{
    sws_stats_head_t *st = k->st;
    unsigned cls = status / 100u - 1u;
    st->requests++;
    if (cls < 5)
        st->status[cls]++;
    sws_hist_add(&st->duration, ms);
    if (route && route <= k->st_n_routes)
        sws_hist_add(&k->st_routes[route - 1], ms);
}

/* Monotonic nanoseconds (vDSO: no system call). */
static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
