/* TLS termination: server contexts, SNI, the handshake, the TLS transport,
 * session tickets and OCSP stapling from shared memory; contract in
 * scalws/tls.h and scalws/net.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "context.h"
#include "scalws/sni.h"

#define TLS_REC 16384           /* the largest TLS record's payload */
#define TLS_BUF (4 * TLS_REC)   /* file bytes read per pread, written as four records */
#define TLS_MAX_CERTS 4         /* one per key type */

struct sws_tls_site {
    SSL_CTX *ctx;
    /* set again on a connection that SNI moves here */
    char *ciphers, *ciphersuites, *groups;
    int min_version, max_version;
    size_t n_certs;
    struct {
        X509 *leaf;
        sws_ocsp_slot_t *ocsp;
    } cert[TLS_MAX_CERTS];
};

typedef struct {
    char *name;                 /* without the "*." of a wildcard */
    size_t len;
    int wild;
    sws_tls_site_t *site;
} tls_name_t;

struct sws_tls_listen {
    sws_tls_site_t *def;
    tls_name_t *names;
    size_t n;
};

/* Our data on each SSL: the engine (for the shared buffers and the log) and
 * the listener's table (for SNI). */
static int ex_engine = -1, ex_listen = -1, ex_conn = -1;

static void tls_once(void)
{
    if (ex_engine < 0) {
        ex_engine = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
        ex_listen = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
        ex_conn = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    }
}

/* The reason of OpenSSL's most recent error, its queue emptied. */
static const char *tls_reason(char *buf, size_t len)
{
    unsigned long err = ERR_get_error(), next;
    if (!err) {
        snprintf(buf, len, "unknown error");
        return buf;
    }
    while ((next = ERR_get_error()) != 0)
        err = next; /* the last is the most specific */
    ERR_error_string_n(err, buf, len);
    return buf;
}

/* ---- seqlocked shared memory ------------------------------------------------------- */

void sws_tls_ticket_publish(sws_ticket_shm_t *t, const sws_ticket_key_t *k, uint32_t lifetime,
                            int64_t now)
{
    /* Odd while we write (a writer that died mid-write left it odd: we
     * go on from there). */
    uint32_t seq = __atomic_load_n(&t->seq, __ATOMIC_RELAXED) | 1u;
    __atomic_store_n(&t->seq, seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    uint32_t next = t->count ? (t->current + 1) % SWS_TICKET_KEYS : 0;
    memcpy(&t->key[next], k, sizeof *k);
    t->current = next;
    t->count++;
    t->lifetime = lifetime;
    t->rotated = now;
    __atomic_store_n(&t->seq, seq + 1, __ATOMIC_RELEASE);
}

void sws_tls_ocsp_publish(sws_ocsp_slot_t *slot, const unsigned char *der, size_t len,
                          int64_t expires)
{
    if (len > sizeof slot->der)
        len = 0;
    uint32_t seq = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED) | 1u;
    __atomic_store_n(&slot->seq, seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (len)
        memcpy(slot->der, der, len);
    slot->len = (uint32_t)len;
    slot->expires = expires;
    __atomic_store_n(&slot->seq, seq + 1, __ATOMIC_RELEASE);
}

/* Copies what the keeper published; 0 when a write kept racing us. */
static int ticket_snapshot(const sws_ticket_shm_t *t, sws_ticket_shm_t *out)
{
    for (int tries = 0; tries < 100; tries++) {
        uint32_t s1 = __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        memcpy(out, t, sizeof *out);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&t->seq, __ATOMIC_RELAXED) == s1)
            return 1;
    }
    return 0;
}

/* ---- session tickets ------------------------------------------------------------------ */

static EVP_CIPHER *ticket_cipher;

/* RFC 5077's format, as OpenSSL lays it out: 16-byte key name, IV,
 * AES-256-CBC, HMAC-SHA256. New tickets use the current key; a ticket of
 * the key before is accepted and renewed (return 2). */
static int ticket_cb(SSL *s, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                     EVP_MAC_CTX *hctx, int enc)
{
    sws_engine_t *e = SSL_get_ex_data(s, ex_engine);
    sws_ticket_shm_t t;
    if (!e || !e->net.tickets || !ticket_snapshot(e->net.tickets, &t) || !t.count)
        return 0; /* no keys: no ticket made, or a full handshake */
    const sws_ticket_key_t *k = NULL;
    int rc = 1;
    if (enc) {
        k = &t.key[t.current];
        if (RAND_bytes(iv, 16) != 1)
            return -1;
        memcpy(name, k->name, 16);
    } else {
        uint32_t prev = (t.current + SWS_TICKET_KEYS - 1) % SWS_TICKET_KEYS;
        if (memcmp(name, t.key[t.current].name, 16) == 0) {
            k = &t.key[t.current];
        } else if (t.count > 1 && memcmp(name, t.key[prev].name, 16) == 0) {
            k = &t.key[prev];
            rc = 2;
        } else {
            return 0;
        }
    }
    OSSL_PARAM params[3];
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)k->hmac, 32);
    params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0);
    params[2] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_CTX_set_params(hctx, params))
        return -1;
    if (enc ? !EVP_EncryptInit_ex(cctx, ticket_cipher, NULL, k->aes, iv)
            : !EVP_DecryptInit_ex(cctx, ticket_cipher, NULL, k->aes, iv))
        return -1;
    return rc;
}

/* ---- OCSP stapling ---------------------------------------------------------------------- */

static int status_cb(SSL *s, void *arg)
{
    sws_tls_site_t *site = arg;
    X509 *x = SSL_get_certificate(s);
    sws_ocsp_slot_t *slot = NULL;
    for (size_t i = 0; i < site->n_certs; i++)
        if (site->cert[i].leaf == x)
            slot = site->cert[i].ocsp;
    if (!slot)
        return SSL_TLSEXT_ERR_NOACK;
    sws_engine_t *e = SSL_get_ex_data(s, ex_engine);
    for (int tries = 0; tries < 100; tries++) {
        uint32_t s1 = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        uint32_t len = slot->len;
        int64_t expires = slot->expires;
        if (!len || len > sizeof slot->der || (e && expires <= (int64_t)e->core.wall))
            return SSL_TLSEXT_ERR_NOACK; /* nothing fresh: no staple rather than a stale one */
        unsigned char *copy = OPENSSL_malloc(len);
        if (!copy)
            return SSL_TLSEXT_ERR_NOACK;
        memcpy(copy, slot->der, len);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&slot->seq, __ATOMIC_RELAXED) != s1) {
            OPENSSL_free(copy);
            continue;
        }
        SSL_set_tlsext_status_ocsp_resp(s, copy, (long)len); /* OpenSSL frees it */
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

/* ---- SNI --------------------------------------------------------------------------------- */

/* The site for a server name (lowercase, no trailing dot): exact first,
 * then the longest "*.suffix"; NULL: the listener's default. */
static sws_tls_site_t *listen_find(const sws_tls_listen_t *l, const char *low, size_t len)
{
    sws_tls_site_t *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < l->n; i++) {
        const tls_name_t *n = &l->names[i];
        if (!n->wild) {
            if (n->len == len && memcmp(n->name, low, len) == 0)
                return n->site; /* exact wins */
        } else if (len > n->len + 1 && low[len - n->len - 1] == '.' &&
                   memcmp(low + len - n->len, n->name, n->len) == 0 && n->len > best_len) {
            best = n->site; /* "*.example.com": the longest suffix */
            best_len = n->len;
        }
    }
    return best;
}

/* The site is chosen from the raw ClientHello, before OpenSSL looks at
 * anything else: its protocols, curves and ciphers then apply (not the
 * default site's, as with a servername callback, which comes after version
 * and key share), and a session resumes only on the site that made it (the
 * session id context is the site's before the ticket is opened). */
static int client_hello_cb(SSL *s, int *alert, void *arg)
{
    const sws_tls_listen_t *l = SSL_get_ex_data(s, ex_listen);
    const unsigned char *p;
    size_t len;
    char name[SWS_SNI_MAX + 1];
    if (!l || !SSL_client_hello_get0_ext(s, TLSEXT_TYPE_server_name, &p, &len))
        return SSL_CLIENT_HELLO_SUCCESS; /* no SNI: the default site */
    int n = sws_sni_name(p, len, name);
    sws_tls_site_t *site = n > 0 ? listen_find(l, name, (size_t)n) : NULL;
    if (site && site->ctx != SSL_get_SSL_CTX(s)) {
        SSL_set_SSL_CTX(s, site->ctx); /* certificates, session id context, stapling */
        SSL_set_options(s, SSL_CTX_get_options(site->ctx));
        if (!SSL_set_min_proto_version(s, site->min_version) ||
            !SSL_set_max_proto_version(s, site->max_version) ||
            (site->ciphers && !SSL_set_cipher_list(s, site->ciphers)) ||
            (site->ciphersuites && !SSL_set_ciphersuites(s, site->ciphersuites)) ||
            (site->groups && !SSL_set1_groups_list(s, site->groups))) {
            *alert = SSL_AD_INTERNAL_ERROR;
            return SSL_CLIENT_HELLO_ERROR;
        }
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* Acknowledges the name (an empty server_name extension in the answer):
 * the site was chosen already. */
static int servername_cb(SSL *s, int *alert, void *arg)
{
    return SSL_get_servername(s, TLSEXT_NAMETYPE_host_name) ? SSL_TLSEXT_ERR_OK
                                                            : SSL_TLSEXT_ERR_NOACK;
}

/* The server chooses (RFC 7301 §3.2): h2 when the listener allows HTTP/2
 * (its alternative protocol) and the client offers it, else http/1.1. */
static int alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    static const unsigned char ours[] = "\x02h2\x08http/1.1";
    const sws_conn_t *c = SSL_get_ex_data(s, ex_conn);
    int h2 = c && c->lst && c->lst->alt;
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, h2 ? ours : ours + 3,
                              h2 ? sizeof ours - 1 : sizeof ours - 4, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* no ALPN in the answer: HTTP/1.1 all the same */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* ---- contexts ------------------------------------------------------------------------------ */

sws_tls_site_t *sws_tls_site_new(const sws_tls_site_conf_t *conf, char *err, size_t errlen)
{
    char why[256];
    tls_once();
    if (!ticket_cipher)
        ticket_cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    if (conf->n_certs == 0 || conf->n_certs > TLS_MAX_CERTS) {
        snprintf(err, errlen, "a site needs 1 to %d certificates", TLS_MAX_CERTS);
        return NULL;
    }
    sws_tls_site_t *site = calloc(1, sizeof *site);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!site || !ctx) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    site->ctx = ctx;
    site->min_version = conf->min_version;
    site->max_version = conf->max_version;
    if ((conf->ciphers && !(site->ciphers = strdup(conf->ciphers))) ||
        (conf->ciphersuites && !(site->ciphersuites = strdup(conf->ciphersuites))) ||
        (conf->groups && !(site->groups = strdup(conf->groups)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    ERR_clear_error();
    /* No renegotiation, no compression, no 0-RTT; our own ticket keys
     * (or none); no server-side session cache: tickets resume, on any
     * worker. */
    /* Our cipher order (strongest first, all AEAD) rather than the
     * client's, except that a client that puts ChaCha20 first (no AES in
     * hardware) gets it. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA |
                                 (conf->tickets ? 0 : SSL_OP_NO_TICKET));
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_ENABLE_PARTIAL_WRITE);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* One read takes what the socket holds, not a record header and then
     * its body in two. */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_max_early_data(ctx, 0);
    if (!conf->tickets)
        SSL_CTX_set_num_tickets(ctx, 0);
    else if (conf->ticket_lifetime)
        SSL_CTX_set_timeout(ctx, conf->ticket_lifetime); /* the hint, and the limit on resuming */
    if (!SSL_CTX_set_min_proto_version(ctx, conf->min_version) ||
        !SSL_CTX_set_max_proto_version(ctx, conf->max_version)) {
        snprintf(err, errlen, "protocols: %s", tls_reason(why, sizeof why));
        goto fail;
    }
    if (conf->ciphers && *conf->ciphers && !SSL_CTX_set_cipher_list(ctx, conf->ciphers)) {
        snprintf(err, errlen, "ciphers: %s", tls_reason(why, sizeof why));
        goto fail;
    }
    if (conf->ciphersuites && *conf->ciphersuites &&
        !SSL_CTX_set_ciphersuites(ctx, conf->ciphersuites)) {
        snprintf(err, errlen, "ciphersuites: %s", tls_reason(why, sizeof why));
        goto fail;
    }
    if (conf->groups && *conf->groups && !SSL_CTX_set1_groups_list(ctx, conf->groups)) {
        snprintf(err, errlen, "curves: %s", tls_reason(why, sizeof why));
        goto fail;
    }
    if (conf->sid_ctx_len &&
        !SSL_CTX_set_session_id_context(ctx, conf->sid_ctx,
                                        (unsigned)(conf->sid_ctx_len > SSL_MAX_SID_CTX_LENGTH
                                                       ? SSL_MAX_SID_CTX_LENGTH
                                                       : conf->sid_ctx_len))) {
        snprintf(err, errlen, "session id context: %s", tls_reason(why, sizeof why));
        goto fail;
    }
    for (size_t i = 0; i < conf->n_certs; i++) {
        const sws_tls_cert_conf_t *c = &conf->certs[i];
        /* Each key type has its own slot; the chain goes with the leaf. */
        if (SSL_CTX_use_certificate_chain_file(ctx, c->cert) != 1) {
            snprintf(err, errlen, "certificate %s: %s", c->cert, tls_reason(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen, "key %s: %s", c->key, tls_reason(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            snprintf(err, errlen, "key %s does not match %s: %s", c->key, c->cert,
                     tls_reason(why, sizeof why));
            goto fail;
        }
        site->cert[i].leaf = SSL_CTX_get0_certificate(ctx);
        site->cert[i].ocsp = conf->ocsp ? &conf->ocsp[i] : NULL;
        site->n_certs++;
    }
    if (conf->tickets)
        SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
    SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, NULL);
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, NULL);
    if (conf->ocsp) {
        SSL_CTX_set_tlsext_status_cb(ctx, status_cb);
        SSL_CTX_set_tlsext_status_arg(ctx, site);
    }
    return site;
fail:
    ERR_clear_error();
    if (site) {
        site->ctx = ctx;
        sws_tls_site_free(site);
    } else {
        SSL_CTX_free(ctx);
    }
    return NULL;
}

void sws_tls_site_free(sws_tls_site_t *s)
{
    if (!s)
        return;
    SSL_CTX_free(s->ctx);
    free(s->ciphers);
    free(s->ciphersuites);
    free(s->groups);
    free(s);
}

sws_tls_listen_t *sws_tls_listen_new(sws_tls_site_t *def)
{
    sws_tls_listen_t *l = calloc(1, sizeof *l);
    if (l)
        l->def = def;
    return l;
}

int sws_tls_listen_add_name(sws_tls_listen_t *l, const char *name, size_t len, sws_tls_site_t *s)
{
    tls_name_t *nn = realloc(l->names, (l->n + 1) * sizeof *nn);
    if (!nn)
        return -1;
    l->names = nn;
    int wild = len > 2 && name[0] == '*' && name[1] == '.';
    tls_name_t *n = &l->names[l->n];
    n->name = strndup(wild ? name + 2 : name, wild ? len - 2 : len);
    if (!n->name)
        return -1;
    n->len = strlen(n->name);
    n->wild = wild;
    n->site = s;
    l->n++;
    return 0;
}

void sws_tls_listen_set_default(sws_tls_listen_t *l, sws_tls_site_t *s) { l->def = s; }

void sws_tls_listen_free(sws_tls_listen_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i].name);
    free(l->names);
    free(l);
}

/* ---- input OpenSSL holds --------------------------------------------------------------
 *
 * A read that fills the caller's buffer can leave decrypted bytes (the rest
 * of a record, or records read ahead) inside OpenSSL, which epoll knows
 * nothing of: such a connection goes on the core's ready list, which gives
 * it an EPOLLIN event once it wants input again. */

void sws_tls_wants_input(sws_engine_t *e, sws_conn_t *c) { sws_ready_wants(e, &c->ev); }

int sws_net_tls_init(sws_engine_t *e)
{
    if (e->net.tls_buf)
        return 0;
    tls_once();
    e->net.tls_buf = malloc(TLS_BUF);
    return e->net.tls_buf ? 0 : -ENOMEM;
}

void sws_net_tls_free(sws_engine_t *e) { free(e->net.tls_buf); }

/* ---- the transport -------------------------------------------------------------------------- */

/* An SSL call failed: EAGAIN when it waits on the socket, else a dead
 * session (no close_notify will be sent: SSL_set_quiet_shutdown). */
static ssize_t tls_fail(SSL *s, int r)
{
    int err = SSL_get_error(s, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    SSL_set_quiet_shutdown(s, 1);
    ERR_clear_error();
    errno = err == SSL_ERROR_SYSCALL && errno ? errno : ECONNRESET;
    return -1;
}

static ssize_t tls_recv(sws_conn_t *c, char *buf, size_t len)
{
    SSL *s = c->tls;
    size_t total = 0;
    while (total < len) {
        size_t got;
        int r = SSL_read_ex(s, buf + total, len - total, &got);
        if (r) {
            total += got;
            if (!SSL_has_pending(s))
                break; /* the socket may hold more: epoll says so, no read to learn EAGAIN */
            continue;
        }
        if (SSL_get_error(s, r) == SSL_ERROR_ZERO_RETURN) {
            SSL_set_shutdown(s, SSL_get_shutdown(s) | SSL_RECEIVED_SHUTDOWN);
            if (total)
                return (ssize_t)total;
            return 0; /* close_notify: the end of the stream */
        }
        if (total) {
            ERR_clear_error();
            return (ssize_t)total; /* the error shows again on the next read */
        }
        return tls_fail(s, r);
    }
    if (SSL_has_pending(s))
        sws_ready_add(SSL_get_ex_data(s, ex_engine), &c->ev, &c->evmask);
    return (ssize_t)total;
}

/* Writes buf[0..len) (at most one record): the bytes written, or -1. */
static ssize_t tls_write1(SSL *s, const void *buf, size_t len)
{
    size_t w;
    int r = SSL_write_ex(s, buf, len, &w);
    return r ? (ssize_t)w : tls_fail(s, r);
}

/* One record per SSL_write: a piece of an iovec that fills a record goes as
 * it is; smaller ones are gathered into the engine's buffer first. When the
 * socket is full, what was written so far is returned; the caller comes
 * back with the same bytes from there on, which is what OpenSSL needs to
 * finish the record it holds (moving buffers allowed, same or more bytes). */
static ssize_t tls_sendv(sws_conn_t *c, const struct iovec *iov, int n)
{
    SSL *s = c->tls;
    sws_engine_t *e = SSL_get_ex_data(s, ex_engine);
    size_t total = 0, skip = 0;
    int i = 0;
    while (i < n) {
        const char *p = (const char *)iov[i].iov_base + skip;
        size_t avail = iov[i].iov_len - skip, len;
        if (avail >= TLS_REC) {
            len = TLS_REC;
        } else {
            unsigned char *b = e->net.tls_buf;
            len = 0;
            for (int j = i; j < n && len < TLS_REC; j++) {
                const char *q = (const char *)iov[j].iov_base + (j == i ? skip : 0);
                size_t m = iov[j].iov_len - (j == i ? skip : 0);
                if (m > TLS_REC - len)
                    m = TLS_REC - len;
                memcpy(b + len, q, m);
                len += m;
            }
            p = (const char *)b;
        }
        if (len == 0) {
            i++;
            skip = 0;
            continue;
        }
        ssize_t w = tls_write1(s, p, len);
        if (w < 0) {
            if (errno == EAGAIN && total)
                break;
            return w;
        }
        total += (size_t)w;
        size_t adv = (size_t)w;
        while (i < n && adv >= iov[i].iov_len - skip) {
            adv -= iov[i].iov_len - skip;
            i++;
            skip = 0;
        }
        skip += adv;
    }
    return (ssize_t)total;
}

/* File bodies: read into the engine's buffer, written as full records. */
static ssize_t tls_sendfile(sws_conn_t *c, int fd, off_t *off, size_t len)
{
    SSL *s = c->tls;
    sws_engine_t *e = SSL_get_ex_data(s, ex_engine);
    size_t total = 0;
    while (total < len) {
        size_t want = len - total < TLS_BUF ? len - total : TLS_BUF;
        ssize_t got;
        do
            got = pread(fd, e->net.tls_buf, want, *off);
        while (got < 0 && errno == EINTR);
        if (got <= 0)
            return total ? (ssize_t)total : got; /* 0: the file shrank; the caller closes */
        size_t done = 0;
        while (done < (size_t)got) {
            size_t rec = (size_t)got - done < TLS_REC ? (size_t)got - done : TLS_REC;
            ssize_t w = tls_write1(s, e->net.tls_buf + done, rec);
            if (w < 0) {
                if (errno == EAGAIN && total + done)
                    break;
                return w;
            }
            done += (size_t)w;
            *off += w;
        }
        total += done;
        if (done < (size_t)got)
            break; /* the socket is full */
    }
    return (ssize_t)total;
}

static void tls_shutdown(sws_conn_t *c)
{
    SSL *s = c->tls;
    if (SSL_is_init_finished(s) && !SSL_get_quiet_shutdown(s)) {
        SSL_shutdown(s); /* close_notify; a full socket loses it, as a reset would */
        ERR_clear_error();
    }
    shutdown(c->fd, SHUT_WR);
}

const sws_transport_t sws_tls_transport = {tls_recv, tls_sendv, tls_sendfile, tls_shutdown};

void sws_tls_conn_free(sws_engine_t *e, sws_conn_t *c)
{
    SSL *s = c->tls;
    sws_ready_remove(e, &c->ev);
    if (!c->lingering && SSL_is_init_finished(s) && !SSL_get_quiet_shutdown(s) &&
        !(SSL_get_shutdown(s) & SSL_SENT_SHUTDOWN))
        SSL_shutdown(s); /* best effort: the peer learns the stream ended whole */
    ERR_clear_error();
    SSL_free(s);
    c->tls = NULL;
}

const char *sws_tls_protocol(const sws_conn_t *c) { return c->tls ? SSL_get_version(c->tls) : NULL; }

const char *sws_tls_cipher(const sws_conn_t *c)
{
    return c->tls ? SSL_get_cipher_name((SSL *)c->tls) : NULL;
}

/* ---- the handshake ------------------------------------------------------------------------------ */

static const char plain_on_tls[] =
    "HTTP/1.1 400 Bad Request\r\n"
    "Content-Type: text/html\r\n"
    "Content-Length: 148\r\n"
    "Connection: close\r\n"
    "\r\n"
    "<html>\r\n<head><title>400 Bad Request</title></head>\r\n<body>\r\n"
    "<h1>400 Bad Request</h1>\r\n<p>The plain HTTP request was sent to HTTPS port</p>\r\n"
    "</body></html>";

static void tls_handshake(sws_engine_t *e, void *obj, uint32_t events)
{
    sws_conn_t *c = obj;
    SSL *s = c->tls;
    ERR_clear_error();
    int r = SSL_do_handshake(s);
    if (r == 1) {
        c->ev.handler = c->proto->event;
        conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
        const unsigned char *alpn;
        unsigned alpn_len;
        SSL_get0_alpn_selected(s, &alpn, &alpn_len);
        if (alpn_len == 2 && memcmp(alpn, "h2", 2) == 0 && c->lst && c->lst->alt) {
            conn_switch(e, c); /* may close c (fd -1, tls NULL) */
            if (c->fd < 0)
                return;
        }
        if (SSL_has_pending(s))
            c->proto->event(e, c, EPOLLIN); /* the request came with the Finished */
        return;
    }
    int err = SSL_get_error(s, r);
    if (err == SSL_ERROR_WANT_READ) {
        conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
        return;
    }
    if (err == SSL_ERROR_WANT_WRITE) {
        conn_set_mask(e, c, EPOLLOUT);
        return;
    }
    unsigned long code = ERR_peek_last_error();
    if (ERR_GET_LIB(code) == ERR_LIB_SSL && (ERR_GET_REASON(code) == SSL_R_HTTP_REQUEST ||
                                             ERR_GET_REASON(code) == SSL_R_HTTPS_PROXY_REQUEST)) {
        /* Plain HTTP on the TLS port: say so in plain HTTP, then close. */
        ERR_clear_error();
        char peer[48];
        *put_peer(peer, c) = 0;
        elog_folded(e, "plain HTTP on TLS", 0, SWS_L_INFO,
                    "client sent a plain HTTP request to a TLS port, client: %s", peer);
        SSL_set_quiet_shutdown(s, 1);
        (void)!send(c->fd, plain_on_tls, sizeof plain_on_tls - 1, MSG_NOSIGNAL);
        e->core.cnt.errors_4xx_close++;
        SSL_free(s);
        c->tls = NULL;
        e->core.st->conns_tls_active--; /* no longer a TLS connection */
        c->tr = &sws_plain_transport;
        c->ev.handler = c->proto->event;
        conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
        conn_linger(e, c);
        return;
    }
    /* Scanners and clients that give up are ordinary: info, not error. */
    char why[256], peer[48];
    *put_peer(peer, c) = 0;
    if (err == SSL_ERROR_SYSCALL && !code)
        snprintf(why, sizeof why, "%s", errno ? strerror(errno) : "the peer closed the connection");
    else
        tls_reason(why, sizeof why);
    elog_folded(e, "TLS handshake failed", sws_elog_hash(why, strlen(why)), SWS_L_INFO,
                "TLS handshake failed (%s), client: %s", why, peer);
    SSL_set_quiet_shutdown(s, 1);
    conn_close(e, c);
}

int sws_tls_accept(sws_engine_t *e, sws_conn_t *c, const sws_tls_listen_t *l)
{
    SSL *s = SSL_new(l->def->ctx);
    if (!s)
        return -1;
    if (!SSL_set_fd(s, c->fd)) {
        SSL_free(s);
        return -1;
    }
    SSL_set_ex_data(s, ex_engine, e);
    SSL_set_ex_data(s, ex_listen, (void *)l);
    SSL_set_ex_data(s, ex_conn, c);
    SSL_set_accept_state(s);
    c->tls = s;
    c->tr = &sws_tls_transport;
    c->ev.handler = tls_handshake;
    return 0;
}
