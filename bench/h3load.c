/* h3load: an HTTP/3 load generator on Debian's libngtcp2 (GnuTLS crypto)
 * and libnghttp3, for bench/run.sh's tls-h3-* scenarios (Debian's h2load
 * is built without QUIC). One thread, one epoll; output in h2load's shape,
 * which bench/lib/benchlib.py parses.
 *
 *   h3load [-c CONNS] [-m STREAMS] (-n REQUESTS | -D SECONDS) [--sni NAME]
 *          [--hold SECONDS] [--no-gro] URL
 *
 * --hold: once every request is answered, keep the connections open (idle)
 * this long before the summary, saying "holding N connections" on stderr
 * (bench/h3_idle_rss.py measures the server meanwhile).
 *
 * UDP GRO (Linux 5.0+): each socket asks for the server's GSO batches whole
 * (UDP_GRO), as quic-go and ngtcp2's own examples do, and splits them by
 * the segment size the kernel reports. Without it, a GSO batch sent over
 * loopback is cut into datagrams in the sender's system call, each queued
 * and woken for on its own: a cost a NIC's GRO spares a server on a real
 * network, and TCP over loopback (64 KiB segments) never pays. --no-gro:
 * one datagram per read, as before.
 *
 * Each connection keeps up to STREAMS requests in flight (GET, no body).
 * The certificate is not verified (a benchmark against our own test
 * certificates). Build: make -C bench h3load (or `make bench-deps`).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#define MAX_PKT 1452
#define PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:" \
                 "+CHACHA20-POLY1305:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1"

typedef struct conn conn_t;
struct conn {
    int fd;
    ngtcp2_conn *qc;
    nghttp3_conn *h3;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    struct sockaddr_storage local, remote;
    socklen_t local_len, remote_len;
    uint32_t in_flight;
    int dead, ready;
};

static struct {
    const char *host, *port, *path, *authority, *sni;
    uint32_t conns, streams;
    uint64_t n_total;        /* -n: requests to make; 0 with -D */
    double duration, hold;
    int no_gro;
    uint64_t started, done, ok, failed, errored;
    uint64_t s2, s3, s4, s5, bytes;
    uint64_t deadline;       /* ns; 0: by count */
    gnutls_certificate_credentials_t cred;
    gnutls_priority_t prio;
    conn_t *c;
} G;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void rnd(void *p, size_t n)
{
    if (getrandom(p, n, 0) != (ssize_t)n)
        abort();
}

static int more_to_start(void)
{
    if (G.deadline)
        return now_ns() < G.deadline;
    return G.started < G.n_total;
}

/* ---- HTTP/3 --------------------------------------------------------------------------------- */

static int submit(conn_t *c);

/* The status of each stream: kept in a small table by stream id / 4 modulo
 * its size (streams of one connection in flight are few). */
#define ST_SLOTS 4096
static uint16_t *status_of(conn_t *c, int64_t id)
{
    static uint16_t *tab;
    if (!tab)
        tab = calloc((size_t)G.conns * ST_SLOTS, sizeof *tab);
    size_t ci = (size_t)(c - G.c);
    return &tab[ci * ST_SLOTS + (size_t)(id / 4) % ST_SLOTS];
}

static int h_recv_header(nghttp3_conn *h, int64_t id, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *cu, void *su)
{
    (void)h, (void)name, (void)flags, (void)su;
    if (token == NGHTTP3_QPACK_TOKEN__STATUS) {
        nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
        if (v.len == 3)
            *status_of(cu, id) = (uint16_t)((v.base[0] - '0') * 100 + (v.base[1] - '0') * 10 +
                                            (v.base[2] - '0'));
    }
    return 0;
}

static int h_recv_data(nghttp3_conn *h, int64_t id, const uint8_t *p, size_t n, void *cu, void *su)
{
    (void)h, (void)p, (void)su;
    conn_t *c = cu;
    G.bytes += n;
    ngtcp2_conn_extend_max_stream_offset(c->qc, id, n);
    ngtcp2_conn_extend_max_offset(c->qc, n);
    return 0;
}

static int h_deferred(nghttp3_conn *h, int64_t id, size_t n, void *cu, void *su)
{
    (void)h, (void)su;
    conn_t *c = cu;
    ngtcp2_conn_extend_max_stream_offset(c->qc, id, n);
    ngtcp2_conn_extend_max_offset(c->qc, n);
    return 0;
}

static int h_stream_close(nghttp3_conn *h, int64_t id, uint64_t code, void *cu, void *su)
{
    (void)h, (void)su;
    conn_t *c = cu;
    if (!ngtcp2_is_bidi_stream(id))
        return 0;
    uint16_t *st = status_of(c, id);
    G.done++;
    c->in_flight--;
    if (code != NGHTTP3_H3_NO_ERROR || !*st) {
        G.failed++;
        G.errored++;
    } else {
        int k = *st / 100;
        G.s2 += k == 2;
        G.s3 += k == 3;
        G.s4 += k == 4;
        G.s5 += k == 5;
        if (k == 2 || k == 3)
            G.ok++;
        else
            G.failed++;
    }
    *st = 0;
    return 0;
}

static const nghttp3_callbacks h3cb = {
    .stream_close = h_stream_close,
    .recv_data = h_recv_data,
    .deferred_consume = h_deferred,
    .recv_header = h_recv_header,
};

static int h3_setup(conn_t *c)
{
    nghttp3_settings st;
    nghttp3_settings_default(&st);
    st.qpack_max_dtable_capacity = 4096;
    st.qpack_blocked_streams = 100;
    if (nghttp3_conn_client_new(&c->h3, &h3cb, &st, NULL, c) != 0)
        return -1;
    int64_t ctrl, enc, dec;
    if (ngtcp2_conn_open_uni_stream(c->qc, &ctrl, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(c->h3, ctrl) != 0 ||
        ngtcp2_conn_open_uni_stream(c->qc, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(c->qc, &dec, NULL) != 0 ||
        nghttp3_conn_bind_qpack_streams(c->h3, enc, dec) != 0)
        return -1;
    return 0;
}

static int submit(conn_t *c)
{
    while (c->h3 && c->ready && c->in_flight < G.streams && more_to_start()) {
        int64_t id;
        int rv = ngtcp2_conn_open_bidi_stream(c->qc, &id, NULL);
        if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED)
            return 0;
        if (rv != 0)
            return -1;
        const nghttp3_nv nva[] = {
            {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
            {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
            {(uint8_t *)":authority", (uint8_t *)G.authority, 10, strlen(G.authority), 0},
            {(uint8_t *)":path", (uint8_t *)G.path, 5, strlen(G.path), 0},
            {(uint8_t *)"user-agent", (uint8_t *)"h3load", 10, 6, 0},
        };
        if (nghttp3_conn_submit_request(c->h3, id, nva, 5, NULL, NULL) != 0)
            return -1;
        c->in_flight++;
        G.started++;
    }
    return 0;
}

/* ---- QUIC ----------------------------------------------------------------------------------- */

static int q_recv_stream_data(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t off,
                              const uint8_t *p, size_t n, void *u, void *su)
{
    (void)off, (void)su;
    conn_t *c = u;
    nghttp3_ssize k = nghttp3_conn_read_stream(c->h3, id, p, n, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (k < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_extend_max_stream_offset(qc, id, (uint64_t)k);
    ngtcp2_conn_extend_max_offset(qc, (uint64_t)k);
    return 0;
}

static int q_acked(ngtcp2_conn *qc, int64_t id, uint64_t off, uint64_t n, void *u, void *su)
{
    (void)qc, (void)off, (void)su;
    conn_t *c = u;
    return nghttp3_conn_add_ack_offset(c->h3, id, n) ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int q_stream_close(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t code, void *u,
                          void *su)
{
    (void)qc, (void)su;
    conn_t *c = u;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = NGHTTP3_H3_NO_ERROR;
    int rv = nghttp3_conn_close_stream(c->h3, id, code);
    return rv && rv != NGHTTP3_ERR_STREAM_NOT_FOUND ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int q_stream_reset(ngtcp2_conn *qc, int64_t id, uint64_t size, uint64_t code, void *u,
                          void *su)
{
    (void)qc, (void)size, (void)code, (void)su;
    conn_t *c = u;
    return nghttp3_conn_shutdown_stream_read(c->h3, id) ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int q_extend_stream_data(ngtcp2_conn *qc, int64_t id, uint64_t max, void *u, void *su)
{
    (void)qc, (void)max, (void)su;
    conn_t *c = u;
    return nghttp3_conn_unblock_stream(c->h3, id) ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int q_extend_streams(ngtcp2_conn *qc, uint64_t max, void *u)
{
    (void)qc, (void)max;
    return submit(u) < 0 ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static void q_rand(uint8_t *p, size_t n, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    rnd(p, n);
}

static int q_new_cid(ngtcp2_conn *qc, ngtcp2_cid *cid, uint8_t *token, size_t len, void *u)
{
    (void)qc, (void)u;
    rnd(cid->data, len);
    cid->datalen = len;
    rnd(token, NGTCP2_STATELESS_RESET_TOKENLEN);
    return 0;
}

static int q_handshake_completed(ngtcp2_conn *qc, void *u)
{
    (void)qc;
    conn_t *c = u;
    c->ready = 1;
    return submit(c) < 0 ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int q_rx_key(ngtcp2_conn *qc, ngtcp2_crypto_level level, void *u)
{
    (void)qc;
    conn_t *c = u;
    if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION || c->h3)
        return 0;
    return h3_setup(c) ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static const ngtcp2_callbacks qcb = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = q_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = q_recv_stream_data,
    .acked_stream_data_offset = q_acked,
    .stream_close = q_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .extend_max_local_streams_bidi = q_extend_streams,
    .rand = q_rand,
    .get_new_connection_id = q_new_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = q_stream_reset,
    .extend_max_stream_data = q_extend_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
    .recv_rx_key = q_rx_key,
};

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) { return ((conn_t *)ref->user_data)->qc; }

static int conn_open(conn_t *c, const struct addrinfo *ai, int ep)
{
    c->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0)
        return -1;
    int buf = 4 << 20;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    int one = 1;
    if (!G.no_gro && setsockopt(c->fd, SOL_UDP, UDP_GRO, &one, sizeof one) < 0)
        G.no_gro = 1; /* a kernel without it: one datagram per read */
    memcpy(&c->remote, ai->ai_addr, ai->ai_addrlen);
    c->remote_len = ai->ai_addrlen;
    c->local_len = sizeof c->local;
    getsockname(c->fd, (struct sockaddr *)&c->local, &c->local_len);
    ngtcp2_cid dcid, scid;
    dcid.datalen = 18;
    rnd(dcid.data, dcid.datalen);
    scid.datalen = 17;
    rnd(scid.data, scid.datalen);
    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = now_ns();
    st.max_tx_udp_payload_size = MAX_PKT;
    ngtcp2_transport_params tp;
    ngtcp2_transport_params_default(&tp);
    tp.initial_max_stream_data_bidi_local = 1 << 20;
    tp.initial_max_stream_data_uni = 1 << 20;
    tp.initial_max_data = 16 << 20;
    tp.initial_max_streams_uni = 3;
    tp.max_idle_timeout = 30 * NGTCP2_SECONDS;
    ngtcp2_path path = {{(ngtcp2_sockaddr *)&c->local, c->local_len},
                        {(ngtcp2_sockaddr *)&c->remote, c->remote_len}, NULL};
    if (ngtcp2_conn_client_new(&c->qc, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &qcb, &st, &tp,
                               NULL, c) != 0)
        return -1;
    static const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    if (gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA) != 0 ||
        gnutls_priority_set(c->tls, G.prio) != 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(c->tls) != 0 ||
        gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, G.cred) != 0 ||
        gnutls_alpn_set_protocols(c->tls, &alpn, 1, 0) != 0 ||
        gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, G.sni, strlen(G.sni)) != 0)
        return -1;
    gnutls_session_set_ptr(c->tls, &c->ref);
    ngtcp2_conn_set_tls_native_handle(c->qc, c->tls);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void conn_fail(conn_t *c, const char *why, int rv)
{
    if (c->dead)
        return;
    fprintf(stderr, "h3load: connection %zu: %s (%d)\n", (size_t)(c - G.c), why, rv);
    c->dead = 1;
    G.errored += c->in_flight;
    G.failed += c->in_flight;
    G.done += c->in_flight;
    c->in_flight = 0;
}

static void conn_write(conn_t *c)
{
    uint8_t buf[MAX_PKT];
    uint64_t ts = now_ns();
    for (int pkts = 0; pkts < 64 && !c->dead; pkts++) {
        int64_t sid = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize nv = 0;
        if (c->h3 && ngtcp2_conn_get_max_data_left(c->qc)) {
            nv = nghttp3_conn_writev_stream(c->h3, &sid, &fin, vec, 16);
            if (nv < 0) {
                conn_fail(c, "nghttp3_conn_writev_stream", (int)nv);
                return;
            }
        }
        ngtcp2_ssize nd = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize w = ngtcp2_conn_writev_stream(c->qc, NULL, &pi, buf, sizeof buf, &nd, flags,
                                                   sid, (const ngtcp2_vec *)vec, (size_t)nv, ts);
        if (w < 0) {
            if (w == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                nghttp3_conn_block_stream(c->h3, sid);
                continue;
            }
            if (w == NGTCP2_ERR_STREAM_SHUT_WR) {
                nghttp3_conn_shutdown_stream_write(c->h3, sid);
                continue;
            }
            if (w == NGTCP2_ERR_WRITE_MORE) {
                nghttp3_conn_add_write_offset(c->h3, sid, (size_t)nd);
                continue;
            }
            conn_fail(c, "ngtcp2_conn_writev_stream", (int)w);
            return;
        }
        if (nd >= 0)
            nghttp3_conn_add_write_offset(c->h3, sid, (size_t)nd);
        if (w == 0)
            break;
        if (send(c->fd, buf, (size_t)w, 0) < 0 && errno != EAGAIN && errno != ENOBUFS) {
            conn_fail(c, "send", -errno);
            return;
        }
    }
    ngtcp2_conn_update_pkt_tx_time(c->qc, ts);
}

static void conn_read(conn_t *c)
{
    uint8_t buf[65536];
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    for (int i = 0; i < 64 && !c->dead; i++) {
        struct iovec iov = {buf, sizeof buf};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        if (!G.no_gro) {
            msg.msg_control = ctl.b;
            msg.msg_controllen = sizeof ctl.b;
        }
        ssize_t n = recvmsg(c->fd, &msg, 0);
        if (n < 0)
            break;
        size_t seg = (size_t)n; /* the datagrams of a GRO batch: seg bytes each, the last shorter */
        for (struct cmsghdr *cm = msg.msg_controllen ? CMSG_FIRSTHDR(&msg) : NULL; cm;
             cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                int v;
                memcpy(&v, CMSG_DATA(cm), sizeof v);
                if (v > 0)
                    seg = (size_t)v;
            }
        ngtcp2_path path = {{(ngtcp2_sockaddr *)&c->local, c->local_len},
                            {(ngtcp2_sockaddr *)&c->remote, c->remote_len}, NULL};
        for (size_t at = 0; at < (size_t)n && !c->dead; at += seg) {
            size_t len = (size_t)n - at < seg ? (size_t)n - at : seg;
            ngtcp2_pkt_info pi = {0};
            int rv = ngtcp2_conn_read_pkt(c->qc, &path, &pi, buf + at, len, now_ns());
            if (rv != 0) {
                conn_fail(c, "ngtcp2_conn_read_pkt", rv);
                return;
            }
        }
    }
    submit(c);
    conn_write(c);
}

static void usage(void)
{
    fprintf(stderr, "usage: h3load [-c CONNS] [-m STREAMS] (-n REQUESTS | -D SECONDS) "
                    "[--sni NAME] [--no-gro] https://HOST:PORT/PATH\n");
    exit(2);
}

int main(int argc, char **argv)
{
    G.conns = 1;
    G.streams = 1;
    static const struct option longs[] = {{"sni", required_argument, NULL, 's'},
                                          {"threads", required_argument, NULL, 't'},
                                          {"hold", required_argument, NULL, 'H'},
                                          {"no-gro", no_argument, NULL, 'G'},
                                          {NULL, 0, NULL, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "c:m:n:D:t:", longs, NULL)) != -1) {
        switch (o) {
        case 'c': G.conns = (uint32_t)atoi(optarg); break;
        case 'm': G.streams = (uint32_t)atoi(optarg); break;
        case 'n': G.n_total = strtoull(optarg, NULL, 10); break;
        case 'D': G.duration = atof(optarg); break;
        case 's': G.sni = optarg; break;
        case 't': break; /* one thread (h2load's -t1) */
        case 'H': G.hold = atof(optarg); break;
        case 'G': G.no_gro = 1; break;
        default: usage();
        }
    }
    if (optind != argc - 1 || (!G.n_total && G.duration <= 0) || !G.conns || !G.streams)
        usage();
    const char *url = argv[optind];
    if (strncmp(url, "https://", 8) != 0)
        usage();
    static char host[300], port[16] = "443", path[2048] = "/", auth[300];
    const char *h = url + 8, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    if (hl >= sizeof auth)
        usage();
    memcpy(auth, h, hl);
    if (slash)
        snprintf(path, sizeof path, "%s", slash);
    const char *colon = memrchr(auth, ':', hl);
    if (colon && auth[0] != '[') {
        memcpy(host, auth, (size_t)(colon - auth));
        snprintf(port, sizeof port, "%s", colon + 1);
    } else {
        snprintf(host, sizeof host, "%s", auth);
    }
    G.host = host, G.port = port, G.path = path, G.authority = auth;
    if (!G.sni)
        G.sni = host;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "h3load: cannot resolve %s\n", host);
        return 1;
    }
    if (gnutls_certificate_allocate_credentials(&G.cred) != 0 ||
        gnutls_priority_init(&G.prio, PRIORITY, NULL) != 0)
        return 1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    G.c = calloc(G.conns, sizeof *G.c);
    uint64_t t0 = now_ns();
    if (G.duration > 0)
        G.deadline = t0 + (uint64_t)(G.duration * 1e9);
    for (uint32_t i = 0; i < G.conns; i++) {
        if (conn_open(&G.c[i], ai, ep) < 0) {
            fprintf(stderr, "h3load: cannot open connection %u\n", i);
            return 1;
        }
        conn_write(&G.c[i]);
    }
    struct epoll_event evs[64];
    uint64_t hold_until = 0;
    for (;;) {
        int live = 0;
        uint64_t next = UINT64_MAX, now = now_ns();
        for (uint32_t i = 0; i < G.conns; i++) {
            conn_t *c = &G.c[i];
            if (c->dead)
                continue;
            if (c->in_flight || more_to_start() || !c->ready)
                live = 1;
            uint64_t x = ngtcp2_conn_get_expiry(c->qc);
            if (x <= now) {
                int rv = ngtcp2_conn_handle_expiry(c->qc, now);
                if (rv != 0) {
                    conn_fail(c, "timeout", rv);
                    continue;
                }
                conn_write(c);
                x = ngtcp2_conn_get_expiry(c->qc);
            }
            if (x < next)
                next = x;
        }
        if (!live && G.hold > 0 && !hold_until) {
            uint32_t open = 0;
            for (uint32_t i = 0; i < G.conns; i++)
                open += !G.c[i].dead;
            fprintf(stderr, "holding %u connections\n", open);
            hold_until = now + (uint64_t)(G.hold * 1e9);
        }
        if (!live && (!hold_until || now >= hold_until))
            break;
        int ms = next == UINT64_MAX ? 100 : (int)((next > now ? next - now : 0) / 1000000);
        int n = epoll_wait(ep, evs, 64, ms);
        for (int i = 0; i < n; i++)
            conn_read(evs[i].data.ptr);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    uint64_t total = G.deadline ? G.started : G.n_total;
    printf("finished in %.2fs, %.2f req/s, %.2fMB/s\n", secs, (double)G.done / secs,
           (double)G.bytes / secs / 1e6);
    printf("requests: %llu total, %llu started, %llu done, %llu succeeded, %llu failed, "
           "%llu errored, 0 timeout\n",
           (unsigned long long)total, (unsigned long long)G.started,
           (unsigned long long)G.done, (unsigned long long)G.ok,
           (unsigned long long)G.failed, (unsigned long long)G.errored);
    printf("status codes: %llu 2xx, %llu 3xx, %llu 4xx, %llu 5xx\n",
           (unsigned long long)G.s2, (unsigned long long)G.s3, (unsigned long long)G.s4,
           (unsigned long long)G.s5);
    printf("traffic: %llu bytes of body\n", (unsigned long long)G.bytes);
    printf("Application protocol: h3\n");
    return 0;
}
