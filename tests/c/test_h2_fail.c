/*
 * test_h2_fail.c — an HTTP/2 connection that fails while a handler is on
 * the stack (csrc/http/h2.c, h2_fail), with the whole engine built under
 * ASan/UBSan.
 *
 * A real engine serves a unix h2c listener whose only route proxies to an
 * upstream the test plays itself. Once the request reached the upstream,
 * the test answers it and makes every calloc and malloc fail while the
 * engine handles that answer: the proxy's upstream event hands the body to
 * the stream (h2_data), whose queue item cannot be allocated. The
 * connection must die from its own next event, not under the proxy:
 * closing at once ran the proxy's gone hook, which freed the exchange the
 * proxy went on using (ASan: heap-use-after-free in body_out). Built with
 * -Wl,--wrap=calloc,--wrap=malloc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sanitizer/common_interface_defs.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "context.h"
#include "guard.h"
#include "../fuzz/h2wire.h"

/* ---- calloc, failing on demand --------------------------------------------------- */

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
static int calloc_fail;  /* armed: every calloc returns NULL */
static int calloc_failed; /* how many did */

void *__wrap_calloc(size_t n, size_t size)
{
    if (calloc_fail) {
        calloc_failed++;
        if (getenv("TEST_H2_FAIL_VERBOSE"))
            __sanitizer_print_stack_trace();
        return NULL;
    }
    return __real_calloc(n, size);
}

/* malloc too: the body's queue item comes from malloc since the per-size
 * cache counts (calloc skips glibc's). */
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);

void *__wrap_malloc(size_t size)
{
    if (calloc_fail) {
        calloc_failed++;
        if (getenv("TEST_H2_FAIL_VERBOSE"))
            __sanitizer_print_stack_trace();
        return NULL;
    }
    return __real_malloc(size);
}

/* ---- the setup ------------------------------------------------------------------- */

static sws_respond_t ERR[SWS_ERR_COUNT];

static sws_engine_t *engine(void)
{
    static const int status[SWS_ERR_COUNT] = SWS_ERR_STATUSES;
    for (int i = 0; i < SWS_ERR_COUNT; i++)
        ERR[i] = (sws_respond_t){status[i], "Err", 3, "", 0, "err\n", 4, 1};
    sws_limits_t lim = {.max_header_bytes = 8192, .max_headers = 64, .max_uri_bytes = 4096,
                        .max_body_bytes = 1 << 20, .header_timeout_ms = 10000, .body_timeout_ms = 10000,
                        .keepalive_timeout_ms = 10000, .send_timeout_ms = 10000,
                        .keepalive_requests = 100, .max_connections = 100};
    sws_engine_t *e = sws_engine_new(&lim, ERR, 0);
    if (!e) {
        perror("sws_engine_new");
        exit(2);
    }
    return e;
}

static void pass(sws_engine_t *e, int ms)
{
    struct pollfd p = {sws_engine_fd(e), POLLIN, 0};
    poll(&p, 1, ms);
    sws_engine_run(e);
    sws_engine_tick(e);
}

static int unix_listener(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(l, 8) != 0) {
        perror(path);
        exit(2);
    }
    return l;
}

/* ---- the case --------------------------------------------------------------------- */

static void test_failure_inside_a_proxy_upstream_event(const char *dir)
{
    sws_engine_t *e = engine();
    char up_path[100], h2_path[100];
    snprintf(up_path, sizeof up_path, "%s/up.sock", dir);
    snprintf(h2_path, sizeof h2_path, "%s/h2.sock", dir);
    int upl = unix_listener(up_path);
    sws_upstream_server_t srv = {.name = "unix:up", .weight = 1};
    CHECK(sws_upstream_server_set_addr(&srv, NULL, 0, up_path) == 0, "addr");
    sws_upstream_t up = {.name = "u", .conf = &srv, .n_conf = 1, .keepalive = 4,
                         .keepalive_timeout_ms = 60000, .keepalive_requests = 100,
                         .keepalive_time_ms = 3600000};
    CHECK(sws_engine_add_upstream(e, &up) == 0, "upstream");
    sws_proxy_t px = {.up = &up, .connect_timeout_ms = 5000, .read_timeout_ms = 5000,
                      .send_timeout_ms = 5000, .buffer_size = 4096};
    sws_router_t *rt = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_handler_t hp = {SWS_H_PROXY, &px};
    sws_site_add_route(site, SWS_MATCH_PREFIX, "/", 1, &hp);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);
    CHECK(sws_engine_add_listener(e, unix_listener(h2_path), vh, NULL, 1) == 0, "listener");

    /* The client: preface, SETTINGS, GET /x. */
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", h2_path);
    int cl = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(connect(cl, (struct sockaddr *)&sun, sizeof sun) == 0, "connect");
    uint8_t out[512];
    size_t n = 0;
    memcpy(out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    n = 24;
    n += h2_frame_head(out + n, 0, 4, 0, 0); /* SETTINGS */
    uint8_t block[256];
    size_t bl = 0;
    bl += h2_literal(block + bl, ":method", "GET");
    bl += h2_literal(block + bl, ":scheme", "http");
    bl += h2_literal(block + bl, ":path", "/x");
    bl += h2_literal(block + bl, ":authority", "h");
    n += h2_frame_head(out + n, bl, 1, 0x5, 1); /* HEADERS, END_STREAM | END_HEADERS */
    memcpy(out + n, block, bl);
    n += bl;
    CHECK(write(cl, out, n) == (ssize_t)n, "write the request");

    /* The request reaches the upstream. */
    int us = -1;
    char req[4096];
    size_t rl = 0;
    for (int i = 0; i < 200 && !(rl >= 4 && memmem(req, rl, "\r\n\r\n", 4)); i++) {
        pass(e, 10);
        if (us < 0)
            us = accept4(upl, NULL, NULL, SOCK_NONBLOCK);
        if (us >= 0) {
            ssize_t k = read(us, req + rl, sizeof req - 1 - rl);
            if (k > 0)
                rl += (size_t)k;
        }
    }
    CHECK(us >= 0 && rl > 0 && memmem(req, rl, "GET /x HTTP/1.1\r\n", 17), "the upstream got it");

    /* Its answer is handled with calloc failing: the body's queue item. */
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    CHECK(write(us, resp, sizeof resp - 1) == (ssize_t)sizeof resp - 1, "answer");
    struct pollfd p = {sws_engine_fd(e), POLLIN, 0};
    poll(&p, 1, 1000);
    calloc_fail = 1;
    sws_engine_run(e);
    calloc_fail = 0;
    CHECK(calloc_failed > 0, "a calloc failed while the answer was handled");

    /* The connection dies (from its next event); the client sees the end. */
    int closed = 0;
    for (int i = 0; i < 200 && !closed; i++) {
        pass(e, 5);
        char buf[4096];
        ssize_t k;
        while ((k = read(cl, buf, sizeof buf)) > 0)
            ;
        closed = k == 0 || (k < 0 && errno != EAGAIN);
    }
    CHECK(closed, "the client connection was closed");
    for (int i = 0; i < 50 && sws_engine_counters(e)->active; i++)
        pass(e, 1);
    CHECK(sws_engine_counters(e)->active == 0, "no client connection left (%llu)",
          (unsigned long long)sws_engine_counters(e)->active);
    close(cl);
    close(us);
    sws_engine_free(e);
    sws_router_free(rt);
    close(upl);
    unlink(up_path);
    unlink(h2_path);
    t_end();
}

int main(void)
{
    char dir[] = "/tmp/test_h2_fail.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_failure_inside_a_proxy_upstream_event(dir);
    rmdir(dir);
    return t_summary();
}
