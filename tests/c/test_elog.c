/* The error-log budget (elog_folded and sws_elog_flush, csrc/core/core.c):
 * lines go to a memfd the cases read back; the wall clock is set by hand
 * (e->core.wall), as the pass's update_time would, so that seconds pass
 * without sleeping. Linked with core.c and httpdate.c alone. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "context.h"
#include "guard.h"

static sws_engine_t *e;
static off_t seen;
static char level[16]; /* the level of the last line got() read */

/* What the log got since the previous call, without the lines' prefix
 * ("2026/12/05 00:00:00 [error] PID#0: "), one line per '\n'. */
static const char *got(void)
{
    static char out[1 << 16];
    char raw[1 << 16];
    ssize_t n = pread(e->core.elog_fd, raw, sizeof raw - 1, seen);
    n = n < 0 ? 0 : n;
    seen += n;
    raw[n] = 0;
    size_t o = 0;
    for (char *line = raw; *line;) {
        char *end = strchr(line, '\n');
        char *msg = strstr(line, "#0: ");
        if (!end || !msg || msg > end)
            break;
        char *lv = strchr(line, '[');
        if (lv && lv < msg)
            snprintf(level, sizeof level, "%.*s", (int)strcspn(lv + 1, "]"), lv + 1);
        msg += 4;
        memcpy(out + o, msg, (size_t)(end + 1 - msg));
        o += (size_t)(end + 1 - msg);
        line = end + 1;
    }
    out[o] = 0;
    return out;
}

static void fresh(int level)
{
    memset(&e->core, 0, sizeof e->core);
    e->core.elog_fd = memfd_create("elog", 0);
    e->core.elog_level = level;
    e->core.wall = 1000;
    memcpy(e->core.err_time, "2026/12/05 00:00:00", SWS_ERR_TIME_LEN);
    seen = 0;
}

static void done(void)
{
    close(e->core.elog_fd);
    t_end();
}

static const char A[] = "cause a", B[] = "cause b";

static void test_one_line_a_second_and_the_count_after(void)
{
    fresh(SWS_L_NOTICE);
    for (int i = 0; i < 4; i++)
        elog_folded(e, A, 7, SWS_L_ERROR, "refused %d", i);
    CHECK(!strcmp(got(), "refused 0\n"), "the first line only: %s", got());
    sws_elog_flush(e, 0);
    CHECK(!*got(), "the tick writes nothing while the second lasts");
    e->core.wall++;
    sws_elog_flush(e, 0);
    CHECK(!strcmp(got(), "3 more like this in the last 1s: refused 0\n"), "count");
    sws_elog_flush(e, 0);
    CHECK(!*got(), "a count is written once");
    elog_folded(e, A, 7, SWS_L_ERROR, "refused %d", 9);
    CHECK(!strcmp(got(), "refused 9\n"), "the next second: a line with no count");
    done();
}

static void test_the_next_line_carries_the_count(void)
{
    fresh(SWS_L_NOTICE);
    for (int i = 0; i < 3; i++)
        elog_folded(e, A, 7, SWS_L_ERROR, "refused %d", i);
    e->core.wall += 2; /* no tick ran in between */
    elog_folded(e, A, 7, SWS_L_ERROR, "refused %d", 3);
    elog_folded(e, A, 7, SWS_L_ERROR, "refused %d", 4);
    CHECK(!strcmp(got(), "refused 0\nrefused 3 (and 2 more like this in the last 2s)\n"),
          "carried: %s", got());
    sws_elog_flush(e, 1); /* at exit: this second's count too */
    CHECK(!strcmp(got(), "1 more like this in the last 1s: refused 3\n"), "exit: %s", got());
    done();
}

static void test_keys_are_cause_and_who(void)
{
    fresh(SWS_L_NOTICE);
    elog_folded(e, A, 1, SWS_L_ERROR, "a1");
    elog_folded(e, A, 2, SWS_L_ERROR, "a2");
    elog_folded(e, B, 1, SWS_L_ERROR, "b1");
    elog_folded(e, A, 1, SWS_L_ERROR, "a1 again");
    elog(e, SWS_L_ERROR, "plain");
    elog(e, SWS_L_ERROR, "plain");
    CHECK(!strcmp(got(), "a1\na2\nb1\nplain\nplain\n"), "%s", got());
    done();
}

static void test_lines_below_the_level_are_not_counted(void)
{
    fresh(SWS_L_NOTICE);
    for (int i = 0; i < 3; i++)
        elog_folded(e, A, 0, SWS_L_INFO, "handshake %d", i);
    e->core.wall++;
    sws_elog_flush(e, 1);
    CHECK(!*got(), "nothing: %s", got());
    done();
}

static void test_a_full_table_counts_the_rest_as_others(void)
{
    fresh(SWS_L_NOTICE);
    for (int i = 0; i < SWS_ELOG_KEYS; i++)
        elog_folded(e, A, (uint64_t)i, SWS_L_WARN, "key %d", i);
    elog_folded(e, A, 0, SWS_L_WARN, "key 0 again");      /* a known key: folded */
    elog_folded(e, B, 0, SWS_L_WARN, "no room");          /* others */
    elog_folded(e, B, 1, SWS_L_ERROR, "no room either");  /* others, more severe */
    const char *g = got();
    CHECK(strstr(g, "key 63\n") && !strstr(g, "no room") && !strstr(g, "again"), "%s", g);
    sws_elog_flush(e, 0);
    CHECK(!*got(), "the second lasts");
    e->core.wall++;
    /* a new key takes the slot idle longest; its count comes out first */
    elog_folded(e, B, 0, SWS_L_WARN, "new key");
    CHECK(!strcmp(got(), "1 more like this in the last 1s: key 0\nnew key\n"), "%s", got());
    sws_elog_flush(e, 0);
    g = got();
    CHECK(strstr(g, "2 more lines of other kinds in the last 1s") == g, "%s", g);
    char line[256];
    snprintf(line, sizeof line, "(the error-log budget tracks %d kinds at once)\n",
             SWS_ELOG_KEYS);
    CHECK(strstr(g, line), "%s", g);
    CHECK(!strcmp(level, "error"), "others at their most severe level: %s", level);
    done();
}

static void test_a_long_line_keeps_its_count(void)
{
    fresh(SWS_L_NOTICE);
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    elog_folded(e, A, 0, SWS_L_ERROR, "%s", big);
    elog_folded(e, A, 0, SWS_L_ERROR, "%s", big);
    e->core.wall++;
    elog_folded(e, A, 0, SWS_L_ERROR, "%s", big);
    char raw[4096];
    ssize_t n = pread(e->core.elog_fd, raw, sizeof raw - 1, 0);
    raw[n > 0 ? n : 0] = 0;
    char *second = strchr(raw, '\n') + 1;
    size_t len = strlen(second);
    static const char count[] = "xxx (and 1 more like this in the last 1s)\n";
    CHECK(len <= 1024, "a line is at most 1024 bytes: %zu", len);
    CHECK(len > sizeof count && !strcmp(second + len - (sizeof count - 1), count), "%s", second);
    done();
}

int main(void)
{
    e = calloc(1, sizeof *e);
    test_one_line_a_second_and_the_count_after();
    test_the_next_line_carries_the_count();
    test_keys_are_cause_and_who();
    test_lines_below_the_level_are_not_counted();
    test_a_full_table_counts_the_rest_as_others();
    test_a_long_line_keeps_its_count();
    free(e);
    return t_summary();
}
