/* QUIC's datagrams (csrc/http/h3/h3_int.h): the worker's UDP sockets,
 * reading them (a connection's packets, a client's first Initial, Retry,
 * stateless resets), writing what ngtcp2 packs (UDP GSO where the kernel
 * has it), the timer's event, and the end of connections (closing period,
 * draining, silent drop). The ID table and the timer heap: table.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "http/h3/h3_int.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

uint64_t h3_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void h3_rand(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t k = getrandom(p, n, 0);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            abort(); /* the kernel's generator is always there after boot */
        }
        p += k;
        n -= (size_t)k;
    }
}

/* Our connection IDs: random, but on a steered socket byte 0 is the
 * socket's index in its reuseport group and byte 1 that index XOR the
 * server's key, which the master's program checks before it trusts byte 0
 * (docs/adr/0032-http3-quic.md). */
void h3_new_cid(const quic_lst_t *ql, uint8_t *id, size_t len)
{
    h3_rand(id, len);
    if (ql->steered && len >= 2) {
        id[0] = ql->cid0;
        id[1] = ql->cid1;
    }
}

void h3_reset_token(const quic_lst_t *ql, uint8_t *token, const uint8_t *id, size_t len)
{
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, id, len);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ql->reset_secret,
                                                     sizeof ql->reset_secret, &cid) != 0)
        h3_rand(token, NGTCP2_STATELESS_RESET_TOKENLEN);
}

/* ---- sending --------------------------------------------------------------------------------- */

/* One sendmsg: n bytes of packets of `seg` bytes each (the last may be
 * shorter) to hc's peer from its local address. 0, or -1 (dropped: QUIC
 * retransmits what was lost). */
static int send_batch(sws_engine_t *e, h3conn_t *hc, const ngtcp2_path *path, const uint8_t *p,
                      size_t n, size_t seg)
{
    quic_lst_t *ql = hc->ql;
    struct iovec iov = {(void *)p, n};
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(struct in6_pktinfo))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {0};
    msg.msg_name = path->remote.addr;
    msg.msg_namelen = path->remote.addrlen;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = u.buf;
    size_t clen = 0;
    struct cmsghdr *cm = (struct cmsghdr *)u.buf;
    if (ql->wildcard) {
        if (path->local.addr->sa_family == AF_INET) {
            struct in_pktinfo pi = {0};
            pi.ipi_spec_dst = ((const struct sockaddr_in *)path->local.addr)->sin_addr;
            cm->cmsg_level = IPPROTO_IP;
            cm->cmsg_type = IP_PKTINFO;
            cm->cmsg_len = CMSG_LEN(sizeof pi);
            memcpy(CMSG_DATA(cm), &pi, sizeof pi);
            clen += CMSG_SPACE(sizeof pi);
        } else {
            struct in6_pktinfo pi = {0};
            pi.ipi6_addr = ((const struct sockaddr_in6 *)path->local.addr)->sin6_addr;
            cm->cmsg_level = IPPROTO_IPV6;
            cm->cmsg_type = IPV6_PKTINFO;
            cm->cmsg_len = CMSG_LEN(sizeof pi);
            memcpy(CMSG_DATA(cm), &pi, sizeof pi);
            clen += CMSG_SPACE(sizeof pi);
        }
        cm = (struct cmsghdr *)(u.buf + clen);
    }
    if (n > seg) {
        uint16_t s = (uint16_t)seg;
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof s);
        memcpy(CMSG_DATA(cm), &s, sizeof s);
        clen += CMSG_SPACE(sizeof s);
    }
    msg.msg_controllen = clen;
    if (!clen)
        msg.msg_control = NULL;
    for (;;) {
        ssize_t k = sendmsg(ql->fd, &msg, 0);
        if (k >= 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (n > seg && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT)) {
            /* no GSO here (or not for this device): one packet a call from now on */
            e->h3.gso = 0;
            for (size_t at = 0; at < n; at += seg)
                send_batch(e, hc, path, p + at, n - at < seg ? n - at : seg, seg);
            return 0;
        }
        /* EAGAIN (the socket's buffer is full), ENOBUFS, EPERM from a
         * firewall: the packets are lost, as on the wire */
        elog_folded(e, "h3: sendmsg", (uint64_t)errno, SWS_L_INFO, "h3: sendmsg: %s",
                    strerror(errno));
        return -1;
    }
}

int h3_write(sws_engine_t *e, h3conn_t *hc)
{
    if (hc->closing || hc->draining || hc->dead)
        return -1;
    if (hc->busy)
        return 0;
    hc->busy = 1;
    uint64_t ts = h3_now_ns();
    ngtcp2_path_storage ps, bps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_path_storage_zero(&bps);
    uint8_t *out = e->h3.out;
    size_t used = 0, seg = 0;
    size_t max_segs = e->h3.gso ? H3_GSO_SEGS : 1;
    size_t quantum = ngtcp2_conn_get_send_quantum(hc->qc);
    size_t budget = quantum / H3_MAX_PKT;
    if (budget < 1)
        budget = 1;
    if (budget > 64)
        budget = 64;
    size_t pkts = 0;
    int rc = 0;
    sws_h3sess_t *h3 = hc->h3;
    for (;;) {
        int64_t sid = -1;
        int fin = 0;
        sws_h3vec_t vec[16];
        ssize_t nv = 0;
        if (h3 && ngtcp2_conn_get_max_data_left(hc->qc)) {
            nv = sws_h3sess_writev(h3, &sid, &fin, vec, 16);
            if (nv < 0) {
                ngtcp2_connection_close_error_set_application_error(&hc->last_error,
                                                                    (uint64_t)-nv, NULL, 0);
                rc = -1;
                break;
            }
        }
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        if (fin)
            flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        ngtcp2_ssize ndatalen = -1;
        ngtcp2_pkt_info pi;
        ngtcp2_ssize w = ngtcp2_conn_writev_stream(hc->qc, &ps.path, &pi, out + used, H3_MAX_PKT,
                                                   &ndatalen, flags, sid,
                                                   (const ngtcp2_vec *)vec, (size_t)nv, ts);
        if (w < 0) {
            if (w == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                sws_h3sess_block(h3, sid);
                continue;
            }
            if (w == NGTCP2_ERR_STREAM_SHUT_WR) {
                sws_h3sess_shut_wr(h3, sid);
                continue;
            }
            if (w == NGTCP2_ERR_WRITE_MORE) {
                sws_h3sess_written(h3, sid, (size_t)ndatalen);
                continue;
            }
            ngtcp2_connection_close_error_set_transport_error_liberr(&hc->last_error, (int)w,
                                                                     NULL, 0);
            rc = -1;
            break;
        }
        if (ndatalen >= 0)
            sws_h3sess_written(h3, sid, (size_t)ndatalen);
        if (w == 0)
            break;
        /* Batch packets of one size (the last may be shorter) on one path. */
        if (used && (!ngtcp2_path_eq(&bps.path, &ps.path) || (size_t)w > seg)) {
            send_batch(e, hc, &bps.path, out, used, seg);
            memmove(out, out + used, (size_t)w);
            used = 0;
        }
        if (!used) {
            ngtcp2_path_copy(&bps.path, &ps.path);
            seg = (size_t)w;
        }
        used += (size_t)w;
        pkts++;
        if ((size_t)w < seg || used / seg >= max_segs) {
            send_batch(e, hc, &bps.path, out, used, seg);
            used = 0;
        }
        if (pkts >= budget)
            break;
    }
    if (used)
        send_batch(e, hc, &bps.path, out, used, seg);
    ngtcp2_conn_update_pkt_tx_time(hc->qc, ts);
    hc->busy = 0;
    if (rc < 0) {
        h3_close(e, hc, 0);
        return -1;
    }
    h3_timer(e, hc);
    return 0;
}

void h3_due(h3conn_t *hc)
{
    if (hc->due || hc->dead)
        return;
    sws_engine_t *e = hc->e;
    hc->due = 1;
    hc->due_next = e->h3.due;
    e->h3.due = hc;
}

static void close_no_error(sws_engine_t *e, h3conn_t *hc);

static void bury(sws_engine_t *e)
{
    while (e->h3.dead) {
        h3conn_t *hc = e->h3.dead;
        e->h3.dead = hc->due_next;
        h3conn_free(e, hc);
    }
}

/* Writes every due connection's output. */
static void write_due(sws_engine_t *e)
{
    while (e->h3.due) {
        h3conn_t *hc = e->h3.due;
        e->h3.due = hc->due_next;
        hc->due = 0;
        hc->due_next = NULL;
        if (!hc->dead && hc->work)
            h3_work(e, hc);
        if (!hc->dead)
            h3_write(e, hc);
        if (!hc->dead && e->h3.stopping && !hc->n_streams && hc->goaway_until &&
            h3_now_ns() >= hc->goaway_until)
            close_no_error(e, hc); /* draining, and its last request is answered */
    }
    bury(e);
}

void sws_h3_after_pass(sws_engine_t *e) { write_due(e); }

/* ---- the end of a connection ---------------------------------------------------------------- */

static void kill(sws_engine_t *e, h3conn_t *hc)
{
    if (hc->dead)
        return;
    hc->dead = 1;
    h3_heap_del(e, hc);
    h3_arm(e);
    /* off the due list: it is walked from its head, so a dead one there is skipped */
    if (!hc->due) {
        hc->due_next = e->h3.dead;
        e->h3.dead = hc;
    } else {
        /* freed when write_due reaches it: mark, and let write_due bury it */
        hc->due = 0;
        for (h3conn_t **pp = &e->h3.due; *pp; pp = &(*pp)->due_next)
            if (*pp == hc) {
                *pp = hc->due_next;
                break;
            }
        hc->due_next = e->h3.dead;
        e->h3.dead = hc;
    }
}

void h3_close(sws_engine_t *e, h3conn_t *hc, int silent)
{
    if (hc->dead || hc->closing || hc->draining)
        return;
    uint64_t now = h3_now_ns();
    if (silent || !hc->qc || ngtcp2_conn_is_in_draining_period(hc->qc)) {
        kill(e, hc);
        return;
    }
    uint8_t *pkt = malloc(H3_MAX_PKT);
    if (!pkt) {
        kill(e, hc);
        return;
    }
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_ssize w = ngtcp2_conn_write_connection_close(hc->qc, &ps.path, &pi, pkt, H3_MAX_PKT,
                                                        &hc->last_error, now);
    if (w <= 0) {
        free(pkt);
        kill(e, hc);
        return;
    }
    hc->close_pkt = pkt;
    hc->close_len = (size_t)w;
    hc->closing = 1;
    hc->close_until = now + 3 * ngtcp2_conn_get_pto(hc->qc);
    send_batch(e, hc, &ps.path, pkt, (size_t)w, (size_t)w);
    h3_timer(e, hc);
}

static void drain(sws_engine_t *e, h3conn_t *hc)
{
    hc->draining = 1;
    hc->close_until = h3_now_ns() + 3 * ngtcp2_conn_get_pto(hc->qc);
    h3_timer(e, hc);
}

static void on_timer(sws_engine_t *e, void *obj, uint32_t events)
{
    (void)obj;
    (void)events;
    uint64_t ticks;
    if (read(e->h3.tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
        return;
    e->h3.armed_ns = 0;
    uint64_t now = h3_now_ns();
    while (e->h3.n_heap && e->h3.heap[0]->expiry <= now) {
        h3conn_t *hc = e->h3.heap[0];
        if (hc->closing || hc->draining) {
            kill(e, hc);
            continue;
        }
        if (e->h3.stopping && ((!hc->n_streams && hc->goaway_until && now >= hc->goaway_until) ||
                               now >= hc->last_rx + H3_DRAIN_SILENCE)) {
            close_no_error(e, hc); /* its requests are answered, or its client is gone */
            continue;
        }
        if (e->h3.stopping && hc->goaway_until && now >= hc->goaway_until && !hc->goaway_final) {
            /* requests still running: the second GOAWAY refuses any later one */
            hc->goaway_final = 1;
            if (hc->h3)
                sws_h3sess_goaway(hc->h3);
            h3_due(hc);
        }
        hc->busy = 1;
        int rv = ngtcp2_conn_handle_expiry(hc->qc, now);
        hc->busy = 0;
        if (rv == NGTCP2_ERR_IDLE_CLOSE) {
            kill(e, hc);
            continue;
        }
        if (rv != 0) {
            ngtcp2_connection_close_error_set_transport_error_liberr(&hc->last_error, rv, NULL, 0);
            h3_close(e, hc, 0);
            continue;
        }
        if (h3_write(e, hc) == 0 && !hc->dead && hc->heap_at && hc->expiry <= now) {
            /* nothing moved it (should not happen): do not spin */
            hc->expiry = now + 1000000;
            h3_heap_down(e, hc->heap_at - 1);
        }
    }
    h3_arm(e);
    write_due(e);
}

/* ---- receiving ------------------------------------------------------------------------------ */

static void version_negotiation(sws_engine_t *e, quic_lst_t *ql, const ngtcp2_version_cid *vc,
                                const struct sockaddr *peer, socklen_t peer_len,
                                const struct sockaddr *local, socklen_t local_len)
{
    uint8_t pkt[256];
    uint32_t sv[] = {NGTCP2_PROTO_VER_V1};
    uint8_t unused;
    h3_rand(&unused, 1);
    ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
        pkt, sizeof pkt, unused, vc->scid, vc->scidlen, vc->dcid, vc->dcidlen, sv, 1);
    if (n <= 0)
        return;
    h3conn_t fake;
    memset(&fake, 0, sizeof fake);
    fake.ql = ql;
    ngtcp2_path path = {{(ngtcp2_sockaddr *)local, local_len},
                        {(ngtcp2_sockaddr *)peer, peer_len}, NULL};
    send_batch(e, &fake, &path, pkt, (size_t)n, (size_t)n);
}

static void send_to(sws_engine_t *e, quic_lst_t *ql, const uint8_t *pkt, size_t n,
                    struct sockaddr *peer, socklen_t peer_len, struct sockaddr *local,
                    socklen_t local_len)
{
    h3conn_t fake;
    memset(&fake, 0, sizeof fake);
    fake.ql = ql;
    ngtcp2_path path = {{local, local_len}, {peer, peer_len}, NULL};
    send_batch(e, &fake, &path, pkt, n, n);
}

/* RFC 9000 §10.3: tells a client whose connection we do not have to stop,
 * with the token its issuer derived from the master's secret; smaller than
 * what triggered it (no loop between two endpoints, no amplification), and
 * at most SWS_H3_RESETS a second. */
static void stateless_reset(sws_engine_t *e, quic_lst_t *ql, const uint8_t *dcid, size_t dcidlen,
                            size_t n, struct sockaddr *peer, socklen_t peer_len,
                            struct sockaddr *local, socklen_t local_len)
{
    if (dcidlen != H3_SCID_LEN || n < 43)
        return; /* not an ID of ours, or too small to answer smaller than it */
    uint64_t sec = e->core.now / 1000;
    if (sec != e->h3.reset_sec) {
        e->h3.reset_sec = sec;
        e->h3.reset_tokens = SWS_H3_RESETS;
    }
    if (!e->h3.reset_tokens)
        return;
    e->h3.reset_tokens--;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[64], pkt[128];
    h3_reset_token(ql, token, dcid, dcidlen);
    size_t len = n - 1 < sizeof pkt ? n - 1 : sizeof pkt;
    size_t rl = len - NGTCP2_STATELESS_RESET_TOKENLEN - 1;
    if (rl > sizeof rnd)
        rl = sizeof rnd;
    h3_rand(rnd, rl);
    ngtcp2_ssize w = ngtcp2_pkt_write_stateless_reset(pkt, sizeof pkt, token, rnd, rl);
    if (w > 0)
        send_to(e, ql, pkt, (size_t)w, peer, peer_len, local, local_len);
}

/* A client's first Initial: a new connection, or first a Retry when this
 * worker has more than retry_above handshakes under way (RFC 9000 §8.1.2:
 * a client must then prove it receives at its address before we spend a
 * handshake's work and 3x its bytes on it). NULL: none made. */
static h3conn_t *accept_initial(sws_engine_t *e, quic_lst_t *ql, const uint8_t *data, size_t n,
                                struct sockaddr *peer, socklen_t peer_len,
                                struct sockaddr *local, socklen_t local_len)
{
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data, n) != 0)
        return NULL;
    if (e->h3.stopping || e->h3.n_conns >= e->h3.conf.max_conns)
        return NULL; /* the client's Initial times out; it may try TCP */
    uint64_t now = h3_now_ns();
    ngtcp2_cid odcid;
    int retried = 0;
    if (hd.type == NGTCP2_PKT_INITIAL && hd.token.len &&
        hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
        if (ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len,
                                             ql->token_secret, sizeof ql->token_secret,
                                             hd.version, peer, peer_len, &hd.dcid,
                                             10 * NGTCP2_SECONDS, now) != 0)
            return NULL; /* forged, stale, or from another address */
        retried = 1;
    } else if (hd.type == NGTCP2_PKT_INITIAL && e->h3.n_handshaking >= e->h3.conf.retry_above) {
        uint8_t scid_b[H3_SCID_LEN], token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], pkt[256];
        h3_new_cid(ql, scid_b, sizeof scid_b);
        ngtcp2_cid scid;
        ngtcp2_cid_init(&scid, scid_b, sizeof scid_b);
        ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
            token, ql->token_secret, sizeof ql->token_secret, hd.version, peer, peer_len, &scid,
            &hd.dcid, now);
        if (tl < 0)
            return NULL;
        ngtcp2_ssize w = ngtcp2_crypto_write_retry(pkt, sizeof pkt, hd.version, &hd.scid, &scid,
                                                   &hd.dcid, token, (size_t)tl);
        if (w > 0) {
            send_to(e, ql, pkt, (size_t)w, peer, peer_len, local, local_len);
            e->h3.retries++;
        }
        return NULL;
    }
    return h3conn_new(e, ql, &hd, retried ? &odcid : NULL, peer, peer_len, local, local_len);
}

static void datagram(sws_engine_t *e, quic_lst_t *ql, uint8_t *data, size_t n,
                     struct sockaddr *peer, socklen_t peer_len, struct sockaddr *local,
                     socklen_t local_len)
{
    ngtcp2_version_cid vc;
    int rv = ngtcp2_pkt_decode_version_cid(&vc, data, n, H3_SCID_LEN);
    if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
        version_negotiation(e, ql, &vc, peer, peer_len, local, local_len);
        return;
    }
    if (rv != 0)
        return;
    h3conn_t *hc = h3_cid_find(e, vc.dcid, vc.dcidlen);
    if (!hc) {
        if (!(data[0] & 0x80)) {
            /* a short header for a connection we do not know (a worker
             * restarted, or the client's state outlived ours) */
            stateless_reset(e, ql, vc.dcid, vc.dcidlen, n, peer, peer_len, local, local_len);
            return;
        }
        hc = accept_initial(e, ql, data, n, peer, peer_len, local, local_len);
        if (!hc)
            return;
    }
    if (hc->dead || hc->draining)
        return;
    if (hc->closing) {
        /* the closing period: repeat our CONNECTION_CLOSE (RFC 9000 §10.2.1) */
        ngtcp2_path path = {{local, local_len}, {peer, peer_len}, NULL};
        send_batch(e, hc, &path, hc->close_pkt, hc->close_len, hc->close_len);
        return;
    }
    ngtcp2_path path = {{local, local_len}, {peer, peer_len}, NULL};
    ngtcp2_pkt_info pi = {0};
    uint64_t now = h3_now_ns();
    hc->busy = 1;
    rv = ngtcp2_conn_read_pkt(hc->qc, &path, &pi, data, n, now);
    hc->busy = 0;
    if (rv == 0)
        hc->last_rx = now;
    if (rv != 0) {
        switch (rv) {
        case NGTCP2_ERR_DRAINING:
            drain(e, hc);
            return;
        case NGTCP2_ERR_DROP_CONN:
            kill(e, hc);
            return;
        case NGTCP2_ERR_CRYPTO:
            if (!hc->last_error.error_code)
                ngtcp2_connection_close_error_set_transport_error_tls_alert(
                    &hc->last_error, ngtcp2_conn_get_tls_alert(hc->qc), NULL, 0);
            break;
        default:
            if (!hc->last_error.error_code)
                ngtcp2_connection_close_error_set_transport_error_liberr(&hc->last_error, rv,
                                                                         NULL, 0);
        }
        h3_close(e, hc, 0);
        return;
    }
    h3_due(hc);
}

static void on_read(sws_engine_t *e, void *obj, uint32_t events)
{
    quic_lst_t *ql = obj;
    (void)events;
    uint8_t *buf = (uint8_t *)e->net.in;
    size_t cap = e->net.in_cap < 65536 ? e->net.in_cap : 65536;
    for (int i = 0; i < H3_RECV_BATCH; i++) {
        struct sockaddr_storage peer, local;
        struct iovec iov = {buf, cap};
        union {
            char buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
            struct cmsghdr align;
        } u;
        struct msghdr msg = {0};
        msg.msg_name = &peer;
        msg.msg_namelen = sizeof peer;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof u.buf;
        ssize_t n = recvmsg(ql->fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN, or an ICMP error queued for the socket */
        }
        socklen_t local_len = ql->local_len;
        memcpy(&local, &ql->local, ql->local_len);
        if (ql->wildcard)
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
                    struct in_pktinfo pi;
                    memcpy(&pi, CMSG_DATA(cm), sizeof pi);
                    ((struct sockaddr_in *)&local)->sin_addr = pi.ipi_addr;
                } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO) {
                    struct in6_pktinfo pi;
                    memcpy(&pi, CMSG_DATA(cm), sizeof pi);
                    ((struct sockaddr_in6 *)&local)->sin6_addr = pi.ipi6_addr;
                }
            }
        if (n == 0)
            continue;
        datagram(e, ql, buf, (size_t)n, (struct sockaddr *)&peer, msg.msg_namelen,
                 (struct sockaddr *)&local, local_len);
    }
    write_due(e);
}

/* ---- setting up and stopping ------------------------------------------------------------------ */

int sws_h3_init(sws_engine_t *e)
{
    e->h3.tfd = -1;
    e->h3.gso = -1;
    e->h3.conf = (sws_h3_conf_t){SWS_H3_MAX_STREAMS, SWS_H3_STREAM_WINDOW, SWS_H3_CONN_WINDOW,
                                 SWS_H3_IDLE_MS, SWS_H3_HANDSHAKE_MS, SWS_H3_MAX_CONNS,
                                 SWS_H3_QPACK_TABLE, SWS_H3_QPACK_BLOCKED, SWS_H3_RETRY_ABOVE,
                                 SWS_H3_QPACK_ENCODER, 0, 1};
    return 0;
}

/* What the first quic listener needs: the timer, the table, buffers. */
static int enable(sws_engine_t *e)
{
    if (e->h3.enabled)
        return 0;
    e->h3.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (e->h3.tfd < 0)
        return -errno;
    e->h3.tev.handler = on_timer;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->h3.tev};
    if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, e->h3.tfd, &ev) < 0)
        return -errno;
    e->h3.tab = calloc(256, sizeof *e->h3.tab);
    e->h3.tab_mask = 255;
    e->h3.out = malloc((size_t)H3_GSO_SEGS * H3_MAX_PKT);
    e->h3.path = malloc(e->core.lim.max_uri_bytes + 512);
    if (!e->h3.tab || !e->h3.out || !e->h3.path)
        return -ENOMEM;
    h3_rand(&e->h3.seed, sizeof e->h3.seed);
    e->h3.enabled = 1;
    return 0;
}

int sws_h3_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vh,
                        const sws_quic_certs_t *certs, int steer_index, int steer_key,
                        const uint8_t *secret, size_t secret_len)
{
    int rc = enable(e);
    quic_lst_t *ql = NULL;
    quic_lst_t **nl = NULL;
    if (rc == 0) {
        ql = calloc(1, sizeof *ql);
        nl = realloc(e->h3.lst, (e->h3.n_lst + 1) * sizeof *nl);
        if (nl)
            e->h3.lst = nl;
        if (!ql || !nl)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        ql->fd = fd;
        ql->vh = vh;
        ql->certs = certs;
        uint8_t own[SWS_H3_SECRET];
        if (!secret || secret_len < SWS_H3_SECRET) {
            h3_rand(own, sizeof own); /* an engine alone: this worker's own */
            secret = own;
        }
        memcpy(ql->reset_secret, secret, 32);
        memcpy(ql->token_secret, secret + 32, 32);
        memcpy(ql->ticket_key, secret + 64, 64);
        ql->ticket.data = ql->ticket_key;
        ql->ticket.size = sizeof ql->ticket_key;
        if (steer_index >= 0 && steer_index < 256 && steer_key >= 0) {
            ql->steered = 1;
            ql->cid0 = (uint8_t)steer_index;
            ql->cid1 = (uint8_t)(steer_index ^ steer_key);
        }
        ql->local_len = sizeof ql->local;
        if (getsockname(fd, (struct sockaddr *)&ql->local, &ql->local_len) < 0)
            rc = -errno;
    }
    if (rc == 0) {
        ql->family = ql->local.ss_family;
        int on = 1;
        if (ql->family == AF_INET) {
            ql->wildcard = ((struct sockaddr_in *)&ql->local)->sin_addr.s_addr == INADDR_ANY;
            if (ql->wildcard)
                setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on);
        } else {
            ql->wildcard = IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ql->local)->sin6_addr);
            if (ql->wildcard)
                setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on);
        }
        ql->lst.fd = fd;
        ql->lst.conf = vh;
        ql->lst.is_unix = 0;
        sws_listener_set_local(&ql->lst, fd);
        ql->ev.handler = on_read;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ql};
        if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
            rc = -errno;
    }
    if (rc < 0) {
        free(ql);
        close(fd);
        return rc;
    }
    e->h3.lst[e->h3.n_lst++] = ql;
    return 0;
}

void sws_h3_close_all(sws_engine_t *e)
{
    for (h3conn_t *hc = e->h3.conns; hc; hc = hc->next)
        kill(e, hc);
    bury(e);
}

/* Ends hc now with CONNECTION_CLOSE H3_NO_ERROR (or silently, before its
 * handshake ended). */
static void close_no_error(sws_engine_t *e, h3conn_t *hc)
{
    if (hc->closing || hc->draining || hc->dead)
        return;
    ngtcp2_connection_close_error_set_application_error(&hc->last_error, H3_NO_ERROR, NULL, 0);
    h3_close(e, hc, !hc->handshaken);
}

/* A stream ended while the worker drains: hc closes once it has none,
 * at the end of the batch (write_due; not inside ngtcp2's call). */
void h3_drain_check(sws_engine_t *e, h3conn_t *hc)
{
    if (e->h3.stopping && !hc->n_streams && !hc->dead)
        h3_due(hc);
}

void sws_h3_shutdown(sws_engine_t *e)
{
    write_due(e); /* what handlers gave in this pass goes first */
    e->h3.stopping = 1;
    int steered = 1;
    for (size_t i = 0; i < e->h3.n_lst; i++)
        steered &= e->h3.lst[i]->steered;
    if (!steered) {
        /* The socket is shared with the next generation's worker of our
         * index, and nothing steers our connections' packets to us: we stop
         * reading it now, so every connection ends (H3_NO_ERROR) and its
         * client opens a new one, with that worker. */
        for (h3conn_t *hc = e->h3.conns; hc; hc = hc->next) {
            close_no_error(e, hc);
            kill(e, hc);
        }
        bury(e);
        for (size_t i = 0; i < e->h3.n_lst; i++) {
            epoll_ctl(e->core.epfd, EPOLL_CTL_DEL, e->h3.lst[i]->fd, NULL);
            close(e->h3.lst[i]->fd);
            e->h3.lst[i]->fd = -1;
        }
        return;
    }
    /* Steered: new connections go to the new generation's sockets, ours
     * keep coming here. Each connection is told GOAWAY as RFC 9114 5.2
     * advises a graceful shutdown: first with the largest ID (no new
     * requests, but those in flight are served), after 3 PTOs (at least a
     * round trip) with the real last ID (goaway_final, in the expiry
     * below); it closes once it has no request left. One still in its
     * handshake finishes it and is told then (conn.c,
     * q_handshake_completed), or ends by silence or the handshake timeout. */
    for (h3conn_t *hc = e->h3.conns; hc; hc = hc->next) {
        if (hc->dead || hc->closing || hc->draining)
            continue;
        if (hc->h3 && hc->handshaken) {
            sws_h3sess_goaway_soon(hc->h3);
            hc->goaway_until = h3_now_ns() + 3 * ngtcp2_conn_get_pto(hc->qc);
        } else if (hc->handshaken) {
            hc->goaway_until = h3_now_ns(); /* no HTTP/3 to drain: closes now */
        }
        h3_due(hc);
    }
    write_due(e); /* the GOAWAYs */
}

void sws_h3_free(sws_engine_t *e)
{
    sws_h3_close_all(e);
    for (size_t i = 0; i < e->h3.n_lst; i++) {
        if (e->h3.lst[i]->fd >= 0)
            close(e->h3.lst[i]->fd);
        free(e->h3.lst[i]);
    }
    free(e->h3.lst);
    if (e->h3.tab)
        for (size_t b = 0; b <= e->h3.tab_mask; b++)
            for (cident_t *c = e->h3.tab[b], *nx; c; c = nx) {
                nx = c->next;
                free(c);
            }
    free(e->h3.tab);
    while (e->h3.spare) {
        struct h3s *s = e->h3.spare;
        e->h3.spare = s->next;
        free(s->rq);
        free(s->hdr);
        free(s->hb);
        free(s);
    }
    h3_early_free(e);
    if (e->h3.pool) {
        sws_h3pool_free(e->h3.pool);
        free(e->h3.pool);
    }
    free(e->h3.heap);
    free(e->h3.out);
    free(e->h3.path);
    if (e->h3.tfd >= 0)
        close(e->h3.tfd);
}
