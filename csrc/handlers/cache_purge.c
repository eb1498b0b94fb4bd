/* PURGE and invalidation's removal (scalws/cache.h, cache_int.h): every
 * stored variant of a key, the entries under a key prefix ("/path*"), or
 * those carrying a tag (Cache-Tag); answered with the count, 404 when none.
 * Allowed to purge.allow, or to trusted_proxies by default. */
#include <stdio.h>
#include <string.h>

#include "cache_int.h"
#include "fields_int.h"

/* ---- PURGE -------------------------------------------------------------------------------- */

/* Unlinks every entry of the key (all variants); how many. Lock held. */
size_t drop_key(sws_cs_t *z, uint64_t hash, const char *key, size_t kl)
{
    size_t n = 0;
    for (uint64_t o = sws_cs_chain(z, hash); o;) {
        sws_cent_t *ent = sws_cs_ent(z, o);
        o = ent->bnext;
        if (ent->state == CS_READY && ent->hash == hash && ent->key_len == kl &&
            !memcmp(ent_key(ent), key, kl)) {
            sws_cs_unlink(z, ent);
            n++;
        }
    }
    return n;
}

typedef struct {
    const char *prefix;
    size_t n;
    const char *tags;      /* space-separated request tags */
    size_t tags_len;
} sweep_arg_t;

static int sweep_prefix(sws_cent_t *ent, void *arg)
{
    const sweep_arg_t *a = arg;
    return ent->state == CS_READY && ent->key_len >= a->n && memcmp(ent_key(ent), a->prefix, a->n) == 0;
}

static int is_sep(char c) { return c == ' ' || c == ',' || c == '\t'; }

/* Does the space- or comma-separated list l contain token t? */
static int has_token(const char *l, size_t ln, const char *t, size_t tn)
{
    size_t i = 0;
    while (i < ln) {
        while (i < ln && is_sep(l[i]))
            i++;
        size_t s = i;
        while (i < ln && !is_sep(l[i]))
            i++;
        if (i - s == tn && memcmp(l + s, t, tn) == 0)
            return 1;
    }
    return 0;
}

static int sweep_tags(sws_cent_t *ent, void *arg)
{
    const sweep_arg_t *a = arg;
    if (ent->state != CS_READY || !ent->tags_len)
        return 0;
    size_t i = 0;
    while (i < a->tags_len) {
        while (i < a->tags_len && is_sep(a->tags[i]))
            i++;
        size_t s = i;
        while (i < a->tags_len && !is_sep(a->tags[i]))
            i++;
        if (i > s && has_token(ent_tags(ent), ent->tags_len, a->tags + s, i - s))
            return 1;
    }
    return 0;
}

static void small_answer(sws_engine_t *e, sws_resp_t *r, int status, const char *body, size_t n)
{
    resp_head(e, r, status, NULL, 0);
    resp_field_lit(e, r, "Content-Type", "application/json", 16);
    resp_start_body(e, r, SWS_BODY_LENGTH, n);
    resp_data(e, r, body, n, 0);
    resp_done(e, r);
}

static int purge_allowed(sws_engine_t *e, const sws_request_t *req, const sws_cache_route_t *c)
{
    if (req->peer)
        return 1; /* the peers' secret was checked (dispatch.c) */
    char peer[64];
    const char *ca;
    size_t cal;
    client_key(e, req->conn, req, &ca, &cal, peer);
    return c->n_purge_allow ? text_in(c->purge_allow, c->n_purge_allow, ca, cal)
                            : trusted_text(e, ca, cal);
}

int sws_cache_purge_allowed(sws_engine_t *e, const sws_request_t *req, const sws_handler_t *h)
{
    return h->cache->purge && purge_allowed(e, req, h->cache);
}

void purge(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
           const sws_cache_route_t *c, sws_cs_t *z)
{
    /* the client as we see it: the peer, or behind trusted proxies the
     * right-most untrusted X-Forwarded-For entry */
    if (!purge_allowed(e, req, c)) {
        sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_403]);
        return;
    }
    char key[SWS_CACHE_KEY_MAX];
    size_t kl = 0;
    size_t n = 0;
    sweep_arg_t a = {0};
    const sws_header_t *tag = find_header(req, "cache-tag", 9);
    int prefix = req->target_len && req->target[req->target_len - 1] == '*';
    if (!tag && expand(&c->key, req, req->target, req->target_len - (size_t)prefix, key, &kl) < 0) {
        sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_414]);
        return;
    }
    zlock(z);
    if (tag) {
        a.tags = tag->value;
        a.tags_len = tag->value_len;
        n = sws_cs_sweep(z, sweep_tags, &a);
    } else if (prefix) {
        a.prefix = key;
        a.n = kl;
        n = sws_cs_sweep(z, sweep_prefix, &a);
    } else {
        n = drop_key(z, key_hash(key, kl), key, kl);
    }
    __atomic_fetch_add(&z->c.purged, n, __ATOMIC_RELAXED);
    sws_cs_unlock(z);
    char body[96];
    int bl;
    if (c->peers) /* the peers purge too: what they found, their logs say */
        bl = snprintf(body, sizeof body, "{\"purged\": %zu, \"peers\": %u}\n", n,
                      req->peers_purged);
    else
        bl = snprintf(body, sizeof body, "{\"purged\": %zu}\n", n);
    small_answer(e, r, n || req->peers_purged ? 200 : 404, body, (size_t)bl);
}
