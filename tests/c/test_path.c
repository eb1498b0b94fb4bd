/* sws_normalize_path: every input ends at a PROT_NONE page (guard.h), so a
 * one-byte over-read crashes the test. */
#include "guard.h"
#include "scalws/path.h"

static void ok(const char *in, const char *want)
{
    size_t len = strlen(in);
    const char *p = guard_place(in, len);
    char out[256];
    ssize_t n = sws_normalize_path(p, len, out);
    CHECK(n >= 0 && (size_t)n == strlen(want) && memcmp(out, want, (size_t)n) == 0,
          "%s -> %.*s (want %s)", in, n < 0 ? 2 : (int)n, n < 0 ? "-1" : out, want);
    t_end();
}

static void bad(const char *in)
{
    size_t len = strlen(in);
    const char *p = guard_place(in, len);
    char out[256];
    ssize_t n = sws_normalize_path(p, len, out);
    CHECK(n == -1, "%s -> %zd (want -1)", in, n);
    t_end();
}

int main(void)
{
    ok("/", "/");
    ok("/a/b", "/a/b");
    ok("/a/b/", "/a/b/");
    ok("//a///b//", "/a/b/");
    ok("/a/./b", "/a/b");
    ok("/a/.", "/a/");
    ok("/./", "/");
    ok("/a/../b", "/b");
    ok("/a/b/../../c", "/c");
    ok("/a/..", "/");
    ok("/a/b/..", "/a/");
    ok("/a/.../b", "/a/.../b");
    ok("/a/..b/.c", "/a/..b/.c");
    ok("/%62", "/b");
    ok("/%2e/x/..", "/");
    ok("/a/%2e%2e/b", "/b");
    ok("/a%2fb", "/a/b");
    ok("/a%2F..%2Fb", "/b");
    ok("/%41%42%43", "/ABC");
    ok("/caf%C3%A9", "/caf\xc3\xa9");
    ok("/%e0%a4%85", "/\xe0\xa4\x85"); /* a real 3-byte sequence */
    bad("");
    bad("a/b");
    bad("*");
    bad("/..");
    bad("/../a");
    bad("/a/../..");
    bad("/%2e%2e");
    bad("/a/%2e%2e/%2e%2e/etc/passwd");
    bad("/%");
    bad("/%4");
    bad("/%zz");
    bad("/%4g");
    bad("/a%00b");
    bad("/%c0%ae%c0%ae/");   /* overlong '.' */
    bad("/%c1%9c");          /* overlong '\\' */
    bad("/%e0%80%ae");       /* overlong 3-byte '.' */
    bad("/%f0%80%80%ae");    /* overlong 4-byte '.' */
    return t_summary();
}
