/*
 * corpus_main.h — the entry points shared by the fuzz drivers that take
 * one input at a time (fuzz_cachecc, fuzz_sni, fuzz_priority, fuzz_h2).
 * Included last, after the driver defines
 *     static void fuzz_one(const uint8_t *data, size_t size);
 * and its `failures` count (FAIL() bumps it outside libFuzzer). With
 * -DFUZZING this is the libFuzzer target; without, main() runs every file
 * of a corpus directory through fuzz_one (tests/c/Makefile does, under
 * ASan/UBSan) and fails if a contract broke. A driver that must tidy up
 * after the corpus defines FUZZ_CORPUS_DONE() before including this.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>

#ifdef FUZZING
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one(data, size);
    return 0;
}
#else
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 2;
    }
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static uint8_t buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        fuzz_one(buf, n);
        files++;
    }
    closedir(d);
#ifdef FUZZ_CORPUS_DONE
    FUZZ_CORPUS_DONE();
#endif
    printf("%d passed, %d failed\n", files - failures, failures);
    return failures ? 1 : 0;
}
#endif
