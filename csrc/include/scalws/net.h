/* scalws/net.h — connections and their bytes (csrc/net/).
 *
 * Owns: the listening sockets and accept, the client connection struct
 * (sws_conn_t: fd, peer, timeout-list entry, unread input, pending output),
 * the per-engine read buffer, the per-engine output batch and a
 * connection's pending output (iovecs copied or referenced, then at most one
 * file segment sent with sendfile), lingering close, the peer address and
 * whether it is a trusted proxy, and the transport seam: every read and
 * write of a client connection goes through c->tr (plain sockets today;
 * TLS plugs in there).
 *
 * May call: the core (scalws/core.h), the file cache's release
 * (scalws/filecache.h). Protocols sit above: a listener carries a
 * sws_proto_t, whose functions net calls for a connection's events, its
 * expired timeouts and its close. Net never parses a byte.
 *
 * Memory: an idle connection holds its protocol's struct (which begins with
 * sws_conn_t) and nothing else; reads land in the engine's shared buffer,
 * and only an unparsed tail is copied out (stash, exact size).
 */
#ifndef SCALWS_NET_H
#define SCALWS_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "scalws/core.h"
#include "scalws/filecache.h"
#include "scalws/tls.h"

#define OUT_BUF (64 * 1024)   /* per-engine output batch */
#define OUT_IOV 64
#define LINGER_BYTES (1 << 20)
#define EMFILE_PAUSE_MS 500
#define IN_EXTRA (64 * 1024)  /* read buffer = max_header_bytes + this */

typedef struct sws_conn sws_conn_t;

/* A protocol: how net hands a connection upward. The connection struct is
 * conn_size bytes and begins with sws_conn_t; `event` becomes its epoll
 * handler. */
typedef struct {
    size_t conn_size;
    sws_evh_t event;
    /* After accept (the connection is in the epoll set, reading). */
    void (*open)(sws_engine_t *e, sws_conn_t *c, const void *conf);
    /* A timeout-list entry of c expired; must take c off the list. */
    void (*expire)(sws_engine_t *e, sws_conn_t *c, int which);
    /* c is closing (its fd still open): release what the protocol holds. */
    void (*closing)(sws_engine_t *e, sws_conn_t *c);
} sws_proto_t;

/* The transport seam: how a connection's bytes cross its socket. Same
 * contracts as recv(2), sendmsg(2) of an iovec array without SIGPIPE, and
 * sendfile(2): -1 with errno (EAGAIN when the socket is not ready). */
typedef struct {
    ssize_t (*recv)(sws_conn_t *c, char *buf, size_t len);
    ssize_t (*sendv)(sws_conn_t *c, const struct iovec *iov, int n);
    ssize_t (*sendfile)(sws_conn_t *c, int fd, off_t *off, size_t len);
    void (*shutdown)(sws_conn_t *c); /* no more output: our FIN */
} sws_transport_t;

extern const sws_transport_t sws_plain_transport;
extern const sws_transport_t sws_tls_transport;   /* net/tls.c */

typedef struct {
    sws_evobj_t ev;           /* first: the epoll handler is do_accept */
    int fd;
    int enabled;
    const sws_proto_t *proto;
    /* A protocol a connection may switch to (conn_switch): HTTP/2 when ALPN
     * chose it on a TLS listener, or on a plain one when the client sent the
     * HTTP/2 preface (h2c). NULL: none. Connections are allocated big
     * enough for either. */
    const sws_proto_t *alt;
    const void *conf;         /* the protocol's per-listener config (virtual hosts) */
    const sws_tls_listen_t *tls; /* NULL: plain */
    int is_unix;              /* one socket shared by the workers: nothing to steer */
    /* The address connections reach when the socket is bound to one (not
     * a wildcard): SERVER_ADDR without a getsockname per request. */
    unsigned char local_len;  /* 0: a wildcard or unix socket: ask the connection */
    uint16_t local_port;
    char local_addr[46];      /* INET6_ADDRSTRLEN */
} listener_t;

/* Output the socket did not take: iov[idx..niov) still to write; iovecs
 * point into the dlen bytes after iov[niov] (copied) or at bytes their
 * owner keeps (referenced). */
typedef struct {
    int idx, niov;
    size_t dlen;
    struct iovec iov[];
} pend_t;

struct sws_conn {
    sws_evobj_t ev;            /* first: the protocol's event handler */
    sws_tnode_t tn;            /* timeout-list entry */
    const sws_proto_t *proto;
    const sws_transport_t *tr;
    const listener_t *lst;     /* the listener it came from (its protocols and their config) */
    void *tls;                 /* the SSL of a TLS connection, NULL when plain */
    char *stash;               /* unparsed input, malloc'd, exact size */
    pend_t *pend;
    sws_file_t *file;          /* referenced by pending output; file_left bytes still to sendfile */
    char *heap;                /* a buffer referenced by pending output, freed once written */
    sws_hold_t *holds;         /* released once the pending output is written */
    uint64_t file_off, file_left;
    int fd;
    uint32_t evmask;           /* epoll events asked for */
    uint32_t stash_len;
    uint32_t file_chunk;       /* most bytes per sendfile call */
    uint32_t linger_bytes;     /* read while lingering (at most LINGER_BYTES + a read) */
    uint16_t peer_port;
    unsigned char peer_family;
    unsigned char is_unix : 1,
        quic : 1,              /* an HTTP/3 connection's view (csrc/http/h3/): no fd, secure */
        corked : 1,            /* TCP_CORK set for a file body */
        lingering : 1;         /* our side is shut: reading until the peer's FIN */
    unsigned char peer[16];
};

/* A timeout-list entry owned by something a connection carries (an
 * HTTP/2 stream's body timer) rather than by the connection: tn.sub is
 * set (tn.tlist TL_NONE to begin with), and its expiry goes to c's
 * protocol as c's own entry's would, with the list; the protocol finds
 * which of its entries are due. */
typedef struct {
    sws_tnode_t tn;
    sws_conn_t *c;
} sws_subtimer_t;

/* Did c come over TLS (HTTPS: TLS over TCP, or QUIC)? */
static inline int sws_conn_secure(const sws_conn_t *c) { return c->tls || c->quic; }

/* The connection a timeout-list entry belongs to. */
static inline sws_conn_t *conn_of_tnode(sws_tnode_t *n)
{
    if (n->sub)
        return ((sws_subtimer_t *)n)->c;
    return (sws_conn_t *)((char *)n - offsetof(sws_conn_t, tn));
}
#define CONN_OF_TNODE(n) conn_of_tnode(n)

/* A network prefix: family AF_INET or AF_INET6, address bytes, prefix bits. */
typedef struct {
    int family;
    unsigned char addr[16];
    int bits;
} sws_cidr_t;

/* The steering page (net/steer.c, ADR 0023): made by the master for its
 * life, shared by its workers. Slot i is worker i's: `full` while it takes
 * no new connections, `pid` the worker that claimed it last (only that one
 * writes it); `seq` moves at every change. */
#define SWS_STEER_MAX 128
typedef struct {
    uint32_t seq;
    uint32_t pad;
    struct {
        uint32_t full;
        int32_t pid;
    } slot[SWS_STEER_MAX];
} sws_steer_shm_t;

/* Net's part of the engine (e->net). */
typedef struct {
    listener_t *listeners;
    size_t n_listeners;
    int accept_paused;        /* listeners off: EMFILE or max_connections */
    uint64_t accept_resume;   /* monotonic ms to retry after EMFILE */
    char *in;                 /* read buffer, shared by every connection */
    size_t in_cap;
    sws_filecache_t *fc;      /* where file segments are released (static's cache) */
    char out[OUT_BUF];        /* output batch */
    size_t out_len;
    struct iovec iov[OUT_IOV];
    int niov;
    const sws_cidr_t *trusted;
    size_t n_trusted;
    /* TLS (net/tls.c), set up with the first TLS listener */
    unsigned char *tls_buf;   /* records gathered or read from files (TLS_BUF) */
    const sws_ticket_shm_t *tickets;
    /* Fair accept (net/steer.c): NULL when not steering (one worker, the
     * controller's instances, which share one reuseport group). */
    sws_steer_shm_t *steer;
    uint32_t steer_index, steer_n;
    int32_t steer_pid;
    int steer_full, steer_warned;
} sws_net_t;

/* net/listen.c */
SWS_INTERNAL int sws_net_init(sws_engine_t *e);
SWS_INTERNAL void sws_net_free(sws_engine_t *e);
SWS_INTERNAL int sws_net_add_listener(sws_engine_t *e, int fd, const sws_proto_t *proto,
                                      const sws_proto_t *alt, const void *conf,
                                      const sws_tls_listen_t *tls);
/* c goes over to its listener's alternative protocol: the protocol's part
 * of the struct (after sws_conn_t) is zeroed and the new protocol's open
 * runs. Unread input the old protocol stashed stays in c->stash for the
 * new one. */
SWS_INTERNAL void conn_switch(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void listeners_enable(sws_engine_t *e, int on);
/* l's local address as text (local_len etc.) when fd is bound to one, not a
 * wildcard; is_unix for a unix socket. */
SWS_INTERNAL void sws_listener_set_local(listener_t *l, int fd);
/* The address and port the client connected to, as text in addr (cap >= 46
 * bytes): from the listener when it is bound to one address, else one
 * getsockname. The text's length, or 0 (a unix socket, or an error). */
SWS_INTERNAL size_t sws_conn_local_addr(const sws_conn_t *c, char *addr, size_t cap, unsigned *port);
/* Stops accepting for good and closes this worker's copies of the listeners. */
SWS_INTERNAL void sws_net_stop_listening(sws_engine_t *e);
/* net/steer.c. sws_steer_init: this worker is index `index` of `n` (from
 * 2 to SWS_STEER_MAX, else nothing is steered) and claims its slot of `s`.
 * sws_steer_set: it takes no new connections (full) or does again; the
 * reuseport groups of its TCP listeners get the program that reflects the
 * page. Both after the listeners were added. */
SWS_INTERNAL void sws_steer_init(sws_engine_t *e, sws_steer_shm_t *s, uint32_t index, uint32_t n);
SWS_INTERNAL void sws_steer_set(sws_engine_t *e, int full);
/* A connection closed while steering away: stop once an eighth below the limit. */
SWS_INTERNAL void sws_steer_room(sws_engine_t *e);
/* Accepting again after an EMFILE pause, when due. */
SWS_INTERNAL void sws_net_tick(sws_engine_t *e);

/* net/conn.c: the output batch. Bytes are copied into it, or referenced
 * (their owner keeps them valid until the connection's pending output is
 * gone). out_flush writes the batch to c: 0 when all of it went or was
 * queued in c->pend (then EPOLLOUT and the send timeout are armed), -1 on a
 * socket error (the caller closes). When c->pend already holds output the
 * batch is queued behind it, never written ahead of it. */
SWS_INTERNAL void out_copy(sws_engine_t *e, const char *p, size_t n);
SWS_INTERNAL void out_ref(sws_engine_t *e, const char *p, size_t n);
SWS_INTERNAL void out_u64(sws_engine_t *e, uint64_t v);
/* Where the next n copied bytes go (the caller checked out_room and
 * writes them there, a pread for instance), then out_commit adds them to
 * the batch as out_copy would have. */
SWS_INTERNAL char *out_space(sws_engine_t *e);
SWS_INTERNAL void out_commit(sws_engine_t *e, size_t n);
/* Room for `need` more copied bytes and a few iovecs? Callers ask before
 * they add; out_copy and out_ref check again, and a caller that did not ask
 * stops the worker (abort, a crit line) instead of writing past the batch
 * (out_commit checks too, after the caller wrote into out_space). */
SWS_INTERNAL int out_room(const sws_engine_t *e, size_t need);
SWS_INTERNAL int out_flush(sws_engine_t *e, sws_conn_t *c);
/* Forgets what the batch holds (nothing of it was written). */
SWS_INTERNAL void out_discard(sws_engine_t *e);
/* Sends c->pend: 0 when all of it went (pend freed), 1 when the socket is
 * full, -1 on a socket error (the caller closes). */
SWS_INTERNAL int pend_send(sws_engine_t *e, sws_conn_t *c);
/* Copies every byte c->pend references into memory it owns: a protocol
 * that multiplexes (HTTP/2) lets a handler free its buffers while the
 * connection goes on. 0, or -1 when out of memory (the caller closes). */
SWS_INTERNAL int conn_pend_own(sws_conn_t *c);
/* h->release runs once c has no pending output left (or closes). */
SWS_INTERNAL void conn_hold(sws_conn_t *c, sws_hold_t *h);
/* Starts a file segment after the batch: sent by conn_send_file once the
 * iovecs are out; TCP_CORK holds the head for the first file bytes. */
SWS_INTERNAL void conn_file_start(sws_engine_t *e, sws_conn_t *c, sws_file_t *f, uint64_t off,
                                  uint64_t len, uint32_t chunk);
/* Sends the rest of c->file, one chunk per call: 0 (done, or waiting for
 * writability with EPOLLOUT armed) or -1 to close. */
SWS_INTERNAL int conn_send_file(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL int conn_set_mask(sws_engine_t *e, sws_conn_t *c, uint32_t events);
/* At most about `bytes` of c's output wait unsent in the kernel
 * (TCP_NOTSENT_LOWAT; a no-op on unix sockets): the socket reports itself
 * writable only below that. A protocol that multiplexes keeps the order of
 * what is not yet on its way in its own hands (HTTP/2's priorities). */
SWS_INTERNAL void conn_limit_unsent(sws_conn_t *c, int bytes);
/* recv through the transport; as recv(2). */
SWS_INTERNAL ssize_t conn_recv(sws_conn_t *c, char *buf, size_t len);
/* Appends bytes to the unread input; -1 when out of memory. */
SWS_INTERNAL int conn_stash(sws_conn_t *c, const char *p, size_t n);
/* Moves the stash to the start of the read buffer: its length. */
SWS_INTERNAL size_t conn_unstash(sws_engine_t *e, sws_conn_t *c);
SWS_INTERNAL void conn_close(sws_engine_t *e, sws_conn_t *c);
/* Our last response is out: half-close and read until the peer's FIN. */
SWS_INTERNAL void conn_linger(sws_engine_t *e, sws_conn_t *c);
/* Counts bytes read while lingering; 1 when the connection was closed. */
SWS_INTERNAL int conn_linger_input(sws_engine_t *e, sws_conn_t *c, size_t n);

/* net/tls.c */
SWS_INTERNAL int sws_net_tls_init(sws_engine_t *e);
SWS_INTERNAL void sws_net_tls_free(sws_engine_t *e);
/* A connection accepted on a TLS listener: its SSL, and the handshake
 * handler until the handshake is done. -1 when out of memory. */
SWS_INTERNAL int sws_tls_accept(sws_engine_t *e, sws_conn_t *c, const sws_tls_listen_t *l);
/* c closes: close_notify when the session is sound, then the SSL goes. */
SWS_INTERNAL void sws_tls_conn_free(sws_engine_t *e, sws_conn_t *c);
/* c's epoll mask now has EPOLLIN: input waiting inside OpenSSL is announced. */
SWS_INTERNAL void sws_tls_wants_input(sws_engine_t *e, sws_conn_t *c);
/* The negotiated protocol ("TLSv1.3") and cipher, for the access log. */
SWS_INTERNAL const char *sws_tls_protocol(const sws_conn_t *c);
SWS_INTERNAL const char *sws_tls_cipher(const sws_conn_t *c);

/* net/peer.c */
/* The peer as text (IPv4, full IPv6, "unix:"); at most 40 bytes written. */
SWS_INTERNAL char *put_peer(char *p, const sws_conn_t *c);
SWS_INTERNAL int peer_trusted(const sws_engine_t *e, const sws_conn_t *c);
/* Is the peer inside one of list[0..n)? (A unix-socket peer never is.) */
SWS_INTERNAL int peer_in(const sws_conn_t *c, const sws_cidr_t *list, size_t n);
/* Is the textual address s[0..n) inside one of list[0..ln)? */
SWS_INTERNAL int text_in(const sws_cidr_t *list, size_t ln, const char *s, size_t n);
/* Is the textual address s[0..n) inside trusted_proxies? */
SWS_INTERNAL int trusted_text(const sws_engine_t *e, const char *s, size_t n);

#endif
