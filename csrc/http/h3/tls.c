/* QUIC's TLS 1.3 (csrc/http/h3/h3_int.h): GnuTLS credentials holding the
 * sites' certificates, the priority string, and a connection's session
 * set up for ngtcp2's crypto helper. OpenSSL 3.0 has no QUIC API, so this
 * side of the server speaks TLS through GnuTLS (docs/adr/0032-http3-quic.md). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "http/h3/h3_int.h"

/* TLS 1.3 alone (RFC 9001 §4.2), its AEADs, the groups our TCP listeners
 * offer; no middlebox compatibility mode (RFC 9001 §8.4). */
#define PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:" \
                 "+CHACHA20-POLY1305:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"        \
                 "+GROUP-SECP384R1:%DISABLE_TLS13_COMPAT_MODE"

sws_quic_certs_t *sws_quic_certs_new(char *err, size_t errlen)
{
    sws_quic_certs_t *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int rv = gnutls_certificate_allocate_credentials(&q->cred);
    if (rv == 0)
        rv = gnutls_priority_init(&q->prio, PRIORITY, NULL);
    if (rv != 0) {
        snprintf(err, errlen, "GnuTLS: %s", gnutls_strerror(rv));
        sws_quic_certs_free(q);
        return NULL;
    }
    return q;
}

int sws_quic_certs_add(sws_quic_certs_t *q, const sws_tls_cert_conf_t *certs, size_t n, char *err,
                       size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        int rv = gnutls_certificate_set_x509_key_file(q->cred, certs[i].cert, certs[i].key,
                                                      GNUTLS_X509_FMT_PEM);
        if (rv < 0) {
            snprintf(err, errlen, "%s with %s: %s (GnuTLS)", certs[i].cert, certs[i].key,
                     gnutls_strerror(rv));
            return -1;
        }
        q->n++;
    }
    return 0;
}

void sws_quic_certs_free(sws_quic_certs_t *q)
{
    if (!q)
        return;
    if (q->cred)
        gnutls_certificate_free_credentials(q->cred);
    if (q->prio)
        gnutls_priority_deinit(q->prio);
    free(q);
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    h3conn_t *hc = ref->user_data;
    return hc->qc;
}

int h3_tls_session(h3conn_t *hc)
{
    const sws_quic_certs_t *q = hc->ql->certs;
    if (gnutls_init(&hc->tls, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA) != 0)
        return -1;
    static const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    hc->ref.get_conn = get_conn;
    hc->ref.user_data = hc;
    if (gnutls_priority_set(hc->tls, q->prio) != 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(hc->tls) != 0 ||
        gnutls_credentials_set(hc->tls, GNUTLS_CRD_CERTIFICATE, q->cred) != 0 ||
        gnutls_alpn_set_protocols(hc->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0)
        return -1;
    gnutls_session_set_ptr(hc->tls, &hc->ref);
    ngtcp2_conn_set_tls_native_handle(hc->qc, hc->tls);
    return 0;
}
