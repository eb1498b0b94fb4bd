/* The worker's context: one struct whose parts each floor owns. Every C
 * file of the engine includes this; a floor reads and writes only its own
 * part and the parts of floors below it (calls go down: protocol ->
 * dispatch -> handlers -> upstream -> net -> core; docs/architecture.md
 * draws the tree). Types of the upper parts are visible here so that the
 * parts can be embedded without allocations; that is the only way anything
 * above is seen from below. Not an API: the public contract is
 * scalws/engine.h. */
#ifndef SCALWS_CONTEXT_H
#define SCALWS_CONTEXT_H

#include "scalws/engine.h"

#include "scalws/accesslog.h"
#include "scalws/cache.h"
#include "scalws/core.h"
#include "scalws/dispatch.h"
#include "scalws/fastcgi.h"
#include "scalws/h1.h"
#include "scalws/h2.h"
#include "scalws/h3.h"
#include "scalws/net.h"
#include "scalws/proxy.h"
#include "scalws/respond.h"
#include "scalws/response.h"
#include "scalws/static.h"
#include "scalws/upstream.h"

/* The respond handler's part: the error pages (SWS_ERR_*), which every
 * protocol and handler answers with. */
typedef struct {
    sws_respond_t err[SWS_ERR_COUNT];
} sws_respond_state_t;

struct sws_engine {
    sws_core_t core;           /* csrc/core/ */
    sws_net_t net;             /* csrc/net/ */
    sws_h1_t h1;               /* csrc/http/h1*.c */
    sws_h2_t h2;               /* csrc/http/h2/ */
    sws_h3_t h3;               /* csrc/http/h3/ */
    sws_alog_t alog;           /* csrc/http/accesslog.c */
    sws_respond_state_t rsp;   /* csrc/handlers/respond.c */
    sws_static_state_t st;     /* csrc/handlers/static.c */
    sws_fastcgi_state_t fx;    /* csrc/handlers/fastcgi.c (its hook, set by dispatch.c) */
    sws_upstreams_t up;        /* csrc/upstream/ */
    sws_cache_state_t ca;      /* csrc/handlers/cache_*.c */
};

#endif
