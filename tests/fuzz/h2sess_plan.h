/*
 * h2sess_plan.h — what tests/fuzz/h2sess_harness.h's exchanges send and
 * answer: randomness (the input's bytes, then a generator), byte buffers
 * and field lists with their comparison, generated header lists (names
 * and values a client may send, and ones it may not), and a plan per
 * request (hx_plan_t: the request, its body and trailers, the answer we
 * give, and what either side cuts short).
 */
#ifndef SCALWS_TEST_H2SESS_PLAN_H
#define SCALWS_TEST_H2SESS_PLAN_H

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

/* The header blocks the plan has us submit on its stream, in order: the
 * informational answer if any, the response, the trailers if any. */
static int hx_plan_blocks(const hx_plan_t *p, const hx_list_t *want[3])
{
    int nw = 0;
    if (p->info)
        want[nw++] = &p->inf;
    want[nw++] = &p->resp;
    if (p->strailers)
        want[nw++] = &p->str;
    return nw;
}

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

#endif
