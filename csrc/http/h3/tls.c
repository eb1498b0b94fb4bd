/* QUIC's TLS 1.3 (csrc/http/h3/h3_int.h): GnuTLS credentials per site,
 * picked by the client's server name once its ClientHello is read, the
 * priority string, and a connection's session set up for ngtcp2's crypto
 * helper. OpenSSL 3.0 has no QUIC API, so this side of the server speaks
 * TLS through GnuTLS (docs/adr/0032-http3-quic.md). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "http/h3/h3_int.h"

/* TLS 1.3 alone (RFC 9001 §4.2), its AEADs, the groups our TCP listeners
 * offer; no middlebox compatibility mode (RFC 9001 §8.4). */
#define PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:" \
                 "+CHACHA20-POLY1305:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"        \
                 "+GROUP-SECP384R1:%DISABLE_TLS13_COMPAT_MODE"

/* GnuTLS is initialised here, for the listener's lifetime, and not by its
 * library constructor: the engine is loaded with GNUTLS_NO_IMPLICIT_INIT
 * (scalws/server/__init__.py), so that a server without a quic listener
 * never runs GnuTLS's and p11-kit's start-up (docs/adr/0036). Every use of
 * GnuTLS here descends from a sws_quic_certs_t. gnutls_global_init counts
 * its callers; sws_quic_certs_free gives this one back. */
sws_quic_certs_t *sws_quic_certs_new(char *err, size_t errlen)
{
    int rv = gnutls_global_init();
    if (rv != 0) {
        snprintf(err, errlen, "GnuTLS: %s", gnutls_strerror(rv));
        return NULL;
    }
    sws_quic_certs_t *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "out of memory");
        gnutls_global_deinit();
        return NULL;
    }
    rv = gnutls_priority_init(&q->prio, PRIORITY, NULL);
    if (rv != 0) {
        snprintf(err, errlen, "GnuTLS: %s", gnutls_strerror(rv));
        sws_quic_certs_free(q);
        return NULL;
    }
    return q;
}

int sws_quic_certs_add(sws_quic_certs_t *q, const sws_tls_cert_conf_t *certs, size_t n,
                       const char *const *names, size_t n_names, char *err, size_t errlen)
{
    gnutls_certificate_credentials_t *nc = realloc(q->cred, (q->n_cred + 1) * sizeof *nc);
    struct quic_name *nn = nc ? realloc(q->names, (q->n_names + n_names) * sizeof *nn) : NULL;
    if (nc)
        q->cred = nc;
    if (nn)
        q->names = nn;
    int rv = nn ? gnutls_certificate_allocate_credentials(&q->cred[q->n_cred]) : -1;
    if (rv != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t site = q->n_cred++;
    for (size_t i = 0; i < n; i++) {
        rv = gnutls_certificate_set_x509_key_file(q->cred[site], certs[i].cert, certs[i].key,
                                                  GNUTLS_X509_FMT_PEM);
        if (rv < 0) {
            snprintf(err, errlen, "%s with %s: %s (GnuTLS)", certs[i].cert, certs[i].key,
                     gnutls_strerror(rv));
            return -1;
        }
    }
    for (size_t i = 0; i < n_names; i++) {
        char *c = strdup(names[i]);
        if (!c) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        q->names[q->n_names++] = (struct quic_name){c, strlen(c), site};
    }
    return 0;
}

void sws_quic_certs_free(sws_quic_certs_t *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n_cred; i++)
        gnutls_certificate_free_credentials(q->cred[i]);
    free(q->cred);
    for (size_t i = 0; i < q->n_names; i++)
        free(q->names[i].name);
    free(q->names);
    if (q->prio)
        gnutls_priority_deinit(q->prio);
    free(q);
    gnutls_global_deinit();
}

/* The site whose names match `name` (lowercase): an exact name first, then
 * the longest "*.suffix" that matches one more label; 0 when none does. */
static size_t site_of(const sws_quic_certs_t *q, const char *name, size_t len)
{
    size_t best = 0, best_len = 0;
    for (size_t i = 0; i < q->n_names; i++) {
        const struct quic_name *k = &q->names[i];
        if (k->len == len && memcmp(k->name, name, len) == 0)
            return k->site;
        if (k->len > 2 && k->name[0] == '*' && len > k->len - 1 && k->len > best_len) {
            const char *dot = memchr(name, '.', len);
            if (dot && (size_t)(name + len - dot) == k->len - 1 &&
                memcmp(dot, k->name + 1, k->len - 1) == 0 && dot > name) {
                best = k->site;
                best_len = k->len;
            }
        }
    }
    return best;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    h3conn_t *hc = ref->user_data;
    return hc->qc;
}

/* After the ClientHello: the certificate of the site the client names. */
static int pick_site(gnutls_session_t tls)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(tls);
    h3conn_t *hc = ref->user_data;
    const sws_quic_certs_t *q = hc->ql->certs;
    char name[256];
    size_t len = sizeof name - 1;
    unsigned type;
    size_t site = 0;
    if (gnutls_server_name_get(tls, name, &len, &type, 0) == 0 && type == GNUTLS_NAME_DNS &&
        len < sizeof name) {
        while (len && name[len - 1] == '.')
            len--;
        for (size_t i = 0; i < len; i++)
            if (name[i] >= 'A' && name[i] <= 'Z')
                name[i] = (char)(name[i] + 32);
        site = site_of(q, name, len);
    }
    return gnutls_credentials_set(tls, GNUTLS_CRD_CERTIFICATE, q->cred[site]);
}

int h3_tls_session(h3conn_t *hc)
{
    const sws_quic_certs_t *q = hc->ql->certs;
    int early = h3_early_on(hc->e, hc->ql);
    if (!q->n_cred || gnutls_init(&hc->tls, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA |
                                                (early ? GNUTLS_ENABLE_EARLY_DATA : 0)) != 0)
        return -1;
    static const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    hc->ref.get_conn = get_conn;
    hc->ref.user_data = hc;
    if (gnutls_priority_set(hc->tls, q->prio) != 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(hc->tls) != 0 ||
        gnutls_credentials_set(hc->tls, GNUTLS_CRD_CERTIFICATE, q->cred[0]) != 0 ||
        gnutls_alpn_set_protocols(hc->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0)
        return -1;
    /* tickets with the master's key: a client resumes on any worker, and
     * after a reload (GnuTLS rotates the keys it derives from it) */
    if (gnutls_session_ticket_enable_server(hc->tls, &hc->ql->ticket) != 0)
        return -1;
    if (early)
        h3_early_session(hc->e, hc->tls);
    gnutls_session_set_ptr(hc->tls, &hc->ref);
    gnutls_handshake_set_post_client_hello_function(hc->tls, pick_site);
    ngtcp2_conn_set_tls_native_handle(hc->qc, hc->tls);
    return 0;
}
