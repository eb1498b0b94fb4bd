/* scalws/sni.h — the server name of a TLS ClientHello's server_name
 * extension (RFC 6066 section 3), read from its raw bytes so that a TLS
 * listener can pick the site before OpenSSL decides anything else
 * (versions, key share, session resumption) with the wrong context.
 *
 * Floor: a leaf (csrc/net/sni.c); it calls nothing of the engine's.
 */
#ifndef SCALWS_SNI_H
#define SCALWS_SNI_H

#include <stddef.h>

#define SWS_SNI_MAX 253   /* the longest DNS name */

/* The host_name entry of the extension body p[0..len), lowercased, without
 * a trailing dot, into out (at least SWS_SNI_MAX + 1 bytes, NUL-terminated).
 * Returns its length, or -1 when the extension is malformed, holds no
 * host_name, or the name is not a DNS name (letters, digits, '-', '_',
 * dots between non-empty labels). */
int sws_sni_name(const unsigned char *p, size_t len, char *out);

#endif
