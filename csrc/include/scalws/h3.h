/* scalws/h3.h — HTTP/3 over QUIC (csrc/http/h3/), beside HTTP/1 and
 * HTTP/2 on the protocol floor: a UDP socket per worker ("listen: 443
 * quic"), its QUIC connections (libngtcp2, TLS 1.3 from GnuTLS through
 * ngtcp2's crypto helper), HTTP/3 and QPACK on them (ours: h3sess.c,
 * h3sess_recv.c, qpack.c; ADR 0034), and their requests handed to the same handlers through the response
 * interface (scalws/response.h) as HTTP/1's and HTTP/2's.
 *
 * Files by concern: quic.c (datagrams in and out, Retry and stateless
 * resets, the timer's event, closing and draining), table.c (the
 * connection table by connection ID, the timer heap), conn.c (one connection's
 * QUIC and HTTP/3 sessions and their callbacks), request.c (a request
 * stream becomes the request view and goes to its handler), resp.c (the
 * response interface: heads, queued body, acknowledgements), tls.c (the
 * certificates, GnuTLS's side), early.c (0-RTT's anti-replay); under them
 * the leaves h3sess.c + h3sess_recv.c (the HTTP/3 protocol) and qpack.c.
 *
 * May call: the core (time, timeouts, error log), net (the peer's view
 * handlers read), dispatch, the access log. Docs: docs/configuration.md
 * ("listen", "http3"), docs/adr/0032-http3-quic.md, 0034-own-http3-qpack.md.
 */
#ifndef SCALWS_H3_H
#define SCALWS_H3_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/core.h"
#include "scalws/router.h"
#include "scalws/tls.h"

/* Defaults (docs/configuration.md, "http3"). */
#define SWS_H3_MAX_STREAMS 100          /* initial_max_streams_bidi: requests at once */
#define SWS_H3_STREAM_WINDOW (256 * 1024) /* request body a stream may send ahead */
#define SWS_H3_CONN_WINDOW (1024 * 1024) /* ... and the connection */
#define SWS_H3_IDLE_MS 30000            /* max_idle_timeout */
#define SWS_H3_HANDSHAKE_MS 10000       /* a handshake that has not ended by then is dropped */
#define SWS_H3_MAX_CONNS 10000          /* QUIC connections per worker; more: refused */
#define SWS_H3_QPACK_TABLE 4096         /* our decoder's dynamic table */
#define SWS_H3_QPACK_BLOCKED 100        /* streams that may wait on it */
#define SWS_H3_QPACK_ENCODER 0          /* the client's table our encoder may fill: none, the
                                           static table alone (ADR 0032: 11 % less CPU per
                                           small answer than 4 KiB) */
#define SWS_H3_RETRY_ABOVE 100          /* handshakes under way per worker over which a new
                                           client proves its address first (Retry) */
#define SWS_H3_RESETS 100               /* stateless resets a worker sends per second, at most */
#define SWS_H3_SECRET 128               /* the master's secret: reset tokens, address tokens,
                                           the session-ticket key (32 + 32 + 64 bytes) */
#define SWS_H3_EARLY_WINDOW_MS 10000  /* 0-RTT's anti-replay window (RFC 8446 §8.2: "on the
                                           order of ten seconds") */
#define SWS_H3_EARLY_SEEN 16384         /* ClientHellos with early data a worker remembers
                                           within one window; more: 1-RTT for the rest */
#define SWS_H3_BACKLOG (64 * 1024)
#define SWS_H3_SPARE 256                /* stream objects a worker keeps for reuse */      /* a stream's unacknowledged body over which a
                                           handler is told it is backed up */

typedef struct {
    uint32_t max_streams;
    uint32_t stream_window;
    uint32_t conn_window;
    uint32_t idle_ms;
    uint32_t handshake_ms;
    uint32_t max_conns;
    uint32_t qpack_table;
    uint32_t qpack_blocked;
    uint32_t retry_above;      /* handshakes under way; UINT32_MAX: never Retry, 0: always */
    uint32_t qpack_encoder_table; /* the most of the client's table our encoder uses */
    uint32_t early_window_ms;  /* 0: no 0-RTT (the default); else early data is taken, with
                                  anti-replay over this window (early.c) */
    uint32_t gso;              /* 1: a connection's packets in one sendmsg (UDP GSO) where
                                  the kernel takes it; 0: one packet a call */
} sws_h3_conf_t;

struct quic_lst;
struct h3_seen;
struct sws_h3pool;
struct h3conn;
struct cident;

/* HTTP/3's part of the engine (e->h3). */
typedef struct {
    sws_h3_conf_t conf;
    int enabled;               /* a quic listener was added: the rest is set up */
    struct quic_lst **lst;
    size_t n_lst;
    struct h3conn *conns;      /* every connection */
    uint32_t n_conns;
    struct cident **tab;       /* connection IDs -> connections (chained) */
    size_t tab_mask, n_cids;
    uint64_t seed;             /* the table's hash key */
    struct h3conn **heap;      /* connections by expiry (a binary min-heap) */
    size_t n_heap, cap_heap;
    int tfd;                   /* timerfd at the heap's top */
    sws_evobj_t tev;
    uint64_t armed_ns;         /* what tfd is set to (0: disarmed) */
    struct h3conn *due;        /* connections with output to write at the end of the pass */
    struct h3conn *dead;       /* closed in this batch: freed after it */
    char *path;                /* the normalized path of the current request */
    uint8_t *out;              /* packets being built: H3_GSO_SEGS of H3_MAX_PKT */
    struct h3s *spare;         /* stream objects kept for reuse (request.c), with their buffers */
    struct sws_h3pool *pool;   /* the sessions' spare runs and stream records (h3sess.h) */
    uint32_t n_spare;
    uint32_t n_handshaking;    /* connections whose handshake has not ended */
    uint32_t reset_tokens;     /* stateless resets left this second */
    uint64_t reset_sec;
    uint64_t retries;          /* Retry packets sent (counters) */
    int stopping;              /* a graceful stop: no new connections, the others drain */
    int gso;                   /* UDP_SEGMENT works (1), does not (0), untried (-1) */
    void *anti_replay;         /* gnutls_anti_replay_t when 0-RTT is on (early.c) */
    struct h3_seen *seen;      /* the ClientHellos it has seen: SWS_H3_EARLY_SEEN slots */
} sws_h3_t;

/* A QUIC listener's certificates: GnuTLS credentials per site, picked by
 * the client's server name (exact, or "*.suffix"); a client without one,
 * or naming no site, gets the first site's. */
typedef struct sws_quic_certs sws_quic_certs_t;

/* NULL with a message in err when a certificate does not load. */
sws_quic_certs_t *sws_quic_certs_new(char *err, size_t errlen);
/* Adds a site: its certificates (PEM files, as for TLS over TCP) and its
 * server names (lowercase). 0, or -1 with a message in err. */
int sws_quic_certs_add(sws_quic_certs_t *q, const sws_tls_cert_conf_t *certs, size_t n,
                       const char *const *names, size_t n_names, char *err, size_t errlen);
void sws_quic_certs_free(sws_quic_certs_t *q);

typedef struct sws_engine sws_engine_t;
SWS_INTERNAL int sws_h3_init(sws_engine_t *e);
SWS_INTERNAL void sws_h3_free(sws_engine_t *e);
SWS_INTERNAL int sws_h3_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vh,
                                     const sws_quic_certs_t *certs, int steer_index,
                                     int steer_key, const uint8_t *secret, size_t secret_len);
/* The end of a loop pass: output handlers gave HTTP/3 streams goes out. */
SWS_INTERNAL void sws_h3_after_pass(sws_engine_t *e);
/* The graceful stop's part: on steered sockets every connection gets
 * GOAWAY and closes (H3_NO_ERROR) once its requests are answered; else
 * the sockets close and every connection ends now. */
SWS_INTERNAL void sws_h3_shutdown(sws_engine_t *e);
SWS_INTERNAL void sws_h3_close_all(sws_engine_t *e);

#endif
