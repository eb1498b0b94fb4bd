/* Router: a site by Host, then a route by path; the result is the handler
 * chosen at config load.
 *
 * Ownership: a router owns its sites and address tables and frees them in
 * sws_router_free(). Handlers are opaque to the router (`void *`), owned by
 * the caller, and must outlive it. Patterns and names are copied.
 *
 * Route order (nginx's, documented in docs/configuration.md):
 *   `= /p` exact match wins at once; otherwise the longest matching prefix is
 *   remembered; a `^~` prefix wins at once; otherwise regexes (POSIX extended)
 *   are tried in configuration order and the first match wins; otherwise the
 *   longest prefix; otherwise NULL (the caller answers 404).
 * Site order: exact server name, then the longest `*.suffix` wildcard, then
 * the address's default site.
 *
 * Floor: a leaf (csrc/http/router.c); it calls nothing of the engine's.
 */
#ifndef SCALWS_ROUTER_H
#define SCALWS_ROUTER_H

#include <stddef.h>

enum {
    SWS_MATCH_EXACT = 1,
    SWS_MATCH_PREFIX = 2,
    SWS_MATCH_PREFIX_NOREGEX = 3,
    SWS_MATCH_REGEX = 4,
    SWS_MATCH_REGEX_ICASE = 5,
};

typedef struct sws_router sws_router_t;
typedef struct sws_site sws_site_t;
typedef struct sws_vhosts sws_vhosts_t;

sws_router_t *sws_router_new(void);
void sws_router_free(sws_router_t *r);

/* A new, empty site owned by r; NULL on allocation failure. */
sws_site_t *sws_router_site(sws_router_t *r);

/* Adds a route; returns 0, -1 on allocation failure, or -2 when a regex does
 * not compile (the config loader validated it already, so this is a bug). */
int sws_site_add_route(sws_site_t *s, int match, const char *pattern, size_t len, void *handler);

/* Header lines ("Name: value\r\n"...) added to every answer of the site
 * that goes over TLS (Strict-Transport-Security); the bytes are the
 * caller's and must outlive the router. */
void sws_site_set_tls_fields(sws_site_t *s, const char *lines, size_t len);
const char *sws_site_tls_fields(const sws_site_t *s, size_t *len);

/* A new address table (one per listening address) owned by r. */
sws_vhosts_t *sws_router_vhosts(sws_router_t *r);

/* Maps a server name (lowercase; exact, or "*.suffix") to a site. 0 or -1. */
int sws_vhosts_add_name(sws_vhosts_t *v, const char *name, size_t len, sws_site_t *site);
void sws_vhosts_set_default(sws_vhosts_t *v, sws_site_t *site);

/* The site for a Host header value as sent (any case, optional port, IPv6
 * literal in brackets); the default site when nothing matches. */
const sws_site_t *sws_vhosts_find(const sws_vhosts_t *v, const char *host, size_t len);

/* Orders every site's routes for matching; call once after the last
 * sws_site_add_route and before the first lookup. */
void sws_router_finish(sws_router_t *r);

/* The handler for a path (the request-target up to '?'), or NULL. */
void *sws_site_route(const sws_site_t *s, const char *path, size_t len);

#endif
