#include "scalws/router.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SWS_MAX_HOST 255

typedef struct {
    int match;
    char *pattern;
    size_t len;
    regex_t re;
    void *handler;
} route_t;

struct sws_site {
    route_t *routes; /* exact first, then prefixes by length descending, then regexes in order */
    size_t n, cap;
    size_t n_exact, n_prefix; /* boundaries within routes[] once sorted */
    const char *tls_fields;   /* caller-owned header lines for answers over TLS */
    size_t tls_fields_len;
};

typedef struct {
    char *name; /* without the "*." of a wildcard */
    size_t len;
    int wildcard;
    sws_site_t *site;
} vname_t;

struct sws_vhosts {
    vname_t *names;
    size_t n, cap;
    sws_site_t *dflt;
};

struct sws_router {
    sws_site_t **sites;
    size_t n_sites, cap_sites;
    sws_vhosts_t **vhosts;
    size_t n_vhosts, cap_vhosts;
};

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

sws_router_t *sws_router_new(void) { return calloc(1, sizeof(sws_router_t)); }

void sws_router_free(sws_router_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_sites; i++) {
        sws_site_t *s = r->sites[i];
        for (size_t j = 0; j < s->n; j++) {
            if (s->routes[j].match >= SWS_MATCH_REGEX)
                regfree(&s->routes[j].re);
            free(s->routes[j].pattern);
        }
        free(s->routes);
        free(s);
    }
    for (size_t i = 0; i < r->n_vhosts; i++) {
        for (size_t j = 0; j < r->vhosts[i]->n; j++)
            free(r->vhosts[i]->names[j].name);
        free(r->vhosts[i]->names);
        free(r->vhosts[i]);
    }
    free(r->sites);
    free(r->vhosts);
    free(r);
}

sws_site_t *sws_router_site(sws_router_t *r)
{
    if (grow((void **)&r->sites, &r->cap_sites, r->n_sites, sizeof(void *)) < 0)
        return NULL;
    sws_site_t *s = calloc(1, sizeof *s);
    if (s)
        r->sites[r->n_sites++] = s;
    return s;
}

void sws_site_set_tls_fields(sws_site_t *s, const char *lines, size_t len)
{
    s->tls_fields = lines;
    s->tls_fields_len = len;
}

const char *sws_site_tls_fields(const sws_site_t *s, size_t *len)
{
    *len = s->tls_fields_len;
    return s->tls_fields;
}

sws_vhosts_t *sws_router_vhosts(sws_router_t *r)
{
    if (grow((void **)&r->vhosts, &r->cap_vhosts, r->n_vhosts, sizeof(void *)) < 0)
        return NULL;
    sws_vhosts_t *v = calloc(1, sizeof *v);
    if (v)
        r->vhosts[r->n_vhosts++] = v;
    return v;
}

int sws_site_add_route(sws_site_t *s, int match, const char *pattern, size_t len, void *handler)
{
    if (grow((void **)&s->routes, &s->cap, s->n, sizeof(route_t)) < 0)
        return -1;
    route_t *rt = &s->routes[s->n];
    memset(rt, 0, sizeof *rt);
    rt->pattern = malloc(len + 1);
    if (!rt->pattern)
        return -1;
    memcpy(rt->pattern, pattern, len);
    rt->pattern[len] = '\0';
    rt->len = len;
    rt->match = match;
    rt->handler = handler;
    if (match >= SWS_MATCH_REGEX) {
        int flags = REG_EXTENDED | REG_NOSUB | (match == SWS_MATCH_REGEX_ICASE ? REG_ICASE : 0);
        if (regcomp(&rt->re, rt->pattern, flags) != 0) {
            free(rt->pattern);
            return -2;
        }
    }
    s->n++;
    return 0;
}

/* Sort key: exact (0), prefixes (1) by length descending, regexes (2) in
 * insertion order; a stable insertion sort keeps the regex order. */
static int rank(const route_t *r) { return r->match == SWS_MATCH_EXACT ? 0 : r->match < SWS_MATCH_REGEX ? 1 : 2; }

static int before(const route_t *a, const route_t *b)
{
    int ra = rank(a), rb = rank(b);
    if (ra != rb)
        return ra < rb;
    return ra == 1 && a->len > b->len;
}

static void site_sort(sws_site_t *s)
{
    for (size_t i = 1; i < s->n; i++) {
        route_t tmp = s->routes[i];
        size_t j = i;
        while (j > 0 && before(&tmp, &s->routes[j - 1])) {
            s->routes[j] = s->routes[j - 1];
            j--;
        }
        s->routes[j] = tmp;
    }
    s->n_exact = s->n_prefix = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (rank(&s->routes[i]) == 0)
            s->n_exact++;
        else if (rank(&s->routes[i]) == 1)
            s->n_prefix++;
    }
}

void sws_router_finish(sws_router_t *r)
{
    for (size_t i = 0; i < r->n_sites; i++)
        site_sort(r->sites[i]);
}

void *sws_site_route(const sws_site_t *s, const char *path, size_t len)
{
    const route_t *r = s->routes;
    for (size_t i = 0; i < s->n_exact; i++, r++)
        if (r->len == len && memcmp(r->pattern, path, len) == 0)
            return r->handler;
    const route_t *prefix = NULL;
    for (size_t i = 0; i < s->n_prefix; i++, r++) {
        if (r->len <= len && memcmp(r->pattern, path, r->len) == 0) {
            prefix = r; /* sorted by length: the first match is the longest */
            break;
        }
    }
    if (prefix && prefix->match == SWS_MATCH_PREFIX_NOREGEX)
        return prefix->handler;
    size_t n_regex = s->n - s->n_exact - s->n_prefix;
    const route_t *rx = s->routes + s->n_exact + s->n_prefix;
    for (size_t i = 0; i < n_regex; i++, rx++) {
        /* REG_STARTEND (glibc, BSD): match path[0..len) in place, any length. */
        regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)len};
        if (regexec(&rx->re, path, 1, &m, REG_STARTEND) == 0)
            return rx->handler;
    }
    return prefix ? prefix->handler : NULL;
}

int sws_vhosts_add_name(sws_vhosts_t *v, const char *name, size_t len, sws_site_t *site)
{
    if (grow((void **)&v->names, &v->cap, v->n, sizeof(vname_t)) < 0)
        return -1;
    vname_t *vn = &v->names[v->n];
    vn->wildcard = len > 2 && name[0] == '*' && name[1] == '.';
    if (vn->wildcard) {
        name += 1; /* keep the dot: ".example.com" matches as a suffix */
        len -= 1;
    }
    vn->name = malloc(len + 1);
    if (!vn->name)
        return -1;
    memcpy(vn->name, name, len);
    vn->name[len] = '\0';
    vn->len = len;
    vn->site = site;
    v->n++;
    return 0;
}

void sws_vhosts_set_default(sws_vhosts_t *v, sws_site_t *site) { v->dflt = site; }

const sws_site_t *sws_vhosts_find(const sws_vhosts_t *v, const char *host, size_t len)
{
    if (v->n == 0 || host == NULL || len == 0)
        return v->dflt;
    /* Strip the port (RFC 9110 §7.2: Host = uri-host [ ":" port ]). */
    if (host[0] == '[') {
        const char *end = memchr(host, ']', len);
        if (end)
            len = (size_t)(end - host) + 1;
    } else {
        const char *colon = memchr(host, ':', len);
        if (colon)
            len = (size_t)(colon - host);
    }
    if (len && host[len - 1] == '.')
        len--; /* "example.com." is "example.com" */
    if (len == 0 || len > SWS_MAX_HOST)
        return v->dflt;
    const vname_t *best = NULL;
    for (size_t i = 0; i < v->n; i++) {
        const vname_t *vn = &v->names[i];
        if (!vn->wildcard) {
            if (vn->len == len && strncasecmp(vn->name, host, len) == 0)
                return vn->site;
        } else if (vn->len < len && strncasecmp(vn->name, host + len - vn->len, vn->len) == 0) {
            if (!best || vn->len > best->len)
                best = vn;
        }
    }
    return best ? best->site : v->dflt;
}
