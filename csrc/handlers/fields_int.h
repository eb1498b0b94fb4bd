/* Request-field helpers the handlers share (csrc/handlers/fields.c): the
 * proxy, FastCGI and the cache call them; they call nothing of a handler.
 * Not an API. */
#ifndef SCALWS_FIELDS_INT_H
#define SCALWS_FIELDS_INT_H

#include "context.h"

/* Is h's name `lower` (n bytes, lowercase)? */
SWS_INTERNAL int name_is(const sws_header_t *h, const char *lower, size_t n);
/* Is h one of the n names of drop (a route's headers to remove or set)? */
SWS_INTERNAL int dropped(const sws_header_t *h, const sws_hname_t *drop, size_t n);
/* The client's key for hash balancing and PURGE's allow list: the peer
 * (formatted into peer, 64 bytes), or with trusted proxies the right-most
 * untrusted X-Forwarded-For entry (pointing into r). */
SWS_INTERNAL void client_key(const sws_engine_t *e, const sws_conn_t *c, const sws_request_t *r,
                             const char **k, size_t *kl, char *peer);

#endif
