/* csrc/http/h3/h3sess.c and h3sess_recv.c (RFC 9114) without QUIC or the
 * engine, with libnghttp3's client session as the peer and the oracle:
 * stream bytes go between the two sessions in memory (each side's writes
 * read by the other in order, acknowledged at once or later).
 *  - exchanges: GET with a body in pieces, POST with a request body, HEAD,
 *    1xx then the final answer, trailers, a body read later (deferred),
 *    many requests on a client whose QPACK encoder fills our dynamic table
 *    (our decoder stream taken by its encoder); the client gets exactly
 *    what the server gave; acknowledgements report the body bytes;
 *  - RFC 9218's order: a more urgent stream's data goes first, also when
 *    its PRIORITY_UPDATE came before the request (kept, bounded; one for
 *    a stream past the client's stream limit is H3_ID_ERROR);
 *  - GOAWAY: the client learns it, a later request is refused;
 *  - crafted bytes, each the error RFC 9114 names: DATA before HEADERS,
 *    SETTINGS on a request stream, a control stream without SETTINGS
 *    first, a setting twice, an HTTP/2 setting, a second control stream,
 *    the control stream closed, a frame cut by the stream's end, an
 *    uppercase name, content-length against the body, too many blocked
 *    streams, unknown frame and stream types passed over; every crafted
 *    request also fed one byte at a time, with the same outcome. */
#define _GNU_SOURCE
#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "http/h3/h3sess_int.h"

/* ---- the server side: our session, and what it told us ---- */

typedef struct {
    int64_t id;
    char fields[2048];         /* "name: value\n" as they came */
    size_t flen;
    uint8_t body_in[65536];
    size_t body_in_len;
    int requested, fin, ended, closed, too_big;
    uint64_t acked;
    /* the answer the test gives */
    const char *resp_body[4];
    int deferred;              /* read_data says DEFERRED until cleared */
    int trailers;
    int given;                 /* pieces of resp_body given */
} sreq_t;

typedef struct {
    sws_h3sess_t s;
    sreq_t req[64];
    int nreq;
    int64_t stop_id, reset_id;
    uint64_t stop_code, reset_code;
    int consumed;
} server_t;

static sreq_t *sreq(server_t *sv, void *su) { return su; }

static void *s_begin(void *u, int64_t id)
{
    server_t *sv = u;
    sreq_t *r = &sv->req[sv->nreq++];
    memset(r, 0, sizeof *r);
    r->id = id;
    return r;
}

static int s_header(void *u, void *su, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    sreq_t *r = sreq(u, su);
    r->flen += (size_t)snprintf(r->fields + r->flen, sizeof r->fields - r->flen, "%.*s: %.*s\n",
                                (int)nl, n, (int)vl, v);
    return 0;
}

static void s_too_big(void *u, void *su) { sreq(u, su)->too_big = 1; }
static void s_request(void *u, void *su, int fin)
{
    sreq(u, su)->requested = 1;
    sreq(u, su)->fin = fin;
}

static int s_data(void *u, void *su, const uint8_t *p, size_t n)
{
    sreq_t *r = sreq(u, su);
    memcpy(r->body_in + r->body_in_len, p, n);
    r->body_in_len += n;
    return 0;
}

static void s_end(void *u, void *su) { sreq(u, su)->ended = 1; }
static void s_consume(void *u, int64_t id, size_t n)
{
    (void)id;
    ((server_t *)u)->consumed += (int)n;
}
static void s_close(void *u, void *su, int64_t id, uint64_t code)
{
    (void)id, (void)code;
    sreq(u, su)->closed = 1;
}
static void s_acked(void *u, void *su, uint64_t n) { sreq(u, su)->acked += n; }

static ssize_t s_read(void *u, void *su, sws_h3vec_t *vec, size_t nvec, uint32_t *flags)
{
    sreq_t *r = sreq(u, su);
    if (r->deferred)
        return SWS_H3D_DEFERRED;
    size_t n = 0;
    while (n < nvec && r->given < 4 && r->resp_body[r->given]) {
        vec[n].base = (const uint8_t *)r->resp_body[r->given];
        vec[n].len = strlen(r->resp_body[r->given]);
        n++;
        r->given++;
    }
    if (r->given == 4 || !r->resp_body[r->given])
        *flags |= SWS_H3D_EOF | (r->trailers ? SWS_H3D_TRAILERS : 0);
    return (ssize_t)n;
}

static void s_trailers(void *u, void *su, int64_t id)
{
    (void)su;
    static const sws_hpack_field_t tr[] = {{(const uint8_t *)"x-sum", (const uint8_t *)"42", 5, 2, 0}};
    sws_h3sess_trailers(&((server_t *)u)->s, id, tr, 1);
}

static void s_stop(void *u, int64_t id, uint64_t code)
{
    ((server_t *)u)->stop_id = id;
    ((server_t *)u)->stop_code = code;
}

static void s_reset(void *u, int64_t id, uint64_t code)
{
    ((server_t *)u)->reset_id = id;
    ((server_t *)u)->reset_code = code;
}

static const sws_h3cb_t scb = {s_begin, s_header, s_too_big, s_request, s_data, s_end, s_consume,
                               s_close, s_acked, s_read, s_trailers, s_stop, s_reset};

/* The exchanges' sessions share one pool of spares, as a worker's do
 * (small, so that it fills and empties); crafted bytes go to sessions
 * without one. */
static sws_h3pool_t pool = {.max_runs = 8, .max_sts = 2};

static void server_init_pool(server_t *sv, uint32_t qpack_table, uint32_t blocked,
                             sws_h3pool_t *p)
{
    memset(sv, 0, sizeof *sv);
    sv->stop_id = sv->reset_id = -1;
    sws_h3sess_conf_t conf = {qpack_table, blocked, 16384, p};
    if (sws_h3sess_init(&sv->s, &conf, &scb, sv) != 0 || sws_h3sess_bind(&sv->s, 3, 7, 11) != 0)
        abort();
}

static void server_init(server_t *sv, uint32_t qpack_table, uint32_t blocked)
{
    server_init_pool(sv, qpack_table, blocked, &pool);
}

/* ---- the client: nghttp3 ---- */

typedef struct {
    char fields[4096];         /* every head and trailer section, "name: value\n", "--\n" between */
    size_t flen;
    char body[65536];
    size_t blen;
    int ended, reset;
    uint64_t reset_code;
} creq_t;

typedef struct {
    nghttp3_conn *c;
    creq_t req[64];
    int64_t goaway;
    const char *post_body;     /* the request body of the next request (NULL: none) */
} client_t;

static creq_t *creq(client_t *cl, int64_t id) { return &cl->req[id / 4 % 64]; }

static int c_header(nghttp3_conn *c, int64_t id, int32_t token, nghttp3_rcbuf *name,
                    nghttp3_rcbuf *value, uint8_t flags, void *u, void *su)
{
    (void)c, (void)token, (void)flags, (void)su;
    creq_t *r = creq(u, id);
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
    r->flen += (size_t)snprintf(r->fields + r->flen, sizeof r->fields - r->flen, "%.*s: %.*s\n",
                                (int)n.len, n.base, (int)v.len, v.base);
    return 0;
}

static int c_end_headers(nghttp3_conn *c, int64_t id, int fin, void *u, void *su)
{
    (void)c, (void)fin, (void)su;
    creq_t *r = creq(u, id);
    r->flen += (size_t)snprintf(r->fields + r->flen, sizeof r->fields - r->flen, "--\n");
    return 0;
}

static int c_data(nghttp3_conn *c, int64_t id, const uint8_t *p, size_t n, void *u, void *su)
{
    (void)c, (void)su;
    creq_t *r = creq(u, id);
    memcpy(r->body + r->blen, p, n);
    r->blen += n;
    return 0;
}

static int c_end_stream(nghttp3_conn *c, int64_t id, void *u, void *su)
{
    (void)c, (void)su;
    creq(u, id)->ended = 1;
    return 0;
}

static int c_reset(nghttp3_conn *c, int64_t id, uint64_t code, void *u, void *su)
{
    (void)c, (void)su;
    creq(u, id)->reset = 1;
    creq(u, id)->reset_code = code;
    return 0;
}

static int c_shutdown(nghttp3_conn *c, int64_t id, void *u)
{
    (void)c;
    ((client_t *)u)->goaway = id;
    return 0;
}

static nghttp3_ssize c_read_body(nghttp3_conn *c, int64_t id, nghttp3_vec *vec, size_t n,
                                 uint32_t *flags, void *u, void *su)
{
    (void)c, (void)id, (void)n, (void)su;
    const char *b = su;
    vec[0].base = (uint8_t *)b;
    vec[0].len = strlen(b);
    *flags |= NGHTTP3_DATA_FLAG_EOF;
    return 1;
}

static void client_init(client_t *cl, size_t qpack_table)
{
    memset(cl, 0, sizeof *cl);
    cl->goaway = -1;
    nghttp3_callbacks cb = {0};
    cb.recv_header = c_header;
    cb.end_headers = c_end_headers;
    cb.recv_trailer = c_header;
    cb.end_trailers = c_end_headers;
    cb.recv_data = c_data;
    cb.end_stream = c_end_stream;
    cb.reset_stream = c_reset;
    cb.shutdown = c_shutdown;
    nghttp3_settings st;
    nghttp3_settings_default(&st);
    st.qpack_max_dtable_capacity = 4096;
    st.qpack_blocked_streams = 100;
    st.qpack_encoder_max_dtable_capacity = qpack_table;
    if (nghttp3_conn_client_new(&cl->c, &cb, &st, NULL, cl) != 0 ||
        nghttp3_conn_bind_control_stream(cl->c, 2) != 0 ||
        nghttp3_conn_bind_qpack_streams(cl->c, 6, 10) != 0)
        abort();
}

static void client_get(client_t *cl, int64_t id, const char *method, const char *path,
                       const char *extra_name, const char *extra_value, const char *body)
{
    nghttp3_nv nv[6] = {
        {(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
        {(uint8_t *)":authority", (uint8_t *)"example.com", 10, 11, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)"user-agent", (uint8_t *)"test/1", 10, 6, 0},
    };
    size_t n = 5;
    if (extra_name)
        nv[n++] = (nghttp3_nv){(uint8_t *)extra_name, (uint8_t *)extra_value, strlen(extra_name),
                               strlen(extra_value), 0};
    static const nghttp3_data_reader dr = {c_read_body};
    if (nghttp3_conn_submit_request(cl->c, id, nv, n, body ? &dr : NULL, (void *)body) != 0)
        abort();
}

/* ---- moving bytes ---- */

/* Client to server and back until neither has anything; acks at once
 * unless hold_acks. Returns the server's last read error (0: none). */
static int64_t pump(client_t *cl, server_t *sv, int hold_acks)
{
    int64_t err = 0;
    for (int round = 0; round < 1000; round++) {
        int moved = 0;
        for (;;) { /* client -> server */
            int64_t sid;
            int fin;
            nghttp3_vec v[16];
            nghttp3_ssize k = nghttp3_conn_writev_stream(cl->c, &sid, &fin, v, 16);
            if (k < 0)
                abort();
            if (sid < 0)
                break;
            size_t total = 0;
            uint8_t buf[65536];
            for (nghttp3_ssize i = 0; i < k; i++) {
                memcpy(buf + total, v[i].base, v[i].len);
                total += v[i].len;
            }
            int64_t r = sws_h3sess_read(&sv->s, sid, (const uint8_t *)guard_place(buf, total),
                                        total, fin);
            if (r < 0)
                err = r;
            nghttp3_conn_add_write_offset(cl->c, sid, total);
            nghttp3_conn_add_ack_offset(cl->c, sid, total);
            moved = 1;
            if (!k && !fin)
                break;
            if (err)
                return err;
        }
        for (;;) { /* server -> client */
            int64_t sid;
            int fin;
            sws_h3vec_t v[16];
            ssize_t k = sws_h3sess_writev(&sv->s, &sid, &fin, v, 16);
            if (k < 0)
                return k;
            if (sid < 0)
                break;
            size_t total = 0;
            uint8_t buf[65536];
            for (ssize_t i = 0; i < k; i++) {
                memcpy(buf + total, v[i].base, v[i].len);
                total += v[i].len;
            }
            if (nghttp3_conn_read_stream(cl->c, sid, buf, total, fin) < 0)
                abort();
            sws_h3sess_written(&sv->s, sid, total);
            if (!hold_acks)
                sws_h3sess_acked_bytes(&sv->s, sid, total);
            moved = 1;
        }
        if (!moved)
            break;
    }
    return err;
}

/* ---- exchanges ---- */

static void exchanges(void)
{
    server_t *sv = calloc(1, sizeof *sv);
    client_t *cl = calloc(1, sizeof *cl);
    server_init(sv, 4096, 100);
    client_init(cl, 4096);
    /* GET: a body in three pieces */
    client_get(cl, 0, "GET", "/a", NULL, NULL, NULL);
    CHECK(pump(cl, sv, 0) == 0, "GET");
    sreq_t *r = &sv->req[0];
    CHECK(r->requested && r->fin, "the request came whole");
    CHECK(strcmp(r->fields, ":method: GET\n:scheme: https\n:authority: example.com\n:path: /a\n"
                            "user-agent: test/1\n") == 0, "fields: %s", r->fields);
    sws_hpack_field_t head[] = {{(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0},
                                {(const uint8_t *)"content-type", (const uint8_t *)"text/plain", 12, 10, 0},
                                {(const uint8_t *)"set-cookie", (const uint8_t *)"a=b", 10, 3, 0}};
    r->resp_body[0] = "hello, ";
    r->resp_body[1] = "HTTP/3 ";
    r->resp_body[2] = "world";
    CHECK(sws_h3sess_response(&sv->s, 0, head, 3, 1) == 0, "response");
    CHECK(pump(cl, sv, 0) == 0, "the answer");
    creq_t *c = creq(cl, 0);
    CHECK(strcmp(c->fields, ":status: 200\ncontent-type: text/plain\nset-cookie: a=b\n--\n") == 0,
          "client fields: %s", c->fields);
    CHECK(c->blen == 19 && memcmp(c->body, "hello, HTTP/3 world", 19) == 0 && c->ended,
          "client body %zu", c->blen);
    CHECK(r->acked == 19, "acked %llu", (unsigned long long)r->acked);
    CHECK(sws_h3sess_close_stream(&sv->s, 0, H3_NO_ERROR) == 0 && r->closed, "close");
    t_end();

    /* POST with a body; the answer has a 103 first, and trailers */
    client_get(cl, 4, "POST", "/up", "content-length", "11", "hello world");
    CHECK(pump(cl, sv, 0) == 0, "POST");
    r = &sv->req[1];
    CHECK(r->requested && !r->fin && r->ended && r->body_in_len == 11 &&
          memcmp(r->body_in, "hello world", 11) == 0, "request body %zu", r->body_in_len);
    sws_hpack_field_t early[] = {{(const uint8_t *)":status", (const uint8_t *)"103", 7, 3, 0},
                                 {(const uint8_t *)"link", (const uint8_t *)"</s.css>", 4, 8, 0}};
    CHECK(sws_h3sess_info(&sv->s, 4, early, 2) == 0, "1xx");
    r->resp_body[0] = "ok";
    r->trailers = 1;
    CHECK(sws_h3sess_response(&sv->s, 4, head, 1, 1) == 0, "final");
    CHECK(sws_h3sess_info(&sv->s, 4, early, 2) < 0, "no 1xx after the final head");
    CHECK(pump(cl, sv, 0) == 0, "answer");
    c = creq(cl, 4);
    CHECK(strcmp(c->fields, ":status: 103\nlink: </s.css>\n--\n:status: 200\n--\nx-sum: 42\n--\n") == 0,
          "client fields: %s", c->fields);
    CHECK(c->blen == 2 && c->ended, "body and end");
    t_end();

    /* HEAD: no body, the end with the head; a body read later */
    client_get(cl, 8, "HEAD", "/h", NULL, NULL, NULL);
    client_get(cl, 12, "GET", "/later", NULL, NULL, NULL);
    CHECK(pump(cl, sv, 0) == 0, "HEAD and GET");
    CHECK(sws_h3sess_response(&sv->s, 8, head, 1, 0) == 0, "HEAD's answer");
    r = &sv->req[3];
    r->deferred = 1;
    r->resp_body[0] = "late";
    CHECK(sws_h3sess_response(&sv->s, 12, head, 1, 1) == 0, "GET's head");
    CHECK(pump(cl, sv, 0) == 0, "heads");
    CHECK(creq(cl, 8)->ended && creq(cl, 8)->blen == 0, "HEAD ended");
    CHECK(!creq(cl, 12)->ended && creq(cl, 12)->blen == 0, "the deferred body waits");
    r->deferred = 0;
    sws_h3sess_resume(&sv->s, 12);
    CHECK(pump(cl, sv, 0) == 0, "resumed");
    CHECK(creq(cl, 12)->ended && creq(cl, 12)->blen == 4, "the deferred body came");
    t_end();

    /* many requests: the client's encoder uses our table; acks held */
    int64_t id = 16;
    for (int i = 0; i < 40; i++, id += 4) {
        char v[32];
        snprintf(v, sizeof v, "token-%d", i % 3);
        client_get(cl, id, "GET", "/many", "authorization", v, NULL);
    }
    CHECK(pump(cl, sv, 1) == 0, "40 requests");
    CHECK(sv->s.dec.inserts > 0, "the client inserted into our table");
    int good = 0;
    for (int i = 4; i < 44; i++)
        good += sv->req[i].requested && strstr(sv->req[i].fields, "authorization: token-") != NULL;
    CHECK(good == 40, "%d of 40 decoded", good);
    CHECK(sv->s.fatal == 0, "no error");
    /* heads of every length: a static answer's (encoded through the pool's
     * buffer into its run), 20 longer fields (through the buffer into an
     * allocation of their own), 40 (past the buffer: encoded in their own) */
    static const int nfields[] = {9, 9, 9, 20, 40};
    for (int k = 0; k < 5; k++) {
        static char names[40][24], values[40][64];
        sws_hpack_field_t hf[41];
        char want[4096];
        size_t wl = (size_t)snprintf(want, sizeof want, ":status: 200\n");
        hf[0] = (sws_hpack_field_t){(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0};
        for (int i = 0; i < nfields[k]; i++) {
            snprintf(names[i], sizeof names[i], "x-field-%d", i);
            if (nfields[k] == 9)
                snprintf(values[i], sizeof values[i], "\"%x-%d\"", 0x6b15de15u + k, i);
            else
                snprintf(values[i], sizeof values[i], "value %d of answer %d, %s", i, k,
                         "long enough");
            hf[i + 1] = (sws_hpack_field_t){(const uint8_t *)names[i], (const uint8_t *)values[i],
                                            (uint32_t)strlen(names[i]), (uint32_t)strlen(values[i]),
                                            0};
            wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s: %s\n", names[i], values[i]);
        }
        snprintf(want + wl, sizeof want - wl, "--\n");
        int64_t rid = 16 + 4 * k;
        CHECK(sws_h3sess_response(&sv->s, rid, hf, (size_t)nfields[k] + 1, 0) == 0, "answer %d", k);
        CHECK(pump(cl, sv, 0) == 0, "answer %d sent", k);
        CHECK(strcmp(creq(cl, rid)->fields, want) == 0, "answer %d: %s", k, creq(cl, rid)->fields);
    }
    sws_h3sess_free(&sv->s);
    nghttp3_conn_del(cl->c);
    free(sv);
    free(cl);
    t_end();
}

/* Answers requests 0 and 4 (the first two the server took) and returns
 * the request stream writev offers first, after our own streams
 * (control, QPACK). */
static int64_t first_of_two(server_t *sv)
{
    sws_hpack_field_t head[] = {{(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0}};
    sv->req[0].resp_body[0] = "zero";
    sv->req[1].resp_body[0] = "four";
    sws_h3sess_response(&sv->s, 0, head, 1, 1);
    sws_h3sess_response(&sv->s, 4, head, 1, 1);
    int64_t sid = -1;
    int fin;
    sws_h3vec_t v[16];
    for (int i = 0; i < 8; i++) {
        ssize_t k = sws_h3sess_writev(&sv->s, &sid, &fin, v, 16);
        CHECK(k >= 0, "writev");
        if (k < 0 || sid < 0 || sid == 0 || sid == 4)
            break;
        size_t total = 0;
        for (ssize_t j = 0; j < k; j++)
            total += v[j].len;
        sws_h3sess_written(&sv->s, sid, total);
    }
    return sid;
}

/* A PRIORITY_UPDATE (0xF0700) for stream id on the client's control
 * stream (2), after its SETTINGS: what sws_h3sess_read returned. */
static int64_t send_priority_update(server_t *sv, int64_t id, const char *value)
{
    uint8_t pl[64], b[80] = {0x80, 0x0f, 0x07, 0x00};
    uint8_t *o = h3_put_varint(pl, (uint64_t)id);
    memcpy(o, value, strlen(value));
    size_t n = (size_t)(o - pl) + strlen(value);
    o = h3_put_varint(b + 4, n);
    memcpy(o, pl, n);
    return sws_h3sess_read(&sv->s, 2, b, (size_t)(o - b) + n, 0);
}

/* The pair's sessions ended, and new ones begun: the next case. */
static void restart(server_t *sv, client_t *cl)
{
    sws_h3sess_free(&sv->s);
    nghttp3_conn_del(cl->c);
    server_init(sv, 0, 0);
    client_init(cl, 0);
}

/* s->reqs in RFC 9218's order (h3sess.c's before()), its links whole;
 * the request streams on it, in order, into ids (at most max). */
static int reqs_in_order(const sws_h3sess_t *s, int64_t *ids, int max)
{
    int n = 0, ok = 1;
    const sws_h3st_t *prev = NULL;
    for (const sws_h3st_t *st = s->reqs; st; prev = st, st = st->next) {
        ok &= st->prev == prev;
        if (prev) {
            uint64_t a = prev->inc ? prev->seq : (uint64_t)prev->id;
            uint64_t b = st->inc ? st->seq : (uint64_t)st->id;
            ok &= prev->urgency < st->urgency ||
                  (prev->urgency == st->urgency &&
                   (prev->inc < st->inc || (prev->inc == st->inc && a <= b)));
        }
        if (n < max)
            ids[n++] = st->id;
    }
    ok &= s->reqs_tail == prev;
    return ok ? n : -1;
}

/* Takes what writev offers until it offers nothing: of each request
 * stream's offer `take` bytes (0: all of it), our own streams' whole.
 * The request streams offered, one entry an offer, into order. */
static int offers(server_t *sv, size_t take, int64_t *order, int max)
{
    int n = 0;
    for (int guard = 0; guard < 256 && n < max; guard++) {
        int64_t sid = -1;
        int fin;
        sws_h3vec_t v[16];
        ssize_t k = sws_h3sess_writev(&sv->s, &sid, &fin, v, 16);
        if (k < 0 || sid < 0)
            break;
        size_t total = 0;
        for (ssize_t j = 0; j < k; j++)
            total += v[j].len;
        if ((sid & 3) == 0) {
            order[n++] = sid;
            if (take && take < total)
                total = take;
        }
        sws_h3sess_written(&sv->s, sid, total);
        CHECK(reqs_in_order(&sv->s, NULL, 0) >= 0, "the list's order after an offer of %lld",
              (long long)sid);
    }
    return n;
}

/* The scheduler's list is kept in RFC 9218's order as streams come,
 * change priority and take their turns; writev offers its first ready
 * stream. */
static void scheduler_order(void)
{
    sws_hpack_field_t head[] = {{(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0}};
    server_t *sv = calloc(1, sizeof *sv);
    client_t *cl = calloc(1, sizeof *cl);
    server_init(sv, 0, 0);
    client_init(cl, 0);
    client_get(cl, 0, "GET", "/a", NULL, NULL, NULL);
    client_get(cl, 4, "GET", "/b", "priority", "u=1", NULL);
    client_get(cl, 8, "GET", "/c", "priority", "u=3, i", NULL);
    client_get(cl, 12, "GET", "/d", "priority", "i", NULL);
    client_get(cl, 16, "GET", "/e", "priority", "u=5", NULL);
    CHECK(pump(cl, sv, 0) == 0 && sv->nreq == 5, "five requests");
    int64_t ids[8];
    int n = reqs_in_order(&sv->s, ids, 8);
    CHECK(n == 5 && ids[0] == 4 && ids[1] == 0 && ids[2] == 8 && ids[3] == 12 && ids[4] == 16,
          "placed as they came: %d: %lld %lld %lld %lld %lld", n, (long long)ids[0],
          (long long)ids[1], (long long)ids[2], (long long)ids[3], (long long)ids[4]);
    CHECK(send_priority_update(sv, 16, "u=0") == 6 + 3, "an update for an open stream");
    sws_h3sess_set_priority(&sv->s, 4, 6, 0); /* as a handler may */
    n = reqs_in_order(&sv->s, ids, 8);
    CHECK(n == 5 && ids[0] == 16 && ids[1] == 0 && ids[2] == 8 && ids[3] == 12 && ids[4] == 4,
          "moved: %lld first, %lld last", (long long)ids[0], (long long)ids[4]);
    for (int k = 0; k < 5; k++) {
        sv->req[k].resp_body[0] = "some body";
        CHECK(sws_h3sess_response(&sv->s, sv->req[k].id, head, 1, 1) == 0, "answer %d", k);
    }
    int64_t order[64];
    n = offers(sv, 0, order, 64);
    int m = 0; /* a stream's head and body can be two offers: each stream's first */
    for (int k = 0; k < n; k++) {
        int seen = 0;
        for (int j = 0; j < m; j++)
            seen |= order[j] == order[k];
        if (!seen)
            order[m++] = order[k];
    }
    n = m;
    CHECK(n == 5 && order[0] == 16 && order[1] == 0 && order[4] == 4 &&
          ((order[2] == 8 && order[3] == 12) || (order[2] == 12 && order[3] == 8)),
          "offered whole, most urgent first: %d: %lld %lld %lld %lld %lld", n,
          (long long)order[0], (long long)order[1], (long long)order[2], (long long)order[3],
          (long long)order[4]);
    CHECK(sv->s.reqs == NULL && sv->s.reqs_tail == NULL, "all off the list");
    /* incremental streams of one urgency take turns, a byte an offer */
    restart(sv, cl);
    client_get(cl, 0, "GET", "/a", "priority", "i", NULL);
    client_get(cl, 4, "GET", "/b", "priority", "i", NULL);
    client_get(cl, 8, "GET", "/c", "priority", "i", NULL);
    CHECK(pump(cl, sv, 0) == 0 && sv->nreq == 3, "three requests");
    for (int k = 0; k < 3; k++) {
        sv->req[k].resp_body[0] = "0123456789";
        CHECK(sws_h3sess_response(&sv->s, sv->req[k].id, head, 1, 1) == 0, "answer %d", k);
    }
    n = offers(sv, 1, order, 12);
    int turns = n == 12;
    for (int k = 3; k < n; k++)
        turns &= order[k] == order[k - 3] && order[k] != order[k - 1];
    CHECK(turns && order[0] != order[1] && order[1] != order[2] && order[0] != order[2],
          "in turn: %d: %lld %lld %lld %lld %lld %lld", n, (long long)order[0],
          (long long)order[1], (long long)order[2], (long long)order[3], (long long)order[4],
          (long long)order[5]);
    sws_h3sess_free(&sv->s);
    nghttp3_conn_del(cl->c);
    free(sv);
    free(cl);
    t_end();
}

static void urgency_and_goaway(void)
{
    server_t *sv = calloc(1, sizeof *sv);
    client_t *cl = calloc(1, sizeof *cl);
    server_init(sv, 0, 0);
    client_init(cl, 0);
    client_get(cl, 0, "GET", "/low", NULL, NULL, NULL);
    client_get(cl, 4, "GET", "/high", "priority", "u=0", NULL);
    CHECK(pump(cl, sv, 0) == 0, "two requests");
    int64_t sid = first_of_two(sv);
    CHECK(sid == 4, "u=0 goes first, not %lld", (long long)sid);
    t_end();
    /* RFC 9218 7: the control stream's PRIORITY_UPDATE for stream 4 came
     * before the request (the two travel on different streams): kept,
     * and taken over the request's own u=7 */
    restart(sv, cl);
    CHECK(pump(cl, sv, 0) == 0 && sv->s.peer_ctrl == 2, "the client's control stream");
    CHECK(send_priority_update(sv, 4, "u=(") == 6 + 3 && sv->s.early_pri.live == 0,
          "one that cannot be read is not kept");
    CHECK(send_priority_update(sv, 4, "u=0") == 6 + 3 && sv->s.early_pri.live == 1, "kept");
    client_get(cl, 0, "GET", "/low", NULL, NULL, NULL);
    client_get(cl, 4, "GET", "/high", "priority", "u=7", NULL);
    CHECK(pump(cl, sv, 0) == 0, "two requests");
    CHECK(sv->s.early_pri.live == 0, "taken when stream 4 opened: %u left", sv->s.early_pri.live);
    sid = first_of_two(sv);
    CHECK(sid == 4, "the early u=0 goes first, not %lld", (long long)sid);
    t_end();
    /* ... and a bounded number of them: the newest SWS_PRI_EARLY */
    restart(sv, cl);
    CHECK(pump(cl, sv, 0) == 0, "the client's control stream");
    for (int64_t id = 8; id < 8 + 4 * 20; id += 4)
        CHECK(send_priority_update(sv, id, "u=1") == (id < 64 ? 6 : 7) + 3, "update for %lld",
              (long long)id);
    int newest = 0;
    for (uint32_t k = 0; k < SWS_PRI_EARLY; k++)
        newest += sv->s.early_pri.e[k].id1 >= 8 + 4 * 12 + 1; /* ID + 1 */
    CHECK(sv->s.early_pri.live == SWS_PRI_EARLY && newest == SWS_PRI_EARLY,
          "%u kept, %d of them the newest", sv->s.early_pri.live, newest);
    t_end();
    /* ... for a stream the client may open: two at first (QUIC's limit),
     * one more for each closed; beyond, H3_ID_ERROR (RFC 9218 7.2) */
    restart(sv, cl);
    CHECK(pump(cl, sv, 0) == 0, "the client's control stream");
    sv->s.conf.max_requests = 2;
    CHECK(send_priority_update(sv, 4, "u=1") == 6 + 3, "stream 4, the second the client may open");
    CHECK(send_priority_update(sv, 8, "u=1") == -H3_ID_ERROR, "stream 8: past the limit");
    restart(sv, cl);
    CHECK(pump(cl, sv, 0) == 0, "the client's control stream");
    sv->s.conf.max_requests = 2;
    CHECK(sws_h3sess_close_stream(&sv->s, 0, H3_NO_ERROR) == 0, "stream 0 closed");
    CHECK(send_priority_update(sv, 8, "u=1") == 6 + 3, "stream 8, once 0 closed");
    CHECK(send_priority_update(sv, 12, "u=1") == -H3_ID_ERROR, "stream 12: past it");
    t_end();
    restart(sv, cl);
    client_get(cl, 0, "GET", "/a", NULL, NULL, NULL);
    CHECK(pump(cl, sv, 0) == 0, "request");
    CHECK(sws_h3sess_goaway(&sv->s) == 0 && pump(cl, sv, 0) == 0, "GOAWAY");
    CHECK(cl->goaway == 4, "the client was told 4, not %lld", (long long)cl->goaway);
    /* a request the client sent before it saw it */
    uint8_t b[64];
    sws_hpack_field_t f[] = {{(const uint8_t *)":method", (const uint8_t *)"GET", 7, 3, 0}};
    size_t n = sws_qpack_encode(f, 1, b + 2);
    b[0] = F_HEADERS;
    b[1] = (uint8_t)n;
    CHECK(sws_h3sess_read(&sv->s, 8, b, n + 2, 1) == (int64_t)(n + 2), "read past");
    CHECK(sv->reset_id == 8 && sv->reset_code == H3_REQUEST_REJECTED && sv->nreq == 1,
          "refused: %lld %llx", (long long)sv->reset_id, (unsigned long long)sv->reset_code);
    /* the first GOAWAY of a stop that began during the handshake, sent as
     * the client's first requests are on their way: the largest ID, so
     * they are served; a later one may lower it, not raise it */
    restart(sv, cl);
    client_get(cl, 0, "GET", "/a", NULL, NULL, NULL);
    client_get(cl, 4, "GET", "/b", NULL, NULL, NULL);
    CHECK(sws_h3sess_goaway_soon(&sv->s) == 0 && pump(cl, sv, 0) == 0, "GOAWAY soon");
    CHECK(cl->goaway == ((int64_t)1 << 62) - 4, "the client was told %lld", (long long)cl->goaway);
    CHECK(sv->nreq == 2 && sv->reset_id < 0, "both served: %d %lld", sv->nreq,
          (long long)sv->reset_id);
    CHECK(sws_h3sess_goaway(&sv->s) == 0 && pump(cl, sv, 0) == 0 && cl->goaway == 8,
          "then lowered to 8, not %lld", (long long)cl->goaway);
    sws_h3sess_free(&sv->s);
    nghttp3_conn_del(cl->c);
    free(sv);
    free(cl);
    t_end();
}

/* ---- crafted bytes ---- */

/* A section of f[] as a HEADERS frame, hex. */
static void headers_hex(const sws_hpack_field_t *f, size_t nf, char *out)
{
    uint8_t sec[1024], fr[1100], *p = fr;
    size_t n = sws_qpack_encode(f, nf, sec);
    p = h3_put_varint(p, F_HEADERS);
    p = h3_put_varint(p, n);
    memcpy(p, sec, n);
    p += n;
    for (uint8_t *q = fr; q < p; q++)
        out += sprintf(out, "%02x", *q);
}

#define F(n, v) {(const uint8_t *)n, (const uint8_t *)v, sizeof n - 1, sizeof v - 1, 0}
static const sws_hpack_field_t GOOD[] = {F(":method", "GET"), F(":scheme", "https"),
                                         F(":authority", "a.example"), F(":path", "/")};

/* Feeds stream id (after the client's control stream with its SETTINGS)
 * whole and byte by byte: the read's error both times (0: none). */
static void crafted(const char *what, int64_t id, const char *hex, int fin, int64_t want,
                    uint64_t want_reset)
{
    static uint8_t b[4096];
    size_t n = unhex(hex, b);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        server_t *sv = calloc(1, sizeof *sv);
        server_init_pool(sv, 4096, 1, NULL);
        int64_t r = 0;
        if (id != 2) { /* the client's control stream, SETTINGS empty */
            uint8_t ctl[] = {0x00, 0x04, 0x00};
            r = sws_h3sess_read(&sv->s, 2, ctl, 3, 0);
        }
        if (!bytewise) {
            r = r < 0 ? r : sws_h3sess_read(&sv->s, id, (const uint8_t *)guard_place(b, n), n, fin);
        } else {
            for (size_t i = 0; i < n && r >= 0; i++)
                r = sws_h3sess_read(&sv->s, id, (const uint8_t *)guard_place(b + i, 1), 1,
                                    fin && i == n - 1);
            if (!n && r >= 0)
                r = sws_h3sess_read(&sv->s, id, b, 0, fin);
        }
        int64_t got = r < 0 ? r : 0;
        CHECK(got == want, "%s%s: %lld, not %lld", what, bytewise ? " (byte by byte)" : "",
              (long long)got, (long long)want);
        CHECK(!want_reset || sv->reset_code == want_reset, "%s%s: reset %llx, not %llx", what,
              bytewise ? " (byte by byte)" : "", (unsigned long long)sv->reset_code,
              (unsigned long long)want_reset);
        sws_h3sess_free(&sv->s);
        free(sv);
    }
    t_end();
}

static void crafted_bytes(void)
{
    char good[2200], upper[2200], cl[2200], cl0[2200];
    headers_hex(GOOD, 4, good);
    sws_hpack_field_t up[] = {F(":method", "GET"), F(":scheme", "https"), F(":authority", "a"),
                              F(":path", "/"), F("X-Up", "1")};
    headers_hex(up, 5, upper);
    sws_hpack_field_t withcl[] = {F(":method", "POST"), F(":scheme", "https"), F(":authority", "a"),
                                  F(":path", "/"), F("content-length", "5")};
    headers_hex(withcl, 5, cl);
    strcpy(cl0, cl);
    char buf[4500];

    crafted("a good request", 0, good, 1, 0, 0);
    snprintf(buf, sizeof buf, "0003616263 %s", good);
    crafted("DATA before HEADERS", 0, buf, 1, -H3_FRAME_UNEXPECTED, 0);
    snprintf(buf, sizeof buf, "%s 0400", good);
    crafted("SETTINGS on a request stream", 0, buf, 1, -H3_FRAME_UNEXPECTED, 0);
    snprintf(buf, sizeof buf, "%s 0200", good);
    crafted("HTTP/2's PRIORITY type", 0, buf, 1, -H3_FRAME_UNEXPECTED, 0);
    snprintf(buf, sizeof buf, "21 03 616263 %s 2103616263", good);
    crafted("reserved frame types passed over", 0, buf, 1, 0, 0);
    snprintf(buf, sizeof buf, "%s 0005 6162", good);
    crafted("a frame cut by the end", 0, buf, 1, -H3_FRAME_ERROR, 0);
    crafted("an uppercase name", 0, upper, 1, 0, H3_MESSAGE_ERROR);
    crafted("content-length 5 and no body", 0, cl, 1, 0, H3_MESSAGE_ERROR);
    snprintf(buf, sizeof buf, "%s 0003616263", cl0);
    crafted("content-length 5 and 3 bytes", 0, buf, 1, 0, H3_MESSAGE_ERROR);
    snprintf(buf, sizeof buf, "%s 0006616263646566", cl0);
    crafted("content-length 5 and 6 bytes", 0, buf, 1, 0, H3_MESSAGE_ERROR);
    crafted("a stream ended before HEADERS", 0, "", 1, 0, H3_REQUEST_INCOMPLETE);
    crafted("an empty HEADERS", 0, "0100", 1, -SWS_QPACK_DECOMPRESSION_FAILED, 0);
    /* two sections waiting for inserts, when we allow one */
    crafted("a section waiting for inserts is held", 0, "0104 0300 8080", 0, 0, 0);
    /* the control stream */
    crafted("a control stream starting with GOAWAY", 2, "00 0701 00", 0, -H3_MISSING_SETTINGS, 0);
    crafted("a setting twice", 2, "00 0404 0101 0102", 0, -H3_SETTINGS_ERROR, 0);
    crafted("HTTP/2's SETTINGS_ENABLE_PUSH", 2, "00 0402 0200", 0, -H3_SETTINGS_ERROR, 0);
    crafted("SETTINGS twice", 2, "00 0400 0400", 0, -H3_FRAME_UNEXPECTED, 0);
    crafted("DATA on the control stream", 2, "00 0400 0000", 0, -H3_FRAME_UNEXPECTED, 0);
    crafted("the control stream closed", 2, "00 0400", 1, -H3_CLOSED_CRITICAL_STREAM, 0);
    crafted("unknown settings and frames", 2, "00 0405 2101 4a0a00 2103616263", 0, 0, 0);
    crafted("a second control stream", 6, "00", 0, -H3_STREAM_CREATION_ERROR, 0);
    crafted("a push stream from a client", 6, "01", 0, -H3_STREAM_CREATION_ERROR, 0);
    crafted("a QPACK table over ours", 6, "02 3fe21f", 0, -SWS_QPACK_ENCODER_STREAM_ERROR, 0);
    crafted("a QPACK decoder stream error", 6, "03 81", 0, -SWS_QPACK_DECODER_STREAM_ERROR, 0);

    /* a second blocked stream over the limit of 1 is QPACK_DECOMPRESSION_FAILED */
    server_t *sv = calloc(1, sizeof *sv);
    server_init(sv, 4096, 1);
    uint8_t ctl[] = {0x00, 0x04, 0x00}, blk[] = {0x01, 0x04, 0x03, 0x00, 0x80, 0x80};
    CHECK(sws_h3sess_read(&sv->s, 2, ctl, 3, 0) == 3, "control");
    CHECK(sws_h3sess_read(&sv->s, 0, blk, 6, 1) == 6 && sv->s.n_blocked == 1, "one blocked");
    CHECK(sws_h3sess_read(&sv->s, 4, blk, 6, 1) == -SWS_QPACK_DECOMPRESSION_FAILED,
          "a second blocked stream");
    sws_h3sess_free(&sv->s);
    free(sv);
    t_end();

    /* an unknown unidirectional stream type: stopped, read past */
    sv = calloc(1, sizeof *sv);
    server_init(sv, 4096, 1);
    uint8_t unk[] = {0x21, 0xaa, 0xbb};
    CHECK(sws_h3sess_read(&sv->s, 6, unk, 3, 0) == 3, "unknown type");
    CHECK(sv->stop_id == 6 && sv->stop_code == H3_STREAM_CREATION_ERROR, "stop_sending");
    sws_h3sess_free(&sv->s);
    free(sv);
    t_end();
}

int main(void)
{
    exchanges();
    urgency_and_goaway();
    scheduler_order();
    crafted_bytes();
    CHECK(pool.n_runs <= pool.max_runs && pool.n_sts <= pool.max_sts, "the pool's bounds");
    sws_h3pool_free(&pool);
    t_end();
    return t_summary();
}
