/*
 * test_http1_cases.h — the cases of test_http1.c: request heads, their
 * analysis, response heads, their analysis, and chunked bodies, each with
 * what it must give. Included once, by test_http1.c (both of its builds).
 */
#ifndef SCALWS_TEST_HTTP1_CASES_H
#define SCALWS_TEST_HTTP1_CASES_H

/* ---- requests ------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *in;
    size_t in_len;
    int rc;               /* ALL, a byte count, or SWS_PARSE_* */
    const char *method;   /* checked when rc > 0 */
    const char *target;
    int minor;
    const char *hdrs[16]; /* name, value, name, value, ..., NULL */
    size_t cap;           /* header capacity; 0 means MAXH */
} pcase_t;

#define H(...) { __VA_ARGS__, NULL }

static const pcase_t parse_cases[] = {
    /* accepted */
    {"simple", B("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), ALL, "GET", "/", 1, H("Host", "a")},
    {"http10 no headers", B("GET /x HTTP/1.0\r\n\r\n"), ALL, "GET", "/x", 0, H(NULL)},
    {"bare LF", B("GET / HTTP/1.1\nHost: a\nB: c\n\n"), ALL, "GET", "/", 1, H("Host", "a", "B", "c")},
    {"mixed line ends", B("GET / HTTP/1.1\r\nHost: a\n\r\n"), ALL, "GET", "/", 1, H("Host", "a")},
    {"leading CRLFs", B("\r\n\r\nGET / HTTP/1.1\r\n\r\n"), ALL, "GET", "/", 1, H(NULL)},
    {"leading LFs", B("\n\nGET / HTTP/1.1\r\n\r\n"), ALL, "GET", "/", 1, H(NULL)},
    {"OWS trimmed", B("GET / HTTP/1.1\r\nX: \t v a l \t \r\n\r\n"), ALL, "GET", "/", 1, H("X", "v a l")},
    {"empty value", B("GET / HTTP/1.1\r\nX:\r\nY:   \r\n\r\n"), ALL, "GET", "/", 1, H("X", "", "Y", "")},
    {"obs-text value", B("GET / HTTP/1.1\r\nX: caf\xc3\xa9\xff\r\n\r\n"), ALL, "GET", "/", 1,
     H("X", "caf\xc3\xa9\xff")},
    {"obs-text target", B("GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n"), ALL, "GET", "/caf\xc3\xa9", 1, H(NULL)},
    {"htab in value", B("GET / HTTP/1.1\r\nX: a\tb\r\n\r\n"), ALL, "GET", "/", 1, H("X", "a\tb")},
    {"tchar method and name", B("!#$%&'*+-.^_`|~09azAZ / HTTP/1.1\r\n!#$%&'*+-.^_`|~09azAZ: v\r\n\r\n"),
     ALL, "!#$%&'*+-.^_`|~09azAZ", "/", 1, H("!#$%&'*+-.^_`|~09azAZ", "v")},
    {"lowercase method is a token", B("get / HTTP/1.1\r\n\r\n"), ALL, "get", "/", 1, H(NULL)},
    {"M-SEARCH", B("M-SEARCH * HTTP/1.1\r\n\r\n"), ALL, "M-SEARCH", "*", 1, H(NULL)},
    {"long name and value",
     B("POST /a/very/long/path/that/spans/more/than/sixteen/bytes?q=1&r=2 HTTP/1.1\r\n"
       "X-A-Rather-Long-Header-Name~With~Tildes: a value that is longer than thirty-two bytes \x80\r\n"
       "\r\n"),
     ALL, "POST", "/a/very/long/path/that/spans/more/than/sixteen/bytes?q=1&r=2", 1,
     H("X-A-Rather-Long-Header-Name~With~Tildes", "a value that is longer than thirty-two bytes \x80")},
    {"HTTP/1.5 minor", B("GET / HTTP/1.5\r\n\r\n"), ALL, "GET", "/", 5, H(NULL)},
    {"HTTP/1.9 minor", B("GET / HTTP/1.9\r\n\r\n"), ALL, "GET", "/", 9, H(NULL)},
    {"pipelined", B("GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"), 19, "GET", "/1", 1, H(NULL)},
    {"body follows", B("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"), 38, "POST", "/", 1,
     H("Content-Length", "3")},
    {"absolute-form", B("GET http://a.example:80/x?y HTTP/1.1\r\n\r\n"), ALL, "GET",
     "http://a.example:80/x?y", 1, H(NULL)},
    {"authority-form", B("CONNECT a.example:443 HTTP/1.1\r\n\r\n"), ALL, "CONNECT", "a.example:443", 1,
     H(NULL)},
    {"headers == capacity", B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), ALL, "GET", "/", 1,
     H("A", "1", "B", "2", "C", "3"), 3},
    {"no headers, capacity 0", B("GET / HTTP/1.1\r\n\r\n"), ALL, "GET", "/", 1, H(NULL), (size_t)-1},
    {"colon in value", B("GET / HTTP/1.1\r\nX: a:b: c\r\n\r\n"), ALL, "GET", "/", 1, H("X", "a:b: c")},

    /* incomplete */
    {"empty input", B(""), SWS_PARSE_INCOMPLETE},
    {"only CRLF", B("\r\n"), SWS_PARSE_INCOMPLETE},
    {"no final empty line", B("GET / HTTP/1.1\r\nHost: a\r\n"), SWS_PARSE_INCOMPLETE},
    {"ends in CR", B("GET / HTTP/1.1\r\nHost: a\r\n\r"), SWS_PARSE_INCOMPLETE},

    /* method: 1*tchar then exactly one SP */
    {"empty method", B(" / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"method non-tchar", B("GE(T / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"method obs-text", B("G\x80T / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"method NUL", B("G\0T / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"method HTAB sep", B("GET\t/ HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"two SP after method", B("GET  / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"two SP after target", B("GET /  HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"SP after version", B("GET / HTTP/1.1 \r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/0.9 request", B("GET /\r\n\r\n"), SWS_PARSE_ERROR},
    {"method only", B("GET\r\n\r\n"), SWS_PARSE_ERROR},

    /* request-target: no CTL, SP, DEL */
    {"target NUL", B("GET /\0 HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"target DEL", B("GET /\x7f HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"target CTL", B("GET /\x01 HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"target HTAB", B("GET /\ta HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"target long with NUL", B("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\0 HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},

    /* HTTP-version */
    {"lowercase http", B("GET / http/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/1.10", B("GET / HTTP/1.10\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/1", B("GET / HTTP/1\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/1.x", B("GET / HTTP/1.x\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/11.1", B("GET / HTTP/11.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/0.9", B("GET / HTTP/0.9\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/2.0", B("GET / HTTP/2.0\r\n\r\n"), SWS_PARSE_VERSION},
    {"HTTP/3.0", B("GET / HTTP/3.0\r\nHost: a\r\n\r\n"), SWS_PARSE_VERSION},
    {"HTTP/9.9", B("GET / HTTP/9.9\r\n\r\n"), SWS_PARSE_VERSION},
    {"h2 preface", B("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), SWS_PARSE_VERSION},
    {"HTTP/2.0 then junk", B("GET / HTTP/2.0 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/1.1 bare CR", B("GET / HTTP/1.1\rX\r\n\r\n"), SWS_PARSE_ERROR},

    /* field lines */
    {"SP before colon", B("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTAB before colon", B("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"obs-fold", B("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), SWS_PARSE_ERROR},
    {"obs-fold HTAB", B("GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n"), SWS_PARSE_ERROR},
    {"SP before first field", B("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"empty name", B("GET / HTTP/1.1\r\n: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"name non-tchar", B("GET / HTTP/1.1\r\nX(: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"name obs-text", B("GET / HTTP/1.1\r\nX\x80: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"name with SP", B("GET / HTTP/1.1\r\nX Y: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"no colon", B("GET / HTTP/1.1\r\nHost\r\n\r\n"), SWS_PARSE_ERROR},
    {"value NUL", B("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n"), SWS_PARSE_ERROR},
    {"value SOH", B("GET / HTTP/1.1\r\nX: a\x01\r\n\r\n"), SWS_PARSE_ERROR},
    {"value VT", B("GET / HTTP/1.1\r\nX: a\x0b\r\n\r\n"), SWS_PARSE_ERROR},
    {"value DEL", B("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n"), SWS_PARSE_ERROR},
    {"value ESC long", B("GET / HTTP/1.1\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaa\x1b\r\n\r\n"), SWS_PARSE_ERROR},
    {"value bare CR", B("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"), SWS_PARSE_ERROR},
    {"bare CR end of head", B("GET / HTTP/1.1\r\nX: a\r\n\rX\r\n"), SWS_PARSE_ERROR},
    {"bare CR leading", B("\rGET / HTTP/1.1\r\n\r\n"), SWS_PARSE_ERROR},
    {"bare CR line end", B("GET / HTTP/1.1\r\nX: a\r\r\n\r\n"), SWS_PARSE_ERROR},

    /* header capacity */
    {"too many headers", B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), SWS_PARSE_TOO_MANY_HEADERS,
     NULL, NULL, 0, H(NULL), 2},
    {"one header, capacity 0", B("GET / HTTP/1.1\r\nA: 1\r\n\r\n"), SWS_PARSE_TOO_MANY_HEADERS, NULL, NULL,
     0, H(NULL), (size_t)-1},
};

/* ---- request analysis ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *head; /* request head; parsed first */
    int status;
    long long cl;     /* -1: no Content-Length expected */
    int chunked, keepalive, expect, upgrade;
    const char *host; /* NULL: no Host expected */
    int method;
} acase_t;

static const acase_t analyze_cases[] = {
    {"get 1.1", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, -1, 0, 1, 0, 0, "a", SWS_M_GET},
    {"1.1 no host", "GET / HTTP/1.1\r\n\r\n", 400, -1, 0, 1, 0, 0, NULL, SWS_M_GET},
    {"1.5 no host", "GET / HTTP/1.5\r\n\r\n", 400, -1, 0, 1, 0, 0, NULL, SWS_M_GET},
    {"1.0 no host", "GET / HTTP/1.0\r\n\r\n", 0, -1, 0, 0, 0, 0, NULL, SWS_M_GET},
    {"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0, -1, 0, 1, 0, 0, NULL, SWS_M_GET},
    {"1.0 Keep-Alive case", "GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n", 0, -1, 0, 1, 0, 0, NULL,
     SWS_M_GET},
    {"1.0 keep-alive, close", "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0, -1, 0, 0, 0, 0,
     NULL, SWS_M_GET},
    {"1.1 close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 0, -1, 0, 0, 0, 0, "a", SWS_M_GET},
    {"1.1 close in list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo , CLOSE,\r\n\r\n", 0, -1, 0, 0, 0, 0,
     "a", SWS_M_GET},
    {"1.1 close 2nd field", "GET / HTTP/1.1\r\nHost: a\r\nConnection: a\r\nConnection: close\r\n\r\n", 0, -1,
     0, 0, 0, 0, "a", SWS_M_GET},
    {"1.1 closed not close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", 0, -1, 0, 1, 0, 0,
     "a", SWS_M_GET},
    {"CL 5", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", 0, 5, 0, 1, 0, 0, "a", SWS_M_POST},
    {"CL 0", "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n", 0, 0, 0, 1, 0, 0, "a", SWS_M_POST},
    {"CL 007", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n", 0, 7, 0, 1, 0, 0, "a", SWS_M_POST},
    {"CL max", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n", 0,
     9223372036854775807LL, 0, 1, 0, 0, "a", SWS_M_PUT},
    {"CL max+1", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", 400, -2, 0, 1, 0,
     0, "a", SWS_M_PUT},
    {"CL 20 digits", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400, -2, 0,
     1, 0, 0, "a", SWS_M_PUT},
    {"CL dup equal", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400, -2,
     0, 1, 0, 0, "a", SWS_M_POST},
    {"CL list equal", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL list nospace", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,5\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL alpha", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL plus", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL inner space", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", 400, -2, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"CL empty", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400, -2, 0, 1, 0, 0, "a", SWS_M_POST},
    {"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     5, 1, 1, 0, 0, "a", SWS_M_POST},
    {"TE chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0, -1, 1, 1, 0, 0, "a",
     SWS_M_POST},
    {"TE Chunked case", "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: CHUNKED\r\n\r\n", 0, -1, 1, 1, 0, 0,
     "a", SWS_M_POST},
    {"TE in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, -1, 1, 0, 0, 0, NULL,
     SWS_M_POST},
    {"TE gzip, chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, -1, 1,
     1, 0, 0, "a", SWS_M_POST},
    {"TE gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501, -1, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"TE x", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x\r\n\r\n", 501, -1, 0, 1, 0, 0, "a", SWS_M_POST},
    {"TE gzip;q, chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip;a=1, chunked\r\n\r\n", 501,
     -1, 1, 1, 0, 0, "a", SWS_M_POST},
    {"TE chunked, gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400, -1, 0,
     1, 0, 0, "a", SWS_M_POST},
    {"TE chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400, -1,
     1, 1, 0, 0, "a", SWS_M_POST},
    {"TE chunked two fields",
     "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, -1,
     1, 1, 0, 0, "a", SWS_M_POST},
    {"TE gzip then chunked fields",
     "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501, -1, 1,
     1, 0, 0, "a", SWS_M_POST},
    {"TE chunked then gzip fields",
     "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400, -1, 0,
     1, 0, 0, "a", SWS_M_POST},
    {"TE empty", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400, -1, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"TE comma", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n", 400, -1, 0, 1, 0, 0, "a",
     SWS_M_POST},
    {"TE chunked params", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;a=b\r\n\r\n", 400, -1, 1,
     1, 0, 0, "a", SWS_M_POST},
    {"TE chu nked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chu nked\r\n\r\n", 400, -1, 0, 1, 0, 0,
     "a", SWS_M_POST},
    {"TE gzip + CL is 400", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\n\r\n",
     400, 1, 0, 1, 0, 0, "a", SWS_M_POST},
    {"host dup", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, -1, 0, 1, 0, 0, "a", SWS_M_GET},
    {"host dup 1.0", "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", 400, -1, 0, 0, 0, 0, "a", SWS_M_GET},
    {"host space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, -1, 0, 1, 0, 0, "a b", SWS_M_GET},
    {"host slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, -1, 0, 1, 0, 0, "a/b", SWS_M_GET},
    {"host at", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400, -1, 0, 1, 0, 0, "u@a", SWS_M_GET},
    {"host obs-text", "GET / HTTP/1.1\r\nHost: caf\xc3\xa9\r\n\r\n", 400, -1, 0, 1, 0, 0, "caf\xc3\xa9",
     SWS_M_GET},
    {"host ipv6 port", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 0, -1, 0, 1, 0, 0, "[::1]:8080", SWS_M_GET},
    {"host reg-name chars", "GET / HTTP/1.1\r\nHost: a-b.c_d~%41!$&'()*+,;=:80\r\n\r\n", 0, -1, 0, 1, 0, 0,
     "a-b.c_d~%41!$&'()*+,;=:80", SWS_M_GET},
    {"host empty", "GET / HTTP/1.1\r\nHost:\r\n\r\n", 0, -1, 0, 1, 0, 0, "", SWS_M_GET},
    {"expect 100", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", 0, -1, 0, 1, 1, 0, "a",
     SWS_M_PUT},
    {"expect 100 case", "PUT / HTTP/1.1\r\nHost: a\r\nexpect: 100-Continue\r\n\r\n", 0, -1, 0, 1, 1, 0, "a",
     SWS_M_PUT},
    {"expect foo", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: foo\r\n\r\n", 417, -1, 0, 1, 0, 0, "a", SWS_M_PUT},
    {"expect 100, foo", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\n\r\n", 417, -1, 0, 1, 1, 0,
     "a", SWS_M_PUT},
    {"expect in 1.0 ignored", "PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", 0, -1, 0, 0, 0, 0, NULL,
     SWS_M_PUT},
    {"expect foo + bad host", "PUT / HTTP/1.1\r\nHost: a b\r\nExpect: foo\r\n\r\n", 400, -1, 0, 1, 0, 0, "a b",
     SWS_M_PUT},
    {"expect foo + gzip", "PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nExpect: foo\r\n\r\n", 501,
     -1, 0, 1, 0, 0, "a", SWS_M_PUT},
    {"upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 0, -1, 0, 1,
     0, 1, "a", SWS_M_GET},
    {"upgrade in list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgrade\r\nupgrade: h2c\r\n\r\n",
     0, -1, 0, 1, 0, 1, "a", SWS_M_GET},
    {"upgrade no token", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", 0, -1, 0, 1, 0, 0, "a",
     SWS_M_GET},
    {"upgrade token no field", "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", 0, -1, 0, 1, 0, 0,
     "a", SWS_M_GET},
    {"other method", "PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", 0, -1, 0, 1, 0, 0, "a", SWS_M_OTHER},
};

/* ---- responses ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *in;
    size_t in_len;
    int rc;               /* ALL, a byte count, or SWS_PARSE_* */
    int minor, status;    /* checked when rc > 0 */
    const char *reason;
    const char *hdrs[16]; /* name, value, ..., NULL */
    size_t cap;           /* header capacity; 0 means MAXH, (size_t)-1 means 0 */
} rcase_t;

static const rcase_t response_cases[] = {
    /* accepted */
    {"200 OK", B("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), ALL, 1, 200, "OK",
     H("Content-Length", "0")},
    {"1.0 404", B("HTTP/1.0 404 Not Found\r\n\r\n"), ALL, 0, 404, "Not Found", H(NULL)},
    {"empty reason with SP", B("HTTP/1.1 204 \r\n\r\n"), ALL, 1, 204, "", H(NULL)},
    {"no SP before empty reason", B("HTTP/1.1 200\r\nA: b\r\n\r\n"), ALL, 1, 200, "", H("A", "b")},
    {"no SP, bare LF", B("HTTP/1.1 301\nLocation: /x\n\n"), ALL, 1, 301, "", H("Location", "/x")},
    {"bare LF", B("HTTP/1.1 200 OK\nA: 1\nB: 2\n\n"), ALL, 1, 200, "OK", H("A", "1", "B", "2")},
    {"reason with SP, HTAB, obs-text", B("HTTP/1.1 500 Very \tBad \x80\xff Stuff \r\n\r\n"), ALL, 1, 500,
     "Very \tBad \x80\xff Stuff ", H(NULL)},
    {"reason leading SP kept", B("HTTP/1.1 200  OK\r\n\r\n"), ALL, 1, 200, " OK", H(NULL)},
    {"long reason", B("HTTP/1.1 418 I'm a teapot, and this reason phrase is longer than 32 bytes!\r\n\r\n"),
     ALL, 1, 418, "I'm a teapot, and this reason phrase is longer than 32 bytes!", H(NULL)},
    {"100", B("HTTP/1.1 100 Continue\r\n\r\n"), ALL, 1, 100, "Continue", H(NULL)},
    {"599", B("HTTP/1.1 599 x\r\n\r\n"), ALL, 1, 599, "x", H(NULL)},
    {"OWS trimmed", B("HTTP/1.1 200 OK\r\nX: \t v a l \t \r\nY:\r\n\r\n"), ALL, 1, 200, "OK",
     H("X", "v a l", "Y", "")},
    {"body follows", B("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"), 38, 1, 200, "OK",
     H("Content-Length", "3")},
    {"next response follows", B("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), 25, 1, 100,
     "Continue", H(NULL)},
    {"headers == capacity", B("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n"), ALL, 1, 200, "OK",
     H("A", "1", "B", "2"), 2},
    {"no headers, capacity 0", B("HTTP/1.1 200 OK\r\n\r\n"), ALL, 1, 200, "OK", H(NULL), (size_t)-1},

    /* incomplete */
    {"empty", B(""), SWS_PARSE_INCOMPLETE},
    {"status line only", B("HTTP/1.1 200 OK\r\n"), SWS_PARSE_INCOMPLETE},
    {"ends in CR", B("HTTP/1.1 200 OK\r\nA: b\r\n\r"), SWS_PARSE_INCOMPLETE},
    {"partial version", B("HTTP/1."), SWS_PARSE_INCOMPLETE},
    {"partial code", B("HTTP/1.1 20"), SWS_PARSE_INCOMPLETE},

    /* version */
    {"HTTP/1.2", B("HTTP/1.2 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/2.0", B("HTTP/2.0 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/2", B("HTTP/2 200\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/0.9", B("HTTP/0.9 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/1.10", B("HTTP/1.10 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"lowercase http", B("http/1.1 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"ICY", B("ICY 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTTP/0.9 body", B("<html>hello</html>\n\n"), SWS_PARSE_ERROR},
    {"leading CRLF", B("\r\nHTTP/1.1 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"leading LF", B("\nHTTP/1.1 200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"leading SP", B(" HTTP/1.1 200 OK\r\n\r\n"), SWS_PARSE_ERROR},

    /* status-code */
    {"two SP before code", B("HTTP/1.1  200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTAB before code", B("HTTP/1.1\t200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"no SP before code", B("HTTP/1.1200 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"no code", B("HTTP/1.1 \r\n\r\n"), SWS_PARSE_ERROR},
    {"two digits", B("HTTP/1.1 20 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"two digits EOL", B("HTTP/1.1 20\r\n\r\n"), SWS_PARSE_ERROR},
    {"four digits", B("HTTP/1.1 2000 OK\r\n\r\n"), SWS_PARSE_ERROR},
    {"code 099", B("HTTP/1.1 099 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"code 000", B("HTTP/1.1 000 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"code 600", B("HTTP/1.1 600 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"code 999", B("HTTP/1.1 999 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"code sign", B("HTTP/1.1 +20 x\r\n\r\n"), SWS_PARSE_ERROR},
    {"code hex", B("HTTP/1.1 20a x\r\n\r\n"), SWS_PARSE_ERROR},
    {"HTAB after code", B("HTTP/1.1 200\tOK\r\n\r\n"), SWS_PARSE_ERROR},

    /* reason-phrase */
    {"reason NUL", B("HTTP/1.1 200 O\0K\r\n\r\n"), SWS_PARSE_ERROR},
    {"reason DEL", B("HTTP/1.1 200 O\x7fK\r\n\r\n"), SWS_PARSE_ERROR},
    {"reason CTL", B("HTTP/1.1 200 O\x01K\r\n\r\n"), SWS_PARSE_ERROR},
    {"reason bare CR", B("HTTP/1.1 200 O\rK\r\n\r\n"), SWS_PARSE_ERROR},
    {"reason CR CR LF", B("HTTP/1.1 200 OK\r\r\n\r\n"), SWS_PARSE_ERROR},
    {"no-reason bare CR", B("HTTP/1.1 200\rX\r\n\r\n"), SWS_PARSE_ERROR},

    /* field lines: as requests */
    {"SP before colon", B("HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n"), SWS_PARSE_ERROR},
    {"obs-fold", B("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n"), SWS_PARSE_ERROR},
    {"SP before first field", B("HTTP/1.1 200 OK\r\n X: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"empty name", B("HTTP/1.1 200 OK\r\n: a\r\n\r\n"), SWS_PARSE_ERROR},
    {"no colon", B("HTTP/1.1 200 OK\r\nGarbage\r\n\r\n"), SWS_PARSE_ERROR},
    {"value NUL", B("HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n"), SWS_PARSE_ERROR},
    {"value CTL long", B("HTTP/1.1 200 OK\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x1b\r\n\r\n"), SWS_PARSE_ERROR},
    {"value bare CR", B("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n"), SWS_PARSE_ERROR},
    {"bare CR end of head", B("HTTP/1.1 200 OK\r\nX: a\r\n\rX\r\n"), SWS_PARSE_ERROR},

    /* capacity */
    {"too many headers", B("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), SWS_PARSE_TOO_MANY_HEADERS, 0, 0,
     NULL, H(NULL), 2},
    {"one header, capacity 0", B("HTTP/1.1 200 OK\r\nA: 1\r\n\r\n"), SWS_PARSE_TOO_MANY_HEADERS, 0, 0, NULL,
     H(NULL), (size_t)-1},
};

/* ---- response analysis --------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int req_method;
    const char *head; /* response head; parsed first */
    int rc;           /* 0 or -1 */
    long long cl;     /* -1: no Content-Length expected; -2: not checked */
    int chunked, close_delimited, no_body, keepalive, upgrade;
} racase_t;

#define GET_ SWS_M_GET
static const racase_t ranalyze_cases[] = {
    /* framing */
    {"CL", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 0, 5, 0, 0, 0, 1, 0},
    {"CL 0", GET_, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 0, 0, 0, 0, 0, 1, 0},
    {"CL max", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n", 0,
     9223372036854775807LL, 0, 0, 0, 1, 0},
    {"chunked", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0, -1, 1, 0, 0, 1, 0},
    {"Chunked case", GET_, "HTTP/1.1 200 OK\r\ntransfer-encoding: CHUNKED\r\n\r\n", 0, -1, 1, 0, 0, 1, 0},
    {"gzip, chunked", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, -1, 1, 0, 0, 1, 0},
    {"gzip then chunked fields", GET_,
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 0, -1, 1, 0, 0, 1, 0},
    {"TE gzip: until close", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, -1, 0, 1, 0, 0, 0},
    {"TE gzip;q=1: until close", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip;q=1\r\n\r\n", 0, -1, 0, 1,
     0, 0, 0},
    {"no framing: until close", GET_, "HTTP/1.1 200 OK\r\n\r\n", 0, -1, 0, 1, 0, 0, 0},
    {"no framing 1.0", GET_, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", 0, -1, 0, 1, 0, 0, 0},
    /* no body */
    {"HEAD with CL", SWS_M_HEAD, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", 0, 1234, 0, 0, 1, 1, 0},
    {"HEAD with chunked", SWS_M_HEAD, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0, -1, 0, 0, 1,
     1, 0},
    {"HEAD no framing", SWS_M_HEAD, "HTTP/1.1 200 OK\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"100", GET_, "HTTP/1.1 100 Continue\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"103 CL 0", GET_, "HTTP/1.1 103 Early Hints\r\nContent-Length: 0\r\n\r\n", 0, 0, 0, 0, 1, 1, 0},
    {"204", SWS_M_DELETE, "HTTP/1.1 204 No Content\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"204 CL 0", GET_, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", 0, 0, 0, 0, 1, 1, 0},
    {"304 with CL", GET_, "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", 0, 99, 0, 0, 1, 1, 0},
    {"304 no framing", GET_, "HTTP/1.1 304 Not Modified\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"CONNECT 200", SWS_M_CONNECT, "HTTP/1.1 200 Connection Established\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"CONNECT 200 CL+TE ignored", SWS_M_CONNECT,
     "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, -1, 0, 0, 1, 1, 0},
    {"CONNECT 407 has a body", SWS_M_CONNECT, "HTTP/1.1 407 Auth\r\nContent-Length: 3\r\n\r\n", 0, 3, 0, 0, 0,
     1, 0},
    {"CONNECT 300 until close", SWS_M_CONNECT, "HTTP/1.1 300 x\r\n\r\n", 0, -1, 0, 1, 0, 0, 0},
    /* keepalive */
    {"1.0 CL", GET_, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", 0, 1, 0, 0, 0, 0, 0},
    {"1.0 CL keep-alive", GET_, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: Keep-Alive\r\n\r\n", 0, 1,
     0, 0, 0, 1, 0},
    {"1.1 close", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: x, close\r\n\r\n", 0, 1, 0, 0, 0,
     0, 0},
    {"1.1 keep-alive, close", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n"
     "connection: CLOSE\r\n\r\n", 0, 1, 0, 0, 0, 0, 0},
    {"1.1 closed is not close", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: closed\r\n\r\n", 0,
     1, 0, 0, 0, 1, 0},
    /* upgrade */
    {"101 upgrade", GET_, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
     0, -1, 0, 0, 1, 1, 1},
    {"101 no Upgrade field", GET_, "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n", 0, -1, 0,
     0, 1, 1, 0},
    {"200 advertises upgrade", GET_,
     "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", 0, 0, 0, 0, 0, 1, 0},
    /* refused: -1 */
    {"CL and TE", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", -1, 5, 1,
     0, 0, 0, 0},
    {"TE and CL", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", -1, 5, 1,
     0, 0, 0, 0},
    {"gzip TE and CL", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n", -1, 5, 0,
     1, 0, 0, 0},
    {"HEAD CL and TE", SWS_M_HEAD, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     -1, 5, 0, 0, 1, 0, 0},
    {"CL dup equal", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", -1, -2, 0, 0, 0,
     0, 0},
    {"CL dup differ", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", -1, -2, 0, 0,
     0, 0, 0},
    {"CL list equal", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL list differ", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5,6\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL alpha", GET_, "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL negative", GET_, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL plus", GET_, "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL hex", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL inner space", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL empty", GET_, "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"CL max+1", GET_, "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n", -1, -2, 0, 0, 0, 0, 0},
    {"HEAD CL malformed", SWS_M_HEAD, "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", -1, -2, 0, 0, 1, 0, 0},
    {"304 CL malformed", GET_, "HTTP/1.1 304 x\r\nContent-Length: 1, 1\r\n\r\n", -1, -2, 0, 0, 1, 0, 0},
    {"chunked, gzip", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -1, -1, 0, 1, 0, 0, 0},
    {"chunked then gzip fields", GET_,
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", -1, -1, 0, 1, 0, 0, 0},
    {"chunked twice", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", -1, -1, 1, 0, 0, 0,
     0},
    {"chunked two fields", GET_,
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", -1, -1, 1, 0, 0, 0,
     0},
    {"chunked params", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;a=b\r\n\r\n", -1, -1, 1, 0, 0, 0, 0},
    {"TE empty", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n", -1, -1, 0, 1, 0, 0, 0},
    {"TE comma", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n", -1, -1, 0, 1, 0, 0, 0},
    {"TE not a token", GET_, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chu nked\r\n\r\n", -1, -1, 0, 1, 0, 0, 0},
    {"TE in 1.0", GET_, "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", -1, -1, 1, 0, 0, 0, 0},
    {"100 with TE", GET_, "HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n", -1, -1, 0, 0, 1, 0, 0},
    {"101 with CL 5", GET_, "HTTP/1.1 101 x\r\nContent-Length: 5\r\n\r\n", -1, 5, 0, 0, 1, 0, 0},
    {"204 with CL 1", GET_, "HTTP/1.1 204 x\r\nContent-Length: 1\r\n\r\n", -1, 1, 0, 0, 1, 0, 0},
    {"204 with TE", GET_, "HTTP/1.1 204 x\r\nTransfer-Encoding: chunked\r\n\r\n", -1, -1, 0, 0, 1, 0, 0},
    {"HEAD 204 with TE", SWS_M_HEAD, "HTTP/1.1 204 x\r\nTransfer-Encoding: chunked\r\n\r\n", -1, -1, 0, 0, 1, 0,
     0},
};

/* ---- chunked bodies ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *in;
    size_t in_len;
    int rc;            /* bytes after the body, or SWS_PARSE_ERROR / INCOMPLETE */
    const char *body;  /* decoded bytes expected (before an error, a prefix of them) */
} ccase_t;

static char big_ext[SWS_CHUNK_EXT_MAX + 64];
static char big_trailer[SWS_CHUNK_TRAILER_MAX + 64];
static char ok_ext[SWS_CHUNK_EXT_MAX + 64];

static ccase_t chunked_cases[] = {
    {"one chunk", B("5\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"two chunks", B("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), 0, "abcde"},
    {"hex upper", B("A\r\n0123456789\r\n0\r\n\r\n"), 0, "0123456789"},
    {"hex lower", B("a\r\n0123456789\r\n0\r\n\r\n"), 0, "0123456789"},
    {"hex 0x20", B("20\r\n0123456789abcdef0123456789ABCDEF\r\n0\r\n\r\n"), 0,
     "0123456789abcdef0123456789ABCDEF"},
    {"leading zeros", B("0005\r\nhello\r\n000\r\n\r\n"), 0, "hello"},
    {"16 digits", B("0000000000000005\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"17 digits", B("00000000000000005\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"max size incomplete", B("ffffffffffffffff\r\nabc"), SWS_PARSE_INCOMPLETE, "abc"},
    {"total overflow", B("1\r\na\r\nffffffffffffffff\r\n"), SWS_PARSE_ERROR, "a"},
    {"empty body", B("0\r\n\r\n"), 0, ""},
    {"rest follows", B("1\r\na\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 18, "a"},
    {"ext", B("5;a=b\r\nhello\r\n0;x\r\n\r\n"), 0, "hello"},
    {"ext BWS", B("5 ; a = b ;c\t;d=\"\"\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"ext quoted", B("5;a=\"q \\\" s\\\\;\x80\"\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"ext quoted then more", B("5;a=\"x\" ;b=c\r\nhello\r\n0\r\n\r\n"), 0, "hello"},
    {"ext empty name", B("5;\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext trailing SP", B("5 \r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext empty value", B("5;a=\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext unterminated quote", B("5;a=\"x\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext CTL in quote", B("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext name SP name", B("5;a b\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext bad name", B("5;@\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"ext value junk", B("5;a=b\"c\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"trailer", B("0\r\nX: y\r\n\r\n"), 0, ""},
    {"trailers", B("2\r\nab\r\n0\r\nX: y\r\nZ:\r\nW: \x80\t\r\n\r\nNEXT"), 4, "ab"},
    {"trailer SP before colon", B("0\r\nX : y\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"trailer obs-fold", B("0\r\nX: y\r\n z\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"trailer NUL", B("0\r\nX: a\0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"trailer no colon", B("0\r\nX\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"trailer bare LF", B("0\r\nX: y\n\r\n"), SWS_PARSE_ERROR, ""},
    {"data not followed by CRLF", B("5\r\nhelloX\r\n0\r\n\r\n"), SWS_PARSE_ERROR, "hello"},
    {"data then LF", B("5\r\nhello\n0\r\n\r\n"), SWS_PARSE_ERROR, "hello"},
    {"data then CR X", B("5\r\nhello\rX0\r\n\r\n"), SWS_PARSE_ERROR, "hello"},
    {"size bare CR", B("5\rX"), SWS_PARSE_ERROR, ""},
    {"final bare CR", B("5\r\nhello\r\n0\r\n\rX"), SWS_PARSE_ERROR, "hello"},
    {"size bare LF", B("5\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"final bare LF", B("0\r\n\n"), SWS_PARSE_ERROR, ""},
    {"bad hex", B("g\r\n"), SWS_PARSE_ERROR, ""},
    {"empty size", B("\r\n"), SWS_PARSE_ERROR, ""},
    {"negative", B("-5\r\n"), SWS_PARSE_ERROR, ""},
    {"0x prefix", B("0x5\r\nhello\r\n0\r\n\r\n"), SWS_PARSE_ERROR, ""},
    {"incomplete data", B("5\r\nhel"), SWS_PARSE_INCOMPLETE, "hel"},
    {"incomplete trailer", B("5\r\nhello\r\n0\r\n"), SWS_PARSE_INCOMPLETE, "hello"},
    {"ext too long", big_ext, sizeof(big_ext), SWS_PARSE_ERROR, ""},
    {"ext at limit", ok_ext, 0, 0, "a"},
    {"trailer too long", big_trailer, sizeof(big_trailer), SWS_PARSE_ERROR, ""},
};

#endif
