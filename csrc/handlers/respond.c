/* The `respond` handler and the error pages; contract in scalws/respond.h. */
#include <stdio.h>
#include <string.h>

#include "context.h"

int sws_respond_answer(sws_engine_t *e, sws_resp_t *r, const sws_respond_t *resp)
{
    resp_head(e, r, resp->status, resp->reason, resp->reason_len);
    resp_fields(e, r, resp->fields, resp->fields_len);
    if (!resp->has_length) {
        resp_start_body(e, r, SWS_BODY_NONE, 0);
        return resp->status;
    }
    resp_start_body(e, r, SWS_BODY_LENGTH, resp->body_len);
    if (resp->body_len)
        resp_data(e, r, resp->body, resp->body_len, resp->body_len > COPY_BODY_MAX ? SWS_REF : 0);
    resp_done(e, r);
    return resp->status;
}

static const char moved_body[] =
    "<html>\r\n<head><title>301 Moved Permanently</title></head>\r\n<body>\r\n"
    "<h1>301 Moved Permanently</h1>\r\n</body>\r\n</html>\r\n";
static const char moved_body308[] =
    "<html>\r\n<head><title>308 Permanent Redirect</title></head>\r\n<body>\r\n"
    "<h1>308 Permanent Redirect</h1>\r\n</body>\r\n</html>\r\n";

int sws_redirect_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                        const sws_redirect_t *rd)
{
    /* The Host without its port ("[::1]:80" keeps its brackets). */
    const char *host = req->host;
    size_t hl = req->host_len;
    if (!hl) {
        host = rd->host;
        hl = rd->host_len;
    } else if (host[0] == '[') {
        const char *end = memchr(host, ']', hl);
        if (end)
            hl = (size_t)(end - host) + 1;
    } else {
        const char *colon = memchr(host, ':', hl);
        if (colon)
            hl = (size_t)(colon - host);
    }
    if (!hl)
        return sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_400]);
    /* The target as sent; an absolute-form one keeps only its path. */
    const char *t = req->target;
    size_t tl = req->target_len;
    if (tl && t[0] != '/') {
        t = req->raw_path;
        tl = req->raw_len + (req->target + req->target_len - (req->raw_path + req->raw_len));
        if (!tl || t[0] != '/') {
            t = "/";
            tl = 1;
        }
    }
    int get = req->method_id == SWS_M_GET || req->method_id == SWS_M_HEAD;
    resp_head(e, r, get ? 301 : 308, NULL, 0);
    resp_field_lit(e, r, "Content-Type", "text/html", 9);
    char port[8];
    size_t pl = rd->port != 443 ? (size_t)snprintf(port, sizeof port, ":%u", rd->port) : 0;
    /* Location: https://HOST[:PORT]TARGET, written in its pieces (the
     * caller made room for the host and the target). */
    resp_fields(e, r, "Location: https://", 18);
    resp_fields(e, r, host, hl);
    resp_fields(e, r, port, pl);
    resp_fields(e, r, t, tl);
    resp_fields(e, r, "\r\n", 2);
    const char *body = get ? moved_body : moved_body308;
    size_t bl = get ? sizeof moved_body - 1 : sizeof moved_body308 - 1;
    resp_start_body(e, r, SWS_BODY_LENGTH, bl);
    resp_data(e, r, body, bl, SWS_REF);
    resp_done(e, r);
    return get ? 301 : 308;
}

int err_index(int status)
{
    switch (status) {
    case 400: return SWS_ERR_400;
    case 403: return SWS_ERR_403;
    case 404: return SWS_ERR_404;
    case 405: return SWS_ERR_405;
    case 408: return SWS_ERR_408;
    case 412: return SWS_ERR_412;
    case 413: return SWS_ERR_413;
    case 414: return SWS_ERR_414;
    case 417: return SWS_ERR_417;
    case 425: return SWS_ERR_425;
    case 431: return SWS_ERR_431;
    case 501: return SWS_ERR_501;
    case 502: return SWS_ERR_502;
    case 503: return SWS_ERR_503;
    case 504: return SWS_ERR_504;
    case 505: return SWS_ERR_505;
    default: return SWS_ERR_500;
    }
}
