/* The open-file cache; contract in scalws/filecache.h. */
#define _GNU_SOURCE
#include "scalws/filecache.h"
#include "scalws/httpdate.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct sws_filecache {
    sws_file_t **table;      /* hash chains */
    size_t mask;
    sws_file_t *lru_head;    /* most recently used */
    sws_file_t *lru_tail;
    size_t max_entries;
    uint32_t valid_ms;
    size_t mem_max;
    sws_filecache_stats_t st;
};

static uint32_t hash_key(int root, int flags, const char *p, size_t n)
{
    uint32_t h = 2166136261u ^ (uint32_t)root ^ ((uint32_t)flags << 24);
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

sws_filecache_t *sws_filecache_new(size_t max_entries, uint32_t valid_ms, size_t mem_max)
{
    sws_filecache_t *fc = calloc(1, sizeof *fc);
    if (!fc)
        return NULL;
    size_t n = 64;
    while (n < max_entries * 2)
        n <<= 1;
    fc->table = calloc(n, sizeof *fc->table);
    if (!fc->table) {
        free(fc);
        return NULL;
    }
    fc->mask = n - 1;
    fc->max_entries = max_entries ? max_entries : 1;
    fc->valid_ms = valid_ms;
    fc->mem_max = mem_max;
    return fc;
}

/* ---- entries ----------------------------------------------------------- */

static void entry_drop_content(sws_filecache_t *fc, sws_file_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->mem) {
        fc->st.mem_bytes -= f->size;
        free((void *)f->mem);
        f->mem = NULL;
    }
}

static void entry_free(sws_filecache_t *fc, sws_file_t *f)
{
    entry_drop_content(fc, f);
    free(f);
}

static void lru_unlink(sws_filecache_t *fc, sws_file_t *f)
{
    if (f->lprev)
        f->lprev->lnext = f->lnext;
    else
        fc->lru_head = f->lnext;
    if (f->lnext)
        f->lnext->lprev = f->lprev;
    else
        fc->lru_tail = f->lprev;
    f->lprev = f->lnext = NULL;
}

static void lru_push_front(sws_filecache_t *fc, sws_file_t *f)
{
    f->lprev = NULL;
    f->lnext = fc->lru_head;
    if (fc->lru_head)
        fc->lru_head->lprev = f;
    fc->lru_head = f;
    if (!fc->lru_tail)
        fc->lru_tail = f;
}

static void table_unlink(sws_filecache_t *fc, sws_file_t *f)
{
    sws_file_t **pp = &fc->table[f->hash & fc->mask];
    while (*pp && *pp != f)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = f->hnext;
    f->hnext = NULL;
}

/* Removes f from the cache; frees it now or, if referenced, at its last release. */
static void entry_retire(sws_filecache_t *fc, sws_file_t *f)
{
    table_unlink(fc, f);
    lru_unlink(fc, f);
    fc->st.entries--;
    if (f->refs > 0)
        f->evicted = 1;
    else
        entry_free(fc, f);
}

static void entry_evict(sws_filecache_t *fc, sws_file_t *f)
{
    fc->st.evictions++;
    entry_retire(fc, f);
}

/* The encoding a precompressed sibling's name says (FILE.br, FILE.zst,
 * FILE.gz), or NULL. */
static const char *sibling_encoding(const sws_file_t *f)
{
    static const struct { const char *sfx; const char *name; } SIB[] = {
        {".br", "br"}, {".zst", "zstd"}, {".gz", "gzip"}};
    for (size_t i = 0; i < sizeof SIB / sizeof SIB[0]; i++) {
        size_t n = strlen(SIB[i].sfx);
        if (f->key_len > n && memcmp(f->key + f->key_len - n, SIB[i].sfx, n) == 0)
            return SIB[i].name;
    }
    return NULL;
}

static void make_etag(sws_file_t *f)
{
    sws_http_date((time_t)f->mtime, f->last_modified);
    /* Strong validator (RFC 9110 §8.8.3), nginx's: modification time (s)
     * and size, in hex, so that every host serving one release gives a
     * file one ETag (an inode differs from host to host, and a balancer
     * would turn each revalidation into a full answer); short, since
     * HTTP/2 sends it as a literal. A precompressed sibling adds its
     * encoding, so that no two representations of FILE share one. A
     * change within the second that keeps the size keeps it, as nginx's
     * (entry_stale still sees the replacement by its inode). */
    const char *enc = sibling_encoding(f);
    int n = snprintf(f->etag, sizeof f->etag, enc ? "\"%llx-%llx-%s\"" : "\"%llx-%llx\"",
                     (unsigned long long)f->mtime, (unsigned long long)f->size, enc);
    f->etag_len = n > 0 && (size_t)n < sizeof f->etag ? (size_t)n : 0;
}

/* SWS_FC_OWNER: walk the path a component at a time; a symlink is
 * followed only when it and its resolution have the same owner. */
static int open_owner(int root_fd, const char *rel, int oflags)
{
    int dfd = openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    if (rel[0] == '.' && rel[1] == '\0') {
        int fd = openat(dfd, ".", O_RDONLY | O_CLOEXEC | oflags);
        int err = errno;
        close(dfd);
        return fd < 0 ? -err : fd;
    }
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        int last = !slash || slash[1] == '\0';
        char comp[256];
        if (n == 0 || n >= sizeof comp) {
            close(dfd);
            return n ? -ENAMETOOLONG : -ENOENT;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        struct stat ls, ts;
        if (fstatat(dfd, comp, &ls, AT_SYMLINK_NOFOLLOW) < 0) {
            int err = errno;
            close(dfd);
            return -err;
        }
        int follow = 0;
        if (S_ISLNK(ls.st_mode)) {
            if (fstatat(dfd, comp, &ts, 0) < 0) {
                int err = errno; /* a dangling link is ENOENT */
                close(dfd);
                return -err;
            }
            if (ts.st_uid != ls.st_uid) {
                close(dfd);
                return -ELOOP; /* someone else's file behind this link */
            }
            follow = 1;
        }
        int of = last ? (O_RDONLY | oflags) : (O_PATH | O_DIRECTORY);
        int fd = openat(dfd, comp, of | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
        int err = errno;
        close(dfd);
        if (fd < 0)
            return -err;
        if (last)
            return fd;
        dfd = fd;
        p = slash + 1;
    }
}

static int open_path_mode(int root_fd, const char *rel, int flags, int oflags)
{
    if (flags & SWS_FC_OWNER)
        return open_owner(root_fd, rel, oflags);
    if (flags & SWS_FC_NOFOLLOW) {
        struct open_how how = {
            .flags = (uint64_t)(O_RDONLY | O_CLOEXEC | oflags),
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, root_fd, rel, &how, sizeof how);
        return fd < 0 ? -errno : (int)fd;
    }
    int fd = openat(root_fd, rel, O_RDONLY | O_CLOEXEC | oflags);
    return fd < 0 ? -errno : fd;
}

static int open_path(int root_fd, const char *rel, int flags)
{
    return open_path_mode(root_fd, rel, flags, O_NONBLOCK);
}

int sws_filecache_open_dir(int root_fd, const char *path, size_t len, int flags)
{
    char rel[4096];
    if (len == 0 || len >= sizeof rel)
        return -ENAMETOOLONG;
    /* "/a/b/" -> "a/b/", "/" -> "." */
    size_t n = len - 1;
    memcpy(rel, path + 1, n);
    rel[n] = '\0';
    return open_path_mode(root_fd, n ? rel : ".", flags, O_DIRECTORY);
}

/* Opens (or reopens) f from its path; turns it negative on failure. */
static void entry_load(sws_filecache_t *fc, sws_file_t *f, int root_fd, int flags)
{
    entry_drop_content(fc, f);
    f->err = 0;
    f->is_dir = 0;
    const char *rel = f->key_len > 1 ? f->key + 1 : ".";
    int fd = open_path(root_fd, rel, flags);
    if (fd < 0) {
        f->err = -fd;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        f->err = errno;
        close(fd);
        return;
    }
    f->ino = (uint64_t)st.st_ino;
    f->dev = (uint64_t)st.st_dev;
    f->size = (uint64_t)st.st_size;
    f->mtime = (int64_t)st.st_mtim.tv_sec;
    f->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (S_ISDIR(st.st_mode)) {
        f->is_dir = 1;
        close(fd); /* directories are answered by name (index, redirect), not read */
        make_etag(f);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        f->err = EACCES; /* no devices, fifos or sockets from a document root */
        close(fd);
        return;
    }
    f->fd = fd;
    make_etag(f);
    if (f->size <= fc->mem_max) {
        char *buf = malloc(f->size ? f->size : 1);
        size_t got = 0;
        while (buf && got < f->size) {
            ssize_t r = pread(fd, buf + got, f->size - got, (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (buf && got == f->size) {
            f->mem = buf;
            fc->st.mem_bytes += f->size;
        } else {
            free(buf); /* shrank under us: serve from the fd, revalidate later */
        }
    }
}

/* Has the file at f's path changed since it was loaded? */
static int entry_stale(const sws_file_t *f, int root_fd, int flags)
{
    const char *rel = f->key_len > 1 ? f->key + 1 : ".";
    struct stat st;
    int at = (flags & SWS_FC_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0;
    if (fstatat(root_fd, rel, &st, at) < 0)
        return f->err != errno;
    if (f->err)
        return 1;
    int64_t mns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return (uint64_t)st.st_ino != f->ino || (uint64_t)st.st_dev != f->dev ||
           (uint64_t)st.st_size != f->size || mns != f->mtime_ns ||
           (S_ISDIR(st.st_mode) != 0) != (f->is_dir != 0);
}

int sws_filecache_get(sws_filecache_t *fc, int root_fd, const char *path, size_t len, int flags,
                      uint64_t now, sws_file_t **out)
{
    uint32_t h = hash_key(root_fd, flags, path, len);
    sws_file_t *f = fc->table[h & fc->mask];
    while (f && !(f->hash == h && f->root == root_fd && f->flags == flags &&
                  f->key_len == len && memcmp(f->key, path, len) == 0))
        f = f->hnext;
    if (f) {
        fc->st.hits++;
        if (now - f->checked >= fc->valid_ms) {
            fc->st.revalidations++;
            if (entry_stale(f, root_fd, flags)) {
                if (f->refs > 0) {
                    /* A reader still uses the old file: retire it, load anew. */
                    entry_retire(fc, f);
                    f = NULL;
                } else {
                    entry_load(fc, f, root_fd, flags);
                }
            }
            if (f)
                f->checked = now;
        }
    }
    if (!f) {
        fc->st.misses++;
        while (fc->st.entries >= fc->max_entries) {
            sws_file_t *victim = fc->lru_tail;
            while (victim && victim->refs > 0)
                victim = victim->lprev;
            if (!victim)
                break; /* everything is in use: grow past the bound for now */
            entry_evict(fc, victim);
        }
        f = calloc(1, sizeof *f + len + 1);
        if (!f)
            return -ENOMEM;
        memcpy(f->key, path, len);
        f->key[len] = '\0';
        f->key_len = len;
        f->hash = h;
        f->root = root_fd;
        f->flags = flags;
        f->fd = -1;
        f->checked = now;
        entry_load(fc, f, root_fd, flags);
        f->hnext = fc->table[h & fc->mask];
        fc->table[h & fc->mask] = f;
        lru_push_front(fc, f);
        fc->st.entries++;
    } else if (fc->lru_head != f) {
        lru_unlink(fc, f);
        lru_push_front(fc, f);
    }
    if (f->err)
        return -f->err;
    f->refs++;
    *out = f;
    return 0;
}

void sws_filecache_release(sws_filecache_t *fc, sws_file_t *f)
{
    if (--f->refs == 0 && f->evicted)
        entry_free(fc, f);
}

const sws_filecache_stats_t *sws_filecache_stats(const sws_filecache_t *fc) { return &fc->st; }

void sws_filecache_free(sws_filecache_t *fc)
{
    if (!fc)
        return;
    sws_file_t *f = fc->lru_head;
    while (f) {
        sws_file_t *next = f->lnext;
        entry_free(fc, f);
        f = next;
    }
    free(fc->table);
    free(fc);
}
