/* One QUIC connection (csrc/http/h3/h3_int.h): its ngtcp2 session and the
 * callbacks that tie it to GnuTLS, to the connection ID table and to its
 * HTTP/3 session (h3sess.h), made once our 1-RTT key is in, and its
 * callbacks, which hand request streams to request.c and acknowledgements
 * and body reads to resp.c. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "http/h3/h3_int.h"

#define HC(u) ((h3conn_t *)(u))

/* ---- HTTP/3 (h3sess.h) ----------------------------------------------------------------------- */

static void *h_begin(void *u, int64_t id) { return h3s_new(HC(u), id); }

static int h_header(void *u, void *su, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    (void)u;
    return h3s_header(su, n, nl, v, vl);
}

static void h_too_big(void *u, void *su)
{
    (void)u;
    ((h3s_t *)su)->too_big = 1;
}

static void h_request(void *u, void *su, int fin)
{
    h3s_t *s = su;
    if (fin)
        s->req_done = 1;
    h3_dispatch(HC(u)->e, HC(u), s);
}

static int h_data(void *u, void *su, const uint8_t *p, size_t n)
{
    h3s_body_in(HC(u)->e, su, p, n);
    return 0;
}

static void h_end_stream(void *u, void *su) { h3s_body_end(HC(u)->e, su); }

static void h_consume(void *u, int64_t id, size_t n) { h3_consume(HC(u), id, n); }

static void h_close(void *u, void *su, int64_t id, uint64_t code)
{
    (void)id, (void)code;
    h3s_free(HC(u)->e, su);
}

static void h_acked(void *u, void *su, uint64_t n) { h3s_acked(HC(u)->e, su, n); }

static void h_stop_sending(void *u, int64_t id, uint64_t code)
{
    ngtcp2_conn_shutdown_stream_read(HC(u)->qc, id, code);
}

static void h_reset_stream(void *u, int64_t id, uint64_t code)
{
    ngtcp2_conn_shutdown_stream_write(HC(u)->qc, id, code);
}

static const sws_h3cb_t h3_callbacks = {
    .begin = h_begin,
    .header = h_header,
    .too_big = h_too_big,
    .request = h_request,
    .data = h_data,
    .end_stream = h_end_stream,
    .consume = h_consume,
    .close = h_close,
    .acked = h_acked,
    .read_data = h3_read_data,
    .trailers = h3_submit_trailers,
    .stop_sending = h_stop_sending,
    .reset_stream = h_reset_stream,
};

void h3_consume(h3conn_t *hc, int64_t id, size_t n)
{
    if (!n || !hc->qc)
        return;
    ngtcp2_conn_extend_max_stream_offset(hc->qc, id, n);
    ngtcp2_conn_extend_max_offset(hc->qc, n);
}

/* The HTTP/3 session and its three unidirectional streams (RFC 9114
 * §6.2): once our 1-RTT key is in (with our Finished, before the client's:
 * requests in 0-RTT packets come before the handshake ends). */
static int h3_setup(h3conn_t *hc)
{
    sws_engine_t *e = hc->e;
    /* what we take: RFC 9114 4.2.2's size (names, values, 32 each), as
     * request.c counts it for the 431 */
    sws_h3sess_conf_t conf = {e->h3.conf.qpack_table, e->h3.conf.qpack_blocked,
                              e->core.lim.max_header_bytes + 32ull * e->core.lim.max_headers,
                              e->h3.pool};
    conf.max_requests = e->h3.conf.max_streams; /* initial_max_streams_bidi (below) */
    if (ngtcp2_conn_get_max_local_streams_uni(hc->qc) < 3)
        return -1; /* the client must let us open control and QPACK streams */
    if (!conf.pool) {
        if (!(conf.pool = e->h3.pool = calloc(1, sizeof *e->h3.pool)))
            return -1;
        e->h3.pool->max_runs = 4 * SWS_H3_SPARE;
        e->h3.pool->max_sts = SWS_H3_SPARE;
        e->h3.pool->memo = calloc(1, sizeof *e->h3.pool->memo); /* NULL: encode each time */
    }
    hc->h3 = malloc(sizeof *hc->h3);
    if (!hc->h3 || sws_h3sess_init(hc->h3, &conf, &h3_callbacks, hc) < 0) {
        free(hc->h3);
        hc->h3 = NULL;
        return -1;
    }
    int64_t ctrl, enc, dec;
    if (ngtcp2_conn_open_uni_stream(hc->qc, &ctrl, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(hc->qc, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(hc->qc, &dec, NULL) != 0 ||
        sws_h3sess_bind(hc->h3, ctrl, enc, dec) != 0)
        return -1;
    hc->h3_ready = 1;
    return 0;
}

/* ---- QUIC (ngtcp2) --------------------------------------------------------------------------- */

/* A connection error the session found: CONNECTION_CLOSE with its code. */
static int session_error(h3conn_t *hc, int64_t rc)
{
    ngtcp2_connection_close_error_set_application_error(&hc->last_error, (uint64_t)-rc, NULL, 0);
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_recv_stream_data(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t off,
                              const uint8_t *p, size_t n, void *u, void *su)
{
    (void)off, (void)su;
    h3conn_t *hc = u;
    if (!hc->h3)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    int64_t k = sws_h3sess_read(hc->h3, id, p, n, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (k < 0)
        return session_error(hc, k);
    ngtcp2_conn_extend_max_stream_offset(qc, id, (uint64_t)k);
    ngtcp2_conn_extend_max_offset(qc, (uint64_t)k);
    return 0;
}

static int q_acked_offset(ngtcp2_conn *qc, int64_t id, uint64_t off, uint64_t n, void *u, void *su)
{
    (void)qc, (void)off, (void)su;
    h3conn_t *hc = u;
    if (hc->h3)
        sws_h3sess_acked_bytes(hc->h3, id, n);
    return 0;
}

static int q_stream_close(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t code, void *u,
                          void *su)
{
    (void)su;
    h3conn_t *hc = u;
    if (!hc->h3)
        return 0;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = H3_NO_ERROR;
    int rv = sws_h3sess_close_stream(hc->h3, id, code);
    if (rv < 0)
        return session_error(hc, rv);
    if (ngtcp2_is_bidi_stream(id) && !(id & 1)) /* the client may open another */
        ngtcp2_conn_extend_max_streams_bidi(qc, 1);
    return 0;
}

static int q_stream_reset(ngtcp2_conn *qc, int64_t id, uint64_t size, uint64_t code, void *u,
                          void *su)
{
    (void)qc, (void)size, (void)code, (void)su;
    h3conn_t *hc = u;
    if (hc->h3)
        sws_h3sess_shutdown_read(hc->h3, id);
    return 0;
}

static int q_extend_stream_data(ngtcp2_conn *qc, int64_t id, uint64_t max, void *u, void *su)
{
    (void)qc, (void)max, (void)su;
    h3conn_t *hc = u;
    if (hc->h3)
        sws_h3sess_unblock(hc->h3, id);
    return 0;
}

static void q_rand(uint8_t *dest, size_t n, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    h3_rand(dest, n);
}

static int q_new_cid(ngtcp2_conn *qc, ngtcp2_cid *cid, uint8_t *token, size_t len, void *u)
{
    (void)qc;
    h3conn_t *hc = u;
    for (int tries = 0; tries < 4; tries++) {
        h3_new_cid(hc->ql, cid->data, len);
        cid->datalen = len;
        if (h3_cid_add(hc->e, hc, cid->data, len) == 0) {
            h3_reset_token(hc->ql, token, cid->data, len);
            return 0;
        }
    }
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_remove_cid(ngtcp2_conn *qc, const ngtcp2_cid *cid, void *u)
{
    (void)qc;
    h3_cid_del(HC(u)->e, HC(u), cid->data, cid->datalen);
    return 0;
}

static int q_key(ngtcp2_conn *qc, ngtcp2_crypto_level level, void *u)
{
    (void)qc;
    h3conn_t *hc = u;
    if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION || hc->h3)
        return 0;
    return h3_setup(hc) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static void set_peer(sws_conn_t *c, const struct sockaddr *sa);

/* A client that moved (RFC 9000 §9) is seen at its new address from now on:
 * handlers and the log read the peer from hc->c. */
static int q_path_validation(ngtcp2_conn *qc, uint32_t flags, const ngtcp2_path *path,
                             ngtcp2_path_validation_result res, void *u)
{
    (void)qc, (void)flags;
    h3conn_t *hc = u;
    if (res == NGTCP2_PATH_VALIDATION_RESULT_SUCCESS &&
        path->remote.addrlen <= sizeof hc->peer_sa) {
        memcpy(&hc->peer_sa, path->remote.addr, path->remote.addrlen);
        hc->peer_len = (socklen_t)path->remote.addrlen;
        set_peer(&hc->c, path->remote.addr);
    }
    return 0;
}

static int q_handshake_completed(ngtcp2_conn *qc, void *u)
{
    h3conn_t *hc = u;
    if (!hc->handshaken)
        hc->e->h3.n_handshaking--;
    hc->handshaken = 1;
    if (hc->e->h3.stopping && !hc->goaway_until) {
        /* Accepted before the graceful stop, its handshake ended after it:
         * the requests its client sends now are served (closing it in its
         * handshake left the client waiting on a socket nobody reads until
         * its timeout); GOAWAY says no more, and it closes once they are
         * answered (quic.c, write_due). */
        if (hc->h3)
            sws_h3sess_goaway_soon(hc->h3);
        hc->goaway_until = h3_now_ns() + 3 * ngtcp2_conn_get_pto(qc);
        h3_due(hc);
    }
    /* a session ticket (GnuTLS sends none by itself over QUIC): the
     * client resumes on any worker, the master's key being everyone's */
    gnutls_session_ticket_send(hc->tls, 1, 0);
    return 0;
}

static const ngtcp2_callbacks q_callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = q_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = q_recv_stream_data,
    .acked_stream_data_offset = q_acked_offset,
    .stream_close = q_stream_close,
    .rand = q_rand,
    .get_new_connection_id = q_new_cid,
    .remove_connection_id = q_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = q_stream_reset,
    .extend_max_stream_data = q_extend_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
    .path_validation = q_path_validation,
    .recv_rx_key = q_key,
    .recv_tx_key = q_key,
};

/* The peer as net's connections keep it (handlers and the log read it). */
static void set_peer(sws_conn_t *c, const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        c->peer_family = AF_INET;
        memcpy(c->peer, &sin->sin_addr, 4);
        c->peer_port = ntohs(sin->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        c->peer_family = AF_INET6;
        memcpy(c->peer, &sin6->sin6_addr, 16);
        c->peer_port = ntohs(sin6->sin6_port);
    }
}

h3conn_t *h3conn_new(sws_engine_t *e, quic_lst_t *ql, const ngtcp2_pkt_hd *hd,
                     const ngtcp2_cid *odcid, const struct sockaddr *peer, socklen_t peer_len,
                     const struct sockaddr *local, socklen_t local_len)
{
    if (peer_len > sizeof(struct sockaddr_storage) || local_len > sizeof(struct sockaddr_storage) ||
        hd->dcid.datalen > NGTCP2_MAX_CIDLEN)
        return NULL;
    h3conn_t *hc = calloc(1, sizeof *hc);
    if (!hc)
        return NULL;
    hc->e = e;
    hc->ql = ql;
    memcpy(&hc->peer_sa, peer, peer_len);
    memcpy(&hc->local_sa, local, local_len);
    hc->peer_len = peer_len;
    hc->local_len = local_len;
    hc->c.fd = -1;
    hc->last_rx = h3_now_ns();
    hc->c.lst = &ql->lst;
    hc->c.quic = 1;
    set_peer(&hc->c, peer);
    ngtcp2_connection_close_error_default(&hc->last_error);

    uint8_t scid_b[H3_SCID_LEN];
    h3_new_cid(ql, scid_b, sizeof scid_b);
    ngtcp2_cid scid;
    ngtcp2_cid_init(&scid, scid_b, sizeof scid_b);

    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = h3_now_ns();
    st.max_tx_udp_payload_size = H3_MAX_PKT;
    st.cc_algo = NGTCP2_CC_ALGO_CUBIC;
    st.handshake_timeout = (ngtcp2_duration)e->h3.conf.handshake_ms * NGTCP2_MILLISECONDS;

    ngtcp2_transport_params tp;
    ngtcp2_transport_params_default(&tp);
    tp.initial_max_stream_data_bidi_local = e->h3.conf.stream_window;
    tp.initial_max_stream_data_bidi_remote = e->h3.conf.stream_window;
    tp.initial_max_stream_data_uni = e->h3.conf.stream_window;
    tp.initial_max_data = e->h3.conf.conn_window;
    tp.initial_max_streams_bidi = e->h3.conf.max_streams;
    tp.initial_max_streams_uni = 3;
    tp.max_idle_timeout = (ngtcp2_duration)e->h3.conf.idle_ms * NGTCP2_MILLISECONDS;
    tp.active_connection_id_limit = 7;
    tp.stateless_reset_token_present = 1;
    h3_reset_token(ql, tp.stateless_reset_token, scid_b, sizeof scid_b);
    if (odcid) { /* after our Retry (RFC 9000 §7.3) */
        tp.original_dcid = *odcid;
        tp.retry_scid = hd->dcid;
        tp.retry_scid_present = 1;
    } else {
        tp.original_dcid = hd->dcid;
    }

    ngtcp2_path path = {{(ngtcp2_sockaddr *)&hc->local_sa, local_len},
                        {(ngtcp2_sockaddr *)&hc->peer_sa, peer_len}, NULL};
    if (ngtcp2_conn_server_new(&hc->qc, &hd->scid, &scid, &path, hd->version, &q_callbacks, &st,
                               &tp, NULL, hc) != 0) {
        free(hc);
        return NULL;
    }
    hc->next = e->h3.conns;
    if (hc->next)
        hc->next->prev = hc;
    e->h3.conns = hc;
    e->h3.n_conns++;
    e->core.cnt.accepted++;
    e->h3.n_handshaking++;
    e->core.cnt.active++; /* a graceful stop waits for it as for a TCP connection */
    memcpy(hc->odcid, hd->dcid.data, hd->dcid.datalen);
    hc->odcid_len = (uint8_t)hd->dcid.datalen;
    if (h3_tls_session(hc) < 0 || h3_cid_add(e, hc, scid_b, sizeof scid_b) < 0 ||
        h3_cid_add(e, hc, hc->odcid, hc->odcid_len) < 0) {
        h3conn_free(e, hc);
        return NULL;
    }
    return hc;
}

void h3conn_free(sws_engine_t *e, h3conn_t *hc)
{
    while (hc->streams)
        h3s_free(e, hc->streams);
    h3_cid_del(e, hc, hc->odcid, hc->odcid_len);
    h3_conn_forget(e, hc);
    if (hc->h3) {
        sws_h3sess_free(hc->h3);
        free(hc->h3);
    }
    if (hc->qc)
        ngtcp2_conn_del(hc->qc);
    if (hc->tls)
        gnutls_deinit(hc->tls);
    if (hc->prev)
        hc->prev->next = hc->next;
    else
        e->h3.conns = hc->next;
    if (hc->next)
        hc->next->prev = hc->prev;
    e->h3.n_conns--;
    if (!hc->handshaken)
        e->h3.n_handshaking--;
    e->core.cnt.active--;
    e->core.cnt.handled++;
    free(hc->close_pkt);
    free(hc);
}
