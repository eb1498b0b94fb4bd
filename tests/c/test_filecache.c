/* The open-file cache against real files in a temporary folder; time is
 * passed in, so validity windows are crossed by hand, not by sleeping. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "scalws/filecache.h"

static char dir[64];
static int root;

static void put(const char *name, const char *content)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(content, f);
    fclose(f);
}

static void path_of(char *out, const char *name) { snprintf(out, 256, "%s/%s", dir, name); }

/* Paths are placed against the guard page: an over-read of them crashes. */
#define GET(fc, p, flags, now, out) \
    sws_filecache_get(fc, root, guard_place(p, strlen(p)), strlen(p), flags, now, out)

static void test_hit_miss_and_validators(void)
{
    put("a.txt", "hello");
    sws_filecache_t *fc = sws_filecache_new(16, 1000, 64);
    sws_file_t *f = NULL;
    CHECK(GET(fc, "/a.txt", 0, 0, &f) == 0, "get");
    CHECK(f->size == 5 && f->fd >= 0 && f->mem && memcmp(f->mem, "hello", 5) == 0, "content");
    CHECK(f->etag_len > 4 && f->etag[0] == '"' && f->etag[f->etag_len - 1] == '"', "etag %s", f->etag);
    sws_filecache_release(fc, f);
    sws_file_t *g = NULL;
    CHECK(GET(fc, "/a.txt", 0, 500, &g) == 0 && g == f, "same entry within valid");
    CHECK(sws_filecache_stats(fc)->hits == 1 && sws_filecache_stats(fc)->misses == 1, "stats");
    sws_filecache_release(fc, g);
    sws_filecache_free(fc);
    t_end();
}

static void test_fresh_entry_needs_no_syscall(void)
{
    put("b.txt", "bee");
    sws_filecache_t *fc = sws_filecache_new(16, 1000, 64);
    sws_file_t *f;
    CHECK(GET(fc, "/b.txt", 0, 0, &f) == 0, "get");
    sws_filecache_release(fc, f);
    char p[256];
    path_of(p, "b.txt");
    unlink(p); /* within the window the cache must not look at the disk */
    CHECK(GET(fc, "/b.txt", 0, 999, &f) == 0 && f->mem && memcmp(f->mem, "bee", 3) == 0, "cached");
    sws_filecache_release(fc, f);
    CHECK(GET(fc, "/b.txt", 0, 1000, &f) == -ENOENT, "deletion seen after valid_ms");
    CHECK(GET(fc, "/b.txt", 0, 1500, &f) == -ENOENT, "negative entry cached");
    put("b.txt", "back");
    CHECK(GET(fc, "/b.txt", 0, 1900, &f) == -ENOENT, "negative entry trusted within valid");
    CHECK(GET(fc, "/b.txt", 0, 2000, &f) == 0 && f->size == 4, "recreated file seen");
    sws_filecache_release(fc, f);
    sws_filecache_free(fc);
    t_end();
}

static void test_change_and_rename_replacement(void)
{
    put("c.txt", "one");
    sws_filecache_t *fc = sws_filecache_new(16, 100, 64);
    sws_file_t *f;
    CHECK(GET(fc, "/c.txt", 0, 0, &f) == 0, "get");
    char etag1[SWS_FC_ETAG_MAX];
    memcpy(etag1, f->etag, sizeof etag1);
    sws_filecache_release(fc, f);
    put("c.new", "three");
    char a[256], b[256];
    path_of(a, "c.new");
    path_of(b, "c.txt");
    rename(a, b);
    CHECK(GET(fc, "/c.txt", 0, 100, &f) == 0 && f->size == 5 && memcmp(f->mem, "three", 5) == 0,
          "replacement by rename seen");
    CHECK(strcmp(etag1, f->etag) != 0, "etag changed");
    sws_filecache_release(fc, f);
    sws_filecache_free(fc);
    t_end();
}

static void test_referenced_entry_survives_change(void)
{
    put("d.txt", "old!");
    sws_filecache_t *fc = sws_filecache_new(16, 100, 0); /* no memory copies: fd only */
    sws_file_t *reader, *f;
    CHECK(GET(fc, "/d.txt", 0, 0, &reader) == 0 && reader->mem == NULL, "get");
    put("d.txt", "new content");
    CHECK(GET(fc, "/d.txt", 0, 200, &f) == 0 && f != reader && f->size == 11, "new entry");
    char buf[8] = {0};
    CHECK(pread(reader->fd, buf, 4, 0) >= 0, "the old reader's fd is still open");
    sws_filecache_release(fc, reader); /* frees the retired entry */
    sws_filecache_release(fc, f);
    sws_filecache_free(fc);
    t_end();
}

static void test_lru_bound(void)
{
    put("e1", "1");
    put("e2", "2");
    put("e3", "3");
    sws_filecache_t *fc = sws_filecache_new(2, 1000, 64);
    sws_file_t *f1, *f2, *f3;
    CHECK(GET(fc, "/e1", 0, 0, &f1) == 0, "e1");
    sws_filecache_release(fc, f1);
    CHECK(GET(fc, "/e2", 0, 0, &f2) == 0, "e2");
    sws_filecache_release(fc, f2);
    CHECK(GET(fc, "/e1", 0, 1, &f1) == 0, "touch e1");
    sws_filecache_release(fc, f1);
    CHECK(GET(fc, "/e3", 0, 2, &f3) == 0, "e3 evicts e2, the least recently used");
    sws_filecache_release(fc, f3);
    const sws_filecache_stats_t *st = sws_filecache_stats(fc);
    CHECK(st->entries == 2 && st->evictions == 1, "entries %zu evictions %llu", st->entries,
          (unsigned long long)st->evictions);
    uint64_t misses = st->misses;
    CHECK(GET(fc, "/e1", 0, 3, &f1) == 0 && st->misses == misses, "e1 still cached");
    sws_filecache_release(fc, f1);
    CHECK(GET(fc, "/e2", 0, 3, &f2) == 0 && st->misses == misses + 1, "e2 was evicted");
    sws_filecache_release(fc, f2);
    sws_filecache_free(fc);
    t_end();
}

static void test_dirs_symlinks_and_specials(void)
{
    char p[256], t[256];
    path_of(p, "sub");
    mkdir(p, 0755);
    put("sub/x.html", "<p>");
    path_of(p, "link.txt");
    path_of(t, "sub/x.html");
    symlink(t, p);
    path_of(p, "fifo");
    mkfifo(p, 0644);
    sws_filecache_t *fc = sws_filecache_new(16, 1000, 64);
    sws_file_t *f;
    CHECK(GET(fc, "/sub", 0, 0, &f) == 0 && f->is_dir && f->fd == -1, "directory");
    sws_filecache_release(fc, f);
    CHECK(GET(fc, "/", 0, 0, &f) == 0 && f->is_dir, "the root itself");
    sws_filecache_release(fc, f);
    CHECK(GET(fc, "/sub/x.html", 0, 0, &f) == 0 && f->size == 3, "nested file");
    sws_filecache_release(fc, f);
    CHECK(GET(fc, "/link.txt", 0, 0, &f) == 0 && f->size == 3, "symlink followed by default");
    sws_filecache_release(fc, f);
    int r = GET(fc, "/link.txt", SWS_FC_NOFOLLOW, 0, &f);
    CHECK(r == -ELOOP || r == -EXDEV, "symlink refused with NOFOLLOW: %d", r);
    CHECK(GET(fc, "/fifo", 0, 0, &f) == -EACCES, "no fifos from a document root");
    CHECK(GET(fc, "/missing/x", 0, 0, &f) == -ENOENT, "missing");
    CHECK(GET(fc, "/sub/x.html/y", 0, 0, &f) == -ENOTDIR, "not a directory");
    sws_filecache_free(fc);
    t_end();
}

static void test_large_file_not_in_memory(void)
{
    char p[256];
    path_of(p, "big.bin");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0, "make big file");
    close(fd);
    sws_filecache_t *fc = sws_filecache_new(16, 1000, 65536);
    sws_file_t *f;
    CHECK(GET(fc, "/big.bin", 0, 0, &f) == 0 && f->size == (1u << 20) && f->mem == NULL &&
              f->fd >= 0, "fd only");
    CHECK(sws_filecache_stats(fc)->mem_bytes == 0, "no memory held");
    sws_filecache_release(fc, f);
    sws_filecache_free(fc);
    t_end();
}

int main(void)
{
    strcpy(dir, "/tmp/sws-fc-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    test_hit_miss_and_validators();
    test_fresh_entry_needs_no_syscall();
    test_change_and_rename_replacement();
    test_referenced_entry_survives_change();
    test_lru_bound();
    test_dirs_symlinks_and_specials();
    test_large_file_not_in_memory();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return t_summary();
}
