/*
 * test_h1.c — the response interface (scalws/response.h) through the HTTP/1
 * serializer (csrc/http/h1_out.c), and the HTTP/1 protocol (csrc/http/h1.c)
 * answering pipelined requests, with the whole engine built under
 * ASan/UBSan.
 *
 * Serializer cases drive the interface as a handler does, on a connection
 * whose fd is one end of a socketpair, and compare the exact bytes read
 * from the other end. Protocol cases start a real engine on a unix
 * listener, write requests from a client socket and run the engine's passes
 * until the answers are in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "context.h"
#include "guard.h"

/* Freed memory is overwritten, so that a read of it shows in what a case
 * checks even where ASan does not intercept the read (printf's %.*s). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_free_fill_size=65536:free_fill_byte=90"; }

static sws_respond_t ERR[SWS_ERR_COUNT];
static const char SERVER[] = "Server: t\r\n";

static sws_engine_t *engine(void)
{
    static const int status[SWS_ERR_COUNT] = SWS_ERR_STATUSES;
    for (int i = 0; i < SWS_ERR_COUNT; i++)
        ERR[i] = (sws_respond_t){status[i], "Err", 3, "Content-Type: text/plain\r\n", 26,
                                 "err\n", 4, 1};
    sws_limits_t lim = {.max_header_bytes = 8192, .max_headers = 64, .max_uri_bytes = 4096,
                        .max_body_bytes = 1 << 20, .header_timeout_ms = 10000, .body_timeout_ms = 10000,
                        .keepalive_timeout_ms = 10000, .send_timeout_ms = 10000,
                        .keepalive_requests = 100, .max_connections = 100};
    sws_engine_t *e = sws_engine_new(&lim, ERR, 0);
    if (!e) {
        perror("sws_engine_new");
        exit(2);
    }
    sws_engine_set_server(e, SERVER, sizeof SERVER - 1);
    return e;
}

/* A connection of the engine on one end of a socketpair; the test reads
 * the other (*peer). Not in the epoll set: the cases flush by hand. */
static h1conn_t *pair_conn(int *peer)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0) {
        perror("socketpair");
        exit(2);
    }
    h1conn_t *hc = calloc(1, sizeof *hc);
    hc->c.fd = sv[0];
    hc->c.tr = &sws_plain_transport;
    hc->c.proto = &sws_h1_proto;
    hc->c.is_unix = 1;
    hc->c.tn.tlist = TL_NONE;
    hc->resp.ops = &sws_h1_resp_ops;
    *peer = sv[1];
    return hc;
}

static void pair_free(sws_engine_t *e, h1conn_t *hc, int peer)
{
    tl_unlink(e, &hc->c.tn); /* a send timeout armed on the way */
    close(hc->c.fd);
    close(peer);
    free(hc->c.pend);
    free(hc->c.heap);
    free(hc);
}

/* Reads what arrives on fd until `want` bytes or 1 s of silence; with
 * want 0, until EOF. Returns the length (buf NUL-terminated). */
static size_t read_some(int fd, char *buf, size_t cap, size_t want)
{
    size_t len = 0;
    while (len < cap - 1 && (want == 0 || len < want)) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0)
            break;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return len;
}

/* The head the serializer writes before a handler's fields. */
static char *status_head(sws_engine_t *e, char *p, const char *status_line)
{
    return p + sprintf(p, "%s\r\nServer: t\r\nDate: %.*s\r\n", status_line, SWS_HTTP_DATE_LEN,
                       e->core.date);
}

/* The Date values, which may cross a second between the answer and the
 * expectation, masked. */
static void mask_dates(char *s)
{
    while ((s = strstr(s, "\r\nDate: ")) != NULL) {
        s += 8;
        for (int i = 0; i < SWS_HTTP_DATE_LEN && s[i]; i++)
            s[i] = 'D';
    }
}

static void expect_bytes(int peer, const char *want_, const char *what)
{
    static char got[1 << 18], want[1 << 18];
    snprintf(want, sizeof want, "%s", want_);
    size_t n = read_some(peer, got, sizeof got, strlen(want));
    mask_dates(got);
    mask_dates(want);
    CHECK(n == strlen(want) && memcmp(got, want, n) == 0, "%s:\n--- got (%zu)\n%s\n--- want (%zu)\n%s",
          what, n, got, strlen(want), want);
}

/* ---- the serializer ------------------------------------------------------------ */

static void test_length_body_beside_the_head(sws_engine_t *e)
{
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_field_lit(e, r, "X-A", "1", 1);
    resp_start_body(e, r, SWS_BODY_LENGTH, 5);
    resp_data(e, r, "hello", 5, 0);
    resp_done(e, r);
    CHECK(e->net.niov == 1, "head and a copied body are one iovec (%d)", e->net.niov);
    CHECK(hc->r_status == 200 && hc->r_sent == 5 && !hc->r_close, "state");
    CHECK(out_flush(e, &hc->c) == 0 && !hc->c.pend, "flush");
    char want[512];
    char *p = status_head(e, want, "HTTP/1.1 200 OK");
    strcpy(p, "X-A: 1\r\nContent-Length: 5\r\n\r\nhello");
    expect_bytes(peer, want, "200 with a 5-byte body");
    pair_free(e, hc, peer);
    t_end();
}

static void test_head_keeps_the_length_and_drops_the_body(sws_engine_t *e)
{
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 1, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 5);
    resp_data(e, r, "hello", 5, SWS_REF);
    resp_done(e, r);
    CHECK(hc->r_sent == 0, "no body bytes counted for HEAD");
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    char want[512];
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"), "Content-Length: 5\r\n\r\n");
    expect_bytes(peer, want, "HEAD");
    pair_free(e, hc, peer);
    t_end();
}

static void test_connection_header_follows_keepalive(sws_engine_t *e)
{
    static const struct {
        int minor, keep;
        const char *conn;
    } cases[] = {
        {1, 1, ""}, /* HTTP/1.1 keeps by default: nothing to say */
        {1, 0, "Connection: close\r\n"},
        {0, 1, "Connection: keep-alive\r\n"},
        {0, 0, "Connection: close\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int peer;
        h1conn_t *hc = pair_conn(&peer);
        sws_resp_t *r = &hc->resp;
        h1_resp_begin(hc, cases[i].minor, 0, cases[i].keep);
        resp_head(e, r, 404, "Nope", 4);
        resp_start_body(e, r, SWS_BODY_LENGTH, 0);
        resp_done(e, r);
        CHECK(hc->r_close == !cases[i].keep, "r_close for case %zu", i);
        CHECK(out_flush(e, &hc->c) == 0, "flush");
        char want[512];
        sprintf(status_head(e, want, "HTTP/1.1 404 Nope"), "Content-Length: 0\r\n%s\r\n",
                cases[i].conn);
        expect_bytes(peer, want, "Connection header");
        pair_free(e, hc, peer);
    }
    t_end();
}

static void test_stream_of_unknown_length(sws_engine_t *e)
{
    /* HTTP/1.1: chunked, one chunk per piece, the last chunk at done. */
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_STREAM, 0);
    CHECK(out_flush(e, &hc->c) == 0, "flush the head alone");
    resp_data(e, r, "abc", 3, SWS_REF);
    resp_data(e, r, "", 0, 0); /* an empty piece is no chunk (it would end the body) */
    resp_data(e, r, "0123456789abcdefg", 17, 0);
    resp_done(e, r);
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    CHECK(hc->r_sent == 20 && !hc->r_close, "sent %llu", (unsigned long long)hc->r_sent);
    char want[512];
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"),
           "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n11\r\n0123456789abcdefg\r\n0\r\n\r\n");
    expect_bytes(peer, want, "chunked");
    pair_free(e, hc, peer);

    /* HTTP/1.0 has no chunks: the body ends with the connection. */
    hc = pair_conn(&peer);
    r = &hc->resp;
    h1_resp_begin(hc, 0, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_STREAM, 0);
    resp_data(e, r, "abc", 3, 0);
    resp_done(e, r);
    CHECK(hc->r_close && hc->r_close_delim, "closes after the body");
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"), "Connection: close\r\n\r\nabc");
    expect_bytes(peer, want, "close-delimited");
    pair_free(e, hc, peer);

    /* HEAD of a stream: no framing at all. */
    hc = pair_conn(&peer);
    r = &hc->resp;
    h1_resp_begin(hc, 1, 1, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_STREAM, 0);
    resp_data(e, r, "abc", 3, 0);
    resp_done(e, r);
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"), "\r\n");
    expect_bytes(peer, want, "HEAD of a stream");
    pair_free(e, hc, peer);
    t_end();
}

static void test_interim_before_the_head(sws_engine_t *e)
{
    /* HTTP/1.1: each 1xx as it comes, its fields, no Date or Server; the
     * final answer after it untouched. */
    static const sws_header_t links[] = {{"Link", 4, "</a.css>; rel=preload", 21},
                                         {"Link", 4, "</b.js>; rel=preload", 20}};
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    r->ops->interim(e, r, 103, NULL, 0, links, 2);
    r->ops->interim(e, r, 104, "Upload Resumption Supported", 27, NULL, 0);
    CHECK(hc->r_status == 0, "the final response's state is untouched: %d", hc->r_status);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 2);
    resp_data(e, r, "ok", 2, 0);
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    char want[1024];
    char *p = want + sprintf(want, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n"
                                   "Link: </b.js>; rel=preload\r\n\r\n"
                                   "HTTP/1.1 104 Upload Resumption Supported\r\n\r\n");
    strcpy(status_head(e, p, "HTTP/1.1 200 OK"), "Content-Length: 2\r\n\r\nok");
    expect_bytes(peer, want, "103, 104, then 200");
    pair_free(e, hc, peer);

    /* HTTP/1.0 knows no 1xx (RFC 9110 §15.2): only the final answer. */
    hc = pair_conn(&peer);
    r = &hc->resp;
    h1_resp_begin(hc, 0, 0, 0);
    r->ops->interim(e, r, 103, NULL, 0, links, 2);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 2);
    resp_data(e, r, "ok", 2, 0);
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"), "Content-Length: 2\r\nConnection: close\r\n\r\nok");
    expect_bytes(peer, want, "no 103 to HTTP/1.0");
    pair_free(e, hc, peer);
    t_end();
}

/* A stream's trailers: a trailer section after the last chunk for a
 * client that said "TE: trailers" (an exchange's te_trailers), else the
 * plain last chunk; never on HTTP/1.0's close-delimited body. */
static void test_trailers(sws_engine_t *e)
{
    static const sws_header_t tr[] = {{"X-Checksum", 10, "abc", 3}, {"X-Two", 5, "2", 1}};
    static const struct {
        int minor, te;
        const char *want_after_head;
    } cases[] = {
        {1, 1, "Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nX-Checksum: abc\r\nX-Two: 2\r\n\r\n"},
        {1, 0, "Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"},
        {0, 1, "Connection: close\r\n\r\nab"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int peer;
        h1conn_t *hc = pair_conn(&peer);
        sws_resp_t *r = &hc->resp;
        h1x_t *x = calloc(1, sizeof *x);
        x->te_trailers = cases[k].te;
        x->req_done = 1;
        hc->x = x;
        h1_resp_begin(hc, cases[k].minor, 0, 1);
        resp_head(e, r, 200, NULL, 0);
        resp_start_body(e, r, SWS_BODY_STREAM, 0);
        resp_data(e, r, "ab", 2, 0);
        r->ops->trailers(e, r, tr, 2);
        resp_done(e, r);
        CHECK(out_flush(e, &hc->c) == 0, "flush");
        char want[1024];
        strcpy(status_head(e, want, "HTTP/1.1 200 OK"), cases[k].want_after_head);
        expect_bytes(peer, want, cases[k].te ? "trailers" : "no trailers");
        hc->x = NULL;
        free(x);
        pair_free(e, hc, peer);
    }
    t_end();
}

static void test_no_body_statuses(sws_engine_t *e)
{
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 304, NULL, 0);
    resp_field_lit(e, r, "ETag", "\"x\"", 3);
    resp_start_body(e, r, SWS_BODY_NONE, 0);
    resp_data(e, r, "never", 5, 0);
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 204, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 9); /* 204 never carries a length (RFC 9110 §8.6) */
    resp_data(e, r, "never", 5, 0);
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    char want[1024];
    char *p = status_head(e, want, "HTTP/1.1 304 Not Modified");
    p += sprintf(p, "ETag: \"x\"\r\n\r\n");
    strcpy(status_head(e, p, "HTTP/1.1 204 No Content"), "\r\n");
    expect_bytes(peer, want, "304 then 204, pipelined in order");
    pair_free(e, hc, peer);
    t_end();
}

static void test_a_discarded_head_leaves_nothing_behind(sws_engine_t *e)
{
    /* The proxy described a chunked answer, found its body bad and
     * answers 502 instead: the 502 has a length and no chunk framing. */
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_STREAM, 0);
    resp_data(e, r, "abc", 3, 0);
    r->ops->discard(e, r);
    CHECK(e->net.niov == 0, "discarded");
    sws_respond_answer(e, r, &ERR[SWS_ERR_502]);
    CHECK(hc->r_status == 502 && hc->r_sent == 4 && !hc->r_chunked, "a fresh response");
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    char want[512];
    strcpy(status_head(e, want, "HTTP/1.1 502 Err"),
           "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\nerr\n");
    expect_bytes(peer, want, "502 after a discarded chunked head");
    pair_free(e, hc, peer);
    t_end();
}

static void test_output_queues_behind_pending_output(sws_engine_t *e)
{
    /* A first answer the peer does not read fills the socket; a second one
     * must go out after it, not ahead of it. */
    enum { BIG = 4 << 20 };
    char *big = malloc(BIG);
    memset(big, 'x', BIG);
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, BIG);
    resp_data(e, r, big, BIG, SWS_REF);
    CHECK(out_flush(e, &hc->c) == 0 && hc->c.pend, "the first answer is left pending");
    size_t cap = BIG + 4096, len = 0;
    char *got = malloc(cap);
    ssize_t n;
    while ((n = read(peer, got + len, cap - len)) > 0) /* the socket has room again */
        len += (size_t)n;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 404, "Nope", 4);
    resp_start_body(e, r, SWS_BODY_LENGTH, 3);
    resp_data(e, r, "abc", 3, 0);
    CHECK(out_flush(e, &hc->c) == 0 && hc->c.pend, "the second is queued behind it");
    int rounds = 0;
    while (rounds++ < 100000) {
        n = read(peer, got + len, cap - len);
        if (n > 0)
            len += (size_t)n;
        if (!hc->c.pend && n <= 0)
            break;
        if (hc->c.pend)
            CHECK(pend_send(e, &hc->c) >= 0, "pend_send");
    }
    char tail[512];
    size_t first = (size_t)(status_head(e, tail, "HTTP/1.1 200 OK") - tail) + 27 + BIG;
    char *t = status_head(e, tail, "HTTP/1.1 404 Nope");
    strcpy(t, "Content-Length: 3\r\n\r\nabc");
    size_t tl = strlen(tail);
    CHECK(len == first + tl, "all of both (%zu bytes, want %zu)", len, first + tl);
    if (len == first + tl) {
        got[len] = '\0';
        mask_dates(got + first - 2); /* from the CRLF before its Date line */
        mask_dates(tail);
        CHECK(memcmp(got + first, tail, tl) == 0, "the second answer comes last:\n%s", got + first);
        CHECK(got[first - 1] == 'x' && got[first - BIG] == 'x', "the first body before it");
    }
    free(got);
    free(big);
    pair_free(e, hc, peer);
    t_end();
}

static void write_file(const char *dir, const char *name, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; i < size; i++)
        fputc('a' + (int)(i * 7 % 26), f);
    fclose(f);
}

static void test_file_segment(sws_engine_t *e, const char *dir)
{
    int root = open(dir, O_PATH | O_DIRECTORY);
    /* No memory copies: the segment goes with sendfile after the head. */
    sws_filecache_t *fc = sws_filecache_new(16, 1000, 0);
    e->st.fc = e->net.fc = fc;
    sws_file_t *f = NULL;
    CHECK(sws_filecache_get(fc, root, "/big.bin", 8, 0, e->core.now, &f) == 0 && !f->mem, "get");
    int peer;
    h1conn_t *hc = pair_conn(&peer);
    sws_resp_t *r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 206, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 50000);
    r->ops->file(e, r, f, 100, 50000, 16384);
    resp_done(e, r);
    CHECK(hc->c.file == f && hc->c.file_left == 50000, "the segment waits behind the head");
    CHECK(out_flush(e, &hc->c) == 0, "flush the head");
    int rounds = 0;
    while (hc->c.file && rounds++ < 100)
        CHECK(conn_send_file(e, &hc->c) == 0, "sendfile");
    CHECK(!hc->c.file && rounds == 4, "sent in sendfile_chunk pieces (%d rounds)", rounds);
    char want[60000];
    char *p = status_head(e, want, "HTTP/1.1 206 Partial Content");
    p += sprintf(p, "Content-Length: 50000\r\n\r\n");
    for (size_t i = 100; i < 50100; i++)
        *p++ = (char)('a' + (int)(i * 7 % 26));
    *p = '\0';
    expect_bytes(peer, want, "file segment");
    pair_free(e, hc, peer);

    /* A small file held in memory goes beside the head: one iovec. */
    sws_filecache_free(fc);
    fc = sws_filecache_new(16, 1000, 1 << 20);
    e->st.fc = e->net.fc = fc;
    CHECK(sws_filecache_get(fc, root, "/small.txt", 10, 0, e->core.now, &f) == 0 && f->mem, "mem");
    hc = pair_conn(&peer);
    r = &hc->resp;
    h1_resp_begin(hc, 1, 0, 1);
    resp_head(e, r, 200, NULL, 0);
    resp_start_body(e, r, SWS_BODY_LENGTH, 10);
    r->ops->file(e, r, f, 0, 10, 16384);
    CHECK(e->net.niov == 1 && !hc->c.file, "copied beside the head, reference released");
    CHECK(out_flush(e, &hc->c) == 0, "flush");
    strcpy(status_head(e, want, "HTTP/1.1 200 OK"), "Content-Length: 10\r\n\r\nahovcjqxel");
    expect_bytes(peer, want, "small file");
    pair_free(e, hc, peer);
    sws_filecache_free(fc);
    e->st.fc = e->net.fc = NULL;
    close(root);
    t_end();
}

/* ---- the protocol ------------------------------------------------------------------- */

static void test_pipelined_answers_in_order(const char *dir)
{
    sws_engine_t *e = engine();
    sws_router_t *rt = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_respond_t a = {200, "OK", 2, "Content-Type: text/plain\r\n", 26, "A", 1, 1};
    sws_respond_t b = {201, "Created", 7, "", 0, "BB", 2, 1};
    sws_handler_t ha = {SWS_H_RESPOND, &a}, hb = {SWS_H_RESPOND, &b};
    sws_site_add_route(site, SWS_MATCH_EXACT, "/a", 2, &ha);
    sws_site_add_route(site, SWS_MATCH_EXACT, "/b", 2, &hb);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);

    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/h1.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(bind(l, (struct sockaddr *)&sun, sizeof sun) == 0 && listen(l, 8) == 0, "listen");
    CHECK(sws_engine_add_listener(e, l, vh, NULL, 0) == 0, "add_listener");
    int cl = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(connect(cl, (struct sockaddr *)&sun, sizeof sun) == 0, "connect");
    static const char reqs[] = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                               "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                               "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n"
                               "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                               "GET /b HTTP/1.0\r\n\r\n";
    CHECK(write(cl, reqs, sizeof reqs - 1) == (ssize_t)sizeof reqs - 1, "write");
    for (int i = 0; i < 20; i++) {
        struct pollfd p = {sws_engine_fd(e), POLLIN, 0};
        poll(&p, 1, 50);
        sws_engine_run(e);
    }
    char want[2048];
    char *p = status_head(e, want, "HTTP/1.1 200 OK");
    p += sprintf(p, "Content-Type: text/plain\r\nContent-Length: 1\r\n\r\nA");
    p = status_head(e, p, "HTTP/1.1 201 Created");
    p += sprintf(p, "Content-Length: 2\r\n\r\nBB");
    p = status_head(e, p, "HTTP/1.1 200 OK");
    p += sprintf(p, "Content-Type: text/plain\r\nContent-Length: 1\r\n\r\n");
    p = status_head(e, p, "HTTP/1.1 404 Err");
    p += sprintf(p, "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\nerr\n");
    p = status_head(e, p, "HTTP/1.1 201 Created");
    p += sprintf(p, "Content-Length: 2\r\nConnection: close\r\n\r\nBB");
    static char got[8192];
    size_t n = read_some(cl, got, sizeof got, 0); /* to EOF: HTTP/1.0 without keep-alive closes */
    mask_dates(got);
    mask_dates(want);
    CHECK(n == strlen(want) && memcmp(got, want, n) == 0, "pipelined:\n--- got\n%s\n--- want\n%s",
          got, want);
    CHECK(sws_engine_counters(e)->requests == 5, "5 requests counted");
    close(cl);
    sws_engine_free(e);
    sws_router_free(rt);
    unlink(sun.sun_path);
    t_end();
}

/* A proxied request refused at once (its only upstream cannot be
 * connected to: a unix socket that does not exist) is answered 502 and
 * logged with a request id of our own; the exchange it briefly had is gone
 * by then (under ASan, a read of it would fail the run). */
static void test_refused_proxy_request(const char *dir)
{
    sws_engine_t *e = engine();
    char logpath[512];
    snprintf(logpath, sizeof logpath, "%s/access.log", dir);
    int logfd = open(logpath, O_CREAT | O_TRUNC | O_RDWR, 0600);
    CHECK(sws_engine_set_access_log(e, logfd, SWS_LOG_COMBINED, 8192, 0) == 0, "log");
    char sock[512];
    snprintf(sock, sizeof sock, "%s/nobody.sock", dir);
    sws_upstream_server_t srv = {.name = "unix:nobody", .weight = 1};
    CHECK(sws_upstream_server_set_addr(&srv, NULL, 0, sock) == 0, "addr");
    sws_upstream_t up = {.name = "u", .conf = &srv, .n_conf = 1, .keepalive = 4,
                         .keepalive_timeout_ms = 60000, .keepalive_requests = 100,
                         .keepalive_time_ms = 3600000};
    CHECK(sws_engine_add_upstream(e, &up) == 0, "upstream");
    sws_proxy_t px = {.up = &up, .connect_timeout_ms = 1000, .read_timeout_ms = 1000,
                      .send_timeout_ms = 1000, .buffer_size = 4096};
    sws_router_t *rt = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_handler_t hp = {SWS_H_PROXY, &px};
    sws_site_add_route(site, SWS_MATCH_PREFIX, "/", 1, &hp);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/px.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(bind(l, (struct sockaddr *)&sun, sizeof sun) == 0 && listen(l, 8) == 0, "listen");
    CHECK(sws_engine_add_listener(e, l, vh, NULL, 0) == 0, "add_listener");
    int cl = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(connect(cl, (struct sockaddr *)&sun, sizeof sun) == 0, "connect");
    static const char req[] = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n0\r\n\r\nGET /y HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    CHECK(write(cl, req, sizeof req - 1) == (ssize_t)sizeof req - 1, "write");
    for (int i = 0; i < 20; i++) {
        struct pollfd p = {sws_engine_fd(e), POLLIN, 0};
        poll(&p, 1, 50);
        sws_engine_run(e);
    }
    static char got[8192];
    read_some(cl, got, sizeof got, 0);
    /* Both requests answered 502 on one connection: the body of the first
     * (read whole with its head) did not end it. */
    char *second = strstr(got, "HTTP/1.1 502");
    CHECK(second && strstr(second + 1, "HTTP/1.1 502") && strstr(got, "Connection: close"),
          "two 502s:\n%s", got);
    sws_engine_flush(e);
    char log[4096] = {0};
    CHECK(pread(logfd, log, sizeof log - 1, 0) > 0, "log written");
    char *line = strstr(log, "\"POST /x HTTP/1.1\" 502 ");
    char *eol = line ? strchr(line, '\n') : NULL;
    int hex = 0;
    if (eol)
        for (char *q = eol - 16; q < eol; q++)
            hex += (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f');
    CHECK(line && eol && eol[-17] == ' ' && hex == 16, "a 16-hex request id ends the line:\n%s", log);
    close(cl);
    close(logfd);
    sws_engine_free(e);
    sws_router_free(rt);
    unlink(sun.sun_path);
    t_end();
}

/* Runs the engine's passes until one handles nothing: a write on the
 * client's socket has then been read and answered. */
static void pump(sws_engine_t *e)
{
    for (int idle = 0; idle < 2;) {
        struct pollfd p = {sws_engine_fd(e), POLLIN, 0};
        poll(&p, 1, 2);
        idle = sws_engine_run(e) > 0 ? 0 : idle + 1;
    }
}

/* What the client has been sent so far (no wait), NUL-terminated; *eof when
 * the server closed its side. */
static size_t got_now(int fd, char *buf, size_t cap, int *eof)
{
    size_t len = 0;
    *eof = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
        if (n == 0)
            *eof = 1;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return len;
}

/* The statuses in out, as "200 400 ": status lines at the start or after a
 * line end. */
static void statuses(const char *out, char *st)
{
    *st = '\0';
    for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")) != NULL; p += 9)
        if (p == out || p[-1] == '\n')
            st += sprintf(st, "%.3s ", p + 9);
}

/* The discipline of tests/c/test_http1.c at the protocol's level: a request
 * written in two pieces, split at every offset, each piece its own read.
 * A broken chunked body on a respond route: 400 when the break came with
 * the head (the body is read past before the answer), else the 200 went
 * out and the break closes the connection. A head whose line is already at
 * fault: answered as soon as that line has ended (the header timeout, 10 s,
 * never runs here), and nothing before. */
static void test_every_split(const char *dir)
{
    sws_engine_t *e = engine();
    sws_router_t *rt = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_respond_t a = {200, "OK", 2, "", 0, "A", 1, 1};
    sws_handler_t ha = {SWS_H_RESPOND, &a};
    sws_site_add_route(site, SWS_MATCH_PREFIX, "/", 1, &ha);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/split.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(bind(l, (struct sockaddr *)&sun, sizeof sun) == 0 && listen(l, 8) == 0, "listen");
    CHECK(sws_engine_add_listener(e, l, vh, NULL, 0) == 0, "add_listener");

    static const struct {
        const char *in;
        size_t head;  /* the head's length (0: it never ends) */
        size_t fault; /* bytes from which the fault is decided */
        const char *whole, *late; /* statuses: in one piece (or split before `head`),
                                     and split between head and fault */
    } cases[] = {
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n0\r\n\r\n"
         "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
         56, 65, "400 ", "200 "},
        {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 55, 62,
         "400 ", "200 "},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n", 0, 64, "400 ", NULL},
        {"GET / HTTP/5.6\r\nHost: a\r\n", 0, 16, "505 ", NULL},
        {"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n", 0, 32, "400 ", NULL},
    };
    static char out[8192];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].in);
        for (size_t k = 1; k <= len; k++) {
            int cl = socket(AF_UNIX, SOCK_STREAM, 0), eof;
            char st[64];
            CHECK(connect(cl, (struct sockaddr *)&sun, sizeof sun) == 0, "connect");
            CHECK(write(cl, cases[i].in, k) == (ssize_t)k, "write");
            pump(e);
            size_t n = got_now(cl, out, sizeof out, &eof);
            /* before the head's end and the fault: nothing yet */
            if (k < cases[i].fault && (!cases[i].head || k < cases[i].head))
                CHECK(n == 0 && !eof, "case %zu split %zu: answered early: %s", i, k, out);
            if (k < len) {
                CHECK(write(cl, cases[i].in + k, len - k) == (ssize_t)(len - k), "write rest");
                pump(e);
                n += got_now(cl, out + n, sizeof out - n, &eof);
            }
            statuses(out, st);
            const char *want = cases[i].head && k >= cases[i].head && k < cases[i].fault ? cases[i].late
                                                                                          : cases[i].whole;
            CHECK(strcmp(st, want) == 0 && eof, "case %zu split %zu: statuses %s(eof %d), want %s\n%s", i,
                  k, st, eof, want, out);
            close(cl);
        }
    }
    sws_engine_free(e);
    sws_router_free(rt);
    unlink(sun.sun_path);
    t_end();
}

/* A caller that adds past the batch without asking out_room stops the
 * process (SIGABRT) instead of writing past it: bytes past OUT_BUF, and
 * an iovec past OUT_IOV. Up to the bounds, nothing happens. */
static void test_output_past_the_batch_aborts(void)
{
    for (int kind = 0; kind < 2; kind++) {
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            sws_engine_t *e = engine();
            static char big[OUT_BUF];
            if (kind == 0) {
                out_copy(e, big, OUT_BUF - 1);
                out_copy(e, "x", 1); /* full: allowed */
                out_copy(e, "y", 1);
            } else {
                for (int i = 0; i < OUT_IOV; i++)
                    out_ref(e, big + 2 * i, 1); /* one iovec each: not adjacent */
                out_ref(e, big, 1);
            }
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "kind %d: status %#x", kind, st);
    }
    t_end();
}

int main(void)
{
    char dir[] = "/tmp/test_h1.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    write_file(dir, "big.bin", 60000);
    write_file(dir, "small.txt", 10);
    sws_engine_t *e = engine();
    test_length_body_beside_the_head(e);
    test_head_keeps_the_length_and_drops_the_body(e);
    test_connection_header_follows_keepalive(e);
    test_stream_of_unknown_length(e);
    test_interim_before_the_head(e);
    test_trailers(e);
    test_no_body_statuses(e);
    test_a_discarded_head_leaves_nothing_behind(e);
    test_output_queues_behind_pending_output(e);
    test_file_segment(e, dir);
    sws_engine_free(e);
    test_pipelined_answers_in_order(dir);
    test_refused_proxy_request(dir);
    test_every_split(dir);
    test_output_past_the_batch_aborts();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        perror("rm");
    return t_summary();
}
