/* The HTTP/2 protocol of one server connection (RFC 9113), ours: frames,
 * stream states, flow control both ways, SETTINGS, PING, GOAWAY,
 * RST_STREAM, RFC 9218's urgency scheduling, and HPACK (hpack.h). It does
 * no I/O and knows nothing of requests: h2.c feeds it the bytes the socket
 * gave (sws_h2sess_recv) and takes the bytes to write (sws_h2sess_send),
 * and it reports what the client did through sws_h2cb_t.
 *
 * Streams: a stream is open from its HEADERS until both sides ended it
 * (END_STREAM each way) or either reset it; then stream_close runs and
 * the session forgets it, except for its id and how it ended, which the
 * last SWS_H2_CLOSED_KEEP closed streams leave behind: frames on a closed
 * stream are told apart from frames on an idle one (RFC 9113 §5.1), and
 * frames that crossed our RST_STREAM are ignored, not errors.
 *
 * Output keeps the wire's order: control frames are serialized when they
 * are submitted, header blocks when they go out (HPACK's dynamic table
 * follows the order of encoding, and a stream reset before its HEADERS
 * left never sends them), all into the connection's control buffer, which
 * goes out before any DATA; a stream's state changes when its frame goes
 * out (its END_STREAM, its RST_STREAM), never inside the submit call, so
 * a caller's stream is not closed under it. DATA is written by the caller
 * itself (data_send: a frame header, then its own bytes, referenced or
 * copied), the stream picked by urgency, then incremental round robin.
 *
 * Errors: a connection error queues GOAWAY with its code; the session
 * reads nothing more, and once that GOAWAY is out wants neither to read
 * nor to write (the caller closes). A stream error queues RST_STREAM. */
#ifndef SCALWS_H2_SESSION_H
#define SCALWS_H2_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http/h2/hpack.h"
#include "http/reqcheck.h"

#ifndef SWS_INTERNAL
#define SWS_INTERNAL __attribute__((visibility("hidden")))
#endif

/* Frame types (RFC 9113 §6; RFC 9218 §7.1) and flags. */
enum {
    H2_DATA = 0, H2_HEADERS = 1, H2_PRIORITY = 2, H2_RST_STREAM = 3, H2_SETTINGS = 4,
    H2_PUSH_PROMISE = 5, H2_PING = 6, H2_GOAWAY = 7, H2_WINDOW_UPDATE = 8, H2_CONTINUATION = 9,
    H2_PRIORITY_UPDATE = 0x10,
};
#define H2_F_END_STREAM 0x1
#define H2_F_ACK 0x1
#define H2_F_END_HEADERS 0x4
#define H2_F_PADDED 0x8
#define H2_F_PRIORITY 0x20

/* Error codes (RFC 9113 §7). */
enum {
    H2_NO_ERROR = 0, H2_PROTOCOL_ERROR = 1, H2_INTERNAL_ERROR = 2, H2_FLOW_CONTROL_ERROR = 3,
    H2_SETTINGS_TIMEOUT = 4, H2_STREAM_CLOSED = 5, H2_FRAME_SIZE_ERROR = 6,
    H2_REFUSED_STREAM = 7, H2_CANCEL = 8, H2_COMPRESSION_ERROR = 9, H2_CONNECT_ERROR = 10,
    H2_ENHANCE_YOUR_CALM = 11, H2_INADEQUATE_SECURITY = 12, H2_HTTP_1_1_REQUIRED = 13,
};

/* Settings (RFC 9113 §6.5.2; RFC 8441; RFC 9218). */
enum {
    H2_SET_HEADER_TABLE_SIZE = 1, H2_SET_ENABLE_PUSH = 2, H2_SET_MAX_CONCURRENT_STREAMS = 3,
    H2_SET_INITIAL_WINDOW_SIZE = 4, H2_SET_MAX_FRAME_SIZE = 5, H2_SET_MAX_HEADER_LIST_SIZE = 6,
    H2_SET_ENABLE_CONNECT_PROTOCOL = 8, H2_SET_NO_RFC7540_PRIORITIES = 9,
};

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
#define H2_FRAME_MAX 16384          /* the frame payload we take and send (the default) */
#define H2_WINDOW_MAX 0x7fffffff
#define H2_DEFAULT_WINDOW 65535
#define SWS_H2_CLOSED_KEEP 64       /* closed streams remembered (how they ended) */
#define SWS_H2_ACKS_MAX 1000        /* SETTINGS and PING ACKs waiting to go out: more is a flood */

/* data_read's flags. */
#define SWS_H2D_EOF 0x1             /* the body ends with this frame ... */
#define SWS_H2D_TRAILERS 0x2        /* ... and trailers follow it (trailers then submits them) */
#define SWS_H2D_DEFERRED (-1)       /* data_read: nothing ready yet (sws_h2sess_resume) */
#define SWS_H2D_BLOCKED (-2)        /* data_send: no room now; the same frame is asked again */
#define SWS_H2D_FAIL (-3)           /* data_send: the stream cannot go on (reset INTERNAL_ERROR) */

typedef struct sws_h2sess sws_h2sess_t;

/* What the session tells its owner. `u` is the owner's pointer given to
 * sws_h2sess_init; `su` a stream's, given to sws_h2sess_set_user (NULL
 * until then). Every callback runs inside sws_h2sess_recv or
 * sws_h2sess_send, never inside a submit call. */
typedef struct {
    /* A frame header arrived (before the session acts on it): the budgets'
     * hook. -1: stop reading (the owner terminated the session). */
    int (*frame)(void *u, uint8_t type, uint8_t flags, int32_t id, uint32_t len);
    /* A request's HEADERS opens stream id (its fields follow). -1: refuse
     * it (RST_STREAM INTERNAL_ERROR). */
    int (*begin)(void *u, int32_t id);
    /* A request field, checked against RFC 9113 §8.2 and §8.3 (lowercase
     * names, no connection-specific field, pseudo-headers known, once,
     * first). -1: reset the stream (INTERNAL_ERROR). */
    int (*header)(void *u, void *su, const uint8_t *name, size_t nl, const uint8_t *value,
                  size_t vl);
    /* The request's header block ended and was well formed. */
    void (*request)(void *u, void *su, int end_stream);
    /* Called before request when a field of the block was over
     * SWS_HPACK_FIELD_MAX: it and the fields after it were not passed to
     * header (the list is incomplete: answer 431). May be NULL: the stream
     * is reset INTERNAL_ERROR instead. */
    void (*too_big)(void *u, void *su);
    /* Request body bytes (DATA's payload, padding off). -1: reset the
     * stream (INTERNAL_ERROR). The caller hands the window back
     * (sws_h2sess_consume) when it took them. */
    int (*data)(void *u, void *su, int32_t id, const uint8_t *p, size_t n);
    /* The client ended its side (END_STREAM on DATA or trailers). */
    void (*end_stream)(void *u, void *su);
    /* The stream closed (code: why; the client's RST_STREAM's, or ours,
     * or NO_ERROR). The session forgets su. */
    void (*close)(void *u, void *su, int32_t id, uint32_t code);
    /* Our END_STREAM on stream su went out (the answer is complete). */
    void (*sent_end)(void *u, void *su);
    /* A PING's ACK came back. */
    void (*ping_ack)(void *u, const uint8_t opaque[8]);
    /* A PRIORITY_UPDATE (RFC 9218 §7.1) for stream id (su: NULL when the
     * stream is not open). */
    void (*priority)(void *u, void *su, int32_t id, const uint8_t *v, size_t n);
    /* Something the session refused, for the error log. */
    void (*error)(void *u, uint32_t code, const char *what);
    /* Output: how much of stream su's body may go in one DATA frame of at
     * most max bytes (0 with SWS_H2D_EOF: an empty last frame), *flags
     * SWS_H2D_*; or SWS_H2D_DEFERRED. */
    ssize_t (*data_read)(void *u, void *su, size_t max, int *flags);
    /* Writes the frame: its 9-byte header, then n payload bytes from the
     * head of su's body. 0, SWS_H2D_BLOCKED or SWS_H2D_FAIL. */
    int (*data_send)(void *u, void *su, const uint8_t hd[9], size_t n);
    /* The body's last DATA went without END_STREAM: submit the trailers now. */
    void (*trailers)(void *u, void *su, int32_t id);
} sws_h2cb_t;

/* Our side of the connection (the SETTINGS we send, and the bounds we keep). */
typedef struct {
    uint32_t max_streams;      /* SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t stream_window;    /* SETTINGS_INITIAL_WINDOW_SIZE */
    uint32_t conn_window;      /* the connection's receive window */
    uint32_t max_header_list;  /* SETTINGS_MAX_HEADER_LIST_SIZE (what we announce) */
    uint32_t header_table;     /* SETTINGS_HEADER_TABLE_SIZE (our decoder), and our encoder's cap */
    uint32_t max_continuations; /* CONTINUATION frames after one HEADERS (they bound the block) */
    struct sws_h2pool *pool;    /* header blocks' memory, shared (NULL: malloc and free each) */
} sws_h2sess_conf_t;

/* Header blocks' memory kept for the next ones, shared by the sessions of
 * one thread (the owner's: a worker's). A busy connection queues a block
 * per answer, several a pass (h2load -m10: ten), more than malloc's
 * per-size cache holds (seven). Blocks of SWS_H2_HQ_MIN bytes are kept,
 * `max` of them. */
#define SWS_H2_HQ_MIN 1024
typedef struct sws_h2pool {
    struct h2hq *spare;
    uint32_t n, max;
} sws_h2pool_t;

void sws_h2pool_free(sws_h2pool_t *p);

/* One field of a header block we send. */
typedef sws_hpack_field_t sws_h2field_t;

/* sws_h2sess_headers' flags. */
#define SWS_H2H_FINAL 0x1           /* the final head (else a 1xx) ... */
#define SWS_H2H_BODY 0x2            /* ... with a body (data_read supplies it) */
#define SWS_H2H_COPY 0x4            /* the names and values are copied (else they must stay
                                     * until the block is out: the stream's first DATA, its
                                     * END_STREAM, or its close) */

/* A header block waiting to be encoded (the fields, then copied bytes). */
struct h2hq {
    struct h2hq *next;
    int32_t id;
    uint8_t flags;                  /* H2_F_END_STREAM */
    size_t n;
    size_t cap;                     /* bytes allocated after the struct */
    sws_h2field_t f[];
};

/* The session, and the stream records it keeps (hash by id). */
typedef struct sws_h2st sws_h2st_t;

struct sws_h2sess {
    const sws_h2cb_t *cb;
    void *u;
    sws_h2sess_conf_t conf;
    sws_hpack_dec_t dec;
    sws_hpack_enc_t enc;
    /* streams */
    sws_h2st_t **tab;          /* open addressing would need tombstones: chains */
    uint32_t tab_mask;
    sws_h2st_t *all;           /* every open stream, for the scheduler and SETTINGS */
    uint32_t n_open;           /* streams counted against max_streams */
    int32_t max_id;            /* the highest stream id the client opened (or skipped past) */
    int32_t last_proc;         /* the highest stream we took (GOAWAY's last-stream-id) */
    int32_t goaway_last;       /* after our final GOAWAY: streams above it are not taken */
    int32_t skip_lo, skip_hi;  /* the latest range of ids the client skipped */
    struct { int32_t id; uint8_t how; } closed[SWS_H2_CLOSED_KEEP];
    uint32_t n_closed;
    uint64_t seq;              /* scheduler's order */
    /* flow control */
    int64_t send_win;          /* the connection's, ours to send in */
    int32_t recv_avail;        /* the connection's, what the client may still send */
    uint32_t recv_unacked;     /* consumed, not yet given back by WINDOW_UPDATE */
    uint32_t recv_window;      /* the connection window we keep giving */
    /* the client's settings */
    uint32_t peer_window;      /* SETTINGS_INITIAL_WINDOW_SIZE */
    uint32_t peer_frame;       /* SETTINGS_MAX_FRAME_SIZE (we send at most H2_FRAME_MAX) */
    /* input */
    uint8_t *blk;              /* a header block being gathered */
    size_t blk_len, blk_cap;
    int32_t blk_id;            /* its stream (0: none) */
    uint8_t blk_flags;         /* the HEADERS' flags */
    uint8_t blk_kind;          /* BLK_* (session_recv.c) */
    uint32_t blk_frames;       /* CONTINUATION frames so far */
    /* output: serialized frames, in order, and what happens when each part goes */
    uint8_t *ctl;
    size_t ctl_len, ctl_cap, ctl_off;
    struct h2ev { int32_t id; uint8_t kind; uint32_t code; } *ev;
    size_t n_ev, ev_cap;
    struct h2hq *hq, **hq_tail; /* header blocks to encode, in order */
    sws_h2st_t *st_spare;      /* closed stream records, for the next streams */
    uint32_t n_st_spare;
    uint8_t *hbuf;             /* a header block being encoded */
    size_t hbuf_cap;
    uint32_t acks;             /* ACKs queued and not yet out */
    uint32_t goaway_code;
    unsigned preface : 2,      /* 0: preface due, 1: its SETTINGS due, 2: both came */
        settings_acked : 1,    /* the client acknowledged ours */
        goaway_sent : 1,       /* our final GOAWAY is queued */
        goaway_out : 1,        /* and went out */
        fatal : 1,             /* a connection error: read nothing more */
        peer_goaway : 1,       /* the client said GOAWAY */
        connect_proto : 1;     /* we announced SETTINGS_ENABLE_CONNECT_PROTOCOL */
};

/* A stream's states we need (idle and reserved ones are never stored). */
enum { ST_OPEN = 0, ST_HALF_REMOTE = 1, ST_HALF_LOCAL = 2 };

struct sws_h2st {
    sws_h2st_t *hnext;         /* hash chain */
    sws_h2st_t *prev, *next;   /* sess->all */
    void *su;
    int32_t id;
    int32_t recv_avail;        /* what the client may still send on it */
    uint32_t recv_unacked;
    int64_t send_win;          /* may go below 0 (SETTINGS_INITIAL_WINDOW_SIZE shrank) */
    uint64_t seq;              /* scheduler order: lower first within an urgency */
    uint64_t cl_got;           /* DATA bytes received (chk.cl: content-length) */
    sws_reqcheck_t chk;        /* what the request's fields said (http/reqcheck.h) */
    uint8_t state;
    uint8_t urgency;           /* RFC 9218: 0 (most urgent) .. 7; 3 by default */
    unsigned incremental : 1,
        body : 1,              /* a response body follows our HEADERS (data_read) */
        deferred : 1,          /* data_read said DEFERRED */
        end_queued : 1,        /* our END_STREAM is serialized or being written */
        rst_queued : 1,        /* our RST_STREAM is serialized */
        malformed : 1,         /* the header block broke RFC 9113 §8: reset once it ends */
        final_sent : 1,        /* a final (non-1xx) HEADERS was submitted */
        pre_ack : 1;           /* opened before the client acknowledged our SETTINGS */
};

SWS_INTERNAL int sws_h2sess_init(sws_h2sess_t *s, const sws_h2sess_conf_t *conf,
                                 const sws_h2cb_t *cb, void *u);
SWS_INTERNAL void sws_h2sess_free(sws_h2sess_t *s);

/* Input: the client's bytes (the preface first). Returns the bytes taken
 * (whole frames; the caller keeps the rest for the next call), or -1 when
 * they are not HTTP/2 at all (a bad preface: close without a word). */
SWS_INTERNAL ssize_t sws_h2sess_recv(sws_h2sess_t *s, const uint8_t *p, size_t n);

/* Output, one step: *p, *n the serialized frames to write now (returns
 * 1; copy them), or a DATA frame written through data_send (returns 1,
 * *n = 0), or 0: nothing more to write now, or 2: data_send had no room
 * (write out, then call again). */
SWS_INTERNAL int sws_h2sess_send(sws_h2sess_t *s, const uint8_t **p, size_t *n);
SWS_INTERNAL int sws_h2sess_want_read(const sws_h2sess_t *s);
/* A header block has begun and not ended, or rest[0..n) (the input kept
 * for later) starts one. */
SWS_INTERNAL int sws_h2sess_in_block(const sws_h2sess_t *s, const uint8_t *rest, size_t n);
SWS_INTERNAL int sws_h2sess_want_write(const sws_h2sess_t *s);

/* Submitting (serialized now, sent by sws_h2sess_send). 0, or -1 when the
 * stream is not open any more (nothing queued) or out of memory. */
SWS_INTERNAL int sws_h2sess_settings(sws_h2sess_t *s);
/* HEADERS: a 1xx, or the final head (SWS_H2H_*) with a body or without
 * (END_STREAM on it). */
SWS_INTERNAL int sws_h2sess_headers(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f,
                                    size_t n, int flags);
/* The trailer section, which ends the stream (copied). */
SWS_INTERNAL int sws_h2sess_trailers(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f,
                                     size_t n);
SWS_INTERNAL int sws_h2sess_rst(sws_h2sess_t *s, int32_t id, uint32_t code);
SWS_INTERNAL int sws_h2sess_ping(sws_h2sess_t *s, const uint8_t opaque[8]);
/* GOAWAY with the last stream we took, and the connection ends once it
 * is out (code NO_ERROR: once the streams taken are done). */
SWS_INTERNAL void sws_h2sess_goaway(sws_h2sess_t *s, uint32_t code);
/* The graceful stop's first GOAWAY (last-stream-id 2^31-1): no final word. */
SWS_INTERNAL int sws_h2sess_goaway_notice(sws_h2sess_t *s);
/* The body of stream id has more now (after data_read said DEFERRED). */
SWS_INTERNAL void sws_h2sess_resume(sws_h2sess_t *s, int32_t id);
/* n request body bytes of stream id (0: the connection's only) were taken:
 * the client may send them again (WINDOW_UPDATE once half a window is due). */
SWS_INTERNAL void sws_h2sess_consume(sws_h2sess_t *s, int32_t id, size_t n);
/* RFC 9218: the stream's urgency and incremental, for the scheduler. */
SWS_INTERNAL void sws_h2sess_priority(sws_h2sess_t *s, int32_t id, int urgency, int incremental);

SWS_INTERNAL void sws_h2sess_set_user(sws_h2sess_t *s, int32_t id, void *su);
SWS_INTERNAL sws_h2st_t *sws_h2sess_stream(const sws_h2sess_t *s, int32_t id);
/* The windows the client may still send in (the connection's: id 0). */
SWS_INTERNAL int32_t sws_h2sess_recv_window(const sws_h2sess_t *s, int32_t id);
/* The highest stream the session took (GOAWAY's last-stream-id). */
SWS_INTERNAL int32_t sws_h2sess_last_stream(const sws_h2sess_t *s);

/* Inside the session (session.c and session_recv.c). */
SWS_INTERNAL sws_h2st_t *h2st_open(sws_h2sess_t *s, int32_t id);
SWS_INTERNAL void h2st_close(sws_h2sess_t *s, sws_h2st_t *st, uint32_t code, int how);
SWS_INTERNAL int h2_closed_how(const sws_h2sess_t *s, int32_t id);
SWS_INTERNAL void h2_conn_error(sws_h2sess_t *s, uint32_t code, const char *what);
SWS_INTERNAL void h2_stream_error(sws_h2sess_t *s, sws_h2st_t *st, int32_t id, uint32_t code);
SWS_INTERNAL int h2_frame_out(sws_h2sess_t *s, uint8_t type, uint8_t flags, int32_t id,
                              const void *p, size_t n);
SWS_INTERNAL int h2_window_update(sws_h2sess_t *s, int32_t id, uint32_t n);

/* How a remembered stream closed. */
enum { CLOSED_NONE = 0, CLOSED_BOTH = 1, CLOSED_BY_PEER = 2, CLOSED_BY_US = 3 };

static inline void h2_put_hd(uint8_t *d, uint32_t len, uint8_t type, uint8_t flags, int32_t id)
{
    d[0] = (uint8_t)(len >> 16);
    d[1] = (uint8_t)(len >> 8);
    d[2] = (uint8_t)len;
    d[3] = type;
    d[4] = flags;
    d[5] = (uint8_t)((uint32_t)id >> 24 & 0x7f);
    d[6] = (uint8_t)((uint32_t)id >> 16);
    d[7] = (uint8_t)((uint32_t)id >> 8);
    d[8] = (uint8_t)id;
}

static inline uint32_t h2_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

#endif
