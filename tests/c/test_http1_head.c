/*
 * test_http1_head.c — incomplete request heads (sws_check_request_head,
 * csrc/http/http1.c): a head whose complete lines are already at fault is
 * refused with the status the whole head would get, at the latest when the
 * faulty line's end arrives, whatever the split of the input into reads;
 * a head that is sound so far waits.
 *
 * decide() is what the connection (csrc/http/h1.c, conn_process) does with
 * each read: parse the first max_head bytes, then either judge the complete
 * head (target length, sws_analyze_request) or ask sws_check_request_head.
 * Each case (llhttp-style: a name, the bytes, the expected status) runs
 * whole; split once at every offset (a first read, then the rest as the
 * buffer grows, the state carried); and one byte per read with last_len.
 * Every input sits against a PROT_NONE page (guard.h), and the buffer moves
 * between calls, as a stash does.
 *
 * Usage: test_http1_head      run the cases, print "N passed, M failed"
 */
#include "scalws/http1.h"

#include "guard.h"

#define B(s) s, sizeof(s) - 1
#define WAIT 0        /* no answer yet */
#define ACCEPTED 1    /* a complete head the analysis takes */

/* Small limits, so that the size cases stay small. */
static const sws_head_limits_t LIM = {.max_head = 256, .max_target = 64, .max_fields = 4};

/* What the connection answers after a read that left buf[0..len) of a head
 * whose previous read left last_len bytes: WAIT, ACCEPTED, or a status. */
static int decide(sws_head_check_t *s, const char *buf, size_t len, size_t last_len)
{
    sws_header_t h[8];
    size_t nh = LIM.max_fields, ml, tl;
    const char *m, *t;
    int minor;
    size_t plen = len < LIM.max_head ? len : LIM.max_head;
    int rc = sws_parse_request(buf, plen, &m, &ml, &t, &tl, &minor, h, &nh,
                               len > LIM.max_head ? 0 : last_len);
    if (rc < 0)
        return sws_check_request_head(s, buf, len, last_len, rc, &LIM);
    if (tl > LIM.max_target)
        return 414;
    sws_request_info_t info;
    int st = sws_analyze_request(m, ml, minor, h, nh, &info);
    return st ? st : ACCEPTED;
}

typedef struct {
    const char *name;
    const char *in;
    size_t in_len;
    int status;  /* WAIT, ACCEPTED or the status */
    size_t from; /* no answer from fewer bytes than this (0: from the start) */
    size_t by;   /* the answer is there once this many bytes are (0: in_len; in_len + 1:
                    only at the header timeout, for bytes that arrive one by one) */
} ecase_t;

/* At the header timeout the connection parses what it holds once more
 * (h1.c, stalled_head_fault): a fault inside a line that never ended. */
static int at_timeout(sws_head_check_t *s, const char *in, size_t len)
{
    return decide(s, guard_place(in, len), len, 0);
}

static char long_target[128], long_line[300], long_head[300], fault_then_long[300];

static ecase_t cases[] = {
    /* the request-line: 505 and 400 once its line end is in, or sooner */
    {"HTTP/5.6", B("GET / HTTP/5.6\r\n"), 505, 16},
    {"HTTP/2.0 then fields", B("GET / HTTP/2.0\r\nHost: a\r\nX: y\r\n"), 505, 16, 16},
    {"HTTP/0.9 version", B("GET / HTTP/0.9\r\nHost: a\r\n"), 400, 16, 16},
    {"lowercase version", B("GET / http/1.1\r\nHost: a\r\n"), 400, 7, 16},
    {"method non-tchar", B("G(T / HTTP/1.1\r\nHost: a\r\n"), 400, 2, 16},
    {"empty method", B(" / HTTP/1.1\r\nHost: a\r\n"), 400, 1, 13},
    {"two SP", B("GET  / HTTP/1.1\r\nHost: a\r\n"), 400, 5, 17},
    {"target CTL", B("GET /\x01 HTTP/1.1\r\nHost: a\r\n"), 400, 6, 17},
    {"no version", B("GET /\r\nHost: a\r\n"), 400, 6, 7},
    {"bare CR in request-line", B("GET / HTTP/1.1\rX\nHost: a\r\n"), 400, 16, 17},
    {"bare CR before request-line", B("\r\rGET / HTTP/1.1\r\n"), 400, 2, 18},
    {"target too long", long_target, 0, 414},
    {"fault in a line that never ends", B("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01" "b"), 400, 30, 32},
    /* field lines */
    {"no colon", B("GET / HTTP/1.1\r\nHost\r\nX: y\r\n"), 400, 21, 22},
    {"SP before colon", B("GET / HTTP/1.1\r\nHost : a\r\n"), 400, 21, 26},
    {"obs-fold", B("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n"), 400, 32, 35},
    {"obs-fold HTAB", B("GET / HTTP/1.1\r\nHost: a\r\n\tb\r\n"), 400, 26, 29},
    {"NUL in value", B("GET / HTTP/1.1\r\nX: a\0b\r\nHost: a\r\n"), 400, 21, 24},
    {"bare CR in value", B("GET / HTTP/1.1\r\nX: a\rb\r\nHost: a\r\n"), 400, 22, 24},
    {"DEL in name", B("GET / HTTP/1.1\r\nX\x7f: a\r\n"), 400, 18, 23},
    {"too many fields", B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n"), 431, 41, 46},
    /* fields that make the analysis' 400 certain */
    {"second Content-Length", B("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n"), 400,
     64, 64},
    {"equal Content-Lengths", B("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n"), 400,
     64, 64},
    {"Content-Length not digits", B("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n"), 400, 46, 46},
    {"Content-Length list", B("POST / HTTP/1.1\r\nContent-Length: 3, 3\r\nHost: a\r\n"), 400, 39, 39},
    {"CL then TE", B("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"), 400, 64, 64},
    {"TE then CL", B("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"), 400, 64, 64},
    {"TE in HTTP/1.0", B("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n"), 400, 45, 45},
    {"TE chunked, gzip", B("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n"), 400, 60, 60},
    {"TE chunked twice", B("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
     400, 73, 73},
    {"TE chunked then gzip", B("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"),
     400, 70, 70},
    {"TE chunked;a=b", B("POST / HTTP/1.1\r\nTransfer-Encoding: chunked;a=b\r\n"), 400, 49, 49},
    {"second Host", B("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n"), 400, 34, 34},
    {"bad Host", B("GET / HTTP/1.1\r\nHost: a/b\r\nX: y\r\n"), 400, 27, 27},
    /* the size: nothing past max_head is read */
    {"request-line over max_head", long_line, 0, 414},
    {"head over max_head", long_head, 0, 431},
    {"fault before max_head, line unended", fault_then_long, 0, 400},
    /* the first fault decides, as it does for the complete head */
    {"second CL, then too many fields",
     B("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), 400, 54,
     54},
    {"long target, then a bad field", B("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n"
                                        "X: \x01\r\n\r\n"),
     414, 82, 82},
    {"second CL, complete", B("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
     400, 64, 64},
    {"bad field, complete", B("GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n"), 400, 27, 32},
    /* sound so far: waits (what needs the whole head waits for it) */
    {"incomplete", B("GET / HTTP/1.1\r\nHost: a\r\n"), WAIT},
    {"request-line only", B("GET / HTTP/1.1\r\n"), WAIT},
    {"empty lines first", B("\r\n\nGET / HTTP/1.1\r\nHost: a\r\n"), WAIT},
    {"unknown coding waits (501 needs the whole head)", B("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n"), WAIT},
    {"empty TE then chunked", B("POST / HTTP/1.1\r\nTransfer-Encoding:\r\nTransfer-Encoding: chunked\r\n"), WAIT},
    {"expectation waits (417)", B("PUT / HTTP/1.1\r\nExpect: teapot\r\nHost: a\r\n"), WAIT},
    {"four fields", B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n"), WAIT},
    {"target at max", B("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n"), WAIT},
    /* complete heads: the same answer as before */
    {"complete", B("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), ACCEPTED},
    {"complete, no Host", B("GET / HTTP/1.1\r\nX: a\r\n\r\n"), 400, 24, 24},
    {"complete, gzip", B("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"), 501, 53, 53},
};

static void build_inputs(void)
{
    size_t n = 0;
    n += (size_t)sprintf(long_target, "GET /");
    memset(long_target + n, 'a', 70);
    n += 70;
    n += (size_t)sprintf(long_target + n, " HTTP/1.1\r\nHost: a\r\n");
    /* a request-line that has not ended at max_head + 1 bytes */
    memset(long_line, 'a', sizeof long_line);
    memcpy(long_line, "GET /", 5);
    /* fields that do not end the head within max_head */
    n = (size_t)sprintf(long_head, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    memset(long_head + n, 'v', sizeof long_head - n);
    /* a NUL in a field line that has not ended when max_head passes */
    n = (size_t)sprintf(fault_then_long, "GET / HTTP/1.1\r\nX: a");
    fault_then_long[n] = '\0';
    memset(fault_then_long + n + 1, 'b', sizeof fault_then_long - n - 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ecase_t *c = &cases[i];
        if (c->in == long_target)
            c->in_len = strlen(long_target), c->from = c->by = 86;
        else if (c->in == long_line)
            c->in_len = sizeof long_line, c->from = c->by = LIM.max_head + 1;
        else if (c->in == long_head)
            c->in_len = sizeof long_head, c->from = c->by = LIM.max_head + 1;
        else if (c->in == fault_then_long)
            c->in_len = sizeof fault_then_long, c->from = 21, c->by = LIM.max_head + 1;
    }
}

static void check_case(const ecase_t *c)
{
    size_t by = c->by ? c->by : c->in_len;
    sws_head_check_t s;

    /* whole */
    memset(&s, 0, sizeof s);
    int whole = decide(&s, guard_place(c->in, c->in_len), c->in_len, 0);
    CHECK(whole == c->status, "[%s] whole: %d, want %d", c->name, whole, c->status);

    /* a first read of k bytes, then the rest */
    for (size_t k = 1; k < c->in_len; k++) {
        memset(&s, 0, sizeof s);
        int first = decide(&s, guard_place(c->in, k), k, 0);
        int then = first ? first : decide(&s, guard_place(c->in, c->in_len), c->in_len, k);
        if (!then)
            then = at_timeout(&s, c->in, c->in_len);
        CHECK(then == c->status, "[%s] split at %zu: %d, want %d", c->name, k, then, c->status);
        if (k < c->from)
            CHECK(first == WAIT, "[%s] %zu bytes answered %d, before the fault", c->name, k, first);
        if (k >= by)
            CHECK(first == c->status, "[%s] %zu bytes: %d, want %d at once", c->name, k, first,
                  c->status);
    }

    /* one byte per read, as a client that dribbles: the answer comes by
     * `by`, and not before the fault */
    memset(&s, 0, sizeof s);
    int got = WAIT;
    size_t at = 0, last = 0;
    for (size_t k = 1; k <= c->in_len && got == WAIT; k++) {
        got = decide(&s, guard_place(c->in, k), k, last);
        last = k;
        at = k;
    }
    if (got == WAIT) {
        got = at_timeout(&s, c->in, c->in_len);
        at = c->in_len + 1;
    }
    CHECK(got == c->status, "[%s] byte by byte: %d, want %d", c->name, got, c->status);
    if (c->status != WAIT && c->status != ACCEPTED)
        CHECK(at <= by && at >= c->from, "[%s] byte by byte: answered at %zu, want %zu..%zu", c->name,
              at, c->from, by);
    t_end();
}

/* The state is eight bytes, as the connection keeps it (scalws/h1.h). */
_Static_assert(sizeof(sws_head_check_t) == 8, "sws_head_check_t is 8 bytes");

/* A head that dribbles in costs one pass over its bytes: a line end per
 * byte would rescan everything before it if lines were not remembered. */
static void check_state_advances(void)
{
    static const char in[] = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n";
    sws_head_check_t s = {0};
    CHECK(decide(&s, guard_place(B(in)), sizeof in - 1, 0) == WAIT, "waits");
    CHECK(s.checked == sizeof in - 1 && s.fields == 2 && (s.flags & SWS_HC_LINE) && s.minor == 1,
          "checked %u fields %u flags %x", s.checked, s.fields, s.flags);
    /* no new line end: nothing is looked at again, even a changed byte */
    char buf[64];
    memcpy(buf, in, sizeof in - 1);
    buf[18] = '\x01';
    memcpy(buf + sizeof in - 1, "C: 3", 4);
    CHECK(decide(&s, guard_place(buf, sizeof in + 3), sizeof in + 3, sizeof in - 1) == WAIT,
          "checked lines are not read again");
    static const char head[] = "HEAD / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n";
    s = (sws_head_check_t){0};
    CHECK(decide(&s, guard_place(B(head)), sizeof head - 1, 0) == 400 && (s.flags & SWS_HC_HEAD),
          "HEAD is noted");
    t_end();
}

int main(void)
{
    build_inputs();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
    check_state_advances();
    return t_summary();
}
