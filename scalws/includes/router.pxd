# Declarations of csrc/include/scalws/router.h used by Cython; contract there.

cdef extern from "scalws/router.h" nogil:
    enum:
        SWS_MATCH_EXACT, SWS_MATCH_PREFIX, SWS_MATCH_PREFIX_NOREGEX,
        SWS_MATCH_REGEX, SWS_MATCH_REGEX_ICASE

    ctypedef struct sws_router_t:
        pass
    ctypedef struct sws_site_t:
        pass
    ctypedef struct sws_vhosts_t:
        pass

    sws_router_t *sws_router_new()
    void sws_router_free(sws_router_t *r)
    sws_site_t *sws_router_site(sws_router_t *r)
    int sws_site_add_route(sws_site_t *s, int match, const char *pattern, size_t len, void *handler)
    sws_vhosts_t *sws_router_vhosts(sws_router_t *r)
    int sws_vhosts_add_name(sws_vhosts_t *v, const char *name, size_t len, sws_site_t *site)
    void sws_vhosts_set_default(sws_vhosts_t *v, sws_site_t *site)
    void sws_router_finish(sws_router_t *r)
    const sws_site_t *sws_vhosts_find(const sws_vhosts_t *v, const char *host, size_t len)
    void *sws_site_route(const sws_site_t *s, const char *path, size_t len)
    void sws_site_set_tls_fields(sws_site_t *s, const char *lines, size_t len)
