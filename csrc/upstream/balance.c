/* Upstream groups: balancing, passive health, the hash ring, addresses;
 * contract in scalws/upstream.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "context.h"

#define RING_POINTS 160          /* consistent-hash points per unit of weight */

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return mix64(h);
}

static int srv_usable(const sws_engine_t *e, const sws_upstream_t *up,
                      const sws_upstream_server_t *s)
{
    return !s->removed && !s->hc_down && s->down_until <= e->core.now &&
           (!s->max_conns || s->active < s->max_conns || up->queue_at_max);
}

static int tried(uint64_t mask, size_t i) { return i < 64 && (mask >> i) & 1; }

/* Smooth weighted round robin (as nginx) over the usable, untried servers
 * of one tier; least_conn first narrows them to the fewest connections per
 * weight. -1 when none. */
static int pick_rr(sws_engine_t *e, sws_upstream_t *up, uint64_t mask, int backup, int least)
{
    int best = -1;
    int64_t total = 0;
    size_t ai = 0, aw = 1; /* least_conn: the smallest active/weight seen */
    int have_least = 0;
    if (least) {
        for (size_t i = 0; i < up->n_servers; i++) {
            sws_upstream_server_t *s = up->servers[i];
            if (s->backup != backup || tried(mask, i) || !srv_usable(e, up, s))
                continue;
            if (!have_least || (uint64_t)s->active * aw < (uint64_t)ai * s->weight) {
                ai = s->active;
                aw = s->weight;
                have_least = 1;
            }
        }
    }
    for (size_t i = 0; i < up->n_servers; i++) {
        sws_upstream_server_t *s = up->servers[i];
        if (s->backup != backup || tried(mask, i) || !srv_usable(e, up, s))
            continue;
        if (least && (uint64_t)s->active * aw != (uint64_t)ai * s->weight)
            continue;
        s->cw += s->weight;
        total += s->weight;
        if (best < 0 || s->cw > up->servers[best]->cw)
            best = (int)i;
    }
    if (best >= 0)
        up->servers[best]->cw -= total;
    return best;
}

/* The index in the ring of the first point at or after hash. */
static size_t ring_at(const sws_upstream_t *up, uint64_t hash)
{
    uint64_t h = hash >> 16;
    size_t lo = 0, hi = up->ring_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((up->ring[mid] >> 16) < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int sws_up_owner(const sws_upstream_t *up, uint64_t hash)
{
    if (!up->ring_len)
        return -1;
    return (int)(up->ring[ring_at(up, hash) % up->ring_len] & 0xffff);
}

/* Consistent hashing: the first ring point at or after the key's hash whose
 * server is usable and untried. */
static int pick_hash(sws_engine_t *e, sws_upstream_t *up, uint64_t mask, uint64_t hash)
{
    if (!up->ring_len)
        return -1;
    size_t lo = ring_at(up, hash);
    for (size_t k = 0; k < up->ring_len; k++) {
        size_t i = (size_t)(up->ring[(lo + k) % up->ring_len] & 0xffff);
        if (!tried(mask, i) && srv_usable(e, up, up->servers[i]))
            return (int)i;
    }
    return -1;
}

int sws_up_pick(sws_engine_t *e, sws_upstream_t *up, uint64_t mask, uint64_t hash)
{
    int i = -1;
    if (up->balance == SWS_BAL_HASH)
        i = pick_hash(e, up, mask, hash);
    else
        i = pick_rr(e, up, mask, 0, up->balance == SWS_BAL_LEAST_CONN);
    if (i < 0)
        i = pick_rr(e, up, mask, 1, up->balance == SWS_BAL_LEAST_CONN); /* the backups */
    return i;
}

void srv_fail(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s)
{
    e->core.cnt.upstream_errors++;
    up->st->errors++;
    /* A group of one has nowhere else to go: never mark it down (nginx). */
    if (up->n_servers - up->n_removed < 2 || !s->max_fails)
        return;
    if (e->core.now - s->fail_start >= s->fail_timeout_ms) {
        s->fail_start = e->core.now;
        s->fails = 0;
    }
    if (++s->fails < s->max_fails)
        return;
    s->fails = 0;
    if (up->hc_request) {
        s->hc_down = 1; /* back when the active checks pass `rise` times */
        s->hc_pass = 0;
        elog(e, SWS_L_WARN, "upstream server %s of \"%s\" marked down after %u failures; "
             "health checks will bring it back", s->name, up->name, s->max_fails);
    } else {
        s->down_until = e->core.now + s->fail_timeout_ms;
        elog(e, SWS_L_WARN, "upstream server %s of \"%s\" marked down for %u ms after %u failures",
             s->name, up->name, s->fail_timeout_ms, s->max_fails);
    }
}

static int ring_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int sws_upstream_server_set_addr(sws_upstream_server_t *s, const char *host, int port,
                                 const char *unix_path)
{
    memset(&s->addr, 0, sizeof s->addr);
    if (!host) {
        struct sockaddr_un *sun = (struct sockaddr_un *)&s->addr;
        size_t n = strlen(unix_path);
        if (n >= sizeof sun->sun_path)
            return -EINVAL;
        sun->sun_family = AF_UNIX;
        memcpy(sun->sun_path, unix_path, n + 1);
        s->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
    }
    struct sockaddr_in *sin = (struct sockaddr_in *)&s->addr;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&s->addr;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        s->addr_len = sizeof *sin;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        s->addr_len = sizeof *sin6;
        return 0;
    }
    return -EINVAL;
}

/* The consistent-hash points of the first n_live servers (the primaries),
 * sorted; 0, or -ENOMEM with the group's ring unchanged. */
static int ring_build(sws_upstream_t *u, sws_upstream_server_t **servers, size_t n_live)
{
    size_t total = 0;
    for (size_t i = 0; i < n_live; i++)
        if (!servers[i]->backup)
            total += (size_t)servers[i]->weight * RING_POINTS;
    uint64_t *ring = malloc((total ? total : 1) * sizeof *ring);
    if (!ring)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n_live && i < 0x10000; i++) {
        if (servers[i]->backup)
            continue;
        const char *nm = servers[i]->name;
        for (uint32_t pt = 0; pt < servers[i]->weight * RING_POINTS; pt++) {
            char key[160];
            int kl = snprintf(key, sizeof key, "%s-%u", nm, pt);
            ring[k++] = (hash_bytes(key, (size_t)kl) & ~0xffffull) | i;
        }
    }
    qsort(ring, k, sizeof *ring, ring_cmp);
    free(u->ring);
    u->ring = ring;
    u->ring_len = k;
    return 0;
}

/* A server of our own from the config half c (its names copied after it),
 * runtime zeroed; NULL when out of memory. */
static sws_upstream_server_t *srv_copy(sws_engine_t *e, const sws_upstream_server_t *c)
{
    const char *name = c->name ? c->name : "";
    size_t nl = strlen(name) + 1, tl = c->tls_name ? strlen(c->tls_name) + 1 : 0;
    sws_upstream_server_t *s = calloc(1, sizeof *s + nl + tl);
    if (!s)
        return NULL;
    memcpy(s, c, offsetof(sws_upstream_server_t, index));
    char *p = (char *)(s + 1);
    memcpy(p, name, nl);
    s->name = p;
    if (tl) {
        memcpy(p + nl, c->tls_name, tl);
        s->tls_name = p + nl;
    }
    s->hc_next = e->core.now; /* first check at the next tick */
    return s;
}

void srv_free(sws_upstream_server_t *s)
{
    if (s->tls_session)
        uptls_session_free(s);
    free(s);
}

int sws_engine_add_upstream(sws_engine_t *e, sws_upstream_t *u)
{
    sws_upstream_t **nu = realloc(e->up.upstreams, (e->up.n_upstreams + 1) * sizeof *nu);
    if (!nu)
        return -ENOMEM;
    e->up.upstreams = nu;
    e->up.upstreams[e->up.n_upstreams++] = u; /* from here sws_up_free frees what it has */
    if (!u->st)
        u->st = &e->up.st_none;
    u->servers = calloc(u->n_conf ? u->n_conf : 1, sizeof *u->servers);
    if (!u->servers)
        return -ENOMEM;
    for (size_t i = 0; i < u->n_conf; i++) {
        u->servers[i] = srv_copy(e, &u->conf[i]);
        if (!u->servers[i])
            return -ENOMEM;
        u->servers[i]->index = i;
        u->n_servers = i + 1;
    }
    u->conf = NULL; /* the caller's; not read again */
    if (u->balance == SWS_BAL_HASH && ring_build(u, u->servers, u->n_servers) < 0)
        return -ENOMEM;
    return 0;
}

int sws_upstream_set_servers(sws_engine_t *e, sws_upstream_t *up,
                             const sws_upstream_server_t *conf, size_t n)
{
    if (!n)
        return -EINVAL; /* a group keeps at least one server (DNS keeps its last set) */
    size_t cap = n + up->n_servers;
    sws_upstream_server_t **next = calloc(cap ? cap : 1, sizeof *next);
    unsigned char *kept = calloc(up->n_servers + 1, 1);  /* old index -> in the new set */
    unsigned char *fresh = calloc(cap + 1, 1);           /* new index -> made here */
    size_t k = 0, live;
    int rc = -ENOMEM;
    if (!next || !kept || !fresh)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const char *name = conf[i].name ? conf[i].name : "";
        sws_upstream_server_t *s = NULL;
        for (size_t j = 0; j < up->n_servers && !s; j++) {
            sws_upstream_server_t *o = up->servers[j];
            if (!kept[j] && !o->removed && o->backup == conf[i].backup &&
                strcmp(o->name, name) == 0) {
                kept[j] = 1;
                s = o;
            }
        }
        if (!s) {
            s = srv_copy(e, &conf[i]);
            if (!s)
                goto out;
            fresh[k] = 1;
        }
        next[k++] = s;
    }
    live = k;
    for (size_t j = 0; j < up->n_servers; j++)
        if (!kept[j])
            next[k++] = up->servers[j]; /* removed now or before: last, so freeing
                                         * them never moves a live server */
    if (up->balance == SWS_BAL_HASH && ring_build(up, next, live) < 0)
        goto out;
    for (size_t i = 0; i < k; i++) {
        sws_upstream_server_t *s = next[i];
        s->index = i;
        if (i >= live && !s->removed) {
            s->removed = 1;
            elog(e, SWS_L_NOTICE, "upstream server %s of \"%s\" removed (DNS): "
                 "%u busy connections finish, no new ones", s->name, up->name, s->active);
        } else if (fresh[i] && up->hc_request) {
            /* with active checks, a new address takes traffic once its first check passes */
            s->hc_down = 1;
            s->hc_pass = up->hc_rise ? up->hc_rise - 1 : 0;
            elog(e, SWS_L_NOTICE, "upstream server %s of \"%s\" added (DNS); up once its first "
                 "health check passes", s->name, up->name);
        } else if (fresh[i]) {
            elog(e, SWS_L_NOTICE, "upstream server %s of \"%s\" added (DNS)", s->name, up->name);
        }
    }
    free(up->servers);
    up->servers = next;
    up->n_servers = k;
    up->n_removed = k - live;
    up->gen++;
    next = NULL;
    rc = 0;
    /* Idle connections to a removed server close now; busy ones when done. */
    for (upconn_t *uc = up->idle, *nx; uc; uc = nx) {
        nx = uc->inext;
        if (uc->srv->removed)
            uc_close(e, uc);
    }
out:
    if (next)
        for (size_t i = 0; i < k; i++)
            if (fresh[i])
                free(next[i]);
    free(next);
    free(kept);
    free(fresh);
    return rc;
}

void up_sweep_removed(sws_engine_t *e, sws_upstream_t *up)
{
    (void)e;
    for (size_t i = up->n_servers - up->n_removed; i < up->n_servers;) {
        sws_upstream_server_t *s = up->servers[i];
        if (s->conns) {
            i++;
            continue;
        }
        memmove(&up->servers[i], &up->servers[i + 1],
                (up->n_servers - i - 1) * sizeof *up->servers);
        up->servers[--up->n_servers] = NULL;
        up->n_removed--;
        for (size_t j = i; j < up->n_servers; j++)
            up->servers[j]->index = j;
        srv_free(s);
    }
}
