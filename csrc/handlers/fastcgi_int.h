/* The FastCGI handler's insides, shared by its two files: fastcgi.c (the
 * exchange: start, the application's answer, errors and retries, the end)
 * and fastcgi_params.c (the request as records: the PARAMS stream and its
 * framing). Contract of the handler in scalws/fastcgi.h. */
#ifndef SCALWS_FASTCGI_INT_H
#define SCALWS_FASTCGI_INT_H

#include "context.h"

#include "proxy_int.h"
#include "scalws/fastcgi.h"
#include "scalws/fcgi.h"

#define FCGI_ID 1
#define STDIN_MAX 32768           /* content per STDIN record we write */
/* An error-log line is at most 1024 bytes (elog): the STDERR text and the
 * request target are cut so that the upstream and the request id after
 * them always fit. */
#define ERRLINE_MAX 480           /* one STDERR line logged; longer ones are cut */
#define TARGET_LOG_MAX 200        /* the request target in a line that ends with the id */
#define TLOG(x) ((x)->target_len > TARGET_LOG_MAX ? TARGET_LOG_MAX : (x)->target_len)
#define REDIRECTS_MAX 5           /* local redirects followed for one request */

/* FS_BEHIND: written on another request's connection, after it (fastcgi_queue.c) */
enum { FS_WAIT_BODY, FS_HEAD, FS_BODY, FS_DONE, FS_BEHIND };
enum { G_CONNECT, G_CONNECT_TIMEOUT, G_RESET, G_READ_TIMEOUT, G_SEND_TIMEOUT, G_BAD_RESPONSE,
       G_OVERLOADED };

typedef struct fx {
    sws_resp_t *r;
    const sws_conn_t *conn;
    upconn_t *uc;
    const sws_fastcgi_t *f;
    sws_upstream_t *up;
    const sws_site_t *site;
    int method;
    int fs;                       /* FS_* */
    int status;
    unsigned started : 1,         /* a response byte went to the client */
        req_done : 1,             /* the whole request body went into w (or body) */
        hold : 1,                 /* chunked: the body is held until its end */
        can_retry : 1,            /* head[] holds the whole request */
        junk : 1,                 /* bytes after END_REQUEST, or a cut response: not reusable */
        in_start : 1,             /* sws_fastcgi_start is on the stack */
        ended : 1,                /* END_REQUEST read */
        heard : 1,                /* a byte came from the application on this attempt */
        fresh : 1,                /* on uc->srv->fcgi_new: a new connection not answered yet */
        waiting : 1,              /* on wsrv->fcgi_q: waits for a connection */
        open : 1,                 /* on uc->srv->fcgi_open: a request may go behind it */
        followed : 1;             /* a request was written behind it on its connection */
    int early_status;
    int fail_status;              /* the last failed attempt's answer, for when none is left */
    int redirects;
    struct fx *nprev, *nnext;     /* uc->srv->fcgi_new */
    uint64_t t_new;               /* e->core.now when it went on it */
    struct fx *wprev, *wnext;     /* wsrv->fcgi_q */
    sws_upstream_server_t *wsrv;
    uint64_t t_wait;              /* e->core.now when it began to wait */
    uint64_t wait_until;          /* then it is answered 504 */
    struct fx *oprev, *onext;     /* uc->srv->fcgi_open */
    uint64_t t_owner;             /* e->core.now when its connection began on it */
    struct fx *behind, *ahead;    /* the request written after this one on its connection,
                                   * and (FS_BEHIND) the one this is written after */
    size_t left_at, left_len;     /* rbuf: the bytes after END_REQUEST (the one behind's) */
    size_t pend;                  /* rbuf[olen..olen+pend): handed on, not decoded yet */
    uint32_t attempts;
    uint64_t tried;
    uint32_t up_gen;              /* the group's gen the indexes in tried belong to */
    uint64_t hash;
    char *params;                 /* the PARAMS stream's content, until framed */
    size_t params_len, params_cap;
    char *head;                   /* BEGIN + PARAMS (+ the whole STDIN when known), for retries */
    size_t head_len;
    char *w;                      /* bytes for the application */
    size_t wlen, woff, wcap;
    char *body;                   /* a held (chunked) body */
    size_t body_len, body_cap;
    sws_fcgi_dec_t dec;
    char *rbuf;
    size_t rcap, olen, last_len;  /* rbuf[0..olen): decoded STDOUT not yet passed on */
    char errline[ERRLINE_MAX];
    size_t errlen;
    char rid[RID_MAX];
    size_t rid_len;
    int method_len, target_len;
    char what[];                  /* the method, then the target (the request's REQUEST_URI) */
} fx_t;

/* fastcgi_queue.c: connections against the application's children */
#define FCGI_STALL_MS 50          /* a new connection unanswered this long waits for a child */
#define FCGI_PROBE_MS 1000        /* one connection past the learned count, this often */
/* x's new connection to s: watched until the application answers on it. */
SWS_INTERNAL void fq_watch(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s);
/* Off that watch (its connection closes). */
SWS_INTERNAL void fq_unwatch(fx_t *x);
/* The application answered on x's connection: off the watch, and the count
 * of connections it answers at once grows if this one was past it. */
SWS_INTERNAL void fq_heard(sws_engine_t *e, fx_t *x);
/* Has a request on a new connection to s waited FCGI_STALL_MS unanswered? */
SWS_INTERNAL int fq_stalled(const sws_engine_t *e, const sws_upstream_server_t *s);
/* A connection to s ends its request while fq_stalled: the connections s
 * answers at once are those not stalled. */
SWS_INTERNAL void fq_learn(sws_engine_t *e, sws_upstream_server_t *s);
/* A kept connection to s closed while stalled, to free its child. */
SWS_INTERNAL void fq_freed(sws_upstream_server_t *s);
/* May a new connection to s be opened now (else x waits for one)? */
SWS_INTERNAL int fq_may_connect(sws_engine_t *e, sws_upstream_server_t *s);
/* x waits in this worker for a connection to s (FIFO), until its
 * connect_timeout. */
SWS_INTERNAL void fq_wait(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s);
/* Out of that wait (its client left, or it got a connection). */
SWS_INTERNAL void fq_leave(sws_engine_t *e, fx_t *x);
/* A connection to s came free or may be opened: the waiting requests get
 * them, oldest first, through fx_resume, when fq_run_kicks runs next (at
 * the end of a FastCGI connection's event, or the tick: never inside an
 * exchange, whose client another request's answer could close). */
SWS_INTERNAL void fq_kick_later(sws_engine_t *e, sws_upstream_server_t *s);
SWS_INTERNAL void fq_run_kicks(sws_engine_t *e);
/* x's request is all written on its connection: the oldest waiting
 * request goes behind it if it may (fq_may_follow), else x is open for
 * one (s->fcgi_open). */
SWS_INTERNAL void fq_open(sws_engine_t *e, fx_t *x);
/* While s is stalled, one of its connections (the first asked) takes no
 * request behind its own, so that its end frees a child for the stalled
 * one; the others go on. */
SWS_INTERNAL int fq_drains(sws_engine_t *e, const upconn_t *uc);
/* Off the open list (it ends, or one went behind it). */
SWS_INTERNAL void fq_close(fx_t *x);
/* x would wait for a connection to s: the open request it may go behind
 * (the oldest whose connection began on it under FCGI_PIPE_MS ago), taken
 * off the list, or NULL. */
SWS_INTERNAL fx_t *fq_pick_open(sws_engine_t *e, sws_upstream_server_t *s);
/* May x go behind another request on its connection (GET or HEAD, the
 * whole request at hand: nothing of it started if it has to go again)? */
SWS_INTERNAL int fq_may_follow(const fx_t *x);
/* Back to the front of the wait (its connection failed before its turn). */
SWS_INTERNAL void fq_wait_front(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s);
#define FCGI_PIPE_MS 20           /* a request goes behind one begun at most this long ago */

/* x2 goes behind x1 on x1's connection, written at once. */
SWS_INTERNAL void fq_behind(sws_engine_t *e, fx_t *x1, fx_t *x2);
/* x1's answer has ended cleanly: its connection uc goes to the one behind. */
SWS_INTERNAL void fq_hand_on(sws_engine_t *e, fx_t *x1, upconn_t *uc);
/* x1's connection fails or stops: the one behind waits again, first. */
SWS_INTERNAL void fq_unfollow(sws_engine_t *e, fx_t *x1);

/* fastcgi.c: a request out of the wait goes on s; one past its deadline is
 * answered 504; x's state to its connection's events and deadline, and
 * its client's body reading. */
SWS_INTERNAL void fx_sync(sws_engine_t *e, fx_t *x);
/* Writes what y has left in its buffer on uc, until done or the socket is
 * full: the bytes written, or -1 with errno. All written: y's buffer is
 * empty again (woff = wlen = 0). */
SWS_INTERNAL ssize_t fx_send_rest(sws_engine_t *e, upconn_t *uc, fx_t *y);
SWS_INTERNAL void fx_resume(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s);
SWS_INTERNAL void fx_wait_expired(sws_engine_t *e, fx_t *x, const sws_upstream_server_t *s);

/* fastcgi_params.c */
SWS_INTERNAL int fx_grow(char **buf, size_t *cap, size_t need);
/* n bytes as records of `type` appended to x->w; n 0: the stream's end. */
SWS_INTERNAL int fx_w_records(fx_t *x, int type, const char *p, size_t n);
/* x->params: the CGI variables of req (and the operator's, last). */
SWS_INTERNAL int fx_build_params(sws_engine_t *e, fx_t *x, const sws_request_t *req);
/* x->w (and x->head when done): BEGIN_REQUEST, the PARAMS stream, then
 * the STDIN given. */
SWS_INTERNAL int fx_frame_request(fx_t *x, const char *body, size_t n, int done);

#endif
