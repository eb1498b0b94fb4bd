/* What h3sess.c (streams, output) and h3sess_recv.c (input) share. */
#ifndef SCALWS_H3_SESS_INT_H
#define SCALWS_H3_SESS_INT_H

#include "http/h3/h3sess.h"
#include "http/reqcheck.h"

/* Frame types (RFC 9114 7.2; RFC 9218 7.2). */
enum {
    F_DATA = 0x00, F_HEADERS = 0x01, F_CANCEL_PUSH = 0x03, F_SETTINGS = 0x04,
    F_PUSH_PROMISE = 0x05, F_GOAWAY = 0x07, F_MAX_PUSH_ID = 0x0d,
};
#define F_PRIORITY_UPDATE_REQ 0xf0700 /* the push one (0xf0701) is an unknown frame to us */

/* Unidirectional stream types (RFC 9114 6.2; RFC 9204 4.2). */
enum { U_CONTROL = 0x00, U_PUSH = 0x01, U_QENC = 0x02, U_QDEC = 0x03 };

/* Settings (RFC 9114 7.2.4.1; RFC 9204 5). */
enum {
    SET_QPACK_MAX_TABLE_CAPACITY = 0x01, SET_MAX_FIELD_SECTION_SIZE = 0x06,
    SET_QPACK_BLOCKED_STREAMS = 0x07,
};

/* What a stream is. */
enum { K_REQUEST, K_UNI_NEW, K_CONTROL, K_QENC, K_QDEC, K_IGNORED, K_OURS };

/* A run of a stream's outgoing bytes. */
#define H3_RUN_INLINE 120      /* a HEADERS frame this long goes in the run itself */
struct h3out {
    h3out_t *next;
    const uint8_t *p;
    size_t len;
    uint8_t *own;              /* freed once acknowledged (NULL: the owner's bytes, or inl) */
    uint8_t body;              /* the owner's body bytes: acked() counts them */
    uint8_t inl[H3_RUN_INLINE]; /* a DATA frame's header, or a short HEADERS frame */
};

struct sws_h3st {
    sws_h3st_t *hnext;         /* hash chain */
    sws_h3st_t *prev, *next;   /* s->reqs */
    int64_t id;
    void *su;
    uint8_t kind;
    /* input: the frame being read (request and control streams) */
    uint8_t phase;             /* request: 0 before HEADERS, 1 after, 2 after trailers */
    uint8_t hd[16], hdlen;     /* a frame header's bytes (two varints) being gathered */
    uint64_t ftype, flen, fgot;
    int in_frame;              /* the header is read: fgot of flen payload bytes so far */
    uint8_t *blk;              /* a HEADERS payload being gathered */
    size_t blk_len, blk_cap;
    uint8_t *held;             /* input kept while the section waits for QPACK inserts */
    size_t held_len, held_cap;
    int held_fin;
    uint64_t body_got;         /* DATA bytes read (chk.cl: content-length) */
    sws_reqcheck_t chk;        /* what the request's fields said (http/reqcheck.h) */
    /* output */
    h3out_t *oh, *ot;          /* the runs not acknowledged, in order */
    h3out_t *ow;               /* the first run not all written ... */
    size_t ow_off;             /* ... and how much of it was */
    uint64_t unwritten;
    uint64_t seq;
    uint8_t urgency;
    unsigned inc : 1,
        blocked_q : 1,         /* the section waits for QPACK inserts */
        skip_hd : 1,           /* a HEADERS frame over what we gather: skipped, 431 */
        read_shut : 1,         /* input dropped */
        fin_in : 1,            /* the client's end came */
        final_sent : 1,        /* the final head is queued */
        body : 1,              /* ... and read_data gives a body */
        eof : 1,               /* read_data said EOF */
        deferred : 1,          /* read_data said DEFERRED */
        fin_due : 1,           /* the stream ends after its last run */
        fin_offered : 1,       /* writev gave the end */
        fin_out : 1,           /* QUIC took the end */
        wr_blocked : 1,
        wr_shut : 1,
        unlisted : 1,          /* off s->reqs: its output all taken (fin_out) */
        pri_update : 1;        /* a PRIORITY_UPDATE came before HEADERS: their field yields */
};

SWS_INTERNAL sws_h3st_t *h3st_find(const sws_h3sess_t *s, int64_t id);
SWS_INTERNAL sws_h3st_t *h3st_new(sws_h3sess_t *s, int64_t id, uint8_t kind);
/* Back on s->reqs (the scheduler's list, which unblock() walks too): a
 * request stream taken off it once its output was all written, whose
 * trailers then wait for QPACK inserts. */
SWS_INTERNAL void h3st_relist(sws_h3sess_t *s, sws_h3st_t *st);
/* Sets a request stream's priority, and its place on s->reqs with it. */
SWS_INTERNAL void h3st_set_priority(sws_h3sess_t *s, sws_h3st_t *st, int urgency, int inc);
/* Queues bytes (copied) on st's output. 0, or -1. */
SWS_INTERNAL int h3_out_copy(sws_h3sess_t *s, sws_h3st_t *st, const uint8_t *p, size_t n);
/* A stream error: reset both ways, input dropped. */
SWS_INTERNAL void h3_stream_error(sws_h3sess_t *s, sws_h3st_t *st, uint64_t code);
/* A connection error: returns -code, and the session takes nothing more. */
SWS_INTERNAL int h3_conn_error(sws_h3sess_t *s, uint64_t code);

/* QUIC variable-length integers (RFC 9000 16). */
static inline size_t h3_varint_len(uint64_t v)
{
    return v < 64 ? 1 : v < 16384 ? 2 : v < 1073741824 ? 4 : 8;
}

static inline uint8_t *h3_put_varint(uint8_t *o, uint64_t v)
{
    size_t n = h3_varint_len(v);
    for (size_t i = n; i--; v >>= 8)
        o[i] = (uint8_t)v;
    o[0] |= (uint8_t)((n == 1 ? 0 : n == 2 ? 1 : n == 4 ? 2 : 3) << 6);
    return o + n;
}

/* A varint at p[0..n): its length (1, 2, 4, 8), 0 when it is not all
 * there. */
static inline size_t h3_get_varint(const uint8_t *p, size_t n, uint64_t *v)
{
    if (!n)
        return 0;
    size_t len = (size_t)1 << (p[0] >> 6);
    if (n < len)
        return 0;
    uint64_t x = p[0] & 0x3f;
    for (size_t i = 1; i < len; i++)
        x = x << 8 | p[i];
    *v = x;
    return len;
}

#endif
