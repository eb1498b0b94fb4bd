/* 0-RTT (RFC 9001 §4.6, RFC 8470), off unless http3.early_window_ms:
 * early data is taken only with GnuTLS's anti-replay (RFC 8446 §8.2), whose
 * store of ClientHellos is here, and h3_dispatch answers 425 Too Early to a
 * request that came in early data with a method other than GET or HEAD.
 *
 * Why a store per worker is enough: a replayed first flight reaches the
 * worker its first one reached. The steering program sends a packet by its
 * destination connection ID, and 0-RTT packets carry the ID of the client's
 * first Initial under their own AEAD: an attacker who re-encrypts the
 * Initial under another ID (its keys are public) cannot move the 0-RTT
 * packets with it, so they reach the worker that has seen them or none.
 * Without steering (under scalws-controller, or past its limits: the
 * kernel's 4-tuple hash) that does not hold, and a listener that is not
 * steered takes no early data (the master says so in its log).
 *
 * Across reloads and restarts: GnuTLS refuses early data on a ticket
 * issued before its anti-replay context started, and a worker starts it
 * with its first new connection: after the steering program sent new
 * clients to its generation. A ticket the old workers issued before that
 * is refused here; a first flight that uses a later one reaches this
 * generation, and a replay of it the same worker. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/h3/h3_int.h"

struct h3_seen {
    uint64_t hash;             /* keyed hash of GnuTLS's key (window start + ClientHello id) */
    uint64_t expires;          /* seconds (CLOCK_REALTIME, as GnuTLS's exp_time) */
};

#define SEEN_PROBES 32

static uint64_t seen_hash(uint64_t seed, const unsigned char *p, size_t n)
{
    uint64_t h = seed ^ (n * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h | 1; /* 0: an empty slot */
}

/* GnuTLS's add function: 0 when the ClientHello is new (remembered until
 * exp_time), GNUTLS_E_DB_ENTRY_EXISTS for a replay; a full neighbourhood
 * refuses too (the client's early data is then sent again after the
 * handshake: slower, never unsafe). */
static int seen_add(void *ptr, time_t exp_time, const gnutls_datum_t *key,
                    const gnutls_datum_t *data)
{
    (void)data;
    sws_engine_t *e = ptr;
    struct h3_seen *t = e->h3.seen;
    uint64_t h = seen_hash(e->h3.seed, key->data, key->size);
    uint64_t now = (uint64_t)time(NULL);
    size_t at = (size_t)h & (SWS_H3_EARLY_SEEN - 1), free_at = SIZE_MAX;
    for (size_t i = 0; i < SEEN_PROBES; i++) {
        struct h3_seen *s = &t[(at + i) & (SWS_H3_EARLY_SEEN - 1)];
        int live = s->hash && s->expires >= now;
        if (live && s->hash == h)
            return GNUTLS_E_DB_ENTRY_EXISTS;
        if (!live && free_at == SIZE_MAX)
            free_at = (at + i) & (SWS_H3_EARLY_SEEN - 1);
    }
    if (free_at == SIZE_MAX)
        return GNUTLS_E_DB_ERROR;
    t[free_at] = (struct h3_seen){h, (uint64_t)exp_time};
    return 0;
}

int h3_early_on(sws_engine_t *e, const quic_lst_t *ql)
{
    if (!e->h3.conf.early_window_ms || !ql->steered)
        return 0;
    if (e->h3.anti_replay)
        return 1;
    gnutls_anti_replay_t ar;
    if (!e->h3.seen && !(e->h3.seen = calloc(SWS_H3_EARLY_SEEN, sizeof *e->h3.seen)))
        return 0;
    if (gnutls_anti_replay_init(&ar) != 0)
        return 0;
    gnutls_anti_replay_set_window(ar, e->h3.conf.early_window_ms);
    gnutls_anti_replay_set_add_function(ar, seen_add);
    gnutls_anti_replay_set_ptr(ar, e);
    e->h3.anti_replay = ar;
    return 1;
}

void h3_early_free(sws_engine_t *e)
{
    if (e->h3.anti_replay)
        gnutls_anti_replay_deinit(e->h3.anti_replay);
    e->h3.anti_replay = NULL;
    free(e->h3.seen);
    e->h3.seen = NULL;
}

void h3_early_session(const sws_engine_t *e, gnutls_session_t tls)
{
    gnutls_anti_replay_enable(tls, e->h3.anti_replay);
    /* RFC 9001 §4.6.1: a ticket that allows 0-RTT says 0xffffffff */
    gnutls_record_set_max_early_data_size(tls, 0xffffffffu);
}

int h3_early_refused(const sws_request_t *r)
{
    return r->early && r->method_id != SWS_M_GET && r->method_id != SWS_M_HEAD;
}
