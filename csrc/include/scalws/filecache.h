/* The open-file cache of one worker (groundwork of the static handler).
 *
 * Maps a (root directory fd, normalized path) to an open file descriptor, its
 * stat, its validators (strong ETag from size, mtime in ns and inode;
 * Last-Modified), and — for files up to `mem_max` bytes — its content in
 * memory, so a fresh entry answers a request with no system call at all.
 * Lookups that fail are cached too (negative entries, with their errno).
 *
 * Time is passed in (`now`, monotonic milliseconds): an entry is trusted for
 * `valid_ms` after it was opened or last checked; the next lookup after that
 * stats the path again (fstatat, not fstat: a file replaced by rename has a
 * new inode) and reopens it when size, mtime or inode changed, or turns it
 * into a negative entry when it is gone. So a change is seen within
 * `valid_ms`, and open/stat run at most once per entry per `valid_ms`.
 *
 * Ownership: sws_filecache_get() returns an entry with a reference taken;
 * the caller calls sws_filecache_release() when it no longer reads from it
 * (a sendfile in progress keeps its reference). The cache holds at most
 * `max_entries` entries: the least recently used unreferenced entry is
 * evicted first; an evicted entry still referenced is closed and freed on
 * its last release. The cache owns every fd and buffer in it.
 *
 * Paths: `path` is the normalized request path (csrc/path.c: starts with
 * '/', no '.' or '..' segments). With SWS_FC_NOFOLLOW no component may be a
 * symlink and the result stays beneath the root (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS); with SWS_FC_OWNER each component that is a symlink
 * is followed only when the link and what it resolves to have the same
 * owner (nginx's disable_symlinks if_not_owner), else -ELOOP; with neither,
 * symlinks are followed, as nginx does by default.
 *
 * Blocking: open, fstatat and the read of small files block the calling
 * thread; they run only on a miss or a revalidation.
 *
 * Floor: a leaf (csrc/core/filecache.c); it calls nothing of the engine's:
 * the static handler looks files up, net releases the segments it sent.
 */
#ifndef SCALWS_FILECACHE_H
#define SCALWS_FILECACHE_H

#include <stddef.h>
#include <stdint.h>

#define SWS_FC_NOFOLLOW 1
#define SWS_FC_OWNER 2    /* a symlink is followed only when it and its target have one owner */
#define SWS_FC_ETAG_MAX 64

typedef struct sws_file {
    int fd;                  /* O_RDONLY; -1 for a negative entry or a directory */
    int err;                 /* 0, or the errno of a negative entry (ENOENT, EACCES, ELOOP, ...) */
    int is_dir;
    uint64_t size;
    int64_t mtime;           /* seconds */
    char etag[SWS_FC_ETAG_MAX]; /* with the quotes: "mtime-size" in hex (nginx's); a
                                   precompressed sibling adds "-br", "-zstd", "-gzip" */
    size_t etag_len;
    const char *mem;         /* the content when size <= mem_max, else NULL */
    char last_modified[29];  /* mtime as an IMF-fixdate, for the header */
    /* The static handler's memo: the Content-Type line it found for this
     * entry's path under the route (ct_route); NULL until then. A path's
     * type does not change when its file does, so a revalidation keeps it. */
    const void *ct_route;
    const char *ct;
    size_t ct_len;
    /* private */
    uint64_t ino, dev;
    int64_t mtime_ns;
    uint64_t checked;
    int refs;
    int evicted;
    uint32_t hash;
    int root, flags;
    struct sws_file *hnext, *lprev, *lnext;
    size_t key_len;
    char key[];
} sws_file_t;

typedef struct sws_filecache sws_filecache_t;

typedef struct {
    uint64_t hits, misses, revalidations, evictions;
    size_t entries, mem_bytes;
} sws_filecache_stats_t;

/* NULL on allocation failure. */
sws_filecache_t *sws_filecache_new(size_t max_entries, uint32_t valid_ms, size_t mem_max);

/* Closes every fd and frees every entry in the cache (referenced ones too:
 * call it when no reader is left). Entries already retired while referenced
 * are freed by their last sws_filecache_release(). */
void sws_filecache_free(sws_filecache_t *fc);

/* The entry for `path` under the directory `root_fd`: returns 0 and sets
 * *out (a reference is taken) for a file or a directory, or -errno for a
 * path that does not resolve to one (the negative entry is cached; no
 * reference is taken). -ENOMEM when the cache cannot allocate. */
int sws_filecache_get(sws_filecache_t *fc, int root_fd, const char *path, size_t len, int flags,
                      uint64_t now, sws_file_t **out);

void sws_filecache_release(sws_filecache_t *fc, sws_file_t *f);

/* Opens the folder `path` under root_fd for reading its entries, with the
 * same symlink rules as sws_filecache_get (not cached). fd or -errno. */
int sws_filecache_open_dir(int root_fd, const char *path, size_t len, int flags);

const sws_filecache_stats_t *sws_filecache_stats(const sws_filecache_t *fc);

#endif
