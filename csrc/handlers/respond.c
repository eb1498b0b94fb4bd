/* The `respond` handler and the error pages; contract in scalws/respond.h. */
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
    case 431: return SWS_ERR_431;
    case 501: return SWS_ERR_501;
    case 502: return SWS_ERR_502;
    case 503: return SWS_ERR_503;
    case 504: return SWS_ERR_504;
    case 505: return SWS_ERR_505;
    default: return SWS_ERR_500;
    }
}
