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

void sws_pri_early_keep(sws_pri_early_t *t, int64_t id, int got, int urgency, int incremental)
{
    uint64_t id1 = (uint64_t)id + 1;
    uint32_t k = 0, free_k = SWS_PRI_EARLY;
    for (; k < SWS_PRI_EARLY && t->e[k].id1 != id1; k++)
        if (!t->e[k].id1 && free_k == SWS_PRI_EARLY)
            free_k = k;
    if (k == SWS_PRI_EARLY) { /* not there: a free entry, else one in turn */
        k = free_k < SWS_PRI_EARLY ? free_k : t->n % SWS_PRI_EARLY;
        if (!t->e[k].id1)
            t->live++;
    }
    t->n++;
    t->e[k].id1 = id1;
    t->e[k].got = (uint8_t)got;
    t->e[k].u = (uint8_t)urgency;
    t->e[k].i = (uint8_t)incremental;
}

int sws_pri_early_take(sws_pri_early_t *t, int64_t id, int *urgency, int *incremental)
{
    for (uint32_t k = 0; k < SWS_PRI_EARLY; k++) {
        if (t->e[k].id1 != (uint64_t)id + 1)
            continue;
        *urgency = t->e[k].u;
        *incremental = t->e[k].i;
        t->e[k].id1 = 0;
        t->live--;
        return t->e[k].got;
    }
    return -1;
}
