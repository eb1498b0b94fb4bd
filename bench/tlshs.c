/* tlshs: a TLS handshake load generator (bench/handshakes.sh uses it).
 *
 * CONNS slots, each a non-blocking connection driven by one epoll loop, in
 * a cycle: TCP connect, TLS handshake (SNI set), one `GET PATH HTTP/1.1`
 * with `Connection: close`, read the answer to EOF, close; again, until the
 * duration is over. The answer must have the expected status (200) and, if
 * it has a Content-Length, exactly that many body bytes.
 *
 * --resume: each slot keeps the session (TLS 1.2 ticket, or the TLS 1.3
 * NewSessionTicket that arrives after the handshake: the session is taken
 * after the answer was read to EOF) of its first full handshake and offers
 * it on every later connection. A handshake that offered it and still was
 * full counts as a miss; its new session replaces the kept one.
 *
 * Build: gcc -O2 -Wall -o tlshs bench/tlshs.c -lssl -lcrypto
 * Usage: tlshs [options] https://HOST:PORT[/PATH]   (or HOST:PORT)
 *   -c N            concurrent connections (16)
 *   -d SECONDS      duration (5; fractions allowed)
 *   -p PATH         request path (the URL's, else /)
 *   --resume        resume with each slot's saved session
 *   --tls12 / --tls13   only that version (default: 1.2 and 1.3)
 *   --sigalgs LIST  signature algorithms offered (OpenSSL syntax): picks the
 *                   server's certificate, e.g. ecdsa_secp256r1_sha256 or
 *                   rsa_pss_rsae_sha256:rsa_pkcs1_sha256
 *   --cipher LIST   TLS 1.2 cipher list (ECDHE-RSA-... / ECDHE-ECDSA-...)
 *   --ciphersuites LIST, --groups LIST, --alpn a,b
 *   --sni NAME      server name (default: the URL's host, or localhost for an
 *                   IP address); also the Host header
 *   --cafile FILE   verify the certificate chain and name (default: no
 *                   verification)
 *   --timeout S     per connection (10), --status N expected (200), -q quiet
 *
 * Output: a few human lines, then one machine-readable last line:
 *   TLSHS conns=.. duration_s=.. full=.. resumed=.. full_per_s=.. resumed_per_s=..
 *   hs_per_s=.. resumed_frac=.. failures=.. (connect_err handshake_err io_err
 *   bad_response timeout) resume_offered=.. resume_miss=.. no_ticket=..
 *   ok=.. no_close_notify=.. proto=.. cipher=.. group=.. cert=.. mixed=..
 *   full_p50_ms=.. full_p99_ms=.. resumed_p50_ms=.. resumed_p99_ms=..
 * A handshake counts when it completes within the duration; `ok` counts
 * whole cycles (answer read and valid). Latencies: connect start to
 * handshake done. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

enum state { S_IDLE, S_CONNECT, S_HANDSHAKE, S_WRITE, S_READ, S_SLEEP };
enum fail { F_CONNECT, F_HANDSHAKE, F_IO, F_RESPONSE, F_TIMEOUT, F_N };
static const char *fail_name[F_N] = {"connect_err", "handshake_err", "io_err", "bad_response",
                                     "timeout"};

#define HDR_MAX 8192

typedef struct conn {
    int fd;
    SSL *ssl;
    enum state st;
    uint32_t events; /* registered with epoll for this fd (0: not yet) */
    double t_start, wake;
    SSL_SESSION *saved; /* --resume: the slot's session */
    int offered;        /* this connection offered `saved` */
    int close_notify;   /* the server's close_notify arrived */
    size_t wpos;
    char hdr[HDR_MAX];
    size_t hlen;
    int hdr_done;
    long status;
    long long clen, body;
} conn_t;

/* ---- options ---- */
static int o_conns = 16, o_resume, o_minv, o_maxv, o_quiet, o_status = 200;
static double o_duration = 5, o_timeout = 10;
static const char *o_path, *o_sigalgs, *o_cipher, *o_suites, *o_groups, *o_cafile, *o_sni,
    *o_alpn;
static char host[300], port[16];

/* ---- results ---- */
static long long n_full, n_resumed, n_ok, n_offered, n_miss, n_no_ticket, n_no_close_notify;
static long long n_fail[F_N];
static char first_err[F_N][200];
static char info_proto[32] = "-", info_cipher[64] = "-", info_group[32] = "-", info_cert[32] = "-";
static long long n_mixed; /* handshakes whose protocol, cipher or certificate differ from the first */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} lat_t;
static lat_t lat_full, lat_resumed;

static SSL_CTX *ctx;
static int ep;
static struct addrinfo *addr;
static char request[1024];
static size_t request_len;
static unsigned char alpn_wire[256];
static size_t alpn_len;
static int sni_is_ip;
static double t0, deadline;
static int measuring = 1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tlshs: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static void lat_add(lat_t *l, double secs)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            die("out of memory");
    }
    double us = secs * 1e6;
    l->v[l->n++] = us > 4e9 ? 4000000000u : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double lat_pct_ms(lat_t *l, double p)
{
    if (!l->n)
        return 0;
    size_t k = (size_t)(p / 100.0 * l->n + 0.5);
    if (k > 0)
        k--;
    if (k >= l->n)
        k = l->n - 1;
    return l->v[k] / 1000.0;
}

/* the TLS library's reason for the last error, or the errno text */
static void tls_reason(char *buf, size_t len, int sslerr)
{
    unsigned long e = ERR_peek_last_error();
    if (e)
        ERR_error_string_n(e, buf, len);
    else if (sslerr == SSL_ERROR_SYSCALL && errno)
        snprintf(buf, len, "%s", strerror(errno));
    else if (sslerr == SSL_ERROR_SYSCALL)
        snprintf(buf, len, "connection closed by the server");
    else
        snprintf(buf, len, "SSL error %d", sslerr);
    ERR_clear_error();
}

static void conn_start(conn_t *c);

static void conn_close(conn_t *c)
{
    if (c->ssl) {
        /* Marked as shut down: SSL_free would otherwise take the session
         * (possibly the slot's saved one) for a bad one, not resumable. */
        SSL_set_shutdown(c->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0)
        close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->events = 0;
    c->st = S_IDLE;
}

static void conn_fail(conn_t *c, enum fail kind, const char *fmt, ...)
{
    if (measuring) {
        n_fail[kind]++;
        if (!first_err[kind][0]) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(first_err[kind], sizeof first_err[kind], fmt, ap);
            va_end(ap);
        }
    }
    ERR_clear_error();
    conn_close(c);
    if (kind == F_CONNECT) { /* no busy loop against a closed port */
        c->st = S_SLEEP;
        c->wake = now() + 0.01;
        return;
    }
    conn_start(c);
}

static void want(conn_t *c, uint32_t ev)
{
    if (c->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(ep, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e) < 0)
        die("epoll_ctl: %s", strerror(errno));
    c->events = ev;
}

static void conn_start(conn_t *c)
{
    memset(c->hdr, 0, 1);
    c->hlen = c->hdr_done = 0;
    c->status = -1;
    c->clen = -1;
    c->body = 0;
    c->wpos = 0;
    c->offered = c->close_notify = 0;
    c->events = 0;
    c->t_start = now();
    c->fd = socket(addr->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        conn_fail(c, F_CONNECT, "socket: %s", strerror(errno));
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->st = S_CONNECT;
    if (connect(c->fd, addr->ai_addr, addr->ai_addrlen) < 0 && errno != EINPROGRESS) {
        conn_fail(c, F_CONNECT, "connect: %s", strerror(errno));
        return;
    }
    want(c, EPOLLOUT);
}

static void describe_cert(SSL *s, char *buf, size_t len)
{
    X509 *x = SSL_get0_peer_certificate(s);
    EVP_PKEY *k = x ? X509_get0_pubkey(x) : NULL;
    if (!k) {
        snprintf(buf, len, "none");
        return;
    }
    int id = EVP_PKEY_get_base_id(k);
    if (id == EVP_PKEY_EC) {
        char g[64] = "";
        size_t gl = 0;
        EVP_PKEY_get_group_name(k, g, sizeof g, &gl);
        if (!strcmp(g, "prime256v1"))
            snprintf(buf, len, "ECDSA-P256");
        else if (!strcmp(g, "secp384r1"))
            snprintf(buf, len, "ECDSA-P384");
        else
            snprintf(buf, len, "ECDSA-%s", g);
    } else if (id == EVP_PKEY_RSA || id == EVP_PKEY_RSA_PSS) {
        snprintf(buf, len, "RSA-%d", EVP_PKEY_get_bits(k));
    } else {
        snprintf(buf, len, "%s", OBJ_nid2sn(id));
    }
}

static void handshake_done(conn_t *c)
{
    double t = now();
    int reused = SSL_session_reused(c->ssl);
    if (t > deadline || !measuring)
        return;
    if (reused) {
        n_resumed++;
        lat_add(&lat_resumed, t - c->t_start);
    } else {
        n_full++;
        lat_add(&lat_full, t - c->t_start);
        if (c->offered)
            n_miss++;
    }
    const char *proto = SSL_get_version(c->ssl), *cipher = SSL_get_cipher_name(c->ssl);
    char cert[32];
    if (!reused)
        describe_cert(c->ssl, cert, sizeof cert);
    if (!strcmp(info_proto, "-")) {
        snprintf(info_proto, sizeof info_proto, "%s", proto);
        snprintf(info_cipher, sizeof info_cipher, "%s", cipher);
        int nid = SSL_get_negotiated_group(c->ssl);
        const char *gn = nid ? SSL_group_to_name(c->ssl, nid) : NULL;
        snprintf(info_group, sizeof info_group, "%s", gn ? gn : "-");
    } else if (strcmp(info_proto, proto) || strcmp(info_cipher, cipher)) {
        n_mixed++;
    }
    if (!reused) {
        if (!strcmp(info_cert, "-"))
            snprintf(info_cert, sizeof info_cert, "%s", cert);
        else if (strcmp(info_cert, cert))
            n_mixed++;
    }
}

/* The answer so far: status line and headers, then body bytes. */
static int parse_answer(conn_t *c, const char *buf, size_t n)
{
    if (c->hdr_done) {
        c->body += n;
        return 0;
    }
    size_t take = n < HDR_MAX - 1 - c->hlen ? n : HDR_MAX - 1 - c->hlen;
    memcpy(c->hdr + c->hlen, buf, take);
    size_t old = c->hlen;
    c->hlen += take;
    c->hdr[c->hlen] = 0;
    char *end = strstr(c->hdr, "\r\n\r\n");
    if (!end) {
        if (c->hlen >= HDR_MAX - 1)
            return -1; /* header too large */
        return 0;
    }
    size_t hend = (size_t)(end - c->hdr) + 4;
    c->hdr_done = 1;
    c->body = (long long)(old + n) - (long long)hend;
    if (strncmp(c->hdr, "HTTP/1.", 7) || strlen(c->hdr) < 12)
        return -1;
    c->status = strtol(c->hdr + 9, NULL, 10);
    for (char *l = strstr(c->hdr, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
        if (!strncasecmp(l + 2, "content-length:", 15))
            c->clen = strtoll(l + 17, NULL, 10);
    }
    return 0;
}

static void conn_done(conn_t *c)
{
    if (!c->hdr_done) {
        conn_fail(c, F_RESPONSE, "no complete answer head before EOF (%zu bytes)", c->hlen);
        return;
    }
    if (c->status != o_status) {
        conn_fail(c, F_RESPONSE, "status %ld, expected %d", c->status, o_status);
        return;
    }
    if (c->clen >= 0 && c->body != c->clen) {
        conn_fail(c, F_RESPONSE, "body of %lld bytes, Content-Length %lld", c->body, c->clen);
        return;
    }
    if (measuring && now() <= deadline) {
        n_ok++;
        if (!c->close_notify)
            n_no_close_notify++;
    }
    if (o_resume && (!c->saved || !SSL_session_reused(c->ssl))) {
        SSL_SESSION *s = SSL_get1_session(c->ssl);
        if (s && SSL_SESSION_is_resumable(s)) {
            if (c->saved)
                SSL_SESSION_free(c->saved);
            c->saved = s;
        } else {
            if (s)
                SSL_SESSION_free(s);
            if (measuring)
                n_no_ticket++;
        }
    }
    conn_close(c);
    conn_start(c);
}

static void info_cb(const SSL *s, int where, int ret)
{
    if ((where & SSL_CB_READ_ALERT) && (ret & 0xff) == SSL_AD_CLOSE_NOTIFY) {
        conn_t *c = SSL_get_app_data(s);
        if (c)
            c->close_notify = 1;
    }
}

static void drive(conn_t *c)
{
    char buf[16384];
    for (;;) {
        int r, e;
        switch (c->st) {
        case S_CONNECT: {
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                err = errno;
            if (err) {
                conn_fail(c, F_CONNECT, "connect: %s", strerror(err));
                return;
            }
            c->ssl = SSL_new(ctx);
            if (!c->ssl)
                die("SSL_new failed");
            SSL_set_fd(c->ssl, c->fd);
            SSL_set_app_data(c->ssl, c);
            if (!sni_is_ip || o_sni)
                SSL_set_tlsext_host_name(c->ssl, (char *)(o_sni ? o_sni : host));
            if (o_cafile) {
                if (sni_is_ip && !o_sni)
                    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
                else
                    SSL_set1_host(c->ssl, o_sni ? o_sni : host);
            }
            if (o_resume && c->saved) {
                SSL_set_session(c->ssl, c->saved);
                c->offered = 1;
                if (measuring && now() <= deadline)
                    n_offered++;
            }
            SSL_set_connect_state(c->ssl);
            c->st = S_HANDSHAKE;
            break;
        }
        case S_HANDSHAKE:
            r = SSL_do_handshake(c->ssl);
            if (r == 1) {
                handshake_done(c);
                c->st = S_WRITE;
                break;
            }
            e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) {
                want(c, EPOLLIN);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                want(c, EPOLLOUT);
                return;
            }
            {
                char why[160];
                tls_reason(why, sizeof why, e);
                conn_fail(c, F_HANDSHAKE, "handshake: %s", why);
            }
            return;
        case S_WRITE:
            r = SSL_write(c->ssl, request + c->wpos, (int)(request_len - c->wpos));
            if (r > 0) {
                c->wpos += (size_t)r;
                if (c->wpos == request_len)
                    c->st = S_READ;
                break;
            }
            e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) {
                want(c, EPOLLIN);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                want(c, EPOLLOUT);
                return;
            }
            {
                char why[160];
                tls_reason(why, sizeof why, e);
                conn_fail(c, F_IO, "write: %s", why);
            }
            return;
        case S_READ:
            r = SSL_read(c->ssl, buf, sizeof buf);
            if (r > 0) {
                if (parse_answer(c, buf, (size_t)r) < 0) {
                    conn_fail(c, F_RESPONSE, "unparsable answer head: %.60s", c->hdr);
                    return;
                }
                break;
            }
            e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify, or EOF (IGNORE_UNEXPECTED_EOF) */
                conn_done(c);
                return;
            }
            if (e == SSL_ERROR_WANT_READ) {
                want(c, EPOLLIN);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                want(c, EPOLLOUT);
                return;
            }
            {
                char why[160];
                tls_reason(why, sizeof why, e);
                conn_fail(c, F_IO, "read: %s", why);
            }
            return;
        default:
            return;
        }
    }
}

static int accept_any_chain(X509_STORE_CTX *x, void *arg)
{
    return 1;
}

static void parse_target(const char *t)
{
    const char *p = t;
    if (!strncmp(p, "https://", 8))
        p += 8;
    else if (strstr(p, "://"))
        die("only https:// URLs (or HOST:PORT)");
    const char *slash = strchr(p, '/');
    size_t hp_len = slash ? (size_t)(slash - p) : strlen(p);
    char hp[300];
    if (hp_len >= sizeof hp)
        die("host too long");
    memcpy(hp, p, hp_len);
    hp[hp_len] = 0;
    if (!o_path)
        o_path = slash ? strdup(slash) : "/";
    char *colon;
    if (hp[0] == '[') {
        char *rb = strchr(hp, ']');
        if (!rb)
            die("bad IPv6 address in %s", t);
        *rb = 0;
        snprintf(host, sizeof host, "%s", hp + 1);
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = strrchr(hp, ':');
        if (colon)
            *colon = 0;
        snprintf(host, sizeof host, "%s", hp);
    }
    snprintf(port, sizeof port, "%s", colon ? colon + 1 : "443");
    struct in6_addr a6;
    sni_is_ip = inet_pton(AF_INET, host, &a6) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: tlshs [-c CONNS] [-d SECONDS] [-p PATH] [--resume] [--tls12|--tls13]\n"
            "             [--sigalgs LIST] [--cipher LIST] [--ciphersuites LIST] [--groups LIST]\n"
            "             [--alpn a,b] [--sni NAME] [--cafile FILE] [--timeout S] [--status N] [-q]\n"
            "             https://HOST:PORT[/PATH] | HOST:PORT\n");
    exit(2);
}

int main(int argc, char **argv)
{
    enum { O_RESUME = 256, O_TLS12, O_TLS13, O_SIGALGS, O_CIPHER, O_SUITES, O_GROUPS, O_CAFILE,
           O_SNI, O_ALPN, O_TIMEOUT, O_STATUS };
    static const struct option lo[] = {
        {"connections", 1, 0, 'c'}, {"duration", 1, 0, 'd'},     {"path", 1, 0, 'p'},
        {"quiet", 0, 0, 'q'},       {"resume", 0, 0, O_RESUME},  {"tls12", 0, 0, O_TLS12},
        {"tls13", 0, 0, O_TLS13},   {"sigalgs", 1, 0, O_SIGALGS}, {"cipher", 1, 0, O_CIPHER},
        {"ciphersuites", 1, 0, O_SUITES}, {"groups", 1, 0, O_GROUPS}, {"cafile", 1, 0, O_CAFILE},
        {"sni", 1, 0, O_SNI},       {"alpn", 1, 0, O_ALPN},      {"timeout", 1, 0, O_TIMEOUT},
        {"status", 1, 0, O_STATUS}, {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "c:d:p:qh", lo, NULL)) != -1) {
        switch (o) {
        case 'c': o_conns = atoi(optarg); break;
        case 'd': o_duration = atof(optarg); break;
        case 'p': o_path = optarg; break;
        case 'q': o_quiet = 1; break;
        case O_RESUME: o_resume = 1; break;
        case O_TLS12: o_minv = o_maxv = TLS1_2_VERSION; break;
        case O_TLS13: o_minv = o_maxv = TLS1_3_VERSION; break;
        case O_SIGALGS: o_sigalgs = optarg; break;
        case O_CIPHER: o_cipher = optarg; break;
        case O_SUITES: o_suites = optarg; break;
        case O_GROUPS: o_groups = optarg; break;
        case O_CAFILE: o_cafile = optarg; break;
        case O_SNI: o_sni = optarg; break;
        case O_ALPN: o_alpn = optarg; break;
        case O_TIMEOUT: o_timeout = atof(optarg); break;
        case O_STATUS: o_status = atoi(optarg); break;
        default: usage();
        }
    }
    if (optind != argc - 1 || o_conns < 1 || o_duration <= 0 || o_timeout <= 0)
        usage();
    parse_target(argv[optind]);
    if (!o_sni && sni_is_ip)
        o_sni = "localhost"; /* SNI carries names only (RFC 6066): an IP gets localhost */
    signal(SIGPIPE, SIG_IGN);

    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int gr = getaddrinfo(host, port, &hints, &res);
    if (gr)
        die("%s:%s: %s", host, port, gai_strerror(gr));
    addr = res;

    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        die("SSL_CTX_new failed");
    SSL_CTX_set_min_proto_version(ctx, o_minv ? o_minv : TLS1_2_VERSION);
    if (o_maxv)
        SSL_CTX_set_max_proto_version(ctx, o_maxv);
    /* a server that closes without close_notify ends the answer too (counted) */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF); /* the slots keep their own */
    SSL_CTX_set_info_callback(ctx, info_cb);
    if (o_sigalgs && !SSL_CTX_set1_sigalgs_list(ctx, o_sigalgs))
        die("--sigalgs %s: not accepted by OpenSSL", o_sigalgs);
    if (o_cipher && !SSL_CTX_set_cipher_list(ctx, o_cipher))
        die("--cipher %s: not accepted by OpenSSL", o_cipher);
    if (o_suites && !SSL_CTX_set_ciphersuites(ctx, o_suites))
        die("--ciphersuites %s: not accepted by OpenSSL", o_suites);
    if (o_groups && !SSL_CTX_set1_groups_list(ctx, o_groups))
        die("--groups %s: not accepted by OpenSSL", o_groups);
    if (o_cafile) {
        if (!SSL_CTX_load_verify_locations(ctx, o_cafile, NULL))
            die("--cafile %s: cannot load", o_cafile);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        /* no verification: not even the chain building OpenSSL does (and
         * then ignores) under SSL_VERIFY_NONE; the client's work per
         * handshake is then what the protocol needs */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_cert_verify_callback(ctx, accept_any_chain, NULL);
    }
    if (o_alpn) {
        const char *p = o_alpn;
        while (*p) {
            size_t l = strcspn(p, ",");
            if (!l || l > 255 || alpn_len + 1 + l > sizeof alpn_wire)
                die("bad --alpn %s", o_alpn);
            alpn_wire[alpn_len++] = (unsigned char)l;
            memcpy(alpn_wire + alpn_len, p, l);
            alpn_len += l;
            p += l;
            if (*p == ',')
                p++;
        }
        if (SSL_CTX_set_alpn_protos(ctx, alpn_wire, (unsigned)alpn_len))
            die("--alpn %s: not accepted", o_alpn);
    }

    const char *hname = o_sni ? o_sni : host;
    int n = snprintf(request, sizeof request,
                     "GET %s HTTP/1.1\r\nHost: %s%s%s\r\nUser-Agent: tlshs\r\nAccept: */*\r\n"
                     "Connection: close\r\n\r\n",
                     o_path, hname, strcmp(port, "443") ? ":" : "", strcmp(port, "443") ? port : "");
    if (n <= 0 || (size_t)n >= sizeof request)
        die("request too long");
    request_len = (size_t)n;

    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1: %s", strerror(errno));
    conn_t *conns = calloc((size_t)o_conns, sizeof *conns);
    if (!conns)
        die("out of memory");
    t0 = now();
    deadline = t0 + o_duration;
    for (int i = 0; i < o_conns; i++) {
        conns[i].fd = -1;
        conn_start(&conns[i]);
    }
    struct epoll_event evs[1024];
    double last_scan = t0;
    for (;;) {
        double t = now();
        if (t >= deadline)
            break;
        int ms = (int)((deadline - t) * 1000) + 1;
        if (ms > 10)
            ms = 10;
        int k = epoll_wait(ep, evs, 1024, ms);
        if (k < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < k; i++)
            drive((conn_t *)evs[i].data.ptr);
        t = now();
        if (t - last_scan >= 0.01) { /* sleepers and timeouts */
            last_scan = t;
            for (int i = 0; i < o_conns; i++) {
                conn_t *c = &conns[i];
                if (c->st == S_SLEEP && t >= c->wake)
                    conn_start(c);
                else if (c->st != S_SLEEP && c->st != S_IDLE && t - c->t_start > o_timeout)
                    conn_fail(c, F_TIMEOUT, "no answer within %.1f s (state %d)", o_timeout, c->st);
            }
        }
    }
    measuring = 0;
    double dur = now() - t0;
    if (dur > o_duration)
        dur = o_duration; /* counts stop at the deadline */

    qsort(lat_full.v, lat_full.n, sizeof *lat_full.v, cmp_u32);
    qsort(lat_resumed.v, lat_resumed.n, sizeof *lat_resumed.v, cmp_u32);
    long long fails = 0;
    for (int i = 0; i < F_N; i++)
        fails += n_fail[i];
    long long hs = n_full + n_resumed;
    double frac = hs ? (double)n_resumed / hs : 0;
    if (!o_quiet) {
        printf("tlshs: %d connections, %.2f s, https://%s:%s%s (SNI %s)%s\n", o_conns, dur, host,
               port, o_path, o_sni ? o_sni : host, o_resume ? ", resuming" : "");
        printf("  handshakes: %lld full (%.1f/s), %lld resumed (%.1f/s), %.2f %% resumed\n", n_full,
               n_full / dur, n_resumed, n_resumed / dur, 100 * frac);
        printf("  negotiated: %s %s, group %s, certificate %s%s\n", info_proto, info_cipher,
               info_group, info_cert, n_mixed ? " (NOT the same on every handshake)" : "");
        printf("  handshake latency: full p50 %.2f ms p99 %.2f ms; resumed p50 %.2f ms p99 %.2f ms\n",
               lat_pct_ms(&lat_full, 50), lat_pct_ms(&lat_full, 99),
               lat_pct_ms(&lat_resumed, 50), lat_pct_ms(&lat_resumed, 99));
        printf("  answers: %lld ok (%lld without close_notify); failures: %lld\n", n_ok,
               n_no_close_notify, fails);
        if (o_resume)
            printf("  resumption: %lld offered, %lld missed (full handshake), %lld without a ticket\n",
                   n_offered, n_miss, n_no_ticket);
        for (int i = 0; i < F_N; i++)
            if (n_fail[i])
                printf("  %s: %lld, first: %s\n", fail_name[i], n_fail[i], first_err[i]);
    }
    printf("TLSHS conns=%d duration_s=%.3f full=%lld resumed=%lld full_per_s=%.1f resumed_per_s=%.1f "
           "hs_per_s=%.1f resumed_frac=%.4f failures=%lld",
           o_conns, dur, n_full, n_resumed, n_full / dur, n_resumed / dur, hs / dur, frac, fails);
    for (int i = 0; i < F_N; i++)
        printf(" %s=%lld", fail_name[i], n_fail[i]);
    printf(" resume_offered=%lld resume_miss=%lld no_ticket=%lld ok=%lld no_close_notify=%lld "
           "proto=%s cipher=%s group=%s cert=%s mixed=%lld "
           "full_p50_ms=%.3f full_p99_ms=%.3f resumed_p50_ms=%.3f resumed_p99_ms=%.3f\n",
           n_offered, n_miss, n_no_ticket, n_ok, n_no_close_notify, info_proto, info_cipher,
           info_group, info_cert, n_mixed, lat_pct_ms(&lat_full, 50), lat_pct_ms(&lat_full, 99),
           lat_pct_ms(&lat_resumed, 50), lat_pct_ms(&lat_resumed, 99));
    return 0;
}
