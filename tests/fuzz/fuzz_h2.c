/*
 * fuzz_h2.c — fuzz driver for the HTTP/2 request path (csrc/http/h2/: our
 * session and HPACK under the protocol floor), with the whole engine
 * in-process.
 *
 * One engine serves a unix listener with HTTP/2 allowed (h2c by prior
 * knowledge) and four routes: /r (respond, a 5-byte body), /big (respond,
 * 100 000 bytes: more than a stream window, so DATA waits on the client's
 * WINDOW_UPDATE), /up/ (a proxy whose upstream socket does not exist: the
 * handler starts and fails at once, 502) and everything else (404). Each
 * input is what a client sends after the connection preface and an empty
 * SETTINGS frame: the driver connects, writes the three, runs the engine's
 * passes while reading (and dropping) what the server answers, then closes
 * and runs the engine until the connection is gone.
 *
 * The first input byte may switch to a framed mode (fuzz_one, framed):
 * records that become frames with true lengths and, for HEADERS, a valid
 * request's fields first, so mutations get past the frame layer and HPACK
 * into the request path.
 *
 * Checked, besides ASan/UBSan: the engine ends every input with no client
 * connection open (a connection the h2 module forgot would stay active),
 * and it keeps accepting: a plain HTTP/1.1 request after each input is
 * answered.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "context.h"
#include "h2wire.h"

static int failures;

#ifdef FUZZING
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), __builtin_trap())
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                              "\x00\x00\x00\x04\x00\x00\x00\x00\x00"; /* SETTINGS, empty */
static sws_engine_t *E;
static sws_router_t *RT;
static struct sockaddr_un ADDR = {.sun_family = AF_UNIX};

static sws_respond_t ERR[SWS_ERR_COUNT];
static char BIG[100000];
static sws_respond_t R_SMALL = {200, "OK", 2, "Content-Type: text/plain\r\n", 26, "hello", 5, 1};
static sws_respond_t R_BIG = {200, "OK", 2, "", 0, BIG, sizeof BIG, 1};
static sws_handler_t H_SMALL = {SWS_H_RESPOND, &R_SMALL}, H_BIG = {SWS_H_RESPOND, &R_BIG};
static sws_upstream_server_t SRV = {.name = "unix:nobody", .weight = 1};
static sws_upstream_t UP = {.name = "u", .conf = &SRV, .n_conf = 1, .keepalive = 4,
                            .keepalive_timeout_ms = 60000, .keepalive_requests = 100,
                            .keepalive_time_ms = 3600000};
static sws_proxy_t PX = {.up = &UP, .connect_timeout_ms = 1000, .read_timeout_ms = 1000,
                         .send_timeout_ms = 1000, .buffer_size = 4096};
static sws_handler_t H_PX = {SWS_H_PROXY, &PX};

static void setup(void)
{
    static const int status[SWS_ERR_COUNT] = SWS_ERR_STATUSES;
    for (int i = 0; i < SWS_ERR_COUNT; i++)
        ERR[i] = (sws_respond_t){status[i], "Err", 3, "Content-Type: text/plain\r\n", 26,
                                 "err\n", 4, 1};
    memset(BIG, 'b', sizeof BIG);
    sws_limits_t lim = {.max_header_bytes = 8192, .max_headers = 64, .max_uri_bytes = 4096,
                        .max_body_bytes = 1 << 16, .header_timeout_ms = 10000, .body_timeout_ms = 10000,
                        .keepalive_timeout_ms = 10000, .send_timeout_ms = 10000,
                        .keepalive_requests = 100, .max_connections = 100};
    E = sws_engine_new(&lim, ERR, 0);
    if (!E) {
        perror("sws_engine_new");
        exit(2);
    }
    static const char server[] = "Server: f\r\n";
    sws_engine_set_server(E, server, sizeof server - 1);
    sws_engine_set_error_log(E, open("/dev/null", O_WRONLY), SWS_L_EMERG, 0);
    char dir[] = "/tmp/fuzz_h2.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    char nobody[256];
    snprintf(nobody, sizeof nobody, "%s/nobody.sock", dir);
    if (sws_upstream_server_set_addr(&SRV, NULL, 0, nobody) != 0 ||
        sws_engine_add_upstream(E, &UP) != 0) {
        fprintf(stderr, "upstream\n");
        exit(2);
    }
    sws_router_t *rt = RT = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_site_add_route(site, SWS_MATCH_EXACT, "/r", 2, &H_SMALL);
    sws_site_add_route(site, SWS_MATCH_EXACT, "/big", 4, &H_BIG);
    sws_site_add_route(site, SWS_MATCH_PREFIX, "/up/", 4, &H_PX);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);
    snprintf(ADDR.sun_path, sizeof ADDR.sun_path, "%s/h2.sock", dir);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (bind(l, (struct sockaddr *)&ADDR, sizeof ADDR) != 0 || listen(l, 64) != 0 ||
        sws_engine_add_listener(E, l, vh, NULL, 1) != 0) {
        perror("listener");
        exit(2);
    }
    /* The socket stays for the process's life; the folder goes at exit
     * (main) or with /tmp (libFuzzer never returns). */
}

/* Sends in[0..n) on a new connection while the engine runs, reading what
 * comes back; then closes and runs until the engine has no connection.
 * Returns the bytes received. */
static size_t exchange(const uint8_t *in, size_t n, int close_first)
{
    int cl = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (cl < 0 || connect(cl, (struct sockaddr *)&ADDR, sizeof ADDR) != 0) {
        perror("connect");
        exit(2);
    }
    size_t off = 0, got = 0;
    int quiet = 0;
    for (int round = 0; round < 400 && quiet < 3; round++) {
        int progress = 0;
        if (off < n) {
            ssize_t w = send(cl, in + off, n - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                progress = 1;
            } else if (w < 0 && errno != EAGAIN) {
                off = n; /* the server closed: the rest goes nowhere */
            }
        }
        struct pollfd p = {sws_engine_fd(E), POLLIN, 0};
        poll(&p, 1, 0);
        progress |= sws_engine_run(E) > 0;
        sws_engine_tick(E);
        static char buf[1 << 16];
        ssize_t r;
        while ((r = recv(cl, buf, sizeof buf, 0)) > 0) {
            got += (size_t)r;
            progress = 1;
        }
        if (r == 0 && off == n)
            break; /* the server closed */
        quiet = progress ? 0 : quiet + 1;
        if (close_first && off == n)
            break;
    }
    close(cl);
    for (int round = 0; round < 100 && sws_engine_counters(E)->active; round++) {
        struct pollfd p = {sws_engine_fd(E), POLLIN, 0};
        poll(&p, 1, round < 10 ? 0 : 1);
        sws_engine_run(E);
        sws_engine_tick(E);
    }
    return got;
}

/* Framed mode: the input is records [type][flags][stream][len][len bytes],
 * each sent as a frame with a true length field; a HEADERS record with
 * flag 0x80 (not an HTTP/2 flag: cleared) gets a valid request's fields
 * before its bytes (the stream byte's bits: 0-4 the id, 2-4 the path,
 * 5-7 the method), so
 * that mutations reach the request path past HPACK. Returns the bytes
 * written to out (room for every record: 9 + 120 + 255 bytes each). */
static size_t framed(const uint8_t *d, size_t n, uint8_t *out)
{
    static const char *methods[] = {"GET", "POST", "HEAD", "OPTIONS", "PUT", "CONNECT", "DELETE", "get"};
    static const char *paths[] = {"/r", "/big", "/up/x?y", "/nope", "*", "/a/../r", "/up/", ""};
    size_t o = 0;
    while (n >= 4) {
        uint8_t type = d[0], flags = d[1], sid = d[2];
        size_t len = d[3] < n - 4 ? d[3] : n - 4;
        uint8_t block[128];
        size_t bl = 0;
        if (type == 1 && (flags & 0x80)) {
            flags &= 0x7f;
            bl += h2_literal(block + bl, ":method", methods[sid >> 5]);
            bl += h2_literal(block + bl, ":scheme", "http");
            bl += h2_literal(block + bl, ":path", paths[(sid >> 2) & 7]);
            bl += h2_literal(block + bl, ":authority", "x");
        }
        uint32_t sid32 = sid & 0x1f; /* small ids, some even, some 0 */
        size_t fl = bl + len;
        o += h2_frame_head(out + o, fl, type, flags, sid32);
        memcpy(out + o, block, bl);
        o += bl;
        memcpy(out + o, d + 4, len);
        o += len;
        d += 4 + len;
        n -= 4 + len;
    }
    return o;
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (!E)
        setup();
    static uint8_t *in;
    static size_t cap;
    /* The first byte: bit 0, the client leaves as soon as it has written
     * (streams cut mid-answer) or stays until the server is quiet; bit 1,
     * framed mode (the rest is records, see framed). Raw inputs begin with
     * a frame's length, whose first byte is usually 0: both bits clear. */
    int leave = size && (data[0] & 1);
    int rec = size && (data[0] & 2);
    size_t max = sizeof PREFACE - 1 + (rec ? (size / 4 + 1) * (9 + 128) + size : size);
    if (max > cap) {
        free(in);
        in = malloc(max);
        cap = max;
    }
    memcpy(in, PREFACE, sizeof PREFACE - 1);
    size_t n = sizeof PREFACE - 1;
    if (rec) {
        n += framed(data + 1, size - 1, in + n);
    } else {
        memcpy(in + n, data, size);
        n += size;
    }
    size_t got = exchange(in, n, leave);
    if (getenv("FUZZ_H2_VERBOSE"))
        fprintf(stderr, "%zu bytes in, %zu back\n", n, got);
    if (sws_engine_counters(E)->active)
        FAIL("a connection is left open after its client closed");
    static const char ping[] = "GET /r HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (exchange((const uint8_t *)ping, sizeof ping - 1, 0) < 17)
        FAIL("the engine no longer answers a plain request");
}

#ifndef FUZZING
/* After the corpus: the engine and the listener's socket go. */
static void corpus_done(void)
{
    if (E) {
        char dir[sizeof ADDR.sun_path];
        snprintf(dir, sizeof dir, "%s", ADDR.sun_path);
        sws_engine_free(E);
        sws_router_free(RT);
        unlink(ADDR.sun_path);
        *strrchr(dir, '/') = 0;
        rmdir(dir);
    }
}
#define FUZZ_CORPUS_DONE corpus_done
#endif
#include "corpus_main.h"
