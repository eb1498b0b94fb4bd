/* HTTP/2's response interface (sws_resp_t; csrc/http/h2/h2_int.h): a
 * handler's head, body pieces, holds and end, turned into the stream's
 * HEADERS (h2_commit) and queued body (DATA, streams.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "http/h2/h2_int.h"
#include "http/lower.h"
#include "scalws/priority.h"

/* ---- the response interface ---------------------------------------------------------- */

/* The head's fields in s->hb, in the order given, as records: a field a
 * handler gave by name and value (HB_FIELD, then its name's and value's
 * lengths, 4 bytes each, then the name lowercased and the value, without
 * the blanks around it), or field lines as a handler gave them (HB_LINES,
 * then the length, 4 bytes, then "Name: value\r\n" with the names
 * lowercased), parsed at commit. The pieces of one line (a redirect's
 * Location) go into one run of lines. Commit reads the records where
 * they are: the session keeps pointers into them until the block is
 * encoded (h2s_hb_release). */
enum { HB_FIELD = 1, HB_LINES = 2 };
#define HB_FIELD_HEAD 9
#define HB_LINES_HEAD 5

/* Room for n more bytes in the head's records. */
static int hb_room(h2s_t *s, size_t n)
{
    if (s->submitted)
        return -1; /* the head went already */
    if (s->hb_len + n > s->hb_cap) {
        size_t cap = s->hb_cap ? s->hb_cap * 2 : 512;
        while (cap < s->hb_len + n)
            cap *= 2;
        char *nb = realloc(s->hb, cap);
        if (!nb)
            return -1;
        s->hb = nb;
        s->hb_cap = cap;
    }
    return 0;
}

/* The head's records are dropped (a new head, or out of memory: commit
 * then answers without them). */
static void hb_lost(h2s_t *s)
{
    s->hb_len = 0;
    s->hb_lines = 0;
    s->hb_run = 0;
}

static void h2_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                    size_t reason_len)
{
    h2s_t *s = H2S(r);
    /* A head starts a response: nothing of one described and discarded
     * before it carries over. HTTP/2 has no reason phrase. */
    if (s->ws && status >= 200 && status < 300)
        status = 502; /* not a 101: a 2xx would tell the client its WebSocket is open */
    s->status = (uint16_t)status;
    hb_lost(s);
    s->head_ready = 0;
    s->sent = 0;
    s->no_body = s->head_only || status == 204 || status == 304 || status < 200;
    memcpy(s->date, r->date ? r->date : e->core.date, SWS_HTTP_DATE_LEN);
    r->date = NULL;
}

static void h2_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl,
                     const char *value, size_t vl)
{
    h2s_t *s = H2S(r);
    while (vl && (*value == ' ' || *value == '\t'))
        value++, vl--;
    while (vl && (value[vl - 1] == ' ' || value[vl - 1] == '\t'))
        vl--;
    if (!nl || nl > UINT32_MAX || vl > UINT32_MAX)
        return;
    if (hb_room(s, HB_FIELD_HEAD + nl + vl) < 0) {
        hb_lost(s);
        return;
    }
    char *p = s->hb + s->hb_len;
    lower_copy(p + HB_FIELD_HEAD, name, nl); /* HTTP/2's names are lowercase */
    if (sws_conn_specific(p + HB_FIELD_HEAD, nl))
        return; /* not HTTP/2's (RFC 9113 §8.2.2) */
    uint32_t l[2] = {(uint32_t)nl, (uint32_t)vl};
    p[0] = HB_FIELD;
    memcpy(p + 1, l, 8);
    memcpy(p + HB_FIELD_HEAD + nl, value, vl);
    s->hb_len += HB_FIELD_HEAD + nl + vl;
    s->hb_lines++;
    s->hb_run = 0;
}

static void h2_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    h2s_t *s = H2S(r);
    if (!len)
        return;
    if (len > UINT32_MAX || hb_room(s, len + HB_LINES_HEAD) < 0) {
        hb_lost(s);
        return;
    }
    uint32_t run_len = 0;
    if (!s->hb_run) { /* a new run of lines */
        s->hb[s->hb_len] = HB_LINES;
        s->hb_run = (uint32_t)s->hb_len + 1;
        s->hb_len += HB_LINES_HEAD;
    } else {
        memcpy(&run_len, s->hb + s->hb_run, 4);
    }
    char *run = s->hb + s->hb_run + 4, *p = s->hb + s->hb_len;
    memcpy(p, lines, len);
    s->hb_len += len;
    run_len += (uint32_t)len;
    memcpy(s->hb + s->hb_run, &run_len, 4);
    /* Each line's name lowercased here (HTTP/2). A piece that does not
     * start a line starts in a value, which stays as it is. */
    char *end = s->hb + s->hb_len;
    if (p > run && p[-1] != '\n') {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        p = eol ? eol + 1 : end;
    }
    while (p < end) {
        s->hb_lines++;
        for (; p < end && *p != ':' && *p != '\n'; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
        char *eol = memchr(p, '\n', (size_t)(end - p));
        p = eol ? eol + 1 : end;
    }
}

static void h2_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    h2s_t *s = H2S(r);
    s->head_ready = 1;
    switch (kind) {
    case SWS_BODY_LENGTH:
        if (s->status >= 200 && s->status != 204) { /* RFC 9110 §8.6 */
            char num[24];
            char *p = num + sizeof num;
            uint64_t v = len;
            do
                *--p = (char)('0' + v % 10);
            while (v /= 10);
            h2_field(e, r, "content-length", 14, p, (size_t)(num + sizeof num - p));
        }
        if (len == 0)
            s->no_body = 1;
        break;
    case SWS_BODY_STREAM:
        break;
    case SWS_BODY_TUNNEL:
        /* The upstream's 101 to an extended CONNECT (RFC 8441 §5): a 2xx
         * opens the tunnel, and the stream's DATA frames carry it. */
        s->status = 200;
        s->no_body = 0;
        s->tunnel = 1;
        break;
    default:
        s->no_body = 1;
        break;
    }
}

static void h2_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    h2s_t *s = H2S(r);
    if (s->no_body || !n)
        return;
    qitem_t *q = h2_q_push(s, flags & SWS_REF ? Q_REF : Q_COPY, flags & SWS_REF ? 0 : n);
    if (!q) {
        h2_fail(e, s->hc); /* a body with a hole must not look complete */
        return;
    }
    if (flags & SWS_REF) {
        q->p = p;
    } else {
        memcpy(q->data, p, n);
        q->p = q->data;
    }
    q->len = n;
    s->q_bytes += n;
    s->sent += n;
}

static void h2_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                    size_t chunk)
{
    h2s_t *s = H2S(r);
    if (s->no_body || len == 0) {
        sws_filecache_release(e->net.fc, f);
        return;
    }
    if (f->mem) { /* the cache's copy: referenced, the entry held until written */
        h2_data(e, r, f->mem + off, (size_t)len, SWS_REF);
        r->ops->hold_file(e, r, f);
        return;
    }
    qitem_t *q = h2_q_push(s, Q_FILE, 0);
    if (!q) {
        sws_filecache_release(e->net.fc, f);
        h2_fail(e, s->hc);
        return;
    }
    q->f = f;
    q->fc = e->net.fc;
    q->off = off;
    q->len = len;
    s->q_bytes += len;
    s->sent += len;
}

static void marker(sws_engine_t *e, h2s_t *s, int kind, sws_file_t *f, char *heap, sws_hold_t *h)
{
    qitem_t *q = h2_q_push(s, kind, 0);
    if (!q) {
        /* Nothing reads it once the connection is dead (stream_gone_log). */
        h2_fail(e, s->hc);
        if (f)
            sws_filecache_release(e->net.fc, f);
        free(heap);
        if (h)
            conn_hold(&s->hc->c, h);
        return;
    }
    q->f = f;
    q->fc = e->net.fc;
    q->heap = heap;
    q->hold = h;
}

static void h2_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f)
{
    marker(e, H2S(r), Q_HOLD_FILE, f, NULL, NULL);
}

static void h2_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf)
{
    marker(e, H2S(r), Q_HOLD_HEAP, NULL, buf, NULL);
}

static void h2_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h)
{
    marker(e, H2S(r), Q_HOLD, NULL, NULL, h);
}

static void h2_done(sws_engine_t *e, sws_resp_t *r) { H2S(r)->body_done = 1; }

/* h[0..nh) as fields to encode, in one allocation, `extra` empty slots
 * first, names lowercased, connection-specific ones left out (*n: the
 * slots used). NULL when out of memory. */
static sws_h2field_t *fields_copy(const sws_header_t *h, size_t nh, size_t extra, size_t *n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < nh; i++)
        bytes += h[i].name_len + h[i].value_len;
    sws_h2field_t *fa = malloc((extra + nh) * sizeof *fa + bytes + 1);
    if (!fa)
        return NULL;
    uint8_t *p = (uint8_t *)(fa + extra + nh);
    *n = extra;
    for (size_t i = 0; i < nh; i++) {
        sws_h2field_t *f = &fa[*n];
        uint8_t *name = p;
        for (size_t k = 0; k < h[i].name_len; k++)
            *p++ = (uint8_t)(h[i].name[k] >= 'A' && h[i].name[k] <= 'Z' ? h[i].name[k] + 32
                                                                        : h[i].name[k]);
        if (sws_conn_specific((const char *)name, h[i].name_len)) {
            p = name;
            continue;
        }
        memcpy(p, h[i].value, h[i].value_len);
        *f = (sws_h2field_t){name, p, (uint32_t)h[i].name_len, (uint32_t)h[i].value_len, 0};
        p += h[i].value_len;
        (*n)++;
    }
    return fa;
}

/* An informational response: a HEADERS without END_STREAM before the
 * final one (RFC 9113 §8.1). Its frame may sit in pending output, so the
 * handler waits on it as on referenced bytes (refs_out): an upstream's
 * 1xx do not pile up for a client that does not read. */
static void h2_interim(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                       size_t reason_len, const sws_header_t *h, size_t nh)
{
    h2s_t *s = H2S(r);
    size_t n;
    if (!s->open || s->submitted || s->hc->dead || status < 102 || status > 199)
        return;
    sws_h2field_t *fa = fields_copy(h, nh, 1, &n);
    if (!fa)
        return; /* a hint lost, not the answer */
    char st[3] = {'1', (char)('0' + status / 10 % 10), (char)('0' + status % 10)};
    fa[0] = (sws_h2field_t){(const uint8_t *)":status", (const uint8_t *)st, 7, 3, 0};
    if (sws_h2sess_headers(s->hc->sess, s->id, fa, n, SWS_H2H_COPY) == 0)
        s->refs_out = 1;
    free(fa);
}

/* Kept until the body's last DATA went (h2_trailers_due): the trailing
 * HEADERS follow it. */
static void h2_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh)
{
    h2s_t *s = H2S(r);
    if (s->no_body || s->tunnel || s->tr)
        return;
    s->tr = fields_copy(h, nh, 0, &s->ntr); /* NULL: dropped, as an HTTP/1 client may see them */
    if (s->tr && !s->ntr) {
        free(s->tr);
        s->tr = NULL;
    }
}

static void field_set(sws_h2field_t *f, const char *n, size_t nl, const char *v, size_t vl)
{
    /* Encoded at once (h2_commit): nothing is kept. Names are lowercase already. */
    *f = (sws_h2field_t){(const uint8_t *)n, (const uint8_t *)v, (uint32_t)nl, (uint32_t)vl, 0};
}

/* The stream's priority for the scheduler (RFC 9218 §8): each parameter
 * the response gave, else the client's (its request field, or its latest
 * PRIORITY_UPDATE), else the default. */
void h2_pri_set(h2conn_t *hc, h2s_t *s)
{
    int u = 3, inc = 0;
    if (s->pri_cli & SWS_PRI_U)
        u = s->cli_u;
    if (s->pri_cli & SWS_PRI_I)
        inc = s->cli_i;
    if (s->pri_rsp & SWS_PRI_U)
        u = s->rsp_u;
    if (s->pri_rsp & SWS_PRI_I)
        inc = s->rsp_i;
    sws_h2sess_priority(hc->sess, s->id, u, inc);
}

/* A Priority field value of the client's (a request field line, or a
 * PRIORITY_UPDATE: `whole`, which replaces what the client said before). */
int h2_pri_client(h2s_t *s, const uint8_t *v, size_t n, int whole)
{
    int u = 0, i = 0;
    int got = sws_parse_priority((const char *)v, n, &u, &i);
    if (got < 0)
        return got;
    if (whole)
        s->pri_cli = 0;
    s->pri_cli |= (uint8_t)got;
    if (got & SWS_PRI_U)
        s->cli_u = (uint8_t)u;
    if (got & SWS_PRI_I)
        s->cli_i = (uint8_t)i;
    return got;
}

/* A PRIORITY_UPDATE for a stream the client has not opened yet (RFC 9218
 * §7.1): kept for the stream when it opens (scalws/priority.h's table, up
 * to SWS_PRI_EARLY). */
void h2_pri_early_keep(h2conn_t *hc, int32_t id, const uint8_t *v, size_t n)
{
    int u = 0, i = 0;
    int got = sws_parse_priority((const char *)v, n, &u, &i);
    if (got < 0)
        return; /* one that cannot be read is ignored (§7.1) */
    sws_pri_early_keep(&hc->early_pri, id, got, u, i);
}

/* The new stream s takes the PRIORITY_UPDATE that came before it, if any. */
void h2_pri_early_take(h2conn_t *hc, h2s_t *s)
{
    int u = 0, i = 0;
    int got = sws_pri_early_take(&hc->early_pri, s->id, &u, &i);
    if (got < 0)
        return;
    s->pri_cli = (uint8_t)got;
    s->cli_u = (uint8_t)u;
    s->cli_i = (uint8_t)i;
    s->pri_early = 1;
}

/* Field lines of buf[0..len) into nva (names already lowercase). */
static size_t parse_lines(char *buf, size_t len, sws_h2field_t *nva, size_t n, size_t max)
{
    char *p = buf, *end = buf + len;
    while (p < end && n < max) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *le = eol ? eol : end;
        char *next = eol ? eol + 1 : end;
        if (le > p && le[-1] == '\r')
            le--;
        char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon && colon > p) {
            char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            char *ve = le;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            size_t nl = (size_t)(colon - p);
            if (!sws_conn_specific(p, nl)) {
                field_set(&nva[n], p, nl, v, (size_t)(ve - v));
                /* A value new with every answer (the proxy's and FastCGI's
                 * request id) would push the connection's useful entries
                 * out of both HPACK tables, one answer at a time (ADR 0022;
                 * the encoder knows the name too) */
                if (nl == 12 && memcmp(p, "x-request-id", 12) == 0)
                    nva[n].flags |= SWS_HPACK_NEVER;
                n++;
            }
        }
        p = next;
    }
    return n;
}

/* Hands the described head to the session (HEADERS, encoded now; the
 * body follows through h2_data_read). -1 when it could not be. */
int h2_commit(sws_engine_t *e, h2s_t *s)
{
    h2conn_t *hc = s->hc;
    if (s->submitted || !s->head_ready)
        return 0;
    if (hc->c.tls && s->site) { /* Strict-Transport-Security */
        size_t n;
        const char *f = sws_site_tls_fields(s->site, &n);
        if (n && (h2_fields(e, &s->resp, f, n), !s->hb_len)) {
            s->submitted = 1;
            return -1;
        }
    }
    s->submitted = 1;
    size_t max = 3 + s->hb_lines; /* :status, server, date, the lines */
    if (max > e->h2.nva_cap) {
        size_t cap = e->h2.nva_cap ? e->h2.nva_cap : 32;
        while (cap < max)
            cap *= 2;
        sws_h2field_t *nv = realloc(e->h2.nva, cap * sizeof *nv);
        if (!nv)
            return -1;
        e->h2.nva = nv;
        e->h2.nva_cap = cap;
    }
    sws_h2field_t *nva = e->h2.nva;
    s->st[0] = (char)('0' + s->status / 100 % 10);
    s->st[1] = (char)('0' + s->status / 10 % 10);
    s->st[2] = (char)('0' + s->status % 10);
    size_t n = 0;
    field_set(&nva[n++], ":status", 7, s->st, 3);
    const char *sl = e->h1.server_line;
    size_t sll = e->h1.server_line_len;
    if (sll > 10) /* "Server: x\r\n" */
        field_set(&nva[n++], "server", 6, sl + 8, sll - 10);
    field_set(&nva[n++], "date", 4, s->date, SWS_HTTP_DATE_LEN);
    size_t fields = n;
    for (char *p = s->hb, *end = s->hb + s->hb_len; p < end && n < max;) {
        uint32_t l[2];
        memcpy(l, p + 1, p[0] == HB_FIELD ? 8 : 4);
        if (p[0] == HB_FIELD) {
            const char *nm = p + HB_FIELD_HEAD;
            field_set(&nva[n], nm, l[0], nm + l[0], l[1]);
            /* the proxy's and FastCGI's request id: never indexed (parse_lines) */
            if (l[0] == 12 && memcmp(nm, "x-request-id", 12) == 0)
                nva[n].flags |= SWS_HPACK_NEVER;
            n++;
            p += HB_FIELD_HEAD + l[0] + l[1];
        } else {
            n = parse_lines(p + HB_LINES_HEAD, l[0], nva, n, max);
            p += HB_LINES_HEAD + l[0];
        }
    }
    if (s->tunnel) { /* RFC 8441 §5: the handshake's proof is HTTP/1's, not ours to pass on */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!(nva[i].nl == 20 && memcmp(nva[i].name, "sec-websocket-accept", 20) == 0))
                nva[k++] = nva[i];
        n = k;
    }
    for (size_t k = fields; k < n; k++) { /* the response's own priority (RFC 9218 §8) */
        int u = 0, i = 0, got;
        if (nva[k].nl != 8 || memcmp(nva[k].name, "priority", 8) != 0 ||
            (got = sws_parse_priority((const char *)nva[k].value, nva[k].vl, &u, &i)) <= 0)
            continue;
        s->pri_rsp |= (uint8_t)got;
        if (got & SWS_PRI_U)
            s->rsp_u = (uint8_t)u;
        if (got & SWS_PRI_I)
            s->rsp_i = (uint8_t)i;
    }
    if (s->pri_rsp)
        h2_pri_set(hc, s); /* before any DATA goes at the old urgency */
    /* the names and values stay where they are (hb, st, date) until the
     * block is encoded: hb until the first DATA, the END_STREAM or the free */
    int rv = sws_h2sess_headers(hc->sess, s->id, nva, n,
                                SWS_H2H_FINAL | (s->no_body ? 0 : SWS_H2H_BODY));
    if (rv != 0) {
        elog_folded(e, "h2 submit", 0, SWS_L_ERROR, "HTTP/2: cannot submit a response");
        return -1;
    }
    return 0;
}

/* The body's next piece may go: the data provider waited. */
static void resume(h2s_t *s)
{
    if (s->submitted && s->deferred && s->open && (s->q_bytes || s->body_done)) {
        s->deferred = 0;
        sws_h2sess_resume(s->hc->sess, s->id);
    }
}

static void h2_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx)
{
    h2s_t *s = H2S(r);
    s->hooks = hooks;
    s->ctx = ctx;
}

/* This stream's own output waits: bytes queued, or referenced bytes framed
 * into output the socket has not taken. Other streams' output does not
 * count: a proxied answer on a connection busy with a large file would
 * otherwise wait on it, and its handler for a drained nobody marked due (a
 * stall the soak found). A handler told so waits for drained, so the
 * answer marks it due; h2_work delivers it once both are gone. */
static int h2_backed_up(const sws_resp_t *r)
{
    h2s_t *s = (h2s_t *)((const char *)r - offsetof(h2s_t, resp));
    int backed = s->q_bytes > 0 || (s->refs_out && s->hc->c.pend != NULL);
    if (backed)
        s->drain_due = 1;
    return backed;
}

static int h2_flush(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    s->commit_seq = s->q_seq;
    if (!s->open || hc->dead)
        return 0; /* sent nowhere; gone comes with the close */
    if (s->head_ready && !s->submitted && h2_commit(e, s) < 0) {
        h2_rst(hc, s->id, H2_INTERNAL_ERROR);
    }
    resume(s);
    h2_send_soon(e, hc); /* at the end of the pass, with the other streams' output */
    h2_backed_up(r); /* drained comes when what it gave is out */
    return 0;
}

static void h2_want_body(sws_engine_t *e, sws_resp_t *r, int on)
{
    h2s_t *s = H2S(r);
    s->want_body = on;
    if (on && (s->bin_len || (s->req_done && !s->fin_given))) {
        /* h2_work hands it over: later in the connection's own event
         * (a handler started from its input: a proxy's GET), else at the
         * end of the pass; not through the ready list (an eventfd write
         * and a wake-up per proxied request) */
        if (s->hc->in_event)
            s->hc->work_due = 1;
        else
            h2_send_soon(e, s->hc);
    }
}

/* A marker dropped before its body was framed: nothing references it. */
static void q_release_now(qitem_t *q)
{
    if (q->kind == Q_HOLD) {
        q->hold->release(q->hold);
        free(q);
    } else {
        h2_q_release(&q->h);
    }
}

/* Drops the queue from the first piece whose seq is `from` on. */
void h2_q_cut(h2s_t *s, uint64_t from)
{
    qitem_t **pp = &s->qh, *last = NULL;
    while (*pp && (*pp)->seq < from) {
        last = *pp;
        pp = &(*pp)->next;
    }
    qitem_t *q = *pp;
    *pp = NULL;
    s->qt = last;
    while (q) {
        qitem_t *next = q->next;
        if (h2_q_is_data(q)) {
            s->q_bytes -= q->len;
            s->sent -= q->len;
            h2_q_drop(q);
        } else {
            q_release_now(q);
        }
        q = next;
    }
}

static void h2_discard(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    if (!s->submitted) {
        hb_lost(s);
        s->head_ready = 0;
    }
    h2_q_cut(s, s->commit_seq); /* what was given since the last flush */
    s->body_done = 0;
    free(s->tr);
    s->tr = NULL;
}

/* The handler lets go of what its queued pieces reference (its read
 * buffer) when it finishes: they are copied, to go at the end of the pass.
 * NULL-safe: a piece that cannot be copied fails the connection. */
static void refs_copied(sws_engine_t *e, h2s_t *s)
{
    for (qitem_t **pp = &s->qh; *pp; pp = &(*pp)->next) {
        qitem_t *q = *pp;
        if (q->kind != Q_REF || !q->len)
            continue;
        qitem_t *c = malloc(sizeof *c + q->len);
        if (!c) {
            h2_fail(e, s->hc);
            return;
        }
        *c = *q;
        c->kind = Q_COPY;
        memcpy(c->data, q->p, q->len);
        c->p = c->data;
        if (s->qt == q)
            s->qt = c;
        *pp = c;
        free(q);
    }
}

static void h2_finish(sws_engine_t *e, sws_resp_t *r, int how)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    h2s_log(e, s, &s->log, s->status);
    s->live = 0;
    s->hooks = NULL;
    hc->n_live--;
    if (!s->open) {
        h2s_free(e, s); /* the client had all of it, or reset the stream */
        h2_wake(e, hc);    /* an idle connection's timer, or its end after GOAWAY */
        return;
    }
    if (how == SWS_FIN_ABORT || !s->head_ready || (!s->body_done && !s->no_body)) {
        /* cut short: the client must see it, never a complete-looking body */
        h2_rst(hc, s->id, H2_INTERNAL_ERROR);
    } else {
        if (!s->submitted && h2_commit(e, s) < 0)
            h2_rst(hc, s->id, H2_INTERNAL_ERROR);
        resume(s);
    }
    if (s->bin_len) { /* request body the handler never took */
        h2_consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
        h2s_body_timer(e, s); /* read past, with its window back */
    }
    if (!s->submitted || s->qh)
        refs_copied(e, s);
    h2_send_soon(e, hc); /* and the connection's timers, its end after GOAWAY */
    if (hc->in_event)
        h2_wake(e, hc);
}

static void h2_close(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    if (!s->live)
        return;
    if (s->open)
        h2_rst(hc, s->id, H2_INTERNAL_ERROR);
    h2s_gone(e, s);
    if (!s->open) {
        h2s_free(e, s);
    } else if (s->bin_len) {
        h2_consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
    h2_send_soon(e, hc);
}

const sws_resp_ops_t h2_resp_ops = {
    h2_head, h2_field, h2_fields, h2_start_body, h2_data, h2_file, h2_hold_file, h2_hold_heap,
    h2_done, h2_attach, h2_flush, h2_backed_up, h2_want_body, h2_discard, h2_finish, h2_close,
    h2_hold, h2_interim, h2_trailers,
};
