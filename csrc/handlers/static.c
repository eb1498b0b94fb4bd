/* The `static` handler; contract in scalws/static.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "context.h"
#include "scalws/httpcond.h"

#define RANGES_MAX 16         /* more ranges than this in one request: Range ignored */
#define MULTIPART_READ_MAX (1 << 20) /* several ranges of a file on disk: read up to this */

static const char HEX[] = "0123456789abcdef";

int sws_static_init(sws_engine_t *e, uint64_t seed)
{
    size_t n = e->core.lim.max_uri_bytes + 512; /* a path plus a file name or suffix */
    e->st.path2 = malloc(n);
    e->st.path3 = malloc(n);
    e->st.prng = seed | 1;
    return e->st.path2 && e->st.path3 ? 0 : -ENOMEM;
}

void sws_static_free(sws_engine_t *e)
{
    free(e->st.path2);
    free(e->st.path3);
    sws_filecache_free(e->st.fc);
}

/* "/." anywhere but /.well-known/ (RFC 8615: ACME and friends need it). */
static int is_hidden(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '/' && p[i + 1] == '.') {
            if (i == 0 && n >= 12 && memcmp(p, "/.well-known", 12) == 0 && (n == 12 || p[12] == '/'))
                continue;
            return 1;
        }
    }
    return 0;
}

static void content_type(const sws_static_t *st, const char *p, size_t n, const char **line,
                         size_t *line_len)
{
    *line = st->default_type;
    *line_len = st->default_type_len;
    size_t i = n;
    while (i > 0 && p[i - 1] != '/' && p[i - 1] != '.')
        i--;
    if (i == 0 || p[i - 1] != '.' || n - i == 0 || n - i > 16)
        return;
    char ext[16];
    size_t el = n - i;
    for (size_t k = 0; k < el; k++) {
        char ch = p[i + k];
        ext[k] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    size_t lo = 0, hi = st->n_mime;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const sws_mime_entry_t *m = &st->mime[mid];
        int cmp = m->ext_len != el ? (m->ext_len < el ? -1 : 1) : 0;
        for (size_t k = 0; k < el && !cmp; k++) /* a few bytes: no call to memcmp */
            cmp = (unsigned char)m->ext[k] - (unsigned char)ext[k];
        if (cmp == 0) {
            *line = m->line;
            *line_len = m->line_len;
            return;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
}

/* The fixed part of an answer's head: status, Content-Type line. */
static void head_ct(sws_engine_t *e, sws_resp_t *r, int status, const char *ct, size_t ct_len)
{
    resp_head(e, r, status, NULL, 0);
    resp_fields(e, r, ct, ct_len);
}

/* Validators and caching headers shared by 200, 206 and 304. */
static void put_validators(sws_engine_t *e, sws_resp_t *r, const sws_static_t *st,
                           const sws_file_t *f)
{
    resp_field_lit(e, r, "Last-Modified", f->last_modified, SWS_HTTP_DATE_LEN); /* formatted at open */
    resp_field_lit(e, r, "ETag", f->etag, f->etag_len);
    if (st->expires >= 0) {
        char date[SWS_HTTP_DATE_LEN], age[32];
        sws_http_date(e->core.wall + (time_t)st->expires, date);
        resp_field_lit(e, r, "Expires", date, SWS_HTTP_DATE_LEN);
        int n = snprintf(age, sizeof age, "max-age=%lld", (long long)st->expires);
        resp_field_lit(e, r, "Cache-Control", age, (size_t)n);
    }
    if (st->precompressed)
        resp_field_lit(e, r, "Vary", "Accept-Encoding", 15); /* the answer depends on it */
    resp_fields(e, r, st->extra, st->extra_len);
}

static int answer_error(sws_engine_t *e, sws_resp_t *r, int which)
{
    return sws_respond_answer(e, r, &e->rsp.err[which]);
}

/* multipart/byteranges (RFC 9110 §14.6) for several ranges. Parts of a
 * file held in memory are referenced; from a file on disk the ranges are
 * read into one buffer when they total at most MULTIPART_READ_MAX (else -1:
 * the caller sends the whole file, as a server may). 0 when answered; the
 * file reference is released or handed to the protocol. */
static int serve_multipart(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                           const sws_static_t *st, sws_file_t *f, const char *path,
                           size_t path_len, const sws_range_t *rs, size_t n)
{
    int head_only = req->method_id == SWS_M_HEAD;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += rs[i].len;
    if ((!f->mem && total > MULTIPART_READ_MAX) || e->net.niov + 2 * n + 8 > OUT_IOV)
        return -1;
    char *buf = NULL;
    if (!f->mem && !head_only) {
        buf = malloc(total ? total : 1);
        if (!buf)
            return -1;
        uint64_t o = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t got = 0;
            while (got < rs[i].len) {
                ssize_t k = pread(f->fd, buf + o + got, rs[i].len - got, (off_t)(rs[i].start + got));
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0) {
                    free(buf);
                    return -1; /* shrank under us: the caller sends what stat says, or closes */
                }
                got += (uint64_t)k;
            }
            o += rs[i].len;
        }
    }
    /* A boundary no part can contain by chance: 64 random bits per answer. */
    uint64_t *prng = &e->st.prng;
    *prng ^= *prng << 13;
    *prng ^= *prng >> 7;
    *prng ^= *prng << 17;
    char bnd[17];
    for (int i = 0; i < 16; i++)
        bnd[i] = HEX[(*prng >> (60 - 4 * i)) & 15];
    bnd[16] = '\0';
    const char *ct;
    size_t ct_len;
    content_type(st, path, path_len, &ct, &ct_len);
    /* Part heads, built once to count the length and once to send. */
    char crange[SWS_CONTENT_RANGE_MAX];
    uint64_t body_len = 0;
    for (size_t i = 0; i < n; i++) {
        int cl = sws_format_content_range(crange, sizeof crange, rs[i].start, rs[i].len, f->size);
        body_len += 2 + 2 + 16 + 2 + ct_len + 15 + (uint64_t)cl + 2 + 2 + rs[i].len;
    }
    body_len += 2 + 2 + 16 + 2 + 2;
    char ctype[64];
    memcpy(ctype, "multipart/byteranges; boundary=", 31);
    memcpy(ctype + 31, bnd, 16);
    resp_head(e, r, 206, NULL, 0);
    resp_field_lit(e, r, "Content-Type", ctype, 47);
    resp_field_lit(e, r, "Accept-Ranges", "bytes", 5);
    put_validators(e, r, st, f);
    resp_start_body(e, r, SWS_BODY_LENGTH, body_len);
    if (head_only) {
        sws_filecache_release(e->st.fc, f);
        return 0;
    }
    uint64_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int cl = sws_format_content_range(crange, sizeof crange, rs[i].start, rs[i].len, f->size);
        char part[64 + SWS_CONTENT_RANGE_MAX];
        size_t pl = 0;
        memcpy(part, "\r\n--", 4), pl += 4;
        memcpy(part + pl, bnd, 16), pl += 16;
        memcpy(part + pl, "\r\n", 2), pl += 2;
        resp_data(e, r, part, pl, 0);
        resp_data(e, r, ct, ct_len, 0); /* "Content-Type: ...\r\n" */
        pl = 0;
        memcpy(part, "Content-Range: ", 15), pl += 15;
        memcpy(part + pl, crange, (size_t)cl), pl += (size_t)cl;
        memcpy(part + pl, "\r\n\r\n", 4), pl += 4;
        resp_data(e, r, part, pl, 0);
        const char *data = f->mem ? f->mem + rs[i].start : buf + o;
        resp_data(e, r, data, (size_t)rs[i].len, SWS_REF);
        o += rs[i].len;
    }
    char tail[24];
    memcpy(tail, "\r\n--", 4);
    memcpy(tail + 4, bnd, 16);
    memcpy(tail + 20, "--\r\n", 4);
    resp_data(e, r, tail, 24, 0);
    resp_done(e, r);
    if (buf) {
        r->ops->hold_heap(e, r, buf); /* freed once written */
        sws_filecache_release(e->st.fc, f);
    } else {
        r->ops->hold_file(e, r, f); /* the memory copy stays referenced until written */
    }
    return 0;
}

/* The first index file of the folder `dir` (with a '/' added when it does
 * not end in one): 0 with *f referenced and *fpath (in e->st.path2) set, or
 * -EACCES when there is none (a folder is not listed). An index file whose
 * path is on a FastCGI route of the site (index.php) is never served as a
 * file (its source): SWS_REROUTE sends it there, as nginx's index does, or
 * (depth 1, already rerouted) it is skipped. */
static int find_index(sws_engine_t *e, const sws_site_t *site, const sws_static_t *st,
                      const char *dir, size_t len, int depth, sws_file_t **f,
                      const char **fpath, size_t *fpath_len)
{
    char *p2 = e->st.path2;
    int slash = len == 0 || dir[len - 1] != '/';
    memmove(p2, dir, len);
    if (slash)
        p2[len++] = '/';
    for (size_t i = 0; i < st->n_index; i++) {
        size_t nl = strlen(st->index[i]);
        memcpy(p2 + len, st->index[i], nl);
        sws_file_t *g = NULL;
        if (sws_filecache_get(e->st.fc, st->root_fd, p2, len + nl, st->fc_flags, e->core.now,
                              &g) == 0) {
            const sws_handler_t *h = site ? sws_site_route(site, p2, len + nl) : NULL;
            if (!g->is_dir && h && h->kind == SWS_H_FASTCGI) {
                sws_filecache_release(e->st.fc, g);
                if (depth)
                    continue;
                e->st.reroute = h;
                e->st.reroute_args = 1;
                e->st.reroute_path = p2;
                e->st.reroute_len = len + nl;
                return SWS_REROUTE;
            }
            if (!g->is_dir) {
                *f = g;
                *fpath = p2;
                *fpath_len = len + nl;
                return 0;
            }
            sws_filecache_release(e->st.fc, g);
        }
    }
    return -EACCES;
}

static int serve_path(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                      const sws_site_t *site, const sws_static_t *st, const char *path,
                      size_t path_len, const char *raw_path, size_t raw_len, int depth);

/* try_files (nginx's): candidates in order; the first that exists is
 * served; else the fallback status, or the fallback URI routed again (once:
 * a fallback that falls back again is a configuration loop, answered 500).
 * Returns 0 with *found set, or the status it answered. */
static int serve_try_files(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                           const sws_site_t *site, const sws_static_t *st, const char *path,
                           size_t path_len, int depth, sws_file_t **found, const char **fpath,
                           size_t *fpath_len)
{
    for (size_t i = 0; i < st->n_try; i++) {
        const char *item = st->try_items[i];
        size_t il = strlen(item);
        sws_file_t *g = NULL;
        if (strcmp(item, "$uri/") == 0) {
            sws_file_t *d = NULL;
            if (sws_filecache_get(e->st.fc, st->root_fd, path, path_len, st->fc_flags, e->core.now,
                                  &d) == 0) {
                int isdir = d->is_dir;
                sws_filecache_release(e->st.fc, d);
                int rc = isdir ? find_index(e, site, st, path, path_len, depth, found, fpath,
                                            fpath_len)
                               : -EACCES;
                if (rc == 0 || rc == SWS_REROUTE)
                    return rc;
            }
            continue;
        }
        const char *cand = strcmp(item, "$uri") == 0 ? path : item;
        size_t cl = cand == path ? path_len : il;
        if (sws_filecache_get(e->st.fc, st->root_fd, cand, cl, st->fc_flags, e->core.now, &g) ==
            0) {
            if (!g->is_dir) {
                *found = g;
                *fpath = cand;
                *fpath_len = cl;
                return 0;
            }
            sws_filecache_release(e->st.fc, g);
        }
    }
    if (st->try_status)
        return sws_respond_answer(e, r, st->try_status);
    if (st->try_uri_len) {
        const sws_handler_t *h = depth ? NULL : sws_site_route(site, st->try_uri, st->try_uri_len);
        if (!h)
            return answer_error(e, r, depth ? SWS_ERR_500 : SWS_ERR_404);
        if (h->kind == SWS_H_STATIC)
            return serve_path(e, r, req, site, h->data, st->try_uri, st->try_uri_len, st->try_uri,
                              st->try_uri_len, depth + 1);
        if (h->kind == SWS_H_RESPOND || h->kind == SWS_H_FASTCGI) {
            /* the dispatcher answers or starts it: nothing was written */
            e->st.reroute = h;
            e->st.reroute_args = st->try_args;
            e->st.reroute_path = st->try_uri;
            e->st.reroute_len = st->try_uri_len;
            return SWS_REROUTE;
        }
        return answer_error(e, r, SWS_ERR_500); /* a proxy fallback: refused at config load */
    }
    return answer_error(e, r, SWS_ERR_404);
}

int sws_static_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                      const sws_site_t *site, const sws_static_t *st, int depth)
{
    return serve_path(e, r, req, site, st, req->path, req->path_len, req->raw_path, req->raw_len,
                      depth);
}

static int serve_path(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                      const sws_site_t *site, const sws_static_t *st, const char *path,
                      size_t path_len, const char *raw_path, size_t raw_len, int depth)
{
    int method = req->method_id;
    int head_only = method == SWS_M_HEAD;
    int err = -1;
    sws_file_t *f = NULL;
    int other_method = method != SWS_M_GET && method != SWS_M_HEAD;
    if (other_method && !st->n_try) {
        err = SWS_ERR_405;
    } else if (st->deny_hidden && is_hidden(path, path_len)) {
        err = SWS_ERR_404;
    } else if (st->n_try) {
        /* Any method may reach the fallback (a POST to a front controller);
         * only a file found here is refused to methods other than GET/HEAD. */
        const char *fp = NULL;
        size_t fl = 0;
        int done = serve_try_files(e, r, req, site, st, path, path_len, depth, &f, &fp, &fl);
        if (!f)
            return done; /* answered by the fallback */
        path = fp;
        path_len = fl;
        if (other_method) {
            sws_filecache_release(e->st.fc, f);
            f = NULL;
            err = SWS_ERR_405;
        }
    } else {
        int rc = sws_filecache_get(e->st.fc, st->root_fd, path, path_len, st->fc_flags,
                                   e->core.now, &f);
        if (rc == 0 && f->is_dir) {
            sws_filecache_release(e->st.fc, f);
            f = NULL;
            if (path[path_len - 1] != '/') {
                /* RFC 9110 §15.4.2: the folder's URL ends with a slash; the
                 * query string goes along. */
                const char *q = memchr(req->target, '?', req->target_len);
                size_t qlen = q ? (size_t)(req->target + req->target_len - q) : 0;
                char *loc = e->st.path3;
                size_t ll = 0;
                if (raw_len + 1 + qlen <= e->core.lim.max_uri_bytes + 512) {
                    memcpy(loc, raw_path, raw_len), ll += raw_len;
                    loc[ll++] = '/';
                    if (qlen)
                        memcpy(loc + ll, q, qlen), ll += qlen;
                }
                resp_head(e, r, 301, NULL, 0);
                resp_field_lit(e, r, "Location", loc, ll);
                resp_start_body(e, r, SWS_BODY_LENGTH, 0);
                resp_done(e, r);
                return 301;
            }
            rc = find_index(e, site, st, path, path_len, depth, &f, &path, &path_len);
            if (rc == SWS_REROUTE)
                return rc;
            if (rc < 0 && st->autoindex) {
                size_t blen = 0;
                char *body = sws_make_listing(st, path, path_len, &blen, &rc);
                if (body) {
                    static const char CT[] = "Content-Type: text/html; charset=utf-8\r\n";
                    head_ct(e, r, 200, CT, sizeof CT - 1);
                    resp_start_body(e, r, SWS_BODY_LENGTH, blen);
                    if (head_only) {
                        free(body);
                    } else {
                        resp_data(e, r, body, blen, SWS_REF);
                        r->ops->hold_heap(e, r, body); /* freed once written */
                    }
                    resp_done(e, r);
                    return 200;
                }
            }
        }
        if (rc < 0)
            err = rc == -ENOENT || rc == -ENOTDIR || rc == -ENAMETOOLONG ? SWS_ERR_404
                  : rc == -EACCES || rc == -EPERM || rc == -ELOOP || rc == -EXDEV
                      ? SWS_ERR_403
                      : SWS_ERR_500;
    }
    if (err >= 0)
        return answer_error(e, r, err);

    /* The fields a file answer depends on, in one pass over the head (the
     * first of each counts). */
    sws_cond_fields_t cf;
    memset(&cf, 0, sizeof cf);
    const sws_header_t *ae = NULL, *rg = NULL, *ir = NULL;
    for (size_t i = 0; i < req->nh; i++) {
        const sws_header_t *h = &req->h[i];
        const char *nm = h->name;
        switch (h->name_len) {
        case 5:
            if (!rg && strncasecmp(nm, "range", 5) == 0)
                rg = h;
            break;
        case 8:
            if (!cf.if_match && strncasecmp(nm, "if-match", 8) == 0)
                cf.if_match = h->value, cf.if_match_len = h->value_len;
            else if (!ir && strncasecmp(nm, "if-range", 8) == 0)
                ir = h;
            break;
        case 13:
            if (!cf.if_none_match && strncasecmp(nm, "if-none-match", 13) == 0)
                cf.if_none_match = h->value, cf.if_none_match_len = h->value_len;
            break;
        case 15:
            if (!ae && strncasecmp(nm, "accept-encoding", 15) == 0)
                ae = h;
            break;
        case 17:
            if (!cf.if_modified_since && strncasecmp(nm, "if-modified-since", 17) == 0)
                cf.if_modified_since = h->value, cf.if_modified_since_len = h->value_len;
            break;
        case 19:
            if (!cf.if_unmodified_since && strncasecmp(nm, "if-unmodified-since", 19) == 0)
                cf.if_unmodified_since = h->value, cf.if_unmodified_since_len = h->value_len;
            break;
        }
    }
    if (method != SWS_M_GET)
        rg = NULL; /* Range is for GET (RFC 9110 §14.2) */
    /* Precompressed siblings (FILE.br, FILE.zst, FILE.gz): the one the client
     * prefers is served in FILE's place, with its own validators (RFC 9110
     * §8.8.3: each representation has its own ETag); Range applies to it. */
    const char *encoding = NULL;
    if (st->precompressed) {
        if (ae && path_len + 4 < e->core.lim.max_uri_bytes + 512) { /* room for the suffix */
            static const struct { const char *sfx; int bit; const char *name; } SIB[] = {
                {".br", SWS_ENC_BR, "br"}, {".zst", SWS_ENC_ZSTD, "zstd"}, {".gz", SWS_ENC_GZIP, "gzip"}};
            sws_file_t *sib[3] = {NULL, NULL, NULL};
            unsigned avail = 0;
            char *p2 = e->st.path3; /* not the buffer `path` is in (path2: an index file) */
            memcpy(p2, path, path_len);
            for (int i = 0; i < 3; i++) {
                size_t sl = strlen(SIB[i].sfx);
                memcpy(p2 + path_len, SIB[i].sfx, sl);
                if (sws_filecache_get(e->st.fc, st->root_fd, p2, path_len + sl, st->fc_flags, e->core.now,
                                      &sib[i]) == 0) {
                    if (sib[i]->is_dir) {
                        sws_filecache_release(e->st.fc, sib[i]);
                        sib[i] = NULL;
                    } else {
                        avail |= (unsigned)SIB[i].bit;
                    }
                }
            }
            int pick = avail ? sws_pick_encoding(ae->value, ae->value_len, avail) : 0;
            for (int i = 0; i < 3; i++) {
                if (!sib[i])
                    continue;
                if (pick == SIB[i].bit) {
                    sws_filecache_release(e->st.fc, f);
                    f = sib[i];
                    encoding = SIB[i].name;
                } else {
                    sws_filecache_release(e->st.fc, sib[i]);
                }
            }
        }
    }
    int cond = sws_evaluate_preconditions(&cf, f->etag, f->etag_len, f->mtime, 1);
    if (cond == SWS_COND_PRECONDITION_FAILED) {
        sws_filecache_release(e->st.fc, f);
        return answer_error(e, r, SWS_ERR_412);
    }
    if (cond == SWS_COND_NOT_MODIFIED) {
        resp_head(e, r, 304, NULL, 0);
        put_validators(e, r, st, f);
        resp_start_body(e, r, SWS_BODY_NONE, 0);
        sws_filecache_release(e->st.fc, f);
        return 304;
    }
    /* Range (RFC 9110 §14.2), for GET, unless If-Range says the client's
     * copy is stale. One range is answered 206, several with
     * multipart/byteranges (or the whole file when they are too large to
     * gather: a server may ignore Range). */
    uint64_t start = 0, blen = f->size;
    int status = 200;
    char crange[SWS_CONTENT_RANGE_MAX];
    int crange_len = 0;
    if (rg) {
        if (!ir || sws_if_range_matches(ir->value, ir->value_len, f->etag, f->etag_len, f->mtime)) {
            sws_range_t rs[RANGES_MAX];
            int n = sws_parse_range(rg->value, rg->value_len, f->size, rs, RANGES_MAX);
            if (n == 0) {
                char cr[40];
                int k = snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)f->size);
                resp_head(e, r, 416, NULL, 0);
                resp_field_lit(e, r, "Content-Range", cr, (size_t)k);
                resp_start_body(e, r, SWS_BODY_LENGTH, 0);
                resp_done(e, r);
                sws_filecache_release(e->st.fc, f);
                return 416;
            }
            if (n == 1) {
                start = rs[0].start;
                blen = rs[0].len;
                status = 206;
                crange_len = sws_format_content_range(crange, sizeof crange, start, blen, f->size);
            } else if (n > 1 && serve_multipart(e, r, req, st, f, path, path_len, rs, (size_t)n) == 0) {
                return 206;
            }
        }
    }
    const char *ct;
    size_t ct_len;
    if (encoding) { /* f is a precompressed sibling: the type is the path's */
        content_type(st, path, path_len, &ct, &ct_len);
    } else if (f->ct_route == st) {
        ct = f->ct, ct_len = f->ct_len;
    } else {
        content_type(st, path, path_len, &ct, &ct_len);
        f->ct_route = st, f->ct = ct, f->ct_len = ct_len;
    }
    head_ct(e, r, status, ct, ct_len);
    if (crange_len > 0)
        resp_field_lit(e, r, "Content-Range", crange, (size_t)crange_len);
    resp_field_lit(e, r, "Accept-Ranges", "bytes", 5);
    if (encoding)
        resp_field_lit(e, r, "Content-Encoding", encoding, strlen(encoding));
    put_validators(e, r, st, f);
    resp_start_body(e, r, SWS_BODY_LENGTH, blen);
    /* Small files held in memory go beside the head, larger ones are
     * referenced, files on disk are sent with sendfile: the protocol's
     * choice, which also drops the body of an answer to HEAD. */
    r->ops->file(e, r, f, start, blen, st->sendfile_chunk);
    resp_done(e, r);
    return status;
}
