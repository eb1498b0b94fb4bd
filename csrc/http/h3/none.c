/* The engine built without HTTP/3 (setup.py found no libngtcp2 or GnuTLS
 * headers): the protocol floor's HTTP/3 entry points, each a
 * no-op, and certificates that cannot be made, so a `quic` listener is
 * refused at startup with the packages to install. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "context.h"

sws_quic_certs_t *sws_quic_certs_new(char *err, size_t errlen)
{
    snprintf(err, errlen, "this build has no HTTP/3: install libngtcp2-dev, "
                          "libngtcp2-crypto-gnutls-dev and libgnutls28-dev, then build again");
    return NULL;
}

int sws_quic_certs_add(sws_quic_certs_t *q, const sws_tls_cert_conf_t *certs, size_t n,
                       const char *const *names, size_t n_names, char *err, size_t errlen)
{
    (void)q, (void)certs, (void)n, (void)names, (void)n_names;
    snprintf(err, errlen, "this build has no HTTP/3");
    return -1;
}

void sws_quic_certs_free(sws_quic_certs_t *q) { (void)q; }

int sws_h3_init(sws_engine_t *e)
{
    e->h3.tfd = -1;
    return 0;
}

void sws_h3_free(sws_engine_t *e) { (void)e; }

int sws_h3_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vh,
                        const sws_quic_certs_t *certs, int steer_index, int steer_key,
                        const uint8_t *secret, size_t secret_len)
{
    (void)e, (void)vh, (void)certs, (void)steer_index, (void)steer_key, (void)secret;
    (void)secret_len;
    close(fd);
    return -EPROTONOSUPPORT;
}

void sws_h3_after_pass(sws_engine_t *e) { (void)e; }
void sws_h3_shutdown(sws_engine_t *e) { (void)e; }
void sws_h3_close_all(sws_engine_t *e) { (void)e; }
