/*
 * scalws/priority.h — the Priority field of RFC 9218 §4: a Structured
 * Fields Dictionary (RFC 8941 §3.2) whose `u` (urgency, an Integer 0..7)
 * and `i` (incremental, a Boolean) parameters say how a response is to be
 * scheduled against the others of its connection.
 *
 * Ownership: pure. Nothing here allocates, keeps a pointer or calls back;
 * no function reads outside [v, v + len); the table of early updates is
 * the caller's memory.
 *
 * Floor: a leaf (csrc/http/priority.c); HTTP/2 (h2/) and HTTP/3
 * (h3/h3sess_recv.c) use it: the `priority` field of a request and of a
 * response (RFC 9218 §8), PRIORITY_UPDATE's value, and the updates kept
 * for streams not open yet.
 */
#ifndef SCALWS_PRIORITY_H
#define SCALWS_PRIORITY_H

#include <stddef.h>
#include <stdint.h>

#define SWS_PRI_U 1 /* the field gave an urgency */
#define SWS_PRI_I 2 /* the field said whether incremental */

/*
 * Parses v[0..len), one Priority field value (several field lines joined
 * with ", "). Returns which parameters it gave (SWS_PRI_U | SWS_PRI_I, 0:
 * neither) and stores those in *urgency (0..7) and *incremental (0 or 1);
 * the others are left alone. -1 when v is not a Dictionary: the whole
 * field is ignored (RFC 8941 §4.2), nothing stored. v may be NULL when
 * len is 0 (an empty value, as nghttp2 gives a PRIORITY_UPDATE's).
 *
 * Within a valid Dictionary, a key given twice counts once, with its last
 * value (RFC 8941 §3.2); `u` that is not an Integer in 0..7 and `i` that
 * is not a Boolean are ignored, as are unknown keys (RFC 9218 §4).
 */
int sws_parse_priority(const char *v, size_t len, int *urgency, int *incremental);

/*
 * PRIORITY_UPDATEs for request streams not open yet (RFC 9218 §7), kept
 * by a connection until their stream opens: an HTTP/2 frame that came
 * before its HEADERS, an HTTP/3 one whose control stream overtook the
 * request's stream. At most SWS_PRI_EARLY; past that a new one replaces
 * one in turn, whose stream keeps what its request says. Zeroed memory is
 * an empty table.
 */
#define SWS_PRI_EARLY 8

typedef struct {
    struct {
        uint64_t id1;          /* the stream's ID + 1; 0: a free entry */
        uint8_t got, u, i;     /* as sws_parse_priority gave them */
    } e[SWS_PRI_EARLY];
    uint32_t n;                /* kept so far (none free: n % SWS_PRI_EARLY is replaced) */
    uint32_t live;             /* entries in use: 0, and no stream need look */
} sws_pri_early_t;

/* Keeps stream id's parameters (got: which, as sws_parse_priority says),
 * over what it kept for id before. */
void sws_pri_early_keep(sws_pri_early_t *t, int64_t id, int got, int urgency, int incremental);
/* Stream id's kept parameters, its entry freed: their `got` (and *urgency,
 * *incremental), or -1 when none was kept. */
int sws_pri_early_take(sws_pri_early_t *t, int64_t id, int *urgency, int *incremental);

#endif
