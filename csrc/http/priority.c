/* The Priority field (RFC 9218 §4) as an RFC 8941 Dictionary (sfv.c reads
 * it, every member, so that a field that is not one is ignored whole);
 * contract in scalws/priority.h. */
#include "scalws/priority.h"
#include "scalws/sfv.h"

#include <stdint.h>

typedef struct {
    int u_kind, i_kind; /* -1: not given */
    int64_t u, i;
} pri_t;

static void pri_member(void *arg, const char *k, size_t kl, int kind, int64_t num)
{
    pri_t *p = arg;
    if (kl == 1 && *k == 'u') {
        p->u_kind = kind;
        p->u = num;
    } else if (kl == 1 && *k == 'i') {
        p->i_kind = kind;
        p->i = num;
    }
}

int sws_parse_priority(const char *v, size_t len, int *urgency, int *incremental)
{
    pri_t p = {-1, -1, 0, 0};
    if (sws_sf_dict(v, len, pri_member, &p) < 0)
        return -1;
    int got = 0;
    if (p.u_kind == SWS_SF_INT && p.u >= 0 && p.u <= 7) {
        *urgency = (int)p.u;
        got |= SWS_PRI_U;
    }
    if (p.i_kind == SWS_SF_BOOL) {
        *incremental = (int)p.i;
        got |= SWS_PRI_I;
    }
    return got;
}
