/* scalws/engine.h — the public contract of one worker's data plane, the
 * API scalws/server/engine.pyx drives (csrc/engine.c assembles the floors).
 *
 * The engine owns an epoll instance ("inner epoll") holding the worker's
 * listening sockets, client connections and upstream connections. The
 * worker registers one fd with its uvloop loop (loop.add_reader: a relay
 * epoll holding the inner one, sws_engine_fd) and calls
 * sws_engine_serve() when it is readable, so a wake-up costs one
 * Python callback however many connections are ready; bytes move with
 * recv/writev called from C on non-blocking sockets
 * (docs/adr/0001-connection-io.md, 0003-serve-loop.md).
 *
 * The floors, each with its header (docs/adr/0005-engine-layering.md):
 *   scalws/core.h      loop, serve loop, busy poll, batching window, time, timeouts, error log
 *   scalws/net.h       accept, connection I/O, pending output, lingering close, transport
 *   scalws/h1.h        the HTTP/1 protocol; scalws/h2.h HTTP/2; scalws/h3.h HTTP/3 over QUIC;
 *                      scalws/accesslog.h the access log
 *   scalws/response.h  the request view and response interface between protocols and handlers
 *   scalws/respond.h, static.h, proxy.h   the handlers
 *   scalws/upstream.h  groups, balancing, health, the keep-alive pool
 *
 * Config structs (sws_static_t, sws_proxy_t, sws_upstream_t, ...) are filled
 * by the caller and must outlive the engine. Return values: 0 / -errno
 * unless stated.
 */
#ifndef SCALWS_ENGINE_H
#define SCALWS_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>

#include "scalws/accesslog.h"
#include "scalws/core.h"
#include "scalws/fastcgi.h"
#include "scalws/filecache.h"
#include "scalws/h2.h"
#include "scalws/h3.h"
#include "scalws/net.h"
#include "scalws/proxy.h"
#include "scalws/respond.h"
#include "scalws/cache.h"
#include "scalws/response.h"
#include "scalws/router.h"
#include "scalws/static.h"
#include "scalws/tls.h"
#include "scalws/upstream.h"

typedef struct sws_engine sws_engine_t;

/* A new engine; errors_[] are the engine's own error responses (copied by
 * reference: they must outlive the engine). NULL with errno on failure. */
sws_engine_t *sws_engine_new(const sws_limits_t *limits, const sws_respond_t *errors_,
                             int worker_id);
void sws_engine_free(sws_engine_t *e);

/* The fd to register with the outer loop as readable: a relay epoll that
 * holds the inner epoll alone, readable while the inner one has events and
 * the relay is armed. */
int sws_engine_fd(const sws_engine_t *e);

/* Disarms (on = 0) or arms again (on = 1) the relay: the worker disarms it
 * while it serves, so that uvloop's epoll is not woken for events the
 * serve call handles itself (docs/adr/0004-busy-poll.md), and arms it when
 * it gives uvloop the loop back. One epoll_ctl, whatever the number of
 * connections. Returns 0 or -errno. */
int sws_engine_watch(sws_engine_t *e, int on);

/* Adds a listening socket (non-blocking, already bound and listening) whose
 * requests are routed with `vhosts`; with `tls` (not NULL) its connections
 * speak TLS first, with that table's certificates (it must outlive the
 * engine). http2: on a TLS listener, ALPN may choose h2; on a plain one,
 * a client that starts with the HTTP/2 preface speaks h2c (prior
 * knowledge); HTTP/1 is served either way. The engine closes the socket on
 * shutdown. */
int sws_engine_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                            const sws_tls_listen_t *tls, int http2);

/* Adds a UDP socket (non-blocking, bound) that serves HTTP/3 over QUIC
 * for `vhosts`, with `certs` (they must outlive the engine). steer_index
 * (0..255) is the socket's index in its reuseport group and steer_key the
 * byte the master's steering program checks (ADR 0032); -1: not steered.
 * secret: SWS_H3_SECRET bytes the master shares with every worker
 * (stateless resets, Retry tokens, session tickets), copied; NULL: this
 * worker's own. The engine closes the socket. 0, or -errno. */
int sws_engine_add_quic_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                                 const sws_quic_certs_t *certs, int steer_index, int steer_key,
                                 const uint8_t *secret, size_t secret_len);
/* HTTP/3's settings and budgets (the http3: block); without it, the
 * defaults of scalws/h3.h. 0 / -EINVAL. */
int sws_engine_set_h3(sws_engine_t *e, const sws_h3_conf_t *conf);

/* The session-ticket keys the master shares (shared memory that outlives
 * the engine); NULL: no tickets are made or accepted. */
/* The response cache's zones (MAP_SHARED mappings made by the master,
 * zero-filled or already formatted), the holders' registry page and the
 * SWS_CS_HOLDERS eventfds, all inherited. 0, or -1 when caching is off
 * (logged). Before the loop runs. */
int sws_engine_set_cache(sws_engine_t *e, void *const *zones, const size_t *sizes, size_t n,
                         void *registry, const int *efds);
const void *sws_engine_cache_zone(const sws_engine_t *e, size_t i);

void sws_engine_set_tickets(sws_engine_t *e, const sws_ticket_shm_t *keys);

/* Fair accept (ADR 0023): `shm` is the master's steering page (len bytes,
 * at least sizeof(sws_steer_shm_t)); this worker is `index` of `workers`,
 * whose sockets the master bound in that order. After the listeners are
 * added. 0, or -EINVAL (page too small: nothing is steered). */
int sws_engine_set_steering(sws_engine_t *e, void *shm, size_t len, unsigned index,
                            unsigned workers);

/* Access log: fd (-1 = off; the engine does not own it), SWS_LOG_* format,
 * buffer size in bytes; flushed when full, at each tick after `flush_ms`,
 * and by sws_engine_flush(). Switching fd flushes to the old fd first. */
int sws_engine_set_access_log(sws_engine_t *e, int fd, int format, size_t bufsize,
                              uint32_t flush_ms);
/* The open-file cache static routes use (one per engine); call before the
 * first request when any static route exists. 0 or -ENOMEM. */
int sws_engine_set_filecache(sws_engine_t *e, size_t max_entries, uint32_t valid_ms,
                             size_t mem_max);

/* The Server header line for answers built per request ("Server: x\r\n",
 * or empty); the bytes must outlive the engine. */
void sws_engine_set_server(sws_engine_t *e, const char *line, size_t len);

/* HTTP/2's settings and budgets (the http2: block); without it, the
 * defaults of scalws/h2.h. 0 / -ENOMEM. */
int sws_engine_set_h2(sws_engine_t *e, const sws_h2_conf_t *conf);

/* Error log for the engine's own messages: fd (-1 = stderr), level (SWS_L_*). */
void sws_engine_set_error_log(sws_engine_t *e, int fd, int level, int json);

/* Sandboxed worker (ADR 0012): installs the SIGSYS handler that logs a
 * seccomp violation to this engine's error log, then dies of SIGSYS.
 * 0 or -errno. */
int sws_engine_trap_sigsys(sws_engine_t *e);

/* Registers an upstream group (health checks, hashing ring, pooled
 * connections closed at free); before the first request. 0 or -ENOMEM. */
int sws_engine_add_upstream(sws_engine_t *e, sws_upstream_t *u);
/* Replaces the servers of a registered group with conf[0..n) (config
 * halves, copied): a server of the same name and tier keeps its state and
 * connections, new ones join, the others are removed (never picked again,
 * their idle connections closed now, busy ones finish; freed once their
 * last connection closes). Rebuilds the hash ring. 0, or -ENOMEM with the
 * group unchanged. Live DNS (scalws/control/resolver.py). */
int sws_upstream_set_servers(sws_engine_t *e, sws_upstream_t *up,
                             const sws_upstream_server_t *conf, size_t n);
/* A cached route's zone has cache peers p (scalws/cache.h): fwd_http and
 * fwd_https are proxies (sws_proxy_t) to p->up, each setting the marker
 * for its scheme; stat_id the route's. */
void sws_cache_route_set_peers(sws_cache_route_t *c, const sws_cache_peers_t *p, void *fwd_http,
                               void *fwd_https, uint32_t stat_id);

/* Sets s->addr from a numeric IPv4/IPv6 host and port, or from a unix
 * socket path (host NULL). 0, or -EINVAL. */
int sws_upstream_server_set_addr(sws_upstream_server_t *s, const char *host, int port,
                                 const char *unix_path);

/* Peers whose X-Forwarded-For/-Proto/-Host and X-Request-Id are believed;
 * the array must outlive the engine. */
void sws_engine_set_trusted(sws_engine_t *e, const sws_cidr_t *list, size_t n);

/* Reads the clocks: monotonic milliseconds and wall seconds. */
void sws_engine_now(uint64_t *mono_ms, time_t *wall);

/* Handles every ready event of the inner epoll (up to a budget, so the outer
 * loop stays fair), after sleeping the batching window first if it is due;
 * returns the number of events handled. */
int sws_engine_run(sws_engine_t *e);
/* sws_engine_run, then block in the inner epoll itself, handling events as
 * they come, until `max_ms` have passed after the first pass, a signal
 * interrupts a wait (a signal that arrives during a pass is seen at the
 * latest after `max_ms`), or the engine is shutting down; while the batching
 * window is due it sleeps the window and polls instead of blocking, and with
 * `busy_poll` it polls for a while before each blocking wait. The
 * worker calls this when uvloop reports the inner epoll readable: under load
 * the worker then sleeps on the inner epoll alone, and a peer's write wakes
 * it through one epoll callback instead of two nested ones
 * (docs/adr/0003-serve-loop.md). Returns the number of events handled. */
int sws_engine_serve(sws_engine_t *e, int max_ms);

/* Expires timeouts, re-enables accepting after EMFILE, flushes the access
 * log when due, writes the error log's counts of lines folded in a past
 * second; call a few times a second. */
void sws_engine_tick(sws_engine_t *e);

/* Graceful stop: close the listeners, close idle connections now, and let
 * the others finish their current request, answered with Connection: close. */
void sws_engine_shutdown(sws_engine_t *e);

/* Fast stop: close every connection now. */
void sws_engine_close_all(sws_engine_t *e);

/* Writes buffered access-log lines out, and the error log's counts of
 * folded lines (elog_folded in scalws/core.h) not yet written: at exit. */
void sws_engine_flush(sws_engine_t *e);

const sws_counters_t *sws_engine_counters(const sws_engine_t *e);
/* The worker's slot of the shared counters (scalws/stats.h), laid out for
 * n_routes routes; it must outlive the engine. Upstream groups point at
 * their own part (sws_upstream_t.st). */
void sws_engine_set_stats(sws_engine_t *e, void *slot, uint32_t n_routes);

#endif
