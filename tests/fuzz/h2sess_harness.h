/*
 * h2sess_harness.h — our HTTP/2 session (csrc/http/h2/session.c,
 * session_recv.c) as a server, with libnghttp2 as the oracle, not the
 * engine (issue 31, point 5). Shared by tests/c/test_h2_oracle.c and
 * tests/fuzz/fuzz_h2sess.c; it links the session, hpack.c and huffman.c
 * alone (no engine) and -lnghttp2.
 *
 * An exchange (hx_t) is our sws_h2sess_t, with a small callback set that
 * records each request and answers it from a plan (hx_plan_t: the request
 * the client sends, the answer we give: an optional 1xx, the final head,
 * a body written through data_read/data_send, trailers), and a peer:
 *
 *  - oracle mode (hx_init): an nghttp2 client session (mem_send and
 *    mem_recv) that submits the plans' requests (bodies through a data
 *    provider, trailers), bytes moved both ways in memory, in chunks a
 *    caller may bound, until both sides are idle (hx_pump). hx_check then
 *    requires, per plan: our header callback saw the client's request
 *    list (names and values, in order), its body whole, its END_STREAM,
 *    and the stream closed with NO_ERROR (CANCEL where the plan resets
 *    it); nghttp2's on_header saw our blocks (1xx, final, trailers) as we
 *    submitted them, in order, with NGHTTP2_NV_FLAG_NO_INDEX exactly on
 *    the fields we flagged SWS_HPACK_NEVER and on set-cookie, cookie,
 *    authorization, proxy-authorization and x-request-id; the body
 *    whole, byte for byte; and over the connection: no nghttp2 error or
 *    invalid-frame callback, no frame nghttp2 would not send, no
 *    RST_STREAM or GOAWAY either way but those a plan asks for (the
 *    client's CANCEL mid-body, our NO_ERROR after a whole answer while
 *    the upload still came, a final GOAWAY NO_ERROR), no error
 *    callback of ours, every PING answered with its payload, and no
 *    stream left open on our side.
 *
 *  - raw mode (hx_init_raw): the client's bytes are given (hx_raw_feed);
 *    no client session can be the judge of what we answer (nghttp2
 *    refuses, as connection errors, HEADERS on streams it never opened
 *    and ACKs of SETTINGS it never sent), so hx_out_check parses every
 *    frame we write and requires: our first frame a SETTINGS; lengths
 *    at most 16384 and right for the type (SETTINGS a multiple of 6, its
 *    ACK empty, PING 8, RST_STREAM 4, WINDOW_UPDATE 4 with an increment
 *    of 1 to 2^31-1, GOAWAY at least 8); only the types and flags a
 *    server sends (no PUSH_PROMISE, no padding); control frames on
 *    stream 0 and stream frames on odd ids; CONTINUATION only inside a
 *    block, on its stream; each header block decoded by nghttp2's HPACK
 *    inflater, told the client's SETTINGS_HEADER_TABLE_SIZE when our ACK
 *    of that SETTINGS goes (as a client applies it), to the list we
 *    submitted next on that stream; DATA only after the final head, the
 *    body's own bytes in order, within the windows the client gave (a
 *    mirror of the client's SETTINGS_INITIAL_WINDOW_SIZE and
 *    WINDOW_UPDATEs, read from the frames the session's frame callback
 *    reports, checked against the same bytes); END_STREAM once, where the
 *    answer ends; nothing on a stream after our RST_STREAM, and nothing
 *    at all after a GOAWAY with an error code.
 */
#ifndef SCALWS_TEST_H2SESS_HARNESS_H
#define SCALWS_TEST_H2SESS_HARNESS_H

#include <nghttp2/nghttp2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/h2/session.h"

/* ---- randomness: the input's bytes, then a generator ------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n, i;
    uint64_t s;
} hx_rng_t;

static uint8_t hx_byte(hx_rng_t *r)
{
    if (r->i < r->n)
        return r->p[r->i++];
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint8_t)((z ^ (z >> 31)) >> 24);
}

/* 0 .. n-1 (one byte for n <= 256). */
static uint32_t hx_below(hx_rng_t *r, uint32_t n)
{
    if (n <= 1)
        return 0;
    if (n <= 256)
        return hx_byte(r) % n;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) /* in order: the same on every compiler */
        v = v << 8 | hx_byte(r);
    return v % n;
}

/* ---- bytes and field lists ------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} hx_buf_t;

static void hx_put(hx_buf_t *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    if (n && s) /* s NULL: room only (the caller writes) */
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

typedef struct {
    sws_hpack_field_t *f;
    size_t n, cap;
} hx_list_t;

static void hl_add(hx_list_t *l, const void *name, size_t nl, const void *value, size_t vl, int flags)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->f = realloc(l->f, l->cap * sizeof *l->f);
        if (!l->f)
            abort();
    }
    uint8_t *m = malloc(nl + vl + 1);
    if (!m)
        abort();
    if (nl)
        memcpy(m, name, nl);
    if (vl)
        memcpy(m + nl, value, vl);
    l->f[l->n++] = (sws_hpack_field_t){m, m + nl, (uint32_t)nl, (uint32_t)vl, (uint8_t)flags};
}

static void hl_free(hx_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free((void *)l->f[i].name);
    free(l->f);
    memset(l, 0, sizeof *l);
}

static int hx_is(const sws_hpack_field_t *f, const char *s)
{
    return f->nl == strlen(s) && memcmp(f->name, s, f->nl) == 0;
}

/* Our encoder's policy: never indexed when flagged or one of these (hpack.h). */
static int hx_never(const sws_hpack_field_t *f)
{
    return (f->flags & SWS_HPACK_NEVER) || hx_is(f, "set-cookie") || hx_is(f, "cookie") ||
           hx_is(f, "authorization") || hx_is(f, "proxy-authorization") || hx_is(f, "x-request-id");
}

/* got equals want: names and values in order; flags (0/1 never indexed)
 * compared against hx_never(want) when never is set. */
static int hl_eq(const hx_list_t *got, const hx_list_t *want, int never, size_t *at)
{
    size_t i;
    for (i = 0; i < got->n && i < want->n; i++) {
        const sws_hpack_field_t *a = &got->f[i], *b = &want->f[i];
        if (a->nl != b->nl || a->vl != b->vl || memcmp(a->name, b->name, a->nl) != 0 ||
            (a->vl && memcmp(a->value, b->value, a->vl) != 0) ||
            (never && (a->flags != 0) != (hx_never(b) != 0)))
            break;
    }
    *at = i;
    return i == got->n && i == want->n;
}

static void hl_print(const char *what, const hx_list_t *l)
{
    fprintf(stderr, "  %s (%zu):", what, l->n);
    for (size_t i = 0; i < l->n && i < 12; i++)
        fprintf(stderr, " %.*s=%.*s%s", (int)(l->f[i].nl < 40 ? l->f[i].nl : 40), l->f[i].name,
                (int)(l->f[i].vl < 24 ? l->f[i].vl : 24), l->f[i].value, l->f[i].flags ? "(N)" : "");
    fputc('\n', stderr);
}

/* A body's byte at offset i: a function of its seed, so nothing is stored. */
static uint8_t hx_body_byte(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed * 40503u;
    return (uint8_t)(x >> 11 ^ x >> 23 ^ i);
}

/* ---- generated header lists -------------------------------------------------------------- */

static const char *const HX_NAMES[] = {
    "content-type", "cache-control", "server", "etag", "vary", "date", "set-cookie",
    "x-request-id", "cookie", "authorization", "location", "last-modified", "link",
    "accept-ranges", "x-frame-options", "via", "age", "expires", "content-language",
    "proxy-authorization", "user-agent", "accept", "accept-encoding", "referer", "x-forwarded-for",
    "content-encoding", "strict-transport-security", "x-a",
};
#define HX_NNAMES (sizeof HX_NAMES / sizeof HX_NAMES[0])

/* Names a generated field may not have (RFC 9113 §8.2.2, and the ones
 * whose values both sides check: content-length is added right instead). */
static int hx_name_bad(const uint8_t *n, size_t nl)
{
    static const char *const bad[] = {"connection", "keep-alive", "proxy-connection",
                                      "transfer-encoding", "upgrade", "te", "content-length",
                                      "host", "priority"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (nl == strlen(bad[i]) && memcmp(n, bad[i], nl) == 0)
            return 1;
    return 0;
}

/* A field name: a known one, or a token of lowercase tchars. */
static size_t hx_gen_name(hx_rng_t *r, uint8_t *out)
{
    static const char tch[] = "abcdefghijklmnopqrstuvwxyz0123456789-abcdefghijklmnopqrstuvwxyz_.!#$%&'*+^`|~";
    size_t nl;
    do {
        if (hx_below(r, 3)) {
            const char *s = HX_NAMES[hx_below(r, HX_NNAMES)];
            nl = strlen(s);
            memcpy(out, s, nl);
        } else {
            nl = 1 + hx_below(r, 24);
            for (size_t i = 0; i < nl; i++)
                out[i] = (uint8_t)tch[hx_below(r, (uint32_t)(i ? sizeof tch - 1 : 36))];
        }
    } while (hx_name_bad(out, nl));
    return nl;
}

/* A field value: Huffman-friendly, printable with inner spaces, obs-text,
 * long (CONTINUATION), or empty; never whitespace at either end, never
 * NUL, CR or LF (RFC 9113 §8.2.1). max bounds a long one. */
static size_t hx_gen_value(hx_rng_t *r, uint8_t *out, size_t max)
{
    static const char huff[] = "abcdefghijklmnopqrstuvwxyz0123456789-/=";
    size_t vl;
    switch (hx_below(r, 8)) {
    case 0:
        return 0;
    case 1: /* long */
        vl = 1000 + hx_below(r, (uint32_t)(max > 1000 ? max - 1000 : 1));
        for (size_t i = 0; i < vl; i++)
            out[i] = (uint8_t)huff[(i * 7 + vl) % (sizeof huff - 1)];
        if (hx_below(r, 2)) /* and not Huffman-friendly */
            for (size_t i = 0; i < vl; i += 3)
                out[i] = (uint8_t)(0x80 + i % 0x7f);
        return vl;
    case 2: /* obs-text and symbols: Huffman longer than raw */
        vl = 1 + hx_below(r, 40);
        for (size_t i = 0; i < vl; i++) {
            uint8_t c = hx_byte(r);
            out[i] = c >= 0x80 ? c : (uint8_t)(0x21 + c % 0x5e);
        }
        return vl;
    case 3:
    case 4: /* printable with inner spaces and tabs */
        vl = 1 + hx_below(r, 60);
        for (size_t i = 0; i < vl; i++) {
            uint8_t c = hx_byte(r) % 0x60;
            out[i] = c == 0x5f ? '\t' : (uint8_t)(0x20 + c);
        }
        break;
    default: /* Huffman-friendly */
        vl = 1 + hx_below(r, 50);
        for (size_t i = 0; i < vl; i++)
            out[i] = (uint8_t)huff[hx_below(r, sizeof huff - 1)];
        return vl;
    }
    while (vl && (out[vl - 1] == ' ' || out[vl - 1] == '\t'))
        vl--;
    if (vl && (out[0] == ' ' || out[0] == '\t'))
        out[0] = 'x';
    return vl;
}

/* n regular fields: generated, some repeated (the same field again, or
 * the same name with another value), some flagged never-indexed. */
static void hx_gen_fields(hx_rng_t *r, hx_list_t *l, size_t n, size_t long_max, int flags_ok)
{
    static uint8_t name[64], value[40000];
    size_t first = l->n;
    for (size_t i = 0; i < n; i++) {
        if (l->n > first && hx_below(r, 6) == 0) { /* repeated */
            const sws_hpack_field_t *f = &l->f[first + hx_below(r, (uint32_t)(l->n - first))];
            size_t nl = f->nl;
            memcpy(name, f->name, nl);
            size_t vl = f->vl;
            if (hx_below(r, 2))
                vl = hx_gen_value(r, value, long_max);
            else
                memcpy(value, f->value, vl);
            hl_add(l, name, nl, value, vl, f->flags);
            continue;
        }
        size_t nl = hx_gen_name(r, name);
        size_t vl = hx_gen_value(r, value, long_max);
        hl_add(l, name, nl, value, vl, flags_ok && hx_below(r, 10) == 0 ? SWS_HPACK_NEVER : 0);
    }
}

/* ---- a plan: one request and its answer ---------------------------------------------------- */

typedef struct hx_plan {
    int32_t id;
    /* the request */
    hx_list_t req;
    size_t rlen;             /* request body bytes */
    uint32_t rseed;
    int rprov;               /* a data provider (a body, maybe empty) */
    int rtrailers;
    hx_list_t rtr;
    size_t roff;             /* the client's provider: bytes given */
    long rst_req_at;         /* >= 0: the client resets (CANCEL) after giving this much body */
    long rst_resp_at;        /* >= 0: ... after receiving this much response body */
    /* the answer */
    int info;                /* a 1xx first */
    hx_list_t inf, resp, str;
    int body;                /* SWS_H2H_BODY */
    size_t slen;
    uint32_t sseed;
    int strailers;
    int early;               /* answered when the head came, before the request body ended */
    int defer;               /* data_read says DEFERRED once */
    int copy;                /* SWS_H2H_COPY */
    int srv_rst;             /* (raw mode) we reset it ourselves when its head comes */
    int stop_upload;         /* once our END_STREAM went, RST_STREAM NO_ERROR if the body is
                              * still coming (RFC 9113 §8.1: an unread upload) */
    /* what our session told us */
    hx_list_t s_req;
    size_t s_got;            /* request body bytes */
    int s_bad;               /* a body byte differed */
    int s_begin, s_request, s_end, s_closed, s_answered, s_sent_end, s_deferred, s_stopped;
    uint32_t s_code;
    size_t s_off;            /* response body bytes handed to data_send */
    /* what nghttp2 told the client */
    hx_list_t c_blk[4];
    int c_nblk;
    size_t c_got;
    int c_bad, c_closed, c_rst, c_rst_due;
    uint32_t c_code;
    /* raw mode: our output, parsed */
    int o_blk;               /* blocks seen */
    size_t o_off;            /* DATA bytes seen */
    int o_end, o_rst, o_final;
    int64_t o_win;           /* the stream's send window, as the client gave it */
} hx_plan_t;

static void hx_plan_free(hx_plan_t *p)
{
    hl_free(&p->req);
    hl_free(&p->rtr);
    hl_free(&p->inf);
    hl_free(&p->resp);
    hl_free(&p->str);
    hl_free(&p->s_req);
    for (int i = 0; i < 4; i++)
        hl_free(&p->c_blk[i]);
    free(p);
}

/* A plan from r: the request (method, path, fields, maybe content-length,
 * a body of one of sizes[] and trailers) and the answer. */
typedef struct {
    const size_t *rsizes, *ssizes;   /* body sizes to pick from */
    size_t n_rsizes, n_ssizes;
    size_t max_fields, long_max;
} hx_gen_t;

static hx_plan_t *hx_plan_gen(hx_rng_t *r, const hx_gen_t *g)
{
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "PATCH"};
    static const char *const statuses[] = {"200", "201", "404", "500", "299", "203"};
    hx_plan_t *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->rst_req_at = p->rst_resp_at = -1;
    /* request */
    int m = (int)hx_below(r, 5);
    p->rprov = m != 0 && hx_below(r, 4) != 0;
    p->rlen = p->rprov ? g->rsizes[hx_below(r, (uint32_t)g->n_rsizes)] : 0;
    p->rseed = hx_below(r, 1u << 30);
    p->rtrailers = p->rprov && hx_below(r, 4) == 0;
    uint8_t path[80];
    size_t pl = 1 + hx_below(r, 60);
    path[0] = '/';
    for (size_t i = 1; i < pl; i++)
        path[i] = (uint8_t)("abcxyz019/?=&.-_~%"[hx_below(r, 18)]);
    int host = hx_below(r, 8) == 0; /* host instead of :authority */
    const char *ph[4][2] = {{":method", methods[m]}, {":scheme", hx_below(r, 2) ? "https" : "http"},
                            {":authority", "example.com"}, {":path", NULL}};
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) { /* pseudo-headers in any order, before the rest */
        int j = (int)hx_below(r, (uint32_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        if (k == 3)
            hl_add(&p->req, ":path", 5, path, pl, 0);
        else if (!(k == 2 && host))
            hl_add(&p->req, ph[k][0], strlen(ph[k][0]), ph[k][1], strlen(ph[k][1]), 0);
    }
    if (host)
        hl_add(&p->req, "host", 4, "example.com", 11, 0);
    if (p->rprov && !p->rtrailers && hx_below(r, 3) == 0) {
        char cl[24];
        int k = snprintf(cl, sizeof cl, "%zu", p->rlen);
        hl_add(&p->req, "content-length", 14, cl, (size_t)k, 0);
    }
    hx_gen_fields(r, &p->req, hx_below(r, (uint32_t)g->max_fields + 1), g->long_max, 0);
    if (p->rtrailers)
        hx_gen_fields(r, &p->rtr, 1 + hx_below(r, 4), 200, 0);
    /* answer */
    p->info = hx_below(r, 6) == 0;
    if (p->info) {
        hl_add(&p->inf, ":status", 7, "103", 3, 0);
        hl_add(&p->inf, "link", 4, "</s.css>; rel=preload", 21, 0);
        hx_gen_fields(r, &p->inf, hx_below(r, 3), 200, 1);
    }
    p->slen = g->ssizes[hx_below(r, (uint32_t)g->n_ssizes)];
    p->body = p->slen > 0 || hx_below(r, 3) == 0;
    p->strailers = p->body && hx_below(r, 4) == 0;
    p->sseed = hx_below(r, 1u << 30);
    const char *st = statuses[hx_below(r, 6)];
    hl_add(&p->resp, ":status", 7, st, 3, 0);
    if (p->body && !p->strailers && hx_below(r, 3) == 0) {
        char cl[24];
        int k = snprintf(cl, sizeof cl, "%zu", p->slen);
        hl_add(&p->resp, "content-length", 14, cl, (size_t)k, 0);
    }
    hx_gen_fields(r, &p->resp, hx_below(r, (uint32_t)g->max_fields + 1), g->long_max, 1);
    if (p->strailers)
        hx_gen_fields(r, &p->str, 1 + hx_below(r, 4), 300, 1);
    p->early = hx_below(r, 5) == 0;
    p->defer = hx_below(r, 5) == 0;
    p->copy = hx_below(r, 2);
    p->stop_upload = p->early && p->rprov && hx_below(r, 2);
    return p;
}

/* ---- the exchange ------------------------------------------------------------------------ */

typedef struct hx {
    sws_h2sess_t sv;
    nghttp2_session *cl;     /* oracle mode's client */
    int raw;
    hx_plan_t **plans;
    size_t nplans, plans_cap;
    hx_buf_t c2s, s2c;
    size_t c2s_taken, c2s_avail, s2c_taken, s2c_avail;
    size_t s2c_fpos;             /* the next frame header in s2c */
    size_t c2s_chunk, s2c_chunk; /* bytes made available to a side per round (0: all) */
    size_t batch, batch_used;    /* bytes a send round takes before data_send says BLOCKED (0: no bound) */
    int consume_later;           /* request body handed back after sws_h2sess_recv returns */
    struct { int32_t id; size_t n; } *pend;
    size_t npend, pend_cap;
    int failures, printed;
    int srv_errors;              /* our error callback */
    int expect_goaway;           /* a GOAWAY of ours with NO_ERROR is expected */
    int goaway_seen;
    uint32_t goaway_last;
    int allow_srv_rst;           /* RST_STREAM from us is expected (a case's own) */
    int cl_pings, cl_ping_acks, sv_pings, sv_ping_acks;
    uint8_t ping_opaque[8];
    hx_rng_t *r;                 /* chunk sizes, raw-mode answers */
    uint8_t raw_flags;
    /* raw mode: the mirror of the client's frames, and our output parsed */
    size_t m_off;                /* the mirror's place in c2s (the preface skipped) */
    int m_bad;
    int64_t m_conn_win, m_init_win;
    int32_t m_max_id;
    uint32_t *m_tables;          /* per client SETTINGS taken: its HEADER_TABLE_SIZE + 1, or 0 */
    size_t m_nset, m_setcap, o_acks;
    nghttp2_hd_inflater *inf;
    hx_buf_t o_blk;
    int32_t o_blk_id;
    uint8_t o_blk_flags;
    size_t o_frames;
    int o_dead;                  /* a GOAWAY with an error went */
} hx_t;

static void hx_fail(hx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hx_fail(hx_t *x, const char *fmt, ...)
{
    x->failures++;
    if (x->printed++ >= 12)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "h2sess: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static hx_plan_t *hx_find(hx_t *x, int32_t id)
{
    for (size_t i = x->nplans; i-- > 0;)
        if (x->plans[i]->id == id)
            return x->plans[i];
    return NULL;
}

static void hx_add_plan(hx_t *x, hx_plan_t *p)
{
    if (x->nplans == x->plans_cap) {
        x->plans_cap = x->plans_cap ? x->plans_cap * 2 : 16;
        x->plans = realloc(x->plans, x->plans_cap * sizeof *x->plans);
        if (!x->plans)
            abort();
    }
    x->plans[x->nplans++] = p;
}

/* ---- our session's callbacks --------------------------------------------------------------- */

static void hx_answer(hx_t *x, hx_plan_t *p);
static void hx_raw_mirror(hx_t *x, uint8_t type, uint8_t flags, int32_t id, uint32_t len);

static int sv_frame(void *u, uint8_t type, uint8_t flags, int32_t id, uint32_t len)
{
    hx_t *x = u;
    if (x->raw)
        hx_raw_mirror(x, type, flags, id, len);
    return 0;
}

static hx_plan_t *hx_raw_plan(hx_t *x, int32_t id);

static int sv_begin(void *u, int32_t id)
{
    hx_t *x = u;
    hx_plan_t *p = x->raw ? hx_raw_plan(x, id) : hx_find(x, id);
    if (!p) {
        hx_fail(x, "stream %d opened that the client did not submit", (int)id);
        return -1;
    }
    if (p->s_begin)
        hx_fail(x, "stream %d opened twice", (int)id);
    p->s_begin = 1;
    sws_h2sess_set_user(&x->sv, id, p);
    if (x->raw && (x->raw_flags & 0x10) && id % 7 == 5)
        return -1; /* refused by its owner: RST_STREAM INTERNAL_ERROR */
    return 0;
}

static int sv_header(void *u, void *su, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p) {
        hx_fail(x, "a header for a stream without its user pointer");
        return -1;
    }
    hl_add(&p->s_req, name, nl, value, vl, 0);
    if (x->raw && (x->raw_flags & 0x20) && p->s_req.n > 12)
        return -1;
    return 0;
}

static void sv_request(void *u, void *su, int end_stream)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    p->s_request = 1;
    if (end_stream)
        p->s_end = 1;
    if (x->raw && p->srv_rst) {
        sws_h2sess_rst(&x->sv, p->id, H2_CANCEL);
        return;
    }
    if (end_stream || p->early)
        hx_answer(x, p);
}

static int sv_data(void *u, void *su, int32_t id, const uint8_t *d, size_t n)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->s_request)
        hx_fail(x, "stream %d: DATA before its request ended", (int)id);
    for (size_t i = 0; i < n; i++)
        if (d[i] != hx_body_byte(p->rseed, p->s_got + i)) {
            p->s_bad = 1;
            break;
        }
    p->s_got += n;
    if (x->raw && (x->raw_flags & 0x40) && p->s_got > 3000)
        return -1; /* the owner refuses the body (RST_STREAM INTERNAL_ERROR) */
    if (x->consume_later) {
        if (x->npend == x->pend_cap) {
            x->pend_cap = x->pend_cap ? x->pend_cap * 2 : 16;
            x->pend = realloc(x->pend, x->pend_cap * sizeof *x->pend);
            if (!x->pend)
                abort();
        }
        x->pend[x->npend].id = id;
        x->pend[x->npend++].n = n;
    } else {
        sws_h2sess_consume(&x->sv, id, n);
    }
    return 0;
}

static void sv_end_stream(void *u, void *su)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (p->s_end)
        hx_fail(x, "stream %d: END_STREAM told twice", (int)p->id);
    p->s_end = 1;
    if (!p->s_answered)
        hx_answer(x, p);
}

static void sv_close(void *u, void *su, int32_t id, uint32_t code)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p) {
        hx_fail(x, "stream %d closed without its user pointer", (int)id);
        return;
    }
    if (p->s_closed)
        hx_fail(x, "stream %d closed twice", (int)id);
    p->s_closed = 1;
    p->s_code = code;
}

static void sv_sent_end(void *u, void *su)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    p->s_sent_end++;
    if (p->stop_upload && !p->s_end && !p->s_stopped) {
        p->s_stopped = 1;
        if (sws_h2sess_rst(&x->sv, p->id, H2_NO_ERROR) != 0)
            hx_fail(x, "stream %d: RST_STREAM NO_ERROR after our END_STREAM not taken", (int)p->id);
    }
}

static void sv_ping_ack(void *u, const uint8_t opaque[8])
{
    hx_t *x = u;
    if (!x->raw && memcmp(opaque, x->ping_opaque, 8) != 0) /* a raw client ACKs what it likes */
        hx_fail(x, "our PING came back with another payload");
    x->sv_ping_acks++;
}

static void sv_error(void *u, uint32_t code, const char *what)
{
    hx_t *x = u;
    x->srv_errors++;
    if (!x->raw)
        hx_fail(x, "our session refused the client: %s (code %u)", what, (unsigned)code);
}

static ssize_t sv_data_read(void *u, void *su, size_t max, int *flags)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->body || p->s_off > p->slen) {
        hx_fail(x, "stream %d: data_read without a body", (int)p->id);
        return SWS_H2D_DEFERRED;
    }
    if (p->defer && !p->s_deferred) {
        p->s_deferred = 1;
        return SWS_H2D_DEFERRED;
    }
    if (max == 0)
        hx_fail(x, "stream %d: data_read with max 0", (int)p->id);
    size_t n = p->slen - p->s_off < max ? p->slen - p->s_off : max;
    if (p->s_off + n == p->slen)
        *flags |= SWS_H2D_EOF | (p->strailers ? SWS_H2D_TRAILERS : 0);
    return (ssize_t)n;
}

static int sv_data_send(void *u, void *su, const uint8_t hd[9], size_t n)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (x->batch && x->batch_used && x->batch_used + 9 + n > x->batch)
        return SWS_H2D_BLOCKED;
    if (p->s_off + n > p->slen) {
        hx_fail(x, "stream %d: data_send past the body", (int)p->id);
        return SWS_H2D_FAIL;
    }
    hx_put(&x->s2c, hd, 9);
    hx_put(&x->s2c, NULL, n); /* room, then the bytes */
    uint8_t *o = x->s2c.p + x->s2c.n - n;
    for (size_t i = 0; i < n; i++)
        o[i] = hx_body_byte(p->sseed, p->s_off + i);
    p->s_off += n;
    x->batch_used += 9 + n;
    return 0;
}

static void sv_trailers(void *u, void *su, int32_t id)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->strailers)
        hx_fail(x, "stream %d: trailers asked for, none planned", (int)id);
    else if (sws_h2sess_trailers(&x->sv, id, p->str.f, p->str.n) != 0)
        hx_fail(x, "stream %d: sws_h2sess_trailers failed", (int)id);
}

static const sws_h2cb_t HX_CB = {
    .frame = sv_frame,
    .begin = sv_begin,
    .header = sv_header,
    .request = sv_request,
    .data = sv_data,
    .end_stream = sv_end_stream,
    .close = sv_close,
    .sent_end = sv_sent_end,
    .ping_ack = sv_ping_ack,
    .error = sv_error,
    .data_read = sv_data_read,
    .data_send = sv_data_send,
    .trailers = sv_trailers,
};

static void hx_answer(hx_t *x, hx_plan_t *p)
{
    if (p->s_answered)
        return;
    p->s_answered = 1;
    int copy = p->copy ? SWS_H2H_COPY : 0;
    if (p->info && sws_h2sess_headers(&x->sv, p->id, p->inf.f, p->inf.n, copy) != 0) {
        if (!x->raw)
            hx_fail(x, "stream %d: the 1xx was not taken", (int)p->id);
        return;
    }
    int fl = SWS_H2H_FINAL | (p->body ? SWS_H2H_BODY : 0) | copy;
    if (sws_h2sess_headers(&x->sv, p->id, p->resp.f, p->resp.n, fl) != 0 && !x->raw)
        hx_fail(x, "stream %d: the answer was not taken", (int)p->id);
}

/* ---- nghttp2's client callbacks ---------------------------------------------------------- */

static int cl_begin_headers(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (!p) {
        hx_fail(x, "client: HEADERS on stream %d it knows nothing of", (int)fr->hd.stream_id);
        return 0;
    }
    if (p->c_nblk == 4)
        hx_fail(x, "client: more than 4 header blocks on stream %d", (int)p->id);
    else
        p->c_nblk++;
    return 0;
}

static int cl_header(nghttp2_session *s, const nghttp2_frame *fr, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *u)
{
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (p && p->c_nblk)
        hl_add(&p->c_blk[p->c_nblk - 1], name, nl, value, vl, (flags & NGHTTP2_NV_FLAG_NO_INDEX) ? 1 : 0);
    return 0;
}

static int cl_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, id);
    if (!p) {
        hx_fail(x, "client: DATA on stream %d it knows nothing of", (int)id);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (d[i] != hx_body_byte(p->sseed, p->c_got + i)) {
            p->c_bad = 1;
            break;
        }
    p->c_got += n;
    if (p->rst_resp_at >= 0 && p->c_got >= (size_t)p->rst_resp_at && !p->c_rst) {
        p->c_rst = 1;
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int cl_close(nghttp2_session *s, int32_t id, uint32_t code, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, id);
    if (!p)
        return 0;
    if (p->c_closed)
        hx_fail(x, "client: stream %d closed twice", (int)id);
    p->c_closed = 1;
    p->c_code = code;
    return 0;
}

static int cl_frame_recv(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    switch (fr->hd.type) {
    case NGHTTP2_RST_STREAM: {
        hx_plan_t *p = hx_find(x, fr->hd.stream_id); /* the client may have closed it */
        if (p && p->s_stopped && fr->rst_stream.error_code == NGHTTP2_NO_ERROR)
            break; /* the upload stopped after the whole answer */
        if (!x->allow_srv_rst)
            hx_fail(x, "client: RST_STREAM %u from us on stream %d", fr->rst_stream.error_code,
                    (int)fr->hd.stream_id);
        break;
    }
    case NGHTTP2_GOAWAY:
        x->goaway_seen++;
        x->goaway_last = (uint32_t)fr->goaway.last_stream_id;
        if (!x->expect_goaway || fr->goaway.error_code != NGHTTP2_NO_ERROR)
            hx_fail(x, "client: GOAWAY %u from us (last stream %d)", fr->goaway.error_code,
                    (int)fr->goaway.last_stream_id);
        break;
    case NGHTTP2_PING:
        if (fr->hd.flags & NGHTTP2_FLAG_ACK) {
            x->cl_ping_acks++;
            if (memcmp(fr->ping.opaque_data, x->ping_opaque, 8) != 0)
                hx_fail(x, "client: our PING's ACK has another payload");
        }
        break;
    case NGHTTP2_PUSH_PROMISE:
    case NGHTTP2_PRIORITY:
        hx_fail(x, "client: a frame of type %d from us", fr->hd.type);
        break;
    }
    return 0;
}

static int cl_frame_send(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    if (fr->hd.type == NGHTTP2_RST_STREAM) {
        hx_plan_t *p = hx_find(x, fr->hd.stream_id);
        if (!p || !p->c_rst)
            hx_fail(x, "client: nghttp2 reset stream %d (%u)", (int)fr->hd.stream_id,
                    fr->rst_stream.error_code);
    } else if (fr->hd.type == NGHTTP2_GOAWAY) {
        hx_fail(x, "client: nghttp2 sent GOAWAY %u", fr->goaway.error_code);
    }
    return 0;
}

static int cl_not_send(nghttp2_session *s, const nghttp2_frame *fr, int err, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (fr->hd.type == NGHTTP2_RST_STREAM || (p && p->c_rst))
        return 0; /* a reset stream's frames */
    hx_fail(x, "client: nghttp2 could not send a frame of type %d on %d: %s", fr->hd.type,
            (int)fr->hd.stream_id, nghttp2_strerror(err));
    return 0;
}

static int cl_error(nghttp2_session *s, int code, const char *msg, size_t len, void *u)
{
    hx_t *x = u;
    hx_fail(x, "client: nghttp2 error %d: %.*s", code, (int)len, msg);
    return 0;
}

static int cl_invalid(nghttp2_session *s, const nghttp2_frame *fr, int code, void *u)
{
    hx_t *x = u;
    hx_fail(x, "client: nghttp2 found a frame of type %d on stream %d invalid: %s", fr->hd.type,
            (int)fr->hd.stream_id, nghttp2_strerror(code));
    return 0;
}

static ssize_t cl_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *u)
{
    hx_plan_t *p = src->ptr;
    if (p->rst_req_at >= 0 && p->roff >= (size_t)p->rst_req_at) {
        p->c_rst_due = 1; /* hx_pump resets it */
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = p->rlen - p->roff < len ? p->rlen - p->roff : len;
    if (p->rst_req_at >= 0 && p->roff + n > (size_t)p->rst_req_at)
        n = (size_t)p->rst_req_at - p->roff;
    for (size_t i = 0; i < n; i++)
        buf[i] = hx_body_byte(p->rseed, p->roff + i);
    p->roff += n;
    if (p->roff == p->rlen && p->rst_req_at < 0) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (p->rtrailers) {
            nghttp2_nv nv[8];
            size_t k = 0;
            for (; k < p->rtr.n && k < 8; k++)
                nv[k] = (nghttp2_nv){(uint8_t *)p->rtr.f[k].name, (uint8_t *)p->rtr.f[k].value,
                                     p->rtr.f[k].nl, p->rtr.f[k].vl, NGHTTP2_NV_FLAG_NONE};
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            if (nghttp2_submit_trailer(s, id, nv, k) != 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    }
    return (ssize_t)n;
}

/* ---- setting up, pumping, checking --------------------------------------------------------- */

/* Our session with conf, its SETTINGS queued. */
static void hx_init_common(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r)
{
    memset(x, 0, sizeof *x);
    x->r = r;
    if (sws_h2sess_init(&x->sv, conf, &HX_CB, x) != 0 || sws_h2sess_settings(&x->sv) != 0) {
        fprintf(stderr, "sws_h2sess_init failed\n");
        abort();
    }
    memcpy(x->ping_opaque, "h2sess\0\1", 8);
}

/* Oracle mode: an nghttp2 client whose SETTINGS says initial_window
 * (0: its default) and header_table (0: its default; else the value - 1). */
__attribute__((unused))
static void hx_init(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r, uint32_t initial_window,
                    uint32_t header_table)
{
    hx_init_common(x, conf, r);
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, cl_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, cl_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cl_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cl_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cl_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, cl_frame_send);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, cl_not_send);
    nghttp2_session_callbacks_set_error_callback2(cb, cl_error);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, cl_invalid);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_max_send_header_block_length(opt, 1u << 20); /* long request lists */
    if (nghttp2_session_client_new2(&x->cl, cb, x, opt) != 0)
        abort();
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[3];
    size_t n = 0;
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    if (initial_window)
        iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, initial_window};
    if (header_table)
        iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, header_table - 1};
    nghttp2_submit_settings(x->cl, NGHTTP2_FLAG_NONE, iv, n);
}

static void hx_free(hx_t *x)
{
    if (x->cl)
        nghttp2_session_del(x->cl);
    if (x->inf)
        nghttp2_hd_inflate_del(x->inf);
    sws_h2sess_free(&x->sv);
    for (size_t i = 0; i < x->nplans; i++)
        hx_plan_free(x->plans[i]);
    free(x->plans);
    free(x->c2s.p);
    free(x->s2c.p);
    free(x->pend);
    free(x->m_tables);
    free(x->o_blk.p);
}

/* The client submits p (oracle mode); its stream id is p->id. */
__attribute__((unused))
static void hx_submit(hx_t *x, hx_plan_t *p)
{
    nghttp2_nv nv[64];
    size_t n = 0;
    for (; n < p->req.n && n < 64; n++)
        nv[n] = (nghttp2_nv){(uint8_t *)p->req.f[n].name, (uint8_t *)p->req.f[n].value,
                             p->req.f[n].nl, p->req.f[n].vl, NGHTTP2_NV_FLAG_NONE};
    if (p->req.n > 64)
        abort(); /* hx_gen_t.max_fields is at most 40 */
    nghttp2_data_provider prd = {.source.ptr = p, .read_callback = cl_read};
    int32_t id = nghttp2_submit_request(x->cl, NULL, nv, n, p->rprov ? &prd : NULL, p);
    if (id <= 0) {
        hx_fail(x, "nghttp2_submit_request: %s", nghttp2_strerror(id));
        hx_plan_free(p);
        return;
    }
    p->id = id;
    hx_add_plan(x, p);
}

static void hx_out_check(hx_t *x, size_t from);
static uint32_t hx_get24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }

/* Moves bytes both ways until neither side has more to say (and deferred
 * bodies resumed), at most rounds rounds (0: until idle). Returns 0 when
 * idle, 1 when rounds ran out. */
static int hx_pump(hx_t *x, int rounds)
{
    for (int round = 0; rounds == 0 || round < rounds; round++) {
        int moved = 0;
        if (round > 3000000) {
            hx_fail(x, "the exchange never ends");
            return 0;
        }
        /* the client's output */
        if (x->cl) {
            for (size_t i = 0; i < x->nplans; i++) {
                hx_plan_t *p = x->plans[i];
                if (p->c_rst_due && !p->c_rst) {
                    p->c_rst = 1;
                    nghttp2_submit_rst_stream(x->cl, NGHTTP2_FLAG_NONE, p->id, NGHTTP2_CANCEL);
                }
            }
            for (;;) {
                const uint8_t *d;
                ssize_t k = nghttp2_session_mem_send(x->cl, &d);
                if (k < 0) {
                    hx_fail(x, "nghttp2_session_mem_send: %s", nghttp2_strerror((int)k));
                    return 0;
                }
                if (k == 0)
                    break;
                hx_put(&x->c2s, d, (size_t)k);
                moved = 1;
            }
        }
        /* our input, as much as the chunk lets through */
        if (x->c2s_avail < x->c2s.n) {
            size_t add = x->c2s.n - x->c2s_avail;
            if (x->c2s_chunk && hx_below(x->r, 4)) { /* and now and then all of it */
                size_t c = 1 + hx_below(x->r, (uint32_t)x->c2s_chunk);
                add = add < c ? add : c;
            }
            x->c2s_avail += add;
            moved = 1;
        }
        if (x->c2s_avail > x->c2s_taken) {
            ssize_t t = sws_h2sess_recv(&x->sv, x->c2s.p + x->c2s_taken, x->c2s_avail - x->c2s_taken);
            if (t < 0) {
                if (!x->raw)
                    hx_fail(x, "sws_h2sess_recv refused the client's preface");
                return 0;
            }
            x->c2s_taken += (size_t)t;
            for (size_t i = 0; i < x->npend; i++)
                sws_h2sess_consume(&x->sv, x->pend[i].id, x->pend[i].n);
            x->npend = 0;
        }
        /* our output */
        size_t out_from = x->s2c.n;
        x->batch_used = 0;
        for (;;) {
            const uint8_t *d;
            size_t n;
            int rc = sws_h2sess_send(&x->sv, &d, &n);
            if (rc == 0)
                break;
            moved = 1;
            if (rc == 2)
                break; /* data_send had no room: what we have goes first */
            if (rc == 1 && n) {
                hx_put(&x->s2c, d, n);
                x->batch_used += n;
            }
        }
        if (getenv("H2SESS_TRACE"))
            for (size_t o = out_from; o + 9 <= x->s2c.n; o += 9 + hx_get24(x->s2c.p + o))
                fprintf(stderr, "out: type %u flags %#x stream %u, %u bytes\n", x->s2c.p[o + 3],
                        x->s2c.p[o + 4], h2_get32(x->s2c.p + o + 5), hx_get24(x->s2c.p + o));
        if (x->raw)
            hx_out_check(x, out_from);
        else if (x->s2c.n > out_from || x->s2c_avail < x->s2c.n) {
            /* the client's input */
            size_t add = x->s2c.n - x->s2c_avail;
            if (x->s2c_chunk && hx_below(x->r, 4)) { /* and now and then all of it */
                size_t c = 1 + hx_below(x->r, (uint32_t)x->s2c_chunk);
                add = add < c ? add : c;
            }
            x->s2c_avail += add;
            /* libnghttp2 1.52 (Debian's, with the CONTINUATION limit
             * backported) counts a CONTINUATION each time its frame
             * header arrives in pieces: such a header is never cut */
            while (x->s2c_fpos + 9 <= x->s2c.n && x->s2c_fpos < x->s2c_avail) {
                if (x->s2c_avail < x->s2c_fpos + 9 && x->s2c.p[x->s2c_fpos + 3] == H2_CONTINUATION)
                    x->s2c_avail = x->s2c_fpos + 9;
                x->s2c_fpos += 9 + hx_get24(x->s2c.p + x->s2c_fpos);
            }
            if (add) {
                ssize_t k = nghttp2_session_mem_recv(x->cl, x->s2c.p + x->s2c_taken,
                                                     x->s2c_avail - x->s2c_taken);
                if (k < 0) {
                    hx_fail(x, "nghttp2_session_mem_recv: %s", nghttp2_strerror((int)k));
                    return 0;
                }
                x->s2c_taken += (size_t)k;
                moved = 1;
            }
        }
        /* keep the buffers short: what both sides took goes */
        if (x->c2s_taken == x->c2s.n && !x->raw) {
            x->c2s.n = x->c2s_taken = x->c2s_avail = 0;
            x->m_off = 0;
        }
        if (x->s2c_taken == x->s2c.n && x->s2c_fpos == x->s2c.n)
            x->s2c.n = x->s2c_taken = x->s2c_avail = x->s2c_fpos = 0;
        if (!moved) {
            for (size_t i = 0; i < x->nplans; i++) {
                hx_plan_t *p = x->plans[i];
                if (p->s_deferred == 1) {
                    p->s_deferred = 2;
                    sws_h2sess_resume(&x->sv, p->id);
                    moved = 1;
                }
            }
            if (x->cl)
                for (size_t i = 0; i < x->nplans; i++) {
                    hx_plan_t *p = x->plans[i];
                    if (p->c_rst_due && !p->c_rst)
                        moved = 1;
                }
            if (!moved)
                return 0;
        }
    }
    return 1;
}

/* Oracle mode, once idle: every plan's request and answer came whole. */
__attribute__((unused))
static void hx_check(hx_t *x)
{
    for (size_t i = 0; i < x->nplans; i++) {
        hx_plan_t *p = x->plans[i];
        int id = (int)p->id;
        size_t at;
        if (!p->s_begin || !p->s_request) {
            hx_fail(x, "stream %d: our session never saw its request", id);
            continue;
        }
        if (!hl_eq(&p->s_req, &p->req, 0, &at)) {
            hx_fail(x, "stream %d: the request's fields differ at %zu", id, at);
            hl_print("got", &p->s_req);
            hl_print("sent", &p->req);
        }
        if (p->s_bad)
            hx_fail(x, "stream %d: request body bytes differ", id);
        if (!p->s_closed)
            hx_fail(x, "stream %d: never closed on our side", id);
        if (p->c_rst) {
            if (!p->c_closed || (p->c_code != NGHTTP2_CANCEL && p->c_code != NGHTTP2_NO_ERROR))
                hx_fail(x, "stream %d: the client's reset: closed %d code %u", id, p->c_closed,
                        p->c_code);
            if (p->s_closed && p->s_code != H2_CANCEL && p->s_code != H2_NO_ERROR)
                hx_fail(x, "stream %d: reset by the client, closed here with %u", id, p->s_code);
            continue; /* prefixes only */
        }
        if (p->s_stopped) {
            if (p->s_got > p->rlen || p->s_code != H2_NO_ERROR)
                hx_fail(x, "stream %d: upload stopped at %zu of %zu bytes, closed with %u", id,
                        p->s_got, p->rlen, p->s_code);
        } else if (p->s_got != p->rlen || !p->s_end)
            hx_fail(x, "stream %d: request body %zu of %zu bytes, end %d", id, p->s_got, p->rlen,
                    p->s_end);
        if (p->s_closed && p->s_code != H2_NO_ERROR)
            hx_fail(x, "stream %d: closed with %u", id, p->s_code);
        if (p->s_sent_end != 1)
            hx_fail(x, "stream %d: our END_STREAM told %d times", id, p->s_sent_end);
        const hx_list_t *want[3];
        int nw = 0;
        if (p->info)
            want[nw++] = &p->inf;
        want[nw++] = &p->resp;
        if (p->strailers)
            want[nw++] = &p->str;
        if (p->c_nblk != nw)
            hx_fail(x, "stream %d: the client got %d header blocks, we sent %d", id, p->c_nblk, nw);
        for (int k = 0; k < nw && k < p->c_nblk; k++)
            if (!hl_eq(&p->c_blk[k], want[k], 1, &at)) {
                hx_fail(x, "stream %d: block %d differs at field %zu", id, k, at);
                hl_print("got", &p->c_blk[k]);
                hl_print("sent", want[k]);
            }
        if (p->c_got != p->slen || p->c_bad)
            hx_fail(x, "stream %d: response body %zu of %zu bytes%s", id, p->c_got, p->slen,
                    p->c_bad ? ", bytes differ" : "");
        if (!p->c_closed || p->c_code != NGHTTP2_NO_ERROR)
            hx_fail(x, "stream %d: the client's stream closed %d with %u", id, p->c_closed, p->c_code);
    }
    if (x->sv.n_open || x->sv.all)
        hx_fail(x, "%u streams left open on our side", x->sv.n_open);
    if (x->srv_errors)
        hx_fail(x, "our error callback ran %d times", x->srv_errors);
    if (x->cl_ping_acks != x->cl_pings)
        hx_fail(x, "client: %d PINGs, %d ACKs", x->cl_pings, x->cl_ping_acks);
    if (x->sv_ping_acks != x->sv_pings)
        hx_fail(x, "ours: %d PINGs, %d ACKs", x->sv_pings, x->sv_ping_acks);
    if (x->expect_goaway && x->goaway_seen != 1)
        hx_fail(x, "client: %d GOAWAYs, one expected", x->goaway_seen);
}

__attribute__((unused))
static void hx_client_ping(hx_t *x)
{
    nghttp2_submit_ping(x->cl, NGHTTP2_FLAG_NONE, x->ping_opaque);
    x->cl_pings++;
}

__attribute__((unused))
static void hx_server_ping(hx_t *x)
{
    sws_h2sess_ping(&x->sv, x->ping_opaque);
    x->sv_pings++;
}

/* The client's SETTINGS_HEADER_TABLE_SIZE changes mid-connection. */
__attribute__((unused))
static void hx_client_table(hx_t *x, uint32_t size)
{
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, size};
    nghttp2_submit_settings(x->cl, NGHTTP2_FLAG_NONE, &iv, 1);
}

/* ---- raw mode ------------------------------------------------------------------------------ */

/* A plan for a stream the raw client opened: the answer only, from the
 * stream id and the input's flags. */
static hx_plan_t *hx_raw_plan(hx_t *x, int32_t id)
{
    static const size_t ssizes[] = {0, 1, 5, 100, 16383, 16384, 16385, 70000};
    static const size_t none[] = {0};
    hx_rng_t r = {.s = (uint64_t)id * 1000003u + x->raw_flags};
    hx_gen_t g = {none, ssizes, 1, sizeof ssizes / sizeof ssizes[0], 6, 3000};
    hx_plan_t *p = hx_plan_gen(&r, &g);
    p->id = id;
    p->srv_rst = (x->raw_flags & 0x08) && id % 5 == 3;
    p->o_win = x->m_init_win; /* corrected by the mirror when its HEADERS is read */
    hx_add_plan(x, p);
    return p;
}

/* Raw mode: the client's bytes are data[0..n) (the preface first unless
 * flags bit 0 says they hold their own), fed in chunks of up to chunk
 * bytes (0: all at once); flags (bits 3-6) vary how we answer. */
__attribute__((unused))
static void hx_init_raw(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r, uint8_t flags)
{
    hx_init_common(x, conf, r);
    x->raw = 1;
    x->raw_flags = flags;
    x->m_conn_win = x->m_init_win = 65535;
    x->o_blk_id = 0;
    nghttp2_hd_inflate_new(&x->inf);
    uint32_t cap = conf->header_table;
    /* our encoder starts at min(4096, cap); above 4096 it follows the
     * client's settings up to cap, which the ACKs tell the inflater */
    if (cap < 4096)
        nghttp2_hd_inflate_change_table_size(x->inf, cap);
}


/* The session took the frame at m_off (its header says type, flags, id,
 * len): the mirror reads it as the session should, for the windows and
 * the HEADER_TABLE_SIZE our ACKs apply. */
static void hx_raw_mirror(hx_t *x, uint8_t type, uint8_t flags, int32_t id, uint32_t len)
{
    if (x->m_bad)
        return;
    if (x->m_off == 0) {
        if (x->c2s.n < H2_PREFACE_LEN) {
            x->m_bad = 1;
            return;
        }
        x->m_off = H2_PREFACE_LEN;
    }
    const uint8_t *h = x->c2s.p + x->m_off;
    if (x->m_off + 9 > x->c2s.n || hx_get24(h) != len || h[3] != type || h[4] != flags ||
        (int32_t)(h2_get32(h + 5) & 0x7fffffff) != id || x->m_off + 9 + len > x->c2s.n) {
        hx_fail(x, "the frame callback's header is not the frame at offset %zu", x->m_off);
        x->m_bad = 1;
        return;
    }
    const uint8_t *p = h + 9;
    x->m_off += 9 + len;
    switch (type) {
    case H2_SETTINGS:
        if (flags & H2_F_ACK)
            break;
        if (x->m_nset == x->m_setcap) {
            x->m_setcap = x->m_setcap ? x->m_setcap * 2 : 8;
            x->m_tables = realloc(x->m_tables, x->m_setcap * sizeof *x->m_tables);
            if (!x->m_tables)
                abort();
        }
        x->m_tables[x->m_nset] = 0;
        for (uint32_t i = 0; i + 6 <= len; i += 6) {
            uint16_t k = (uint16_t)(p[i] << 8 | p[i + 1]);
            uint32_t v = h2_get32(p + i + 2);
            if (k == H2_SET_HEADER_TABLE_SIZE)
                x->m_tables[x->m_nset] = (v > 1u << 30 ? 1u << 30 : v) + 1;
            if (k == H2_SET_INITIAL_WINDOW_SIZE && v <= H2_WINDOW_MAX) {
                int64_t d = (int64_t)v - x->m_init_win;
                for (size_t j = 0; j < x->nplans; j++)
                    x->plans[j]->o_win += d;
                x->m_init_win = v;
            }
        }
        x->m_nset++;
        break;
    case H2_WINDOW_UPDATE:
        if (len == 4) {
            uint32_t inc = h2_get32(p) & 0x7fffffff;
            if (id == 0) {
                x->m_conn_win += inc;
            } else {
                hx_plan_t *pl = hx_find(x, id);
                if (pl)
                    pl->o_win += inc;
            }
        }
        break;
    case H2_HEADERS:
        if (id > x->m_max_id && (id & 1))
            x->m_max_id = id;
        break;
    }
}

/* Every HEADERS on a new stream opens it with the window in force then:
 * the plan (made inside the session's begin callback, after the frame
 * callback) takes m_init_win. */

static int hx_inflate(hx_t *x, const uint8_t *in, size_t n, hx_list_t *out)
{
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t k = nghttp2_hd_inflate_hd2(x->inf, &nv, &fl, in, n, 1);
        if (k < 0)
            return (int)k;
        in += k;
        n -= (size_t)k;
        if (fl & NGHTTP2_HD_INFLATE_EMIT)
            hl_add(out, nv.name, nv.namelen, nv.value, nv.valuelen,
                   (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) ? 1 : 0);
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(x->inf);
            return 0;
        }
        if (k == 0 && n == 0)
            return -1;
    }
}

/* A whole header block of ours on stream id (flags: the HEADERS'). */
static void hx_out_block(hx_t *x, int32_t id, uint8_t flags)
{
    hx_list_t got = {0};
    int rc = hx_inflate(x, x->o_blk.p, x->o_blk.n, &got);
    x->o_blk.n = 0;
    if (rc != 0) {
        hx_fail(x, "nghttp2's inflater refuses our block on stream %d: %s", (int)id,
                nghttp2_strerror(rc));
        x->o_dead = 1;
        hl_free(&got);
        return;
    }
    hx_plan_t *p = hx_find(x, id);
    if (!p) {
        hx_fail(x, "HEADERS on stream %d, which we never opened", (int)id);
        hl_free(&got);
        return;
    }
    const hx_list_t *want[3];
    int nw = 0;
    if (p->info)
        want[nw++] = &p->inf;
    want[nw++] = &p->resp;
    if (p->strailers)
        want[nw++] = &p->str;
    size_t at;
    if (p->o_end || p->o_rst) {
        hx_fail(x, "HEADERS on stream %d after its end or our RST_STREAM", (int)id);
    } else if (p->o_blk >= nw) {
        hx_fail(x, "stream %d: a header block more than we submitted", (int)id);
    } else if (!hl_eq(&got, want[p->o_blk], 1, &at)) {
        hx_fail(x, "stream %d: block %d differs at field %zu", (int)id, p->o_blk, at);
        hl_print("got", &got);
        hl_print("sent", want[p->o_blk]);
    } else {
        int final = want[p->o_blk] == &p->resp, tr = want[p->o_blk] == &p->str;
        if (final)
            p->o_final = 1;
        if (tr && p->o_off != p->slen)
            hx_fail(x, "stream %d: trailers after %zu of %zu body bytes", (int)id, p->o_off, p->slen);
        int end_due = (final && !p->body) || tr;
        if (!!(flags & H2_F_END_STREAM) != end_due)
            hx_fail(x, "stream %d: block %d END_STREAM %d", (int)id, p->o_blk, !!(flags & H2_F_END_STREAM));
        if (flags & H2_F_END_STREAM)
            p->o_end = 1;
        p->o_blk++;
    }
    hl_free(&got);
}

/* Raw mode: our output from s2c[from..) parsed and checked (see the top). */
static void hx_out_check(hx_t *x, size_t from)
{
    size_t off = from;
    const uint8_t *b = x->s2c.p;
    while (off < x->s2c.n && !x->o_dead) {
        if (x->s2c.n - off < 9) {
            hx_fail(x, "a frame cut short in our output");
            return;
        }
        const uint8_t *h = b + off, *p = h + 9;
        uint32_t len = hx_get24(h);
        uint8_t type = h[3], fl = h[4];
        int32_t id = (int32_t)(h2_get32(h + 5) & 0x7fffffff);
        if (h[5] & 0x80)
            hx_fail(x, "the reserved bit set");
        if (off + 9 + len > x->s2c.n) {
            hx_fail(x, "a frame of %u bytes cut short in our output", len);
            return;
        }
        off += 9 + len;
        if (len > H2_FRAME_MAX)
            hx_fail(x, "a frame of type %u of %u bytes", type, len);
        if (x->o_frames++ == 0 && (type != H2_SETTINGS || (fl & H2_F_ACK)))
            hx_fail(x, "our first frame is of type %u, not SETTINGS", type);
        if (x->o_blk_id && type != H2_CONTINUATION) {
            hx_fail(x, "a frame of type %u inside our header block", type);
            x->o_blk_id = 0;
        }
        hx_plan_t *pl = NULL;
        if (type == H2_DATA || type == H2_HEADERS || type == H2_CONTINUATION || type == H2_RST_STREAM) {
            if (id == 0 || !(id & 1)) {
                hx_fail(x, "a frame of type %u on stream %d", type, (int)id);
                continue;
            }
            pl = hx_find(x, id);
        }
        switch (type) {
        case H2_DATA:
            if (fl & ~H2_F_END_STREAM)
                hx_fail(x, "DATA with flags %#x", fl);
            if (!pl || !pl->o_final || pl->o_end || pl->o_rst) {
                hx_fail(x, "DATA on stream %d before its head, after its end or reset", (int)id);
                break;
            }
            if ((int64_t)len > x->m_conn_win || (int64_t)len > pl->o_win)
                hx_fail(x, "DATA of %u bytes on stream %d, windows %lld / %lld", len, (int)id,
                        (long long)x->m_conn_win, (long long)pl->o_win);
            x->m_conn_win -= len;
            pl->o_win -= len;
            for (uint32_t i = 0; i < len; i++)
                if (p[i] != hx_body_byte(pl->sseed, pl->o_off + i)) {
                    hx_fail(x, "stream %d: body byte %zu differs", (int)id, pl->o_off + i);
                    break;
                }
            pl->o_off += len;
            if (pl->o_off > pl->slen)
                hx_fail(x, "stream %d: %zu body bytes, %zu planned", (int)id, pl->o_off, pl->slen);
            if (fl & H2_F_END_STREAM) {
                if (pl->o_off != pl->slen || pl->strailers)
                    hx_fail(x, "stream %d: END_STREAM after %zu of %zu bytes", (int)id, pl->o_off,
                            pl->slen);
                pl->o_end = 1;
            }
            break;
        case H2_HEADERS:
        case H2_CONTINUATION:
            if (type == H2_HEADERS && (fl & ~(H2_F_END_STREAM | H2_F_END_HEADERS)))
                hx_fail(x, "HEADERS with flags %#x", fl);
            if (type == H2_CONTINUATION && (fl & ~H2_F_END_HEADERS))
                hx_fail(x, "CONTINUATION with flags %#x", fl);
            if (type == H2_CONTINUATION && id != x->o_blk_id) {
                hx_fail(x, "CONTINUATION on stream %d outside its block", (int)id);
                break;
            }
            if (type == H2_HEADERS) {
                x->o_blk_id = id;
                x->o_blk_flags = fl;
                x->o_blk.n = 0;
            }
            hx_put(&x->o_blk, p, len);
            if (fl & H2_F_END_HEADERS) {
                x->o_blk_id = 0;
                hx_out_block(x, id, x->o_blk_flags);
            }
            break;
        case H2_RST_STREAM:
            if (len != 4 || fl)
                hx_fail(x, "RST_STREAM of %u bytes, flags %#x", len, fl);
            if (pl)
                pl->o_rst = 1; /* a second one may come: DATA on a stream closed long ago */
            break;
        case H2_SETTINGS:
            if (id != 0 || (fl & ~H2_F_ACK) || ((fl & H2_F_ACK) ? len != 0 : len % 6 != 0)) {
                hx_fail(x, "SETTINGS on %d, flags %#x, %u bytes", (int)id, fl, len);
                break;
            }
            if (fl & H2_F_ACK) {
                if (x->o_acks >= x->m_nset) {
                    hx_fail(x, "a SETTINGS ACK more than the client's SETTINGS");
                    break;
                }
                uint32_t t = x->m_tables[x->o_acks++];
                if (t && nghttp2_hd_inflate_change_table_size(x->inf, t - 1) != 0)
                    hx_fail(x, "inflate_change_table_size");
            }
            break;
        case H2_PING:
            if (id != 0 || len != 8 || (fl & ~H2_F_ACK))
                hx_fail(x, "PING on %d, flags %#x, %u bytes", (int)id, fl, len);
            break;
        case H2_GOAWAY:
            if (id != 0 || len < 8 || fl)
                hx_fail(x, "GOAWAY on %d, flags %#x, %u bytes", (int)id, fl, len);
            else if (h2_get32(p + 4) != 0)
                x->o_dead = 1; /* nothing may follow */
            break;
        case H2_WINDOW_UPDATE: {
            uint32_t inc = len == 4 ? h2_get32(p) & 0x7fffffff : 0;
            if (len != 4 || fl || inc == 0 || (id && !(id & 1)))
                hx_fail(x, "WINDOW_UPDATE on %d, flags %#x, %u bytes, +%u", (int)id, fl, len, inc);
            hx_plan_t *w = id ? hx_find(x, id) : NULL;
            if (w && w->o_rst)
                hx_fail(x, "WINDOW_UPDATE on stream %d after our RST_STREAM", (int)id);
            break;
        }
        default:
            hx_fail(x, "a frame of type %u from us", type);
        }
    }
    if (x->o_dead && off < x->s2c.n)
        hx_fail(x, "%zu bytes after our GOAWAY with an error code", x->s2c.n - off);
}

/* Raw mode: client bytes data[0..n), fed whole frames at a time up to
 * the chunk bound, answered, our output checked. */
__attribute__((unused))
static void hx_raw_feed(hx_t *x, const uint8_t *data, size_t n, int preface)
{
    if (preface)
        hx_put(&x->c2s, H2_PREFACE, H2_PREFACE_LEN);
    hx_put(&x->c2s, data, n);
    hx_pump(x, 0);
    if (x->o_blk_id)
        hx_fail(x, "our output ends inside a header block");
}

#endif
