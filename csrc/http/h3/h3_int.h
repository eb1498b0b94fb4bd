/* HTTP/3's own declarations, shared by the files of csrc/http/h3/ (contract in
 * scalws/h3.h). One worker's QUIC side:
 *
 *   quic_lst_t   a UDP socket of a "quic" listener (in the inner epoll)
 *   h3conn_t     a QUIC connection: its ngtcp2 and HTTP/3 sessions, its
 *                GnuTLS session, its request streams; found by any of its
 *                connection IDs (the table in quic.c)
 *   h3s_t        a request stream: the request as it came, the handler's
 *                side, the response head and its queued body
 *
 * Time: ngtcp2 counts nanoseconds (CLOCK_MONOTONIC); one timerfd in the
 * inner epoll fires at the earliest expiry of any connection (a binary
 * heap), and expired connections get ngtcp2_conn_handle_expiry.
 *
 * Output: what a pass gives a connection (handshake data, answers,
 * acknowledgements) is written once, at the end of the batch of datagrams
 * that brought it or at the end of the loop's pass (e->h3.due), as ngtcp2
 * packs it: packets of one connection in one sendmsg with UDP GSO where the
 * kernel has it.
 */
#ifndef SCALWS_H3_INT_H
#define SCALWS_H3_INT_H

#include <netinet/in.h>
#include <sys/socket.h>

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "context.h"
#include "http/h3/h3sess.h"

#define H3_SCID_LEN 16         /* our connection IDs: random but for bytes 0 and 1 (steering) */
#define H3_MAX_PKT 1452        /* the UDP payload we send at most (path MTU 1500 with IPv6) */
#define H3_RECV_BATCH 64       /* datagrams read per event before others get a turn */
#define H3_GSO_SEGS 32         /* packets one sendmsg carries with UDP_SEGMENT */
#define H3_FILE_CHUNK (64 * 1024) /* a file body is read this much at a time */
#define H3_TIMER_SLACK 1000000u  /* ns a QUIC timer may fire late (quic.c arm) */
#define H3_DRAIN_SILENCE 2000000000u /* ns: while the worker drains, a client silent this
                                        long is gone (its acknowledgements would keep the
                                        answers' streams, and the stop, open) */

typedef struct h3conn h3conn_t;
typedef struct h3s h3s_t;

struct sws_quic_certs {
    gnutls_priority_t prio;
    gnutls_certificate_credentials_t *cred; /* per site; [0]: a client without SNI, or
                                               naming no site, gets it */
    size_t n_cred;
    struct quic_name {
        char *name;            /* lowercase; "*.suffix" matches one label more */
        size_t len, site;      /* cred[site] */
    } *names;
    size_t n_names;
};

typedef struct quic_lst {
    sws_evobj_t ev;            /* first: the epoll handler reads datagrams */
    int fd;
    int family;
    int wildcard;              /* bound to any address: the local one comes with each datagram */
    int steered;               /* the master's reuseport program steers by our IDs' first
                                  bytes: cid0 (this socket's index in its group) and cid1
                                  (cid0 ^ the server's key); else both random */
    uint8_t cid0, cid1;
    /* the master's secret (the same in every worker and across reloads):
     * stateless reset tokens, Retry tokens, the session-ticket key */
    uint8_t reset_secret[32];
    uint8_t token_secret[32];
    uint8_t ticket_key[64];
    gnutls_datum_t ticket;
    const sws_vhosts_t *vh;
    const sws_quic_certs_t *certs;
    listener_t lst;            /* what handlers read through the connection (SERVER_ADDR) */
    struct sockaddr_storage local;
    socklen_t local_len;
} quic_lst_t;

/* A piece of a response body, queued in order (resp.c). */
enum { P_BYTES, P_FILE, P_REF };
typedef struct piece {
    struct piece *next;
    int kind;
    const char *p;             /* P_BYTES, P_REF: the bytes (own, or the file's in memory) */
    size_t len, cap;           /* P_BYTES, P_REF: their length; P_BYTES: own's size */
    char *own;                 /* P_BYTES: the piece's own bytes: `data` below, or a buffer
                                  freed with it (a file's chunk, a grown piece) */
    sws_file_t *f;             /* P_FILE: the file; off and left its range still to read;
                                  P_REF: the file whose memory p points into, held */
    uint64_t off, left;
    char data[];               /* small pieces' bytes, in the piece's allocation */
} piece_t;

/* A request header kept in the stream's buffer (offsets: it grows). */
typedef struct {
    uint32_t n, nl, v, vl;
} h3hoff_t;

struct h3s {
    sws_resp_t resp;           /* the response interface, HTTP/3's implementation */
    h3conn_t *hc;
    h3s_t *prev, *next;        /* hc->streams */
    int64_t id;
    /* the request */
    char *rq;                  /* names and values as they came */
    size_t rq_len, rq_cap;
    h3hoff_t *hdr;
    size_t nh, hcap;
    h3hoff_t pm, pp, pa, ps;   /* :method, :path, :authority, :scheme (nl 0: absent) */
    uint64_t hsize;            /* the field section's size so far (RFC 9114 §4.2.2) */
    uint64_t body_total;       /* request body bytes received */
    char *bin;                 /* request body the handler has not taken yet */
    size_t bin_len, bin_cap;
    uint64_t start;            /* monotonic ms when the stream opened */
    const sws_site_t *site;
    uint16_t route;
    /* a handler that answers later */
    const sws_resp_hooks_t *hooks;
    void *ctx;
    /* the request for the log of a handler that answers later: x_start
     * writes it whole before anything reads it, and h3s_new does not
     * clear it (no other field between log and hb) */
    sws_request_t log;
    sws_header_t log_h[2];
    char rid[RID_MAX];
    /* the response head: records of (name length, value length, name, value) */
    char *hb;
    size_t hb_len, hb_cap;
    uint32_t hb_n;
    char date[SWS_HTTP_DATE_LEN];
    uint64_t body_len;         /* SWS_BODY_LENGTH's length: content-length */
    uint16_t status;
    /* the response body */
    piece_t *qh, *qt;          /* queued, in order; given to the session up to `gv` */
    piece_t *gv;               /* the first piece not given to the session (pieces go whole) */
    piece_t *commit;           /* the last piece a flush committed (resp.c) */
    size_t gv_off;             /* 0 (a piece goes whole) */
    size_t q_head_acked;       /* bytes of qh acknowledged */
    uint64_t unacked;          /* given to the session, not yet acknowledged */
    uint64_t queued;           /* queued, not yet given */
    uint64_t sent;             /* body bytes described, for the log */
    sws_hpack_field_t *tr;     /* trailers, copied (one allocation), submitted at the end */
    size_t ntr;
    unsigned open : 1,         /* the session has the stream */
        req_done : 1,          /* the request's end came */
        fin_given : 1,         /* the handler got body(done = 1) */
        too_big : 1,           /* the field section went over the limit: 431 */
        head_only : 1,
        no_body : 1,
        submitted : 1,         /* the head went to the session */
        head_ready : 1,        /* start_body was called */
        body_done : 1,         /* done was called */
        blocked : 1,           /* read_data said WOULDBLOCK: resume when more comes */
        live : 1,              /* a handler that answers later holds resp */
        want_body : 1,
        drain_due : 1,         /* the handler saw backed_up and waits for drained */
        drain_ready : 1,       /* ... and acknowledgements made room: h3_work tells it */
        body_due : 1,          /* body the handler asked for: h3_work hands it over */
        logged : 1,
        dispatched : 1,
        reset : 1;             /* we reset it (abort): nothing more is given */
};

#define H3S(r) ((h3s_t *)((char *)(r) - offsetof(h3s_t, resp)))

struct h3conn {
    sws_conn_t c;              /* the peer and the listener, as handlers and the log read them */
    sws_engine_t *e;
    quic_lst_t *ql;
    ngtcp2_conn *qc;
    sws_h3sess_t *h3;          /* HTTP/3 (h3sess.h), from our 1-RTT key on */
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    ngtcp2_connection_close_error last_error;
    struct sockaddr_storage peer_sa, local_sa;
    socklen_t peer_len, local_len;
    uint8_t odcid[NGTCP2_MAX_CIDLEN]; /* the ID the client chose for its first Initial */
    uint8_t odcid_len;
    h3conn_t *prev, *next;     /* e->h3.conns */
    h3conn_t *due_next;
    h3s_t *streams;
    uint32_t n_streams;
    uint32_t n_cids;           /* table entries naming this connection */
    size_t heap_at;            /* index in e->h3.heap + 1; 0: not in it */
    uint64_t expiry;           /* ns: when handle_expiry is due (UINT64_MAX: never) */
    uint8_t *close_pkt;        /* closing period: the CONNECTION_CLOSE we repeat */
    size_t close_len;
    uint64_t close_until;      /* ns: the closing or draining period's end */
    uint64_t goaway_until;     /* ns: after our first GOAWAY, requests in flight may still come */
    uint64_t last_rx;          /* ns: the last packet of the client that ngtcp2 took */
    unsigned due : 1,          /* on e->h3.due */
        busy : 1,              /* inside ngtcp2 or the session: writes wait for the end */
        closing : 1,           /* we sent CONNECTION_CLOSE */
        draining : 1,          /* the peer closed */
        dead : 1,              /* to free at the end of the batch */
        handshaken : 1,
        h3_ready : 1,
        goaway_final : 1,      /* the second GOAWAY (the real last ID) is sent */
        work : 1;              /* a stream has deferred work (h3_work) */
};

/* A connection ID the table maps to its connection. */
typedef struct cident {
    struct cident *next;
    h3conn_t *hc;
    uint8_t len;
    uint8_t id[NGTCP2_MAX_CIDLEN];
} cident_t;

/* HTTP/3's part of the engine (e->h3), declared in context.h as sws_h3_t. */

/* table.c: connection IDs, and the timer heap (h3_timer: hc's next expiry in it) */
SWS_INTERNAL h3conn_t *h3_cid_find(sws_engine_t *e, const uint8_t *id, size_t len);
SWS_INTERNAL int h3_cid_add(sws_engine_t *e, h3conn_t *hc, const uint8_t *id, size_t len);
/* Forgets id when it names hc (an ID another connection holds stays). */
SWS_INTERNAL void h3_cid_del(sws_engine_t *e, const h3conn_t *hc, const uint8_t *id, size_t len);
SWS_INTERNAL void h3_heap_down(sws_engine_t *e, size_t i);
SWS_INTERNAL void h3_heap_del(sws_engine_t *e, h3conn_t *hc);
/* The timerfd at the heap's top, when that comes sooner than it is set to. */
SWS_INTERNAL void h3_arm(sws_engine_t *e);

/* early.c: 0-RTT with anti-replay, when http3.early_window_ms is set */
/* Whether a new connection on ql takes early data (its context made at
 * the first one); then h3_early_session on its TLS session. */
SWS_INTERNAL int h3_early_on(sws_engine_t *e, const quic_lst_t *ql);
SWS_INTERNAL void h3_early_session(const sws_engine_t *e, gnutls_session_t tls);
SWS_INTERNAL void h3_early_free(sws_engine_t *e);
/* A request that came in early data with a method a replay could harm:
 * it gets 425 Too Early (RFC 8470 §5.2). */
SWS_INTERNAL int h3_early_refused(const sws_request_t *r);

/* quic.c */
SWS_INTERNAL uint64_t h3_now_ns(void);
SWS_INTERNAL void h3_rand(void *buf, size_t n);
SWS_INTERNAL void h3_new_cid(const quic_lst_t *ql, uint8_t *id, size_t len);
SWS_INTERNAL void h3_reset_token(const quic_lst_t *ql, uint8_t *token, const uint8_t *id,
                                 size_t len);
/* Output for hc is due at the end of the pass. */
SWS_INTERNAL void h3_due(h3conn_t *hc);
/* Writes what hc has to send now; -1 when the connection closed (freed later). */
SWS_INTERNAL int h3_write(sws_engine_t *e, h3conn_t *hc);
/* Ends hc with CONNECTION_CLOSE (its last_error), or silently. */
SWS_INTERNAL void h3_close(sws_engine_t *e, h3conn_t *hc, int silent);
SWS_INTERNAL void h3_timer(sws_engine_t *e, h3conn_t *hc);
/* While the worker drains: hc closes once it has no request streams. */
SWS_INTERNAL void h3_drain_check(sws_engine_t *e, h3conn_t *hc);
/* hc's table entries and timer go (its free). */
SWS_INTERNAL void h3_conn_forget(sws_engine_t *e, h3conn_t *hc);

/* conn.c */
SWS_INTERNAL void h3_consume(h3conn_t *hc, int64_t id, size_t n);
/* A connection for a client's first Initial (hd); after a Retry, odcid is
 * the ID its very first Initial named (else NULL). */
SWS_INTERNAL h3conn_t *h3conn_new(sws_engine_t *e, quic_lst_t *ql, const ngtcp2_pkt_hd *hd,
                                  const ngtcp2_cid *odcid, const struct sockaddr *peer,
                                  socklen_t peer_len, const struct sockaddr *local,
                                  socklen_t local_len);
SWS_INTERNAL void h3conn_free(sws_engine_t *e, h3conn_t *hc);

/* tls.c: hc's TLS session (hc->qc made): 0, or -1. */
SWS_INTERNAL int h3_tls_session(h3conn_t *hc);

/* request.c */
SWS_INTERNAL h3s_t *h3s_new(h3conn_t *hc, int64_t id);
SWS_INTERNAL void h3s_free(sws_engine_t *e, h3s_t *s);
SWS_INTERNAL int h3s_header(h3s_t *s, const uint8_t *name, size_t nl, const uint8_t *value,
                            size_t vl);
SWS_INTERNAL void h3_dispatch(sws_engine_t *e, h3conn_t *hc, h3s_t *s);
SWS_INTERNAL void h3s_body_in(sws_engine_t *e, h3s_t *s, const uint8_t *p, size_t n);
SWS_INTERNAL void h3s_body_end(sws_engine_t *e, h3s_t *s);
SWS_INTERNAL void h3_body_to_handler(sws_engine_t *e, h3s_t *s);
/* The stream is over on the client's side or closed: the handler lets go. */
SWS_INTERNAL void h3s_gone(sws_engine_t *e, h3s_t *s, int why);
SWS_INTERNAL void h3s_log(sws_engine_t *e, h3s_t *s, const sws_request_t *r, int status);

/* resp.c */
extern const sws_resp_ops_t h3_resp_ops;
/* The head (and, with a body, its reader) to the session: 0 or -1. */
SWS_INTERNAL int h3_commit(sws_engine_t *e, h3s_t *s);
/* The session's read_data and trailers callbacks (h3sess.h). */
SWS_INTERNAL ssize_t h3_read_data(void *cu, void *su, sws_h3vec_t *vec, size_t veccnt,
                                  uint32_t *flags);
SWS_INTERNAL void h3_submit_trailers(void *cu, void *su, int64_t id);
SWS_INTERNAL void h3s_acked(sws_engine_t *e, h3s_t *s, uint64_t n);
SWS_INTERNAL void h3s_release(sws_engine_t *e, h3s_t *s);
/* Deferred work of hc's streams (drained, body asked for), out of the libraries' calls. */
SWS_INTERNAL void h3_work(sws_engine_t *e, h3conn_t *hc);
/* Resets s both ways with an HTTP/3 error code. */
SWS_INTERNAL void h3s_reset(h3s_t *s, uint64_t code);

#endif
