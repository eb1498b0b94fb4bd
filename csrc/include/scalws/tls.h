/* scalws/tls.h — TLS termination on the transport seam (csrc/net/tls.c).
 *
 * Owns: the server contexts of the sites (SSL_CTX: certificates, one per key
 * type, protocols, ciphers, curves), the listener's table of them by server
 * name (SNI, with *.suffix wildcards, and a default for clients without
 * SNI), the non-blocking handshake of a client connection and then its
 * transport (sws_tls_transport: records in and out, close_notify), the
 * session tickets made with keys the master shares through memory, and the
 * OCSP responses the master publishes there, stapled when a client asks.
 *
 * May call: the core (error log, timeout lists) and net (the connection,
 * its epoll mask). libssl does the protocol; we do the I/O decisions:
 *   - reads go through the socket; what a full read buffer leaves decrypted
 *     inside OpenSSL is announced through an eventfd, since epoll cannot see
 *     it (the core's ready list, scalws/core.h);
 *   - writes are whole records (up to 16 KiB) gathered from the iovecs or
 *     read from a file into one reused buffer (no kTLS in our kernels: ADR
 *     0006 says what it would change); a record the socket did not take
 *     stays inside OpenSSL and the caller retries with the same bytes, as
 *     OpenSSL requires (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
 *   - idle connections give their buffers back (SSL_MODE_RELEASE_BUFFERS).
 *
 * Shared memory, written by the master's TLS keeper (scalws/control/
 * tlskeeper.py) through sws_tls_ticket_publish and sws_tls_ocsp_publish and
 * read by every worker: a sequence counter, odd while a write is under way,
 * lets a reader take a consistent copy without a lock.
 */
#ifndef SCALWS_TLS_H
#define SCALWS_TLS_H

#include <stddef.h>
#include <stdint.h>

#define SWS_TICKET_KEYS 3          /* slots; the current key and the one before are accepted */
#define SWS_OCSP_SLOT 16384        /* bytes per certificate's OCSP slot, header included */

typedef struct {
    unsigned char name[16];
    unsigned char aes[32];         /* AES-256-CBC */
    unsigned char hmac[32];        /* HMAC-SHA256 */
} sws_ticket_key_t;

typedef struct {
    uint32_t seq;                  /* odd while the keeper writes */
    uint32_t current;              /* slot that encrypts new tickets */
    uint32_t count;                /* keys published so far (0: tickets off) */
    uint32_t lifetime;             /* seconds between rotations (each site's context has it
                                      as its session timeout, from the configuration) */
    int64_t rotated;               /* wall seconds of the last publish (the keeper's schedule) */
    sws_ticket_key_t key[SWS_TICKET_KEYS];
} sws_ticket_shm_t;

typedef struct {
    uint32_t seq;
    uint32_t len;                  /* 0: nothing to staple */
    int64_t expires;               /* wall seconds: not stapled from then on */
    unsigned char der[SWS_OCSP_SLOT - 16];
} sws_ocsp_slot_t;

typedef struct sws_tls_site sws_tls_site_t;
typedef struct sws_tls_listen sws_tls_listen_t;

typedef struct {
    const char *cert;              /* PEM: the leaf, then its chain */
    const char *key;
} sws_tls_cert_conf_t;

typedef struct {
    const sws_tls_cert_conf_t *certs;
    size_t n_certs;
    int min_version, max_version;  /* TLS1_2_VERSION, TLS1_3_VERSION */
    const char *ciphers;           /* TLS 1.2 */
    const char *ciphersuites;      /* TLS 1.3 */
    const char *groups;            /* "X25519:prime256v1:secp384r1" */
    const unsigned char *sid_ctx;  /* sessions resume only on the site that made them */
    size_t sid_ctx_len;
    sws_ocsp_slot_t *ocsp;         /* n_certs slots, or NULL: no stapling */
    int tickets;                   /* session tickets on */
    uint32_t ticket_lifetime;      /* seconds a session may be resumed (the key rotation) */
} sws_tls_site_conf_t;

/* A site's server context; NULL with a message in err (OpenSSL's reason,
 * the file) when a certificate or a list does not load. */
sws_tls_site_t *sws_tls_site_new(const sws_tls_site_conf_t *conf, char *err, size_t errlen);
void sws_tls_site_free(sws_tls_site_t *s);

/* A TLS listener's sites by server name; `def` answers clients without SNI
 * and names that match nothing. */
sws_tls_listen_t *sws_tls_listen_new(sws_tls_site_t *def);
/* name: lowercase, exact or "*.suffix". 0 or -1 (out of memory). */
int sws_tls_listen_add_name(sws_tls_listen_t *l, const char *name, size_t len, sws_tls_site_t *s);
void sws_tls_listen_set_default(sws_tls_listen_t *l, sws_tls_site_t *s);
void sws_tls_listen_free(sws_tls_listen_t *l);

/* The master's keeper: publishes `k` as the current key (the previous one
 * stays accepted). */
void sws_tls_ticket_publish(sws_ticket_shm_t *t, const sws_ticket_key_t *k, uint32_t lifetime,
                            int64_t now);
/* Publishes an OCSP response (len 0: stop stapling). */
void sws_tls_ocsp_publish(sws_ocsp_slot_t *slot, const unsigned char *der, size_t len,
                          int64_t expires);

#endif
