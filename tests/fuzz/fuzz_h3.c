/*
 * fuzz_h3.c — fuzz driver for HTTP/3's packet-to-stream glue
 * (csrc/http/h3/: the datagrams, the connection table, ngtcp2's and
 * nghttp3's callbacks, the request view, the response interface), with the
 * whole engine in-process behind a real QUIC listener on 127.0.0.1.
 *
 * The driver is a QUIC client of its own (libngtcp2 + GnuTLS, no HTTP/3
 * library: it writes raw stream bytes). It connects once (again after a
 * connection error), opens its control stream with an empty SETTINGS, and
 * for each input writes the input's bytes, after a first byte that picks
 * where, on a new request stream (HTTP/3 frames: HEADERS with QPACK field
 * lines, DATA, ...) or on a new unidirectional stream (a stream type, then
 * frames), with FIN; then it runs the engine's and its own passes until
 * the stream is closed, the connection ends, or a time bound.
 *
 * The engine serves /r (respond, 5 bytes), /big (respond, 100 000 bytes:
 * more than a stream's window) and 404 for the rest. Checked, besides
 * ASan/UBSan: after each input a plain GET /r on a fresh stream (of the
 * same connection, or of a new one when the input ended it) is answered;
 * and at exit every QUIC connection of the engine is gone once the
 * client's is closed.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 * Seeds: tests/fuzz/h3_seeds.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "context.h"

static int failures;

#ifdef FUZZING
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), __builtin_trap())
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static const char CERT_PEM[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBlTCCATugAwIBAgIUdUpKM/V2tgxh2QbgQvZ8EGhBZ20wCgYIKoZIzj0EAwIw\n"
    "FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNjE0MTE1M1oYDzIxMjYxMTEy\n"
    "MTQxMTUzWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO\n"
    "PQMBBwNCAASEGtJVk2z3hYhvTIwBI9xfAURThq+q64GI6dNSFp1RojWEy0RTjHXH\n"
    "wvSXks1MwZinQAjhW082cfpAY38CND3so2kwZzAdBgNVHQ4EFgQUQQUHvduNlcoy\n"
    "bGo4Yc5IZTZxm5YwHwYDVR0jBBgwFoAUQQUHvduNlcoybGo4Yc5IZTZxm5YwDwYD\n"
    "VR0TAQH/BAUwAwEB/zAUBgNVHREEDTALgglsb2NhbGhvc3QwCgYIKoZIzj0EAwID\n"
    "SAAwRQIhAKOjKhSNBMaHl20LCPMz3MuPj/6/Nw4VsolDRWRyvsT8AiAUzEbCGs3I\n"
    "qwjt2ijFtd9cm6NFNfRaYMmqcJ2HDPOZrg==\n"
    "-----END CERTIFICATE-----\n";
static const char KEY_PEM[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg5efRDs6VHJXq+gcP\n"
    "FUxaAn9EsfRSDlASiXmyEXeZMtyhRANCAASEGtJVk2z3hYhvTIwBI9xfAURThq+q\n"
    "64GI6dNSFp1RojWEy0RTjHXHwvSXks1MwZinQAjhW082cfpAY38CND3s\n"
    "-----END PRIVATE KEY-----\n";

static sws_engine_t *E;
static sws_router_t *RT;
static sws_quic_certs_t *CERTS;
static struct sockaddr_in SRV_ADDR;
static sws_respond_t ERR[SWS_ERR_COUNT];
static char BIG[100000];
static sws_respond_t R_SMALL = {200, "OK", 2, "Content-Type: text/plain\r\n", 26, "hello", 5, 1};
static sws_respond_t R_BIG = {200, "OK", 2, "", 0, BIG, sizeof BIG, 1};
static sws_handler_t H_SMALL = {SWS_H_RESPOND, &R_SMALL}, H_BIG = {SWS_H_RESPOND, &R_BIG};

/* ---- the client: raw QUIC streams ------------------------------------------------------------ */

static struct {
    int fd;
    ngtcp2_conn *qc;
    gnutls_session_t tls;
    gnutls_certificate_credentials_t cred;
    ngtcp2_crypto_conn_ref ref;
    struct sockaddr_storage local;
    socklen_t local_len;
    int ready, dead;
    int64_t watch;          /* the stream whose end we wait for */
    int watch_closed;
    uint64_t watch_bytes;   /* response bytes received on it */
} C;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int c_recv_stream_data(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t off,
                              const uint8_t *p, size_t n, void *u, void *su)
{
    (void)flags, (void)off, (void)p, (void)u, (void)su;
    if (id == C.watch)
        C.watch_bytes += n;
    ngtcp2_conn_extend_max_stream_offset(qc, id, n);
    ngtcp2_conn_extend_max_offset(qc, n);
    return 0;
}

static int c_stream_close(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t code, void *u,
                          void *su)
{
    (void)qc, (void)flags, (void)code, (void)u, (void)su;
    if (id == C.watch)
        C.watch_closed = 1;
    return 0;
}

static int c_handshake_completed(ngtcp2_conn *qc, void *u)
{
    (void)qc, (void)u;
    C.ready = 1;
    return 0;
}

static void c_rand(uint8_t *p, size_t n, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    if (getrandom(p, n, 0) != (ssize_t)n)
        abort();
}

static int c_new_cid(ngtcp2_conn *qc, ngtcp2_cid *cid, uint8_t *token, size_t len, void *u)
{
    (void)qc, (void)u;
    c_rand(cid->data, len, NULL);
    cid->datalen = len;
    c_rand(token, NGTCP2_STATELESS_RESET_TOKENLEN, NULL);
    return 0;
}

static const ngtcp2_callbacks CCB = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = c_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = c_recv_stream_data,
    .stream_close = c_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .rand = c_rand,
    .get_new_connection_id = c_new_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    (void)ref;
    return C.qc;
}

static void c_close(void)
{
    if (C.qc)
        ngtcp2_conn_del(C.qc);
    if (C.tls)
        gnutls_deinit(C.tls);
    if (C.fd >= 0)
        close(C.fd);
    C.qc = NULL;
    C.tls = NULL;
    C.fd = -1;
    C.ready = C.dead = 0;
}

/* Writes what ngtcp2 has, with `data` on stream `id` (-1: none) and FIN. */
static int c_write(int64_t id, const uint8_t *data, size_t n, int fin)
{
    uint8_t pkt[1452];
    size_t off = 0;
    for (int i = 0; i < 256; i++) {
        ngtcp2_ssize nd = -1;
        ngtcp2_vec v = {data ? (uint8_t *)data + off : NULL, n - off};
        int64_t sid = id >= 0 && (off < n || fin) ? id : -1;
        uint32_t flags = sid >= 0 && fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0;
        ngtcp2_pkt_info pi;
        ngtcp2_ssize w = ngtcp2_conn_writev_stream(C.qc, NULL, &pi, pkt, sizeof pkt, &nd, flags,
                                                   sid, sid >= 0 ? &v : NULL, sid >= 0, now_ns());
        if (w < 0) {
            if (w == NGTCP2_ERR_STREAM_DATA_BLOCKED || w == NGTCP2_ERR_STREAM_SHUT_WR) {
                id = -1;
                continue;
            }
            C.dead = 1;
            return -1;
        }
        if (nd > 0)
            off += (size_t)nd;
        if (sid >= 0 && nd >= 0 && off >= n)
            id = -1; /* all of it (and FIN) went */
        if (w == 0)
            break;
        send(C.fd, pkt, (size_t)w, 0);
    }
    return 0;
}

static void c_read(void)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(C.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0)
            return;
        ngtcp2_path path = {{(ngtcp2_sockaddr *)&C.local, C.local_len},
                            {(ngtcp2_sockaddr *)&SRV_ADDR, sizeof SRV_ADDR}, NULL};
        ngtcp2_pkt_info pi = {0};
        if (ngtcp2_conn_read_pkt(C.qc, &path, &pi, buf, (size_t)n, now_ns()) != 0) {
            C.dead = 1;
            return;
        }
    }
}

/* The engine's passes and the client's, until done() or about `ms`. */
static void pump(int (*done)(void), int ms)
{
    uint64_t until = now_ns() + (uint64_t)ms * 1000000u;
    while (now_ns() < until && !(done && done())) {
        sws_engine_run(E);
        sws_engine_tick(E);
        if (C.qc && !C.dead) {
            c_read();
            if (!C.dead && ngtcp2_conn_get_expiry(C.qc) <= now_ns() &&
                ngtcp2_conn_handle_expiry(C.qc, now_ns()) != 0)
                C.dead = 1;
            if (!C.dead)
                c_write(-1, NULL, 0, 0);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static int is_ready(void) { return C.ready || C.dead; }
static int watch_done(void) { return C.watch_closed || C.dead; }

static int c_connect(void)
{
    c_close();
    C.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (connect(C.fd, (struct sockaddr *)&SRV_ADDR, sizeof SRV_ADDR) != 0)
        return -1;
    C.local_len = sizeof C.local;
    getsockname(C.fd, (struct sockaddr *)&C.local, &C.local_len);
    ngtcp2_cid dcid = {.datalen = 18}, scid = {.datalen = 17};
    c_rand(dcid.data, dcid.datalen, NULL);
    c_rand(scid.data, scid.datalen, NULL);
    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = now_ns();
    ngtcp2_transport_params tp;
    ngtcp2_transport_params_default(&tp);
    tp.initial_max_stream_data_bidi_local = 1 << 20;
    tp.initial_max_stream_data_uni = 1 << 20;
    tp.initial_max_data = 16 << 20;
    tp.initial_max_streams_uni = 8;
    tp.max_idle_timeout = 30 * NGTCP2_SECONDS;
    ngtcp2_path path = {{(ngtcp2_sockaddr *)&C.local, C.local_len},
                        {(ngtcp2_sockaddr *)&SRV_ADDR, sizeof SRV_ADDR}, NULL};
    static const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    C.ref.get_conn = get_conn;
    if (ngtcp2_conn_client_new(&C.qc, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &CCB, &st, &tp,
                               NULL, NULL) != 0 ||
        gnutls_init(&C.tls, GNUTLS_CLIENT) != 0 ||
        gnutls_priority_set_direct(C.tls, "NORMAL:-VERS-ALL:+VERS-TLS1.3", NULL) != 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(C.tls) != 0 ||
        gnutls_credentials_set(C.tls, GNUTLS_CRD_CERTIFICATE, C.cred) != 0 ||
        gnutls_alpn_set_protocols(C.tls, &alpn, 1, 0) != 0 ||
        gnutls_server_name_set(C.tls, GNUTLS_NAME_DNS, "localhost", 9) != 0)
        return -1;
    gnutls_session_set_ptr(C.tls, &C.ref);
    ngtcp2_conn_set_tls_native_handle(C.qc, C.tls);
    c_write(-1, NULL, 0, 0);
    pump(is_ready, 3000);
    if (!C.ready)
        return -1;
    int64_t ctrl; /* our control stream: type 0x00, SETTINGS, empty */
    static const uint8_t settings[] = {0x00, 0x04, 0x00};
    if (ngtcp2_conn_open_uni_stream(C.qc, &ctrl, NULL) != 0)
        return -1;
    return c_write(ctrl, settings, sizeof settings, 0);
}

/* HEADERS for GET path (QPACK: static table, no dynamic entries). */
static size_t get_request(uint8_t *out, const char *path)
{
    size_t pl = strlen(path), n = 0;
    uint8_t f[64];
    f[n++] = 0x00, f[n++] = 0x00;            /* required insert count, base */
    f[n++] = 0xC0 | 17;                      /* :method GET */
    f[n++] = 0xC0 | 23;                      /* :scheme https */
    f[n++] = 0x50 | 0, f[n++] = 9;           /* :authority localhost */
    memcpy(f + n, "localhost", 9), n += 9;
    f[n++] = 0x50 | 1, f[n++] = (uint8_t)pl; /* :path */
    memcpy(f + n, path, pl), n += pl;
    out[0] = 0x01, out[1] = (uint8_t)n;      /* HEADERS, length */
    memcpy(out + 2, f, n);
    return n + 2;
}

static void check_served(void)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!C.qc || C.dead || !C.ready) {
            if (c_connect() != 0)
                continue;
        }
        uint8_t req[64];
        size_t n = get_request(req, "/r");
        if (ngtcp2_conn_open_bidi_stream(C.qc, &C.watch, NULL) != 0) {
            c_close(); /* out of streams: a new connection */
            continue;
        }
        C.watch_closed = 0;
        C.watch_bytes = 0;
        c_write(C.watch, req, n, 1);
        pump(watch_done, 3000);
        if (C.watch_closed && C.watch_bytes > 5)
            return;
        c_close();
    }
    FAIL("a GET /r after the input was not answered");
}

static void setup(void)
{
    static const int status[SWS_ERR_COUNT] = SWS_ERR_STATUSES;
    for (int i = 0; i < SWS_ERR_COUNT; i++)
        ERR[i] = (sws_respond_t){status[i], "Err", 3, "Content-Type: text/plain\r\n", 26,
                                 "err\n", 4, 1};
    memset(BIG, 'b', sizeof BIG);
    sws_limits_t lim = {.max_header_bytes = 8192, .max_headers = 64, .max_uri_bytes = 4096,
                        .max_body_bytes = 1 << 16, .header_timeout_ms = 10000,
                        .body_timeout_ms = 10000, .keepalive_timeout_ms = 10000,
                        .send_timeout_ms = 10000, .keepalive_requests = 100,
                        .max_connections = 100};
    E = sws_engine_new(&lim, ERR, 0);
    if (!E)
        exit(2);
    static const char server[] = "Server: f\r\n";
    sws_engine_set_server(E, server, sizeof server - 1);
    sws_engine_set_error_log(E, open("/dev/null", O_WRONLY), SWS_L_EMERG, 0);
    sws_router_t *rt = RT = sws_router_new();
    sws_site_t *site = sws_router_site(rt);
    sws_site_add_route(site, SWS_MATCH_EXACT, "/r", 2, &H_SMALL);
    sws_site_add_route(site, SWS_MATCH_EXACT, "/big", 4, &H_BIG);
    sws_router_finish(rt);
    sws_vhosts_t *vh = sws_router_vhosts(rt);
    sws_vhosts_set_default(vh, site);
    char dir[] = "/tmp/fuzz_h3.XXXXXX", cert[64], key[64], err[256];
    if (!mkdtemp(dir))
        exit(2);
    snprintf(cert, sizeof cert, "%s/c.pem", dir);
    snprintf(key, sizeof key, "%s/k.pem", dir);
    FILE *f = fopen(cert, "w");
    fputs(CERT_PEM, f);
    fclose(f);
    f = fopen(key, "w");
    fputs(KEY_PEM, f);
    fclose(f);
    sws_quic_certs_t *q = CERTS = sws_quic_certs_new(err, sizeof err);
    sws_tls_cert_conf_t cc = {cert, key};
    const char *names[] = {"localhost"};
    if (!q || sws_quic_certs_add(q, &cc, 1, names, 1, err, sizeof err) != 0) {
        fprintf(stderr, "certificates: %s\n", err);
        exit(2);
    }
    unlink(cert);
    unlink(key);
    rmdir(dir);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    SRV_ADDR.sin_family = AF_INET;
    SRV_ADDR.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof SRV_ADDR;
    if (bind(fd, (struct sockaddr *)&SRV_ADDR, sizeof SRV_ADDR) != 0 ||
        getsockname(fd, (struct sockaddr *)&SRV_ADDR, &sl) != 0 ||
        sws_engine_add_quic_listener(E, fd, vh, q, -1, -1, NULL, 0) != 0) {
        perror("quic listener");
        exit(2);
    }
    C.fd = -1;
    if (gnutls_certificate_allocate_credentials(&C.cred) != 0)
        exit(2);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (!E)
        setup();
    if (!size)
        return;
    if (!C.qc || C.dead || !C.ready)
        c_connect();
    if (!C.ready) {
        FAIL("the client cannot connect");
        return;
    }
    int uni = data[0] & 1;
    int64_t id;
    if ((uni ? ngtcp2_conn_open_uni_stream(C.qc, &id, NULL)
             : ngtcp2_conn_open_bidi_stream(C.qc, &id, NULL)) != 0) {
        c_connect(); /* out of streams */
        if (!C.ready || (uni ? ngtcp2_conn_open_uni_stream(C.qc, &id, NULL)
                             : ngtcp2_conn_open_bidi_stream(C.qc, &id, NULL)) != 0)
            return;
    }
    C.watch = id;
    C.watch_closed = 0;
    C.watch_bytes = 0;
    c_write(id, data + 1, size - 1, 1);
    pump(uni ? NULL : watch_done, uni ? 20 : 1000);
    check_served();
}

static void corpus_done(void)
{
    c_close();
    pump(NULL, 300); /* the server's side sees the idle client go (its close never went) */
    sws_engine_close_all(E);
    if (sws_engine_counters(E)->active != 0)
        FAIL("a QUIC connection outlived the engine's close_all");
    sws_engine_free(E);
    sws_quic_certs_free(CERTS);
    sws_router_free(RT);
    gnutls_certificate_free_credentials(C.cred);
}
#define FUZZ_CORPUS_DONE corpus_done

#include "corpus_main.h"
