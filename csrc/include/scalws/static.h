/* scalws/static.h — the `static` handler (csrc/handlers/static.c,
 * autoindex.c): files under a root through the open-file cache, with
 * validators and preconditions, single and multipart ranges,
 * precompressed siblings, index files, folder listings and try_files.
 *
 * May call: the response interface, the open-file cache
 * (scalws/filecache.h), conditionals and ranges (scalws/httpcond.h), the
 * router (a leaf: try_files routes its fallback URI again), the respond
 * handler's error pages (and try_files' "=NNN"). A fallback or an index
 * file on a route of another kind is returned (SWS_REROUTE), for the
 * dispatcher (scalws/dispatch.h) to answer or start.
 * Config half: scalws/config/directives/static.py.
 */
#ifndef SCALWS_STATIC_H
#define SCALWS_STATIC_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/respond.h"
#include "scalws/response.h"
#include "scalws/router.h"

/* A MIME mapping: lowercase extension without the dot, and its whole
 * header line ("Content-Type: text/html; charset=utf-8\r\n"). */
typedef struct {
    const char *ext;
    size_t ext_len;
    const char *line;
    size_t line_len;
} sws_mime_entry_t;

/* A `static` route (config: scalws/config/directives/static.py). Files are
 * looked up by the normalized request path under root_fd through the
 * engine's open-file cache; small files go out from memory with the head in
 * one write, larger ones with sendfile(2). */
typedef struct {
    int root_fd;                  /* O_PATH | O_DIRECTORY; owned by the caller */
    int fc_flags;                 /* SWS_FC_NOFOLLOW when symlinks are refused */
    int deny_hidden;              /* 404 for "/." segments but /.well-known/ */
    int precompressed;            /* serve FILE.br/.zst/.gz when accepted */
    int autoindex;                /* list a folder without an index file */
    const char *const *index;     /* index file names, NUL-terminated */
    size_t n_index;
    const sws_mime_entry_t *mime; /* sorted by (ext_len, ext) */
    size_t n_mime;
    const char *default_type;     /* whole Content-Type line */
    size_t default_type_len;
    const char *extra;            /* header lines added to 200/304 answers */
    size_t extra_len;
    int64_t expires;              /* seconds, or -1: no Expires/Cache-Control from us */
    const char *const *try_items; /* try_files candidates: "$uri", "$uri/" or "/path" */
    size_t n_try;                 /* 0: serve the path itself (folder redirect, index) */
    const sws_respond_t *try_status; /* try_files fallback "=NNN", or NULL */
    const char *try_uri;          /* try_files fallback URI (normalized path), routed again */
    size_t try_uri_len;
    int try_args;                 /* the fallback keeps the request's query ("/index.php?$args") */
    size_t sendfile_chunk;        /* most bytes per sendfile call */
} sws_static_t;

/* The static handler's part of the engine (e->st). */
typedef struct {
    sws_filecache_t *fc;
    char *path2;              /* a path with an index file name appended (max_uri_bytes + 512) */
    char *path3;              /* a path with a precompressed suffix appended */
    uint64_t prng;            /* xorshift state for multipart boundaries */
    /* sws_static_answer returned SWS_REROUTE: the try_files fallback of the
     * route is on a respond or FastCGI route, or a folder's index file
     * (index.php) on a FastCGI route, for the dispatcher to answer or start
     * with reroute_path (the static route's try_uri, or the index file's
     * path in path2); reroute_args: the query goes along ("?$args") */
    const sws_handler_t *reroute;
    int reroute_args;
    const char *reroute_path;
    size_t reroute_len;
} sws_static_state_t;

#define SWS_REROUTE (-2)

#define STATIC_ANSWER_MAX 1024 /* batch bytes a static head takes besides extra, Location, body */

SWS_INTERNAL int sws_static_init(sws_engine_t *e, uint64_t seed);
SWS_INTERNAL void sws_static_free(sws_engine_t *e);
/* Answers req on a static route through r; returns the status. depth: 0,
 * or 1 for a request routed again (a try_files fallback, a FastCGI local
 * redirect), which never reroutes. SWS_REROUTE (depth 0 only): nothing was
 * answered; the try_files fallback or the index file goes to
 * e->st.reroute (see there). */
SWS_INTERNAL int sws_static_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                   const sws_site_t *site, const sws_static_t *st, int depth);
/* autoindex.c: the HTML listing of the folder `path` (ending in '/'),
 * malloc'd, or NULL with *err set (-errno). */
SWS_INTERNAL char *sws_make_listing(const sws_static_t *st, const char *path, size_t path_len,
                                    size_t *len, int *err);

#endif
