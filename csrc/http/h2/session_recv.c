/* The HTTP/2 session's input (contract in session.h): the preface, frames
 * checked against RFC 9113 §4-§6 (and RFC 9218 §7.1's PRIORITY_UPDATE),
 * header blocks gathered and decoded, requests checked against §8.2 and
 * §8.3. Whole frames only: the caller keeps a partial one for later. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "http/h2/session.h"

/* What a header block being gathered is for. */
enum {
    BLK_REQUEST = 1,  /* a new stream's request */
    BLK_TRAILERS,     /* the request's trailer section */
    BLK_DISCARD,      /* decoded for HPACK's state, then dropped */
    BLK_REFUSE,       /* decoded, then RST_STREAM REFUSED_STREAM (no stream kept) */
};

typedef struct {
    sws_h2sess_t *s;
    sws_h2st_t *st;            /* NULL: nothing is passed on */
    int trailers;
    int failed;                /* the owner's header callback refused: INTERNAL_ERROR */
} blk_ctx_t;

/* One field, checked; passed on when the block is a request's. 1: stop
 * passing fields on (the block is still decoded to its end). */
static int field(void *ctx, const sws_hpack_field_t *f)
{
    blk_ctx_t *b = ctx;
    sws_h2st_t *st = b->st;
    if (!st)
        return 1;
    if (sws_reqcheck_field(&st->chk, f->name, f->nl, f->value, f->vl, b->trailers,
                           b->s->connect_proto) < 0) {
        st->malformed = 1;
        b->st = NULL;
        return 1;
    }
    if (b->trailers) /* read, checked, not kept */
        return 0;
    if (b->s->cb->header(b->s->u, st->su, f->name, f->nl, f->value, f->vl) < 0) {
        b->failed = 1;
        b->st = NULL;
        return 1;
    }
    return 0;
}

/* The client ended its side of st: closed if ours ended too. */
static void remote_end(sws_h2sess_t *s, sws_h2st_t *st)
{
    int32_t id = st->id;
    if (st->chk.cl_known && st->cl_got != st->chk.cl) { /* §8.1.1: malformed */
        sws_h2sess_rst(s, id, H2_PROTOCOL_ERROR);
        return;
    }
    if (st->state != ST_HALF_LOCAL) {
        st->state = ST_HALF_REMOTE;
        if (s->cb->end_stream)
            s->cb->end_stream(s->u, st->su);
        return;
    }
    if (s->cb->end_stream)
        s->cb->end_stream(s->u, st->su);
    if ((st = sws_h2sess_stream(s, id)) && !st->rst_queued)
        h2st_close(s, st, H2_NO_ERROR, CLOSED_BOTH);
}

/* The header block is whole: decoded (always: HPACK's state is the
 * connection's), then acted on. */
static void block_end(sws_h2sess_t *s, const uint8_t *p, size_t n)
{
    int32_t id = s->blk_id;
    int kind = s->blk_kind, end = s->blk_flags & H2_F_END_STREAM;
    sws_h2st_t *st = kind == BLK_REQUEST || kind == BLK_TRAILERS ? sws_h2sess_stream(s, id) : NULL;
    blk_ctx_t b = {s, st, kind == BLK_TRAILERS, 0};
    if (st && st->malformed)
        b.st = NULL;
    s->blk_id = 0;
    s->blk_len = 0;
    int rc = sws_hpack_decode(&s->dec, p, n, (size_t)-1, field, &b);
    if (rc == SWS_HPACK_ERR) {
        h2_conn_error(s, H2_COMPRESSION_ERROR, "a header block HPACK cannot decode");
        return;
    }
    switch (kind) {
    case BLK_REFUSE:
        h2_stream_error(s, NULL, id, H2_REFUSED_STREAM);
        return;
    case BLK_DISCARD:
        return;
    }
    if (!st)
        return;
    /* a field over SWS_HPACK_FIELD_MAX in a request (the list limit is
     * the caller's, counted in header): the caller answers 431 */
    int too_big = rc == SWS_HPACK_TOO_BIG && kind == BLK_REQUEST && s->cb->too_big;
    if (b.failed || (rc != SWS_HPACK_OK && !too_big)) {
        sws_h2sess_rst(s, id, H2_INTERNAL_ERROR);
        return;
    }
    if (st->malformed || (kind == BLK_TRAILERS && !end) || (kind == BLK_REQUEST && !sws_reqcheck_pseudo_ok(&st->chk))) {
        sws_h2sess_rst(s, id, H2_PROTOCOL_ERROR);
        return;
    }
    if (kind == BLK_TRAILERS) {
        remote_end(s, st);
        return;
    }
    if (end) {
        if (st->chk.cl_known && st->chk.cl) {
            sws_h2sess_rst(s, id, H2_PROTOCOL_ERROR);
            return;
        }
        st->state = ST_HALF_REMOTE;
    }
    if (too_big)
        s->cb->too_big(s->u, st->su);
    s->cb->request(s->u, st->su, end);
}

/* Adds a fragment to the block being gathered. */
static int blk_add(sws_h2sess_t *s, const uint8_t *p, size_t n)
{
    if (!n)
        return 0;
    if (s->blk_len + n > s->blk_cap) {
        size_t cap = s->blk_cap ? s->blk_cap * 2 : 4096;
        while (cap < s->blk_len + n)
            cap *= 2;
        uint8_t *nb = realloc(s->blk, cap);
        if (!nb) {
            h2_conn_error(s, H2_INTERNAL_ERROR, "out of memory for a header block");
            return -1;
        }
        s->blk = nb;
        s->blk_cap = cap;
    }
    memcpy(s->blk + s->blk_len, p, n);
    s->blk_len += n;
    return 0;
}

/* ---- frames --------------------------------------------------------------------------------- */

/* A frame's payload without its padding (RFC 9113 §6.1): -1 when the pad
 * length does not fit (a connection error PROTOCOL_ERROR). */
static int unpad(sws_h2sess_t *s, uint8_t flags, const uint8_t **p, size_t *n, size_t *pad)
{
    *pad = 0;
    if (!(flags & H2_F_PADDED))
        return 0;
    if (*n < 1 || (size_t)(*p)[0] >= *n) {
        h2_conn_error(s, H2_PROTOCOL_ERROR, "padding longer than the frame");
        return -1;
    }
    *pad = (size_t)(*p)[0] + 1;
    *n -= *pad;
    (*p)++;
    return 0;
}

static void on_headers(sws_h2sess_t *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    size_t pad;
    if (id == 0 || !(id & 1)) {
        h2_conn_error(s, H2_PROTOCOL_ERROR, "HEADERS on stream 0 or on an even stream");
        return;
    }
    if (unpad(s, flags, &p, &n, &pad) < 0)
        return;
    int self_dep = 0;
    if (flags & H2_F_PRIORITY) { /* RFC 7540's priority: read past, but for its one rule */
        if (n < 5) {
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "HEADERS too short for its priority");
            return;
        }
        self_dep = (int32_t)(h2_get32(p) & 0x7fffffff) == id;
        p += 5;
        n -= 5;
    }
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    int kind;
    if (self_dep) { /* RFC 7540 §5.3.1, as a connection error (§5.4) */
        h2_conn_error(s, H2_PROTOCOL_ERROR, "HEADERS that depend on their own stream");
        return;
    }
    if (st && st->state == ST_HALF_REMOTE && !st->rst_queued) {
        /* §5.1: half-closed (remote) takes no more than WINDOW_UPDATE,
         * PRIORITY and RST_STREAM; a stream error, ended as the
         * connection's (§5.4) */
        h2_conn_error(s, H2_STREAM_CLOSED, "HEADERS on a half-closed stream");
        return;
    }
    if (st) {
        kind = st->rst_queued ? BLK_DISCARD : BLK_TRAILERS;
    } else if (id <= s->max_id) {
        int how = h2_closed_how(s, id);
        if (how == CLOSED_BY_US) { /* crossed our RST_STREAM */
            kind = BLK_DISCARD;
        } else if (id >= s->skip_lo && id <= s->skip_hi && how == CLOSED_NONE) {
            /* an id the client skipped: a new stream below the highest
             * one (§5.1.1) */
            h2_conn_error(s, H2_PROTOCOL_ERROR, "HEADERS open a stream below a newer one");
            return;
        } else {
            h2_conn_error(s, H2_STREAM_CLOSED, "HEADERS on a closed stream");
            return;
        }
    } else {
        if (id - s->max_id > 2) {
            s->skip_lo = s->max_id + 1;
            s->skip_hi = id - 1;
        }
        s->max_id = id;
        if (s->goaway_sent && id > s->goaway_last) {
            kind = BLK_DISCARD; /* after our GOAWAY: not taken, the client retries elsewhere */
        } else if (s->n_open >= s->conf.max_streams) {
            /* §5.1.2: REFUSED_STREAM while the client may not have seen
             * the limit yet (a stream error it may retry), PROTOCOL_ERROR
             * once it acknowledged our SETTINGS */
            if (s->settings_acked) {
                h2_conn_error(s, H2_PROTOCOL_ERROR, "more streams than SETTINGS_MAX_CONCURRENT_STREAMS");
                return;
            }
            kind = BLK_REFUSE;
        } else if (!(st = h2st_open(s, id))) {
            kind = BLK_REFUSE;
        } else {
            kind = BLK_REQUEST;
            s->last_proc = id;
            if (s->cb->begin(s->u, id) < 0) {
                sws_h2sess_rst(s, id, H2_INTERNAL_ERROR);
                kind = BLK_DISCARD;
            }
        }
    }
    s->blk_id = id;
    s->blk_flags = flags;
    s->blk_kind = (uint8_t)kind;
    s->blk_frames = 0;
    if (flags & H2_F_END_HEADERS)
        block_end(s, p, n); /* the whole block in one frame: decoded in place */
    else
        blk_add(s, p, n);
}

static void on_continuation(sws_h2sess_t *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (!s->blk_id || id != s->blk_id) {
        h2_conn_error(s, H2_PROTOCOL_ERROR, "CONTINUATION without a header block to continue");
        return;
    }
    if (++s->blk_frames > s->conf.max_continuations) { /* CVE-2024-27316 */
        h2_conn_error(s, H2_ENHANCE_YOUR_CALM, "too many CONTINUATION frames");
        return;
    }
    if (blk_add(s, p, n) < 0)
        return;
    if (flags & H2_F_END_HEADERS)
        block_end(s, s->blk_len ? s->blk : (const uint8_t *)"", s->blk_len); /* empty: blk NULL */
}

static void on_data(sws_h2sess_t *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    size_t len = n, pad;
    if (id == 0) {
        h2_conn_error(s, H2_PROTOCOL_ERROR, "DATA on stream 0");
        return;
    }
    if (unpad(s, flags, &p, &n, &pad) < 0)
        return;
    if (len > (size_t)(s->recv_avail > 0 ? s->recv_avail : 0)) {
        h2_conn_error(s, H2_FLOW_CONTROL_ERROR, "DATA beyond the connection's window");
        return;
    }
    s->recv_avail -= (int32_t)len;
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st || st->state == ST_HALF_REMOTE || st->rst_queued) {
        sws_h2sess_consume(s, 0, len); /* read past: the connection's window only */
        if (st && st->state == ST_HALF_REMOTE && !st->rst_queued)
            h2_conn_error(s, H2_STREAM_CLOSED, "DATA on a half-closed stream"); /* §5.1, §5.4 */
        else if (!st && (id > s->max_id || !(id & 1))) /* idle (§5.1): even ids are ours, never opened */
            h2_conn_error(s, H2_PROTOCOL_ERROR, "DATA on an idle stream");
        else if (!st && h2_closed_how(s, id) != CLOSED_BY_US)
            h2_stream_error(s, NULL, id, H2_STREAM_CLOSED); /* ended or reset by the client */
        return;
    }
    if (len > (size_t)(st->recv_avail > 0 ? st->recv_avail : 0)) {
        sws_h2sess_consume(s, 0, len);
        sws_h2sess_rst(s, id, H2_FLOW_CONTROL_ERROR);
        return;
    }
    st->recv_avail -= (int32_t)len;
    if (pad)
        sws_h2sess_consume(s, id, pad); /* the padding is nobody's to take */
    st->cl_got += n;
    if (st->chk.cl_known && st->cl_got > st->chk.cl) { /* §8.1.1: more than content-length */
        sws_h2sess_consume(s, 0, n);
        sws_h2sess_rst(s, id, H2_PROTOCOL_ERROR);
        return;
    }
    if (n && s->cb->data(s->u, st->su, id, p, n) < 0) {
        sws_h2sess_rst(s, id, H2_INTERNAL_ERROR);
        return;
    }
    if ((flags & H2_F_END_STREAM) && (st = sws_h2sess_stream(s, id)) && !st->rst_queued)
        remote_end(s, st);
}

static void on_settings(sws_h2sess_t *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (id != 0) {
        h2_conn_error(s, H2_PROTOCOL_ERROR, "SETTINGS on a stream");
        return;
    }
    if (flags & H2_F_ACK) {
        if (n) {
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload");
        } else if (!s->settings_acked) {
            s->settings_acked = 1;
            for (sws_h2st_t *st = s->all; st; st = st->next) /* our smaller window, now */
                if (st->pre_ack) {
                    st->recv_avail -= (int32_t)(H2_DEFAULT_WINDOW - s->conf.stream_window);
                    st->pre_ack = 0;
                }
            if (s->conf.header_table < SWS_HPACK_DEFAULT_TABLE) /* our table, in force now */
                sws_hpack_dec_set_limit(&s->dec, s->conf.header_table);
        }
        return;
    }
    if (n % 6) {
        h2_conn_error(s, H2_FRAME_SIZE_ERROR, "SETTINGS of a length not a multiple of 6");
        return;
    }
    for (; n; p += 6, n -= 6) {
        uint16_t k = (uint16_t)(p[0] << 8 | p[1]);
        uint32_t v = h2_get32(p + 2);
        switch (k) {
        case H2_SET_HEADER_TABLE_SIZE:
            sws_hpack_enc_peer_max(&s->enc, v);
            break;
        case H2_SET_ENABLE_PUSH:
        case H2_SET_ENABLE_CONNECT_PROTOCOL:
        case H2_SET_NO_RFC7540_PRIORITIES:
            if (v > 1) {
                h2_conn_error(s, H2_PROTOCOL_ERROR, "a SETTINGS flag other than 0 or 1");
                return;
            }
            break;
        case H2_SET_INITIAL_WINDOW_SIZE: {
            if (v > H2_WINDOW_MAX) {
                h2_conn_error(s, H2_FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1");
                return;
            }
            int64_t d = (int64_t)v - s->peer_window; /* §6.9.2: every stream's window moves */
            for (sws_h2st_t *st = s->all; st; st = st->next) {
                st->send_win += d;
                if (st->send_win > H2_WINDOW_MAX) {
                    h2_conn_error(s, H2_FLOW_CONTROL_ERROR, "a stream window over 2^31-1");
                    return;
                }
            }
            s->peer_window = v;
            break;
        }
        case H2_SET_MAX_FRAME_SIZE:
            if (v < H2_FRAME_MAX || v > 0xffffff) {
                h2_conn_error(s, H2_PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
                return;
            }
            s->peer_frame = v;
            break;
        default: /* MAX_CONCURRENT_STREAMS (we push nothing), MAX_HEADER_LIST_SIZE, unknown */
            break;
        }
    }
    if (++s->acks > SWS_H2_ACKS_MAX) { /* a client that does not read what it asks for */
        h2_conn_error(s, H2_ENHANCE_YOUR_CALM, "too many frames to acknowledge (flood)");
        return;
    }
    h2_frame_out(s, H2_SETTINGS, H2_F_ACK, 0, NULL, 0);
}

static void on_window_update(sws_h2sess_t *s, int32_t id, const uint8_t *p, size_t n)
{
    if (n != 4) {
        h2_conn_error(s, H2_FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes long");
        return;
    }
    uint32_t inc = h2_get32(p) & 0x7fffffff;
    if (id == 0) {
        if (!inc)
            h2_conn_error(s, H2_PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
        else if (s->send_win + inc > H2_WINDOW_MAX)
            h2_conn_error(s, H2_FLOW_CONTROL_ERROR, "the connection's window over 2^31-1");
        else
            s->send_win += inc;
        return;
    }
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st) {
        if (id > s->max_id)
            h2_conn_error(s, H2_PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
        return; /* closed: it may have crossed our END_STREAM */
    }
    if (!inc) /* a stream error, ended as the connection's (§5.4) */
        h2_conn_error(s, H2_PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on a stream");
    else if (st->send_win + inc > H2_WINDOW_MAX)
        sws_h2sess_rst(s, id, H2_FLOW_CONTROL_ERROR);
    else
        st->send_win += inc;
}

static void on_frame(sws_h2sess_t *s, uint8_t type, uint8_t flags, int32_t id, const uint8_t *p,
                     size_t n)
{
    switch (type) {
    case H2_DATA:
        on_data(s, flags, id, p, n);
        return;
    case H2_HEADERS:
        on_headers(s, flags, id, p, n);
        return;
    case H2_CONTINUATION:
        on_continuation(s, flags, id, p, n);
        return;
    case H2_SETTINGS:
        on_settings(s, flags, id, p, n);
        return;
    case H2_WINDOW_UPDATE:
        on_window_update(s, id, p, n);
        return;
    case H2_PRIORITY:
        if (id == 0) {
            h2_conn_error(s, H2_PROTOCOL_ERROR, "PRIORITY on stream 0");
        } else if (n != 5) { /* a stream error, ended as the connection's (§5.4) */
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "PRIORITY not 5 bytes long");
        } else if ((int32_t)(h2_get32(p) & 0x7fffffff) == id) { /* RFC 7540 §5.3.1 */
            h2_conn_error(s, H2_PROTOCOL_ERROR, "PRIORITY that depends on its own stream");
        }
        return; /* otherwise RFC 7540's priorities are read past (RFC 9113 §5.3.2) */
    case H2_RST_STREAM: {
        if (id == 0) {
            h2_conn_error(s, H2_PROTOCOL_ERROR, "RST_STREAM on stream 0");
            return;
        }
        if (n != 4) {
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes long");
            return;
        }
        sws_h2st_t *st = sws_h2sess_stream(s, id);
        if (st)
            h2st_close(s, st, h2_get32(p), CLOSED_BY_PEER);
        else if (id > s->max_id)
            h2_conn_error(s, H2_PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        return;
    }
    case H2_PING:
        if (id != 0) {
            h2_conn_error(s, H2_PROTOCOL_ERROR, "PING on a stream");
        } else if (n != 8) {
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "PING not 8 bytes long");
        } else if (flags & H2_F_ACK) {
            if (s->cb->ping_ack)
                s->cb->ping_ack(s->u, p);
        } else if (++s->acks > SWS_H2_ACKS_MAX) {
            h2_conn_error(s, H2_ENHANCE_YOUR_CALM, "too many frames to acknowledge (flood)");
        } else {
            h2_frame_out(s, H2_PING, H2_F_ACK, 0, p, 8);
        }
        return;
    case H2_GOAWAY:
        if (id != 0)
            h2_conn_error(s, H2_PROTOCOL_ERROR, "GOAWAY on a stream");
        else if (n < 8)
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes");
        else
            s->peer_goaway = 1; /* the streams it has go on; no new ones come */
        return;
    case H2_PUSH_PROMISE:
        h2_conn_error(s, H2_PROTOCOL_ERROR, "PUSH_PROMISE from a client");
        return;
    case H2_PRIORITY_UPDATE: {
        if (id != 0) {
            h2_conn_error(s, H2_PROTOCOL_ERROR, "PRIORITY_UPDATE on a stream");
            return;
        }
        if (n < 4) {
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "PRIORITY_UPDATE shorter than 4 bytes");
            return;
        }
        int32_t pid = (int32_t)(h2_get32(p) & 0x7fffffff);
        if (pid == 0 || !(pid & 1)) { /* RFC 9218 §7.1: a stream a client could open */
            h2_conn_error(s, H2_PROTOCOL_ERROR, "PRIORITY_UPDATE of stream 0 or a server stream");
            return;
        }
        sws_h2st_t *st = sws_h2sess_stream(s, pid);
        if (s->cb->priority && (st || pid > s->max_id))
            s->cb->priority(s->u, st ? st->su : NULL, pid, p + 4, n - 4);
        return;
    }
    default: /* extensions we do not know are read past (§5.5) */
        return;
    }
}

ssize_t sws_h2sess_recv(sws_h2sess_t *s, const uint8_t *p, size_t n)
{
    size_t off = 0;
    if (s->fatal)
        return (ssize_t)n;
    if (s->preface == 0) {
        size_t k = n < H2_PREFACE_LEN ? n : H2_PREFACE_LEN;
        if (memcmp(p, H2_PREFACE, k) != 0)
            return -1;
        if (n < H2_PREFACE_LEN)
            return 0;
        off = H2_PREFACE_LEN;
        s->preface = 1;
    }
    while (!s->fatal && n - off >= 9) {
        const uint8_t *h = p + off;
        uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
        uint8_t type = h[3], flags = h[4];
        int32_t id = (int32_t)(h2_get32(h + 5) & 0x7fffffff);
        if (len > H2_FRAME_MAX) { /* §4.2: over the SETTINGS_MAX_FRAME_SIZE we keep */
            h2_conn_error(s, H2_FRAME_SIZE_ERROR, "a frame over 16384 bytes");
            break;
        }
        if (n - off < 9 + (size_t)len)
            break;
        off += 9 + len;
        if (s->preface == 1) { /* §3.4: the client's preface ends with SETTINGS */
            if (type != H2_SETTINGS || (flags & H2_F_ACK)) {
                h2_conn_error(s, H2_PROTOCOL_ERROR, "the preface is not followed by SETTINGS");
                break;
            }
            s->preface = 2;
        }
        if (s->blk_id && type != H2_CONTINUATION) { /* §6.10 */
            h2_conn_error(s, H2_PROTOCOL_ERROR, "a frame inside a header block");
            break;
        }
        if (s->cb->frame && s->cb->frame(s->u, type, flags, id, len) < 0)
            break;
        if (s->fatal)
            break;
        on_frame(s, type, flags, id, h + 9, len);
    }
    return s->fatal ? (ssize_t)n : (ssize_t)off;
}

/* A header block has begun and not ended, or the input kept for later
 * starts one: header_timeout's business, not keepalive_timeout's. */
int sws_h2sess_in_block(const sws_h2sess_t *s, const uint8_t *rest, size_t n)
{
    return s->blk_id || (n >= 4 && (rest[3] == H2_HEADERS || rest[3] == H2_CONTINUATION));
}
