/* Folder listings (autoindex); contract in scalws/static.h. Runs readdir
 * and one fstatat per entry on the loop: listings are off by default and
 * meant for small folders. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_str(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Text for HTML: & < > " ' escaped; other bytes as they are (names are
 * usually UTF-8). */
static void sb_html(sbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': sb_str(b, "&amp;"); break;
        case '<': sb_str(b, "&lt;"); break;
        case '>': sb_str(b, "&gt;"); break;
        case '"': sb_str(b, "&quot;"); break;
        case '\'': sb_str(b, "&#39;"); break;
        default: sb_put(b, s + i, 1);
        }
    }
}

/* A path segment for an href: every byte but unreserved ones (RFC 3986
 * §2.3) percent-encoded, so no name can end the attribute or the URL. */
static void sb_href(sbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            sb_put(b, s + i, 1);
        } else {
            static const char UHEX[] = "0123456789ABCDEF";
            char esc[3] = {'%', UHEX[ch >> 4], UHEX[ch & 15]};
            sb_put(b, esc, 3);
        }
    }
}

typedef struct {
    char *name;
    int is_dir;
    uint64_t size;
    time_t mtime;
} dentry_t;

static int dentry_cmp(const void *a, const void *b)
{
    const dentry_t *x = a, *y = b;
    if (x->is_dir != y->is_dir)
        return y->is_dir - x->is_dir; /* folders first, as nginx */
    return strcmp(x->name, y->name);
}

/* The HTML listing of the folder `path` (ending in '/'), malloc'd, or NULL
 * with *err set (-errno). Runs readdir and one fstatat per entry on the
 * loop: listings are off by default and meant for small folders. */
char *sws_make_listing(const sws_static_t *st, const char *path, size_t path_len, size_t *len,
                          int *err)
{
    int fd = sws_filecache_open_dir(st->root_fd, path, path_len, st->fc_flags);
    if (fd < 0) {
        *err = fd;
        return NULL;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        *err = -errno;
        close(fd);
        return NULL;
    }
    dentry_t *ents = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' &&
            (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
            continue;
        if (de->d_name[0] == '.' && st->deny_hidden)
            continue;
        struct stat sb;
        int at = (st->fc_flags & SWS_FC_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0;
        if (fstatat(dirfd(d), de->d_name, &sb, at) < 0)
            continue;
        if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
            continue; /* links refused, devices, fifos: not listed */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            dentry_t *ne = realloc(ents, cap * sizeof *ents);
            if (!ne)
                break;
            ents = ne;
        }
        ents[n].name = strdup(de->d_name);
        if (!ents[n].name)
            break;
        ents[n].is_dir = S_ISDIR(sb.st_mode);
        ents[n].size = (uint64_t)sb.st_size;
        ents[n].mtime = sb.st_mtim.tv_sec;
        n++;
    }
    closedir(d);
    if (n)
        qsort(ents, n, sizeof *ents, dentry_cmp);
    sbuf_t b = {0};
    sb_str(&b, "<!DOCTYPE html>\n<html>\n<head><meta charset=\"utf-8\"><title>Index of ");
    sb_html(&b, path, path_len);
    sb_str(&b, "</title></head>\n<body>\n<h1>Index of ");
    sb_html(&b, path, path_len);
    sb_str(&b, "</h1><hr><pre><a href=\"../\">../</a>\n");
    for (size_t i = 0; i < n; i++) {
        const char *nm = ents[i].name;
        size_t nl = strlen(nm);
        sb_str(&b, "<a href=\"");
        sb_href(&b, nm, nl);
        if (ents[i].is_dir)
            sb_put(&b, "/", 1);
        sb_str(&b, "\">");
        sb_html(&b, nm, nl);
        if (ents[i].is_dir)
            sb_put(&b, "/", 1);
        char meta[96];
        char date[SWS_HTTP_DATE_LEN + 1];
        sws_http_date(ents[i].mtime, date);
        date[SWS_HTTP_DATE_LEN] = '\0';
        int ml = ents[i].is_dir ? snprintf(meta, sizeof meta, "</a>  %s  -\n", date)
                                : snprintf(meta, sizeof meta, "</a>  %s  %llu\n", date,
                                           (unsigned long long)ents[i].size);
        sb_put(&b, meta, (size_t)ml);
        free(ents[i].name);
    }
    free(ents);
    sb_str(&b, "</pre><hr></body>\n</html>\n");
    if (b.failed) {
        free(b.p);
        *err = -ENOMEM;
        return NULL;
    }
    *len = b.len;
    return b.p;
}

