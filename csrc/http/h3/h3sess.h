/* http/h3/h3sess.h — the HTTP/3 protocol of one server connection (RFC
 * 9114), ours: the unidirectional streams (our control stream and SETTINGS,
 * the client's control stream, both QPACK streams through qpack.h),
 * request streams' frames (HEADERS and DATA; unknown and reserved types
 * skipped), the request checks of RFC 9114 4.2-4.3, responses framed
 * from the owner's head and body, RFC 9218's order among streams, GOAWAY,
 * and what acknowledgements free. It does no I/O and knows nothing of
 * QUIC's packets: the owner (conn.c, quic.c) gives it each stream's bytes
 * in order (sws_h3sess_read) and the acknowledged lengths, and writes what
 * sws_h3sess_writev offers through ngtcp2, telling it how much went.
 *
 * Streams: a request stream exists from its first byte until the owner
 * closes it (sws_h3sess_close_stream, from ngtcp2's stream_close), which
 * calls close and forgets it. Its response is a queue of runs: HEADERS
 * frames (ours, encoded when submitted), DATA frame headers (ours) and the
 * owner's body bytes (read_data gives them, the owner keeps them until
 * acked says so).
 *
 * Errors: a connection error (H3_* or QPACK's) is returned by the call
 * that found it (negative: -code) and the session takes nothing more; the
 * owner closes the connection with that code. A malformed request is a
 * stream error: reset_stream and stop_sending with H3_MESSAGE_ERROR, then
 * the stream's input is discarded. */
#ifndef SCALWS_H3_SESS_H
#define SCALWS_H3_SESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http/h3/qpack.h"
#include "scalws/priority.h"

/* Error codes (RFC 9114 8.1). */
enum {
    H3_NO_ERROR = 0x100, H3_GENERAL_PROTOCOL_ERROR = 0x101, H3_INTERNAL_ERROR = 0x102,
    H3_STREAM_CREATION_ERROR = 0x103, H3_CLOSED_CRITICAL_STREAM = 0x104,
    H3_FRAME_UNEXPECTED = 0x105, H3_FRAME_ERROR = 0x106, H3_EXCESSIVE_LOAD = 0x107,
    H3_ID_ERROR = 0x108, H3_SETTINGS_ERROR = 0x109, H3_MISSING_SETTINGS = 0x10a,
    H3_REQUEST_REJECTED = 0x10b, H3_REQUEST_CANCELLED = 0x10c, H3_REQUEST_INCOMPLETE = 0x10d,
    H3_MESSAGE_ERROR = 0x10e, H3_CONNECT_ERROR = 0x10f, H3_VERSION_FALLBACK = 0x110,
};

/* read_data's flags and returns. */
#define SWS_H3D_EOF 0x1           /* the body ends with these bytes ... */
#define SWS_H3D_TRAILERS 0x2      /* ... and trailers follow (the trailers callback) */
#define SWS_H3D_DEFERRED (-1)     /* nothing ready yet: sws_h3sess_resume when there is */
#define SWS_H3D_FAIL (-2)         /* the stream cannot go on: it is reset (H3_INTERNAL_ERROR) */

typedef struct {
    const uint8_t *base;
    size_t len;
} sws_h3vec_t;

typedef struct sws_h3sess sws_h3sess_t;

/* What the session tells its owner: `u` is sws_h3sess_init's, `su` a
 * request stream's (begin's return). Every callback runs inside a call
 * of the owner's on the session. A negative return from the int ones is a
 * connection error (H3_INTERNAL_ERROR). */
typedef struct {
    /* A request's HEADERS begins on stream id: the owner's stream, or NULL
     * (out of memory: a connection error). */
    void *(*begin)(void *u, int64_t id);
    /* A request field (checked: lowercase, no connection-specific field,
     * pseudo-headers known, once, before the others). */
    int (*header)(void *u, void *su, const uint8_t *name, size_t nl, const uint8_t *value,
                  size_t vl);
    /* The field section was over what we take: the fields after the
     * limit were not passed (answer 431). */
    void (*too_big)(void *u, void *su);
    /* The request's fields ended and were well formed; fin: no body. */
    void (*request)(void *u, void *su, int fin);
    /* Request body bytes; the owner gives the flow-control credit back
     * (extend_max_stream_offset) when it has taken them. */
    int (*data)(void *u, void *su, const uint8_t *p, size_t n);
    /* The client ended its side. */
    void (*end_stream)(void *u, void *su);
    /* Input bytes held while the stream's section was blocked were read
     * now, n of them not body: the owner gives their credit back. */
    void (*consume)(void *u, int64_t id, size_t n);
    /* The stream closed; the session forgets su. */
    void (*close)(void *u, void *su, int64_t id, uint64_t code);
    /* n bytes of su's body were acknowledged (in order). */
    void (*acked)(void *u, void *su, uint64_t n);
    /* The next body bytes of su: up to nvec vectors, their bytes the
     * owner's until acked; flags SWS_H3D_*. Returns the vectors given (0
     * with SWS_H3D_EOF: the body ended), SWS_H3D_DEFERRED or SWS_H3D_FAIL. */
    ssize_t (*read_data)(void *u, void *su, sws_h3vec_t *vec, size_t nvec, uint32_t *flags);
    /* The body's last bytes went with SWS_H3D_TRAILERS: submit the
     * trailers now (sws_h3sess_trailers), which end the stream. */
    void (*trailers)(void *u, void *su, int64_t id);
    /* Tell QUIC: stop reading stream id / reset its sending side, with code. */
    void (*stop_sending)(void *u, int64_t id, uint64_t code);
    void (*reset_stream)(void *u, int64_t id, uint64_t code);
} sws_h3cb_t;

typedef struct h3out h3out_t;
typedef struct sws_h3st sws_h3st_t;

/* What the sessions of one thread (a worker's) share: output runs (a few
 * per answer: its HEADERS, each DATA frame's header, each piece of body)
 * and stream records kept for the next streams, more at once than
 * malloc's per-size cache holds (at most max_runs and max_sts), and the
 * QPACK encoder's memo (NULL: none; freed with the pool). */
typedef struct sws_h3pool {
    h3out_t *runs;
    sws_h3st_t *sts;
    uint32_t n_runs, max_runs, n_sts, max_sts;
    sws_qpack_memo_t *memo;
    /* a HEADERS frame is encoded here, then copied into its run (or into
     * its own allocation when longer than a run holds): the encoder's
     * bound is about three times what a usual answer's head takes */
    uint8_t hbuf[2048];
} sws_h3pool_t;

SWS_INTERNAL void sws_h3pool_free(sws_h3pool_t *p);

typedef struct {
    uint32_t qpack_table;      /* SETTINGS_QPACK_MAX_TABLE_CAPACITY */
    uint32_t qpack_blocked;    /* SETTINGS_QPACK_BLOCKED_STREAMS */
    uint64_t max_field_section; /* SETTINGS_MAX_FIELD_SECTION_SIZE, and the HEADERS we take */
    sws_h3pool_t *pool;        /* NULL: malloc and free each */
    uint64_t max_requests;     /* request streams the client may open at first (QUIC's
                                  initial_max_streams_bidi), one more for each closed
                                  (the owner extends the limit so): a PRIORITY_UPDATE
                                  beyond is H3_ID_ERROR (RFC 9218 7.2); 0: unchecked */
} sws_h3sess_conf_t;

struct sws_h3sess {
    const sws_h3cb_t *cb;
    void *u;
    sws_h3sess_conf_t conf;
    sws_qpack_dec_t dec;
    sws_qpack_enc_t enc;
    sws_h3st_t **tab;          /* every stream by id: chains */
    uint32_t tab_mask, n_st;
    sws_h3st_t *reqs, *reqs_tail; /* request streams, in the scheduler's order (h3sess.c) */
    sws_h3st_t *ctrl, *qenc, *qdec; /* ours */
    sws_h3st_t *offered;       /* the stream writev last offered its end */
    int64_t peer_ctrl, peer_qenc, peer_qdec; /* the client's (-1: not yet) */
    int64_t max_bidi;          /* the highest request stream the client opened (-1: none) */
    int64_t goaway_id;         /* after our GOAWAY: streams from it are refused */
    uint32_t n_blocked;        /* request streams waiting for QPACK inserts */
    uint64_t seq;              /* round robin among incremental streams */
    uint64_t req_closed;       /* request streams closed (conf.max_requests) */
    sws_pri_early_t early_pri; /* PRIORITY_UPDATEs that overtook their requests (RFC 9218 7) */
    int fatal;                 /* a connection error: its code */
    unsigned settings_in : 1,  /* the client's SETTINGS came */
        goaway_queued : 1;
};

SWS_INTERNAL int sws_h3sess_init(sws_h3sess_t *s, const sws_h3sess_conf_t *conf,
                                 const sws_h3cb_t *cb, void *u);
SWS_INTERNAL void sws_h3sess_free(sws_h3sess_t *s);
/* Our three unidirectional streams, opened by the owner: control (with
 * our SETTINGS), QPACK encoder and decoder. 0, or -1 (out of memory). */
SWS_INTERNAL int sws_h3sess_bind(sws_h3sess_t *s, int64_t ctrl, int64_t qenc, int64_t qdec);

/* Input: stream id's next bytes (fin: its end). Returns the bytes the
 * owner gives credit back for now (all but body bytes and bytes held),
 * or -code for a connection error. */
SWS_INTERNAL int64_t sws_h3sess_read(sws_h3sess_t *s, int64_t id, const uint8_t *p, size_t n,
                                     int fin);
/* The owner reads nothing more of id (it reset it): input is dropped. */
SWS_INTERNAL void sws_h3sess_shutdown_read(sws_h3sess_t *s, int64_t id);
/* ngtcp2's stream_close: close, then forgot. 0, or -code (a critical stream). */
SWS_INTERNAL int sws_h3sess_close_stream(sws_h3sess_t *s, int64_t id, uint64_t code);

/* Output: the next stream to write and up to nvec vectors of its bytes
 * (*fin: they end it). Returns the vectors (0 and *id -1: nothing to
 * write; 0 with *fin: only the end), or -code. */
SWS_INTERNAL ssize_t sws_h3sess_writev(sws_h3sess_t *s, int64_t *id, int *fin, sws_h3vec_t *vec,
                                       size_t nvec);
/* QUIC took n bytes of what writev gave for id (and its fin with them all). */
SWS_INTERNAL void sws_h3sess_written(sws_h3sess_t *s, int64_t id, size_t n);
/* The peer acknowledged id's next n bytes. */
SWS_INTERNAL void sws_h3sess_acked_bytes(sws_h3sess_t *s, int64_t id, uint64_t n);
/* QUIC's flow control blocks id / lets it go on; its sending side is shut. */
SWS_INTERNAL void sws_h3sess_block(sws_h3sess_t *s, int64_t id);
SWS_INTERNAL void sws_h3sess_unblock(sws_h3sess_t *s, int64_t id);
SWS_INTERNAL void sws_h3sess_shut_wr(sws_h3sess_t *s, int64_t id);

/* Submitting on request stream id (encoded now, written by writev). 0, or
 * -1 (no such stream, its final head went, out of memory). */
SWS_INTERNAL int sws_h3sess_response(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f,
                                     size_t n, int body);
SWS_INTERNAL int sws_h3sess_info(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f,
                                 size_t n);
SWS_INTERNAL int sws_h3sess_trailers(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f,
                                     size_t n);
/* The body has more now (after read_data said DEFERRED). */
SWS_INTERNAL void sws_h3sess_resume(sws_h3sess_t *s, int64_t id);
/* RFC 9218: the stream's urgency (0..7) and incremental flag. */
SWS_INTERNAL void sws_h3sess_set_priority(sws_h3sess_t *s, int64_t id, int urgency, int inc);
SWS_INTERNAL int sws_h3sess_get_priority(const sws_h3sess_t *s, int64_t id, int *urgency,
                                         int *inc);
SWS_INTERNAL void sws_h3sess_set_user(sws_h3sess_t *s, int64_t id, void *su);
/* GOAWAY (RFC 9114 5.2): requests on streams above the last we opened are
 * refused from now on. */
SWS_INTERNAL int sws_h3sess_goaway(sws_h3sess_t *s);
/* The first GOAWAY of a graceful shutdown that refuses nothing yet (the
 * largest client stream ID, RFC 9114 5.2): for a connection whose client
 * sends its first requests as its handshake ends, after the stop began. */
SWS_INTERNAL int sws_h3sess_goaway_soon(sws_h3sess_t *s);

#endif
