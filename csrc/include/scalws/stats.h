/* scalws/stats.h — the worker's slot of the shared counters block (issue 20;
 * docs/adr/0011-counters.md; the reader is scalws/control/stats.py, whose
 * docstring gives the whole file layout).
 *
 * Owns nothing: the master maps the block (file-backed or anonymous,
 * MAP_SHARED) before it forks; each worker writes only its own slot, the
 * master, the status process and the controller read every slot. Single
 * writer, plain aligned 64-bit stores: a reader may see a value a few
 * increments old, never a torn one (x86-64 and arm64 64-bit aligned stores
 * are single-copy atomic). No locks, no atomics, no system calls.
 *
 * A slot is: sws_stats_head_t, then one sws_hist_t per route (config order:
 * sites, then routes of each site), then one sws_stats_group_t per upstream
 * group (config.upstreams order), rounded up to a page (no two workers share
 * a cache line). Every field is a uint64_t; the Python reader knows the
 * fields by position: do not reorder, only append (and bump the version in
 * scalws/control/stats.py).
 *
 * Units: nanoseconds where a name says _ns, milliseconds _ms, bytes.
 */
#ifndef SCALWS_STATS_H
#define SCALWS_STATS_H

#include <stdint.h>

/* Upper bounds of the duration buckets, in microseconds (1 ms ... 10 s);
 * the last bucket is +Inf. Durations are in the core's milliseconds
 * (`now`, read once per pass), so the first bucket says "within the
 * millisecond". Same table in stats.py (LE_SECONDS). */
#define SWS_STATS_BOUNDS 13
#define SWS_STATS_BUCKETS (SWS_STATS_BOUNDS + 1)
static const uint64_t sws_stats_le_us[SWS_STATS_BOUNDS] = {
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000};

typedef struct {
    uint64_t bucket[SWS_STATS_BUCKETS]; /* not cumulative: the reader sums */
    uint64_t sum_ms;
    uint64_t count;
} sws_hist_t;

typedef struct {
    uint64_t pid;              /* the worker writing this slot; 0: none yet */
    uint64_t busy_ns;          /* loop time handling events (core/loop.c) */
    uint64_t idle_ns;          /* loop time blocked waiting for them */
    uint64_t conns_accepted;
    uint64_t conns_active;     /* gauges: copied at the end of every pass */
    uint64_t conns_idle;       /* keep-alive connections waiting for a request */
    uint64_t conns_tls_accepted;
    uint64_t conns_tls_active; /* maintained at accept and close */
    uint64_t requests;
    uint64_t status[5];        /* 1xx .. 5xx; 499 (client left) is 4xx */
    uint64_t bytes_in;         /* read from clients (after TLS) */
    uint64_t bytes_out;        /* written to clients (before TLS) */
    uint64_t cache[8];         /* unused: the cache's counters are per zone,
                                * in each zone (scalws/cachestore.h), read
                                * by the status process from its mapping */
    uint64_t h2_calm;          /* HTTP/2 connections ended with ENHANCE_YOUR_CALM (ADR 0016) */
    /* cache peers (dispatch.c): requests sent to their key's owner, kept
     * here (this node owns the key), of either whose first owner was down,
     * received from a peer, of which answered from the store; PURGEs sent */
    uint64_t peer_forwarded, peer_local, peer_owner_down, peer_received, peer_hits;
    uint64_t peer_purges;
    uint64_t h3_active;        /* QUIC connections open, handshakes included (a gauge, as
                                * conns_active, which counts them too) */
    sws_hist_t duration;       /* every request answered */
} sws_stats_head_t;

typedef struct {
    uint64_t requests;         /* requests sent to its servers (retries too) */
    uint64_t errors;           /* failed attempts (connect, reset, timeout, bad answer) */
    uint64_t servers_up;       /* this worker's view, refreshed at every tick */
    uint64_t servers_down;
    /* gauges, this worker's, refreshed at every tick (upstream/pool.c) */
    uint64_t conns_busy;       /* connections to its servers busy with a request */
    uint64_t conns_idle;       /* open and not busy: kept in the pool, or a health check's */
    /* FastCGI's wait in the worker (handlers/fastcgi_queue.c, ADR 0038) */
    uint64_t capacity;         /* gauge: connections its servers answer at once, as this
                                * worker learned them (0: none learned) */
    uint64_t queued;           /* gauge: requests waiting for a connection now */
    uint64_t queue_waits;      /* requests that waited (again, after a connection failed
                                * under one written behind another) */
    uint64_t queue_wait_ms;    /* their time waiting */
    uint64_t queue_timeouts;   /* waits ended by the route's read_timeout: 504 */
    uint64_t pipelined;        /* requests written behind another on a kept connection */
} sws_stats_group_t;

/* Bytes of one slot with n_routes and n_groups, a multiple of 4096. */
static inline uint64_t sws_stats_slot_size(uint64_t n_routes, uint64_t n_groups)
{
    uint64_t n = sizeof(sws_stats_head_t) + n_routes * sizeof(sws_hist_t) +
                 n_groups * sizeof(sws_stats_group_t);
    return (n + 4095) & ~(uint64_t)4095;
}

static inline void sws_hist_add(sws_hist_t *h, uint64_t ms)
{
    uint64_t us = ms * 1000u;
    int i = 0;
    while (i < SWS_STATS_BOUNDS && us > sws_stats_le_us[i])
        i++;
    h->bucket[i]++;
    h->sum_ms += ms;
    h->count++;
}

#endif
