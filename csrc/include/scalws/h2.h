/* scalws/h2.h — the HTTP/2 connection protocol (csrc/http/h2/), beside
 * HTTP/1 on the same request view and response interface.
 *
 * Owns: a client connection's HTTP/2 state (h2conn_t, which begins with
 * net's sws_conn_t): one protocol session per connection (session.h:
 * frames, HPACK, stream states, flow control, ours), the streams (h2s_t,
 * one per request, each an implementation of sws_resp_t), their request
 * bodies and response queues, GOAWAY on the graceful stop. The files
 * around the session do the socket I/O (through the connection's
 * transport and net's output batch), the request view, the handlers and
 * the access log.
 *
 * How a connection becomes HTTP/2: its listener was added with HTTP/2
 * allowed (listener_t.alt = &sws_h2_proto); on a TLS listener ALPN chose
 * "h2" (net/tls.c), on a plain one the client sent the connection preface
 * first (prior knowledge, `h2c` in the listen string; h1.c sees it). Net
 * then switches the connection's protocol (conn_switch) and calls our open.
 *
 * Output: the session's serialized frames (control frames and header
 * blocks) are copied into net's batch; DATA payloads are never copied by
 * the session: h2_data_send puts the frame header in the batch and then
 * references the handler's bytes (SWS_REF: the proxy's
 * read buffer, a cached file's memory, a respond body), copies small
 * copied pieces, or preads a file segment straight into the batch. What a
 * batch references stays alive until the connection has written it
 * (net's holds).
 *
 * Request bodies reach a waiting handler through hooks->body as DATA
 * arrives, while it wants them; what it does not want yet waits in the
 * stream (at most the stream window we advertised), and WINDOW_UPDATE
 * gives the client room only for what the handler took
 * (sws_h2sess_consume).
 * Each stream the client owes body to has its own timer (TL_BODY,
 * body_timeout, restarted by its DATA and by the window we give back);
 * a client without window to send in is never timed out by it. Run out:
 * 408 when no answer began, else RST_STREAM; the other streams go on.
 *
 * WebSocket (RFC 8441, SETTINGS_ENABLE_CONNECT_PROTOCOL announced): an
 * extended CONNECT with :protocol websocket on a proxy route is handed to
 * the proxy as the HTTP/1.1 upgrade request (GET, Upgrade, our
 * Sec-WebSocket-Key); SWS_BODY_TUNNEL answers :status 200, and from then
 * on the stream's DATA is the tunnel both ways, under the same windows as
 * bodies. Other routes and protocols: 501. "Expect: 100-continue": an
 * interim :status 100 once a handler that reads the body took the request.
 *
 * May call: net (bytes in and out, holds), the router, the handlers, the
 * access log, the core. Handlers reach it only through
 * sws_resp_t.
 */
#ifndef SCALWS_H2_H
#define SCALWS_H2_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/net.h"
#include "scalws/priority.h"
#include "scalws/response.h"
#include "scalws/router.h"

struct sws_h2sess;

/* Defaults (docs/configuration.md, "http2"; docs/adr/0016-h2-dos-budgets.md). */
#define SWS_H2_MAX_STREAMS 128          /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define SWS_H2_STREAM_WINDOW (256 * 1024) /* SETTINGS_INITIAL_WINDOW_SIZE: request body per stream */
#define SWS_H2_CONN_WINDOW (1024 * 1024) /* the connection's receive window */
#define SWS_H2_TABLE 4096               /* SETTINGS_HEADER_TABLE_SIZE, and our encoder's table */
#define SWS_H2_CONTINUATIONS 8          /* CONTINUATION frames after one HEADERS */
#define SWS_H2_UNSENT (16 * 1024)       /* TCP_NOTSENT_LOWAT: output the kernel holds unsent (ADR 0019) */
#define SWS_H2_RESET_BURST 1000         /* RST_STREAM from the client: a bucket of 1000 ... */
#define SWS_H2_RESET_RATE 33            /* ... refilled by 33 a second (as nghttp2's defaults) */
#define SWS_H2_FRAME_BURST 1000         /* frames that ask nothing of a handler (budget_frame) */
#define SWS_H2_FRAME_RATE 100
#define SWS_H2_DISCARD (4 * 1024 * 1024) /* request body read past after a complete answer */
#define SWS_H2_SPARE 256                /* stream objects a worker keeps for reuse */

typedef struct h2s h2s_t;

/* The http2: block of the configuration (every connection of the engine).
 * Budgets are token buckets: `burst` tokens at most, `rate` more a second;
 * a frame that finds the bucket empty ends the connection with GOAWAY
 * ENHANCE_YOUR_CALM. */
typedef struct {
    uint32_t max_streams;      /* SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t stream_window;    /* SETTINGS_INITIAL_WINDOW_SIZE, bytes */
    uint32_t conn_window;      /* the connection's receive window, bytes */
    uint32_t max_header_list;  /* SETTINGS_MAX_HEADER_LIST_SIZE, bytes; over it: 431; 0: from limits */
    uint32_t header_table;     /* SETTINGS_HEADER_TABLE_SIZE, and the most our encoder uses, bytes */
    uint32_t max_continuations;
    uint32_t unsent_limit;     /* TCP_NOTSENT_LOWAT on the connection, bytes; 0: none (ADR 0019) */
    uint32_t reset_burst, reset_rate;  /* RST_STREAM received (CVE-2023-44487) */
    uint32_t frame_burst, frame_rate;  /* SETTINGS, PING, WINDOW_UPDATE, PRIORITY, empty DATA, ... */
} sws_h2_conf_t;

typedef struct h2conn {
    sws_conn_t c;              /* first: net's part */
    sws_engine_t *e;           /* for the session's callbacks */
    struct sws_h2sess *sess;
    const sws_vhosts_t *vh;
    h2s_t *streams;            /* every stream object, open or waiting for its handler */
    uint32_t n_streams;
    uint32_t n_live;           /* streams whose handler answers later and has not finished */
    uint32_t n_taken;          /* streams taken (limits.keepalive_requests) */
    struct h2conn *due_next;   /* e->h2.due: output to write at the end of the pass */
    sws_pri_early_t early_pri; /* PRIORITY_UPDATEs that came before their HEADERS (RFC 9218 §7.1) */
    uint32_t rst_tokens;       /* the budgets' buckets, in thousandths of a frame */
    uint32_t frame_tokens;
    uint32_t budget_at;        /* monotonic ms the buckets were last filled (mod 2^32) */
    uint64_t cwin_at;          /* monotonic ms the receive window last opened again from 0 */
    unsigned busy : 1,         /* inside the session (recv or send): no re-entry */
        send_due : 1,          /* a send was asked for while busy */
        room_blocked : 1,      /* send_data waited for room in the batch */
        dead : 1,              /* to close at the next event (an error while a handler ran) */
        goaway : 2,            /* 1: the stop's first GOAWAY and PING went, 2: the final GOAWAY */
        closing : 1,           /* conn_close runs */
        hdr_open : 1,          /* a header block began and has not ended: its time is not renewed */
        data_out : 1,          /* DATA went out since the send timer was set */
        calmed : 1,            /* over a budget: GOAWAY ENHANCE_YOUR_CALM given */
        due : 1,               /* on e->h2.due */
        in_event : 1,          /* h2_event runs: it writes what is due at its end */
        work_due : 1;          /* work marked during h2_event: h2_work again before its end */
} h2conn_t;

/* HTTP/2's part of the engine (e->h2). */
typedef struct {
    char *path;                /* the normalized path of the current request */
    sws_h2_conf_t conf;        /* max_header_list resolved */
    void *nva;                 /* h2_commit's field array (the session copies it) */
    size_t nva_cap;
    h2conn_t *due;             /* connections whose handlers gave output this pass */
    h2s_t *spare;              /* stream objects kept for reuse (h2s_new), at most SWS_H2_SPARE */
    uint32_t n_spare;
    struct sws_h2pool *hq_pool; /* the sessions' header blocks kept for reuse (session.h) */
    struct qitem *q_spare;     /* queue items without data kept for reuse, at most SWS_H2_SPARE */
    uint32_t n_q_spare;
} sws_h2_t;

extern const sws_proto_t sws_h2_proto;

SWS_INTERNAL int sws_h2_init(sws_engine_t *e);
SWS_INTERNAL void sws_h2_free(sws_engine_t *e);
/* The http2: block, for connections opened from now on (validated by the
 * loader; 0 / -ENOMEM). */
SWS_INTERNAL int sws_h2_configure(sws_engine_t *e, const sws_h2_conf_t *conf);
/* The graceful stop's part: every HTTP/2 connection gets GOAWAY (first
 * "no new streams" and a PING, then, once the PING is answered, the last
 * stream it took); streams in flight finish, then it closes. */
SWS_INTERNAL void sws_h2_shutdown(sws_engine_t *e);
/* Is buf[0..len) the start of the client connection preface (len >= 24:
 * all of it)? 1: all of it, 0: a proper prefix so far, -1: not it. */
SWS_INTERNAL int sws_h2_preface(const char *buf, size_t len);
/* The end of a loop pass: what handlers gave each HTTP/2 connection during
 * the pass goes out, one write per connection (one run of TLS records). */
SWS_INTERNAL void sws_h2_after_pass(sws_engine_t *e);

#endif
