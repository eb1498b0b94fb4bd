/* The engine: one worker's data plane assembled from its floors (core,
 * net, the HTTP/1, HTTP/2 and HTTP/3 protocols, the handlers, upstreams). This file is the
 * composition root: the only one that calls into every floor, to build,
 * tick, stop and free them. Contract in scalws/engine.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "context.h"
#include "scalws/sandbox.h"

/* The connection gauges of the shared counters: two stores per pass. */
static void stats_gauges(sws_engine_t *e)
{
    e->core.st->conns_active = e->core.cnt.active;
    e->core.st->conns_idle = e->core.tl[TL_KEEPALIVE].n;
    e->core.st->h3_active = e->h3.n_conns;
}

static void after_pass(sws_engine_t *e)
{
    if (e->h2.due)
        sws_h2_after_pass(e);
    if (e->h3.due)
        sws_h3_after_pass(e);
    sws_alog_maybe_flush(e);
    stats_gauges(e);
}

sws_engine_t *sws_engine_new(const sws_limits_t *limits, const sws_respond_t *errors_,
                             int worker_id)
{
    sws_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->core.epfd = -1;
    e->ca.slot = -1;
    int rc = sws_core_init(e, limits, worker_id);
    if (rc < 0) {
        free(e);
        errno = -rc;
        return NULL;
    }
    e->core.after_pass = after_pass;
    memcpy(e->rsp.err, errors_, sizeof e->rsp.err);
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
        seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    sws_alog_init(e, seed);
    if (sws_net_init(e) < 0 || sws_h1_init(e) < 0 || sws_h2_init(e) < 0 ||
        sws_h3_init(e) < 0 ||
        sws_static_init(e, seed) < 0) {
        sws_engine_free(e);
        errno = ENOMEM;
        return NULL;
    }
    sws_dispatch_init(e);
    return e;
}

int sws_engine_fd(const sws_engine_t *e) { return e->core.relay_fd; }

int sws_engine_watch(sws_engine_t *e, int on) { return sws_core_watch(e, on); }

void sws_engine_free(sws_engine_t *e)
{
    if (!e)
        return;
    sws_engine_close_all(e);
    sws_cache_free(e);
    sws_up_free(e);
    sws_alog_free(e);
    sws_net_free(e);
    sws_h1_free(e);
    sws_h2_free(e);
    sws_h3_free(e);
    sws_static_free(e);
    sws_core_free(e);
    free(e);
}

int sws_engine_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                            const sws_tls_listen_t *tls, int http2)
{
    if (tls) {
        int rc = sws_net_tls_init(e);
        if (rc < 0) {
            close(fd);
            return rc;
        }
    }
    return sws_net_add_listener(e, fd, &sws_h1_proto, http2 ? &sws_h2_proto : NULL, vhosts, tls);
}

int sws_engine_add_quic_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts,
                                 const sws_quic_certs_t *certs, int steer_index, int steer_key,
                                 const uint8_t *secret, size_t secret_len)
{
    return sws_h3_add_listener(e, fd, vhosts, certs, steer_index, steer_key, secret, secret_len);
}

int sws_engine_set_h3(sws_engine_t *e, const sws_h3_conf_t *conf)
{
    if (!conf->max_streams || !conf->stream_window || !conf->conn_window || !conf->max_conns)
        return -EINVAL;
    e->h3.conf = *conf;
    e->h3.gso = conf->gso ? -1 : 0; /* -1: tried at the first send */
    return 0;
}

void sws_engine_set_tickets(sws_engine_t *e, const sws_ticket_shm_t *keys) { e->net.tickets = keys; }

int sws_engine_set_steering(sws_engine_t *e, void *shm, size_t len, unsigned index,
                            unsigned workers)
{
    if (!shm || len < sizeof(sws_steer_shm_t))
        return -EINVAL;
    sws_steer_init(e, shm, index, workers);
    return 0;
}

int sws_engine_set_filecache(sws_engine_t *e, size_t max_entries, uint32_t valid_ms,
                             size_t mem_max)
{
    sws_filecache_free(e->st.fc);
    e->st.fc = sws_filecache_new(max_entries, valid_ms, mem_max);
    e->net.fc = e->st.fc; /* where net releases the file segments it sent */
    return e->st.fc ? 0 : -ENOMEM;
}

int sws_engine_set_cache(sws_engine_t *e, void *const *zones, const size_t *sizes, size_t n,
                         void *registry, const int *efds)
{
    return sws_cache_init(e, zones, sizes, n, registry, efds);
}

const void *sws_engine_cache_zone(const sws_engine_t *e, size_t i)
{
    return i < e->ca.n_zones ? e->ca.zones[i] : NULL;
}

void sws_engine_set_server(sws_engine_t *e, const char *line, size_t len)
{
    e->h1.server_line = line;
    e->h1.server_line_len = len;
}

int sws_engine_set_h2(sws_engine_t *e, const sws_h2_conf_t *conf)
{
    return sws_h2_configure(e, conf);
}

void sws_engine_set_error_log(sws_engine_t *e, int fd, int level, int json)
{
    e->core.elog_fd = fd;
    e->core.elog_level = level;
    e->core.elog_json = json;
}

void sws_engine_set_stats(sws_engine_t *e, void *slot, uint32_t n_routes)
{
    /* A worker that replaces a dead one continues its slot's counters, so
     * sums over workers never go back; its gauges start again. */
    sws_stats_head_t *st = slot;
    st->conns_active = st->conns_idle = st->conns_tls_active = st->h3_active = 0;
    st->pid = (uint64_t)getpid();
    e->core.st = st;
    e->core.st_routes = (sws_hist_t *)(st + 1);
    e->core.st_n_routes = n_routes;
}

int sws_engine_trap_sigsys(sws_engine_t *e)
{
    sws_core_t *k = &e->core;
    return sws_sigsys_install(&k->elog_fd, k->elog_json ? k->iso_time : k->err_time,
                              k->elog_json ? SWS_ISO_TIME_LEN : SWS_ERR_TIME_LEN, k->elog_json,
                              k->worker_id);
}

const sws_counters_t *sws_engine_counters(const sws_engine_t *e) { return &e->core.cnt; }

int sws_engine_run(sws_engine_t *e) { return sws_core_run(e); }

int sws_engine_serve(sws_engine_t *e, int max_ms) { return sws_core_serve(e, max_ms); }

/* A worker that served since its last trim and has then had no client
 * connection (TCP or QUIC) for TRIM_IDLE_TICKS ticks gives its heap's free
 * pages back to the kernel: what its connections held (OpenSSL's state,
 * buffers) is free in the heap after a burst but stays in its RSS, 1.9 MiB
 * after 64 TLS clients. Once per quiet spell, never with a connection open,
 * so never on a request's way (docs/adr/0036-master-load-pages.md). */
#define TRIM_IDLE_TICKS 4
static void trim_when_idle(sws_engine_t *e)
{
    uint64_t mark = e->core.cnt.accepted + e->core.cnt.requests;
    if (e->core.cnt.active || e->h3.n_conns || mark == e->core.trim_mark) {
        e->core.trim_idle = 0;
        return;
    }
    if (++e->core.trim_idle < TRIM_IDLE_TICKS)
        return;
    malloc_trim(0);
    e->core.trim_mark = mark;
    e->core.trim_idle = 0;
}

void sws_engine_tick(sws_engine_t *e)
{
    update_time(e);
    sws_elog_flush(e, 0);
    sws_core_expire(e);
    sws_up_tick(e);
    sws_fastcgi_tick(e);
    sws_cache_tick(e);
    sws_core_bury(e);
    sws_net_tick(e);
    sws_alog_maybe_flush(e);
    stats_gauges(e);
    sws_core_poll_tick(e);
    trim_when_idle(e);
    e->core.waiting = 1; /* the tick runs from uvloop's wait: counted idle */
}

void sws_engine_flush(sws_engine_t *e)
{
    sws_alog_flush(e);
    sws_elog_flush(e, 1);
}

void sws_engine_shutdown(sws_engine_t *e)
{
    /* Answer what already sits in socket buffers first: closing a connection
     * with a request unread would reset it. */
    while (sws_core_pass(e) >= RUN_ROUNDS * EV_BATCH)
        ;
    e->core.shutting_down = 1;
    sws_up_shutdown(e); /* pooled upstream connections close; busy ones finish */
    sws_net_stop_listening(e);
    sws_h2_shutdown(e);
    sws_h3_shutdown(e);
    sws_h1_shutdown(e);
}

void sws_engine_close_all(sws_engine_t *e)
{
    sws_up_close_all(e); /* proxied clients are in no timeout list */
    sws_h3_close_all(e); /* nor HTTP/3's: their timers are QUIC's */
    for (int which = 0; which < TL_COUNT; which++)
        while (e->core.tl[which].head)
            conn_close(e, CONN_OF_TNODE(e->core.tl[which].head));
    sws_core_bury(e);
}
