/*
 * scalws/priority.h — the Priority field of RFC 9218 §4: a Structured
 * Fields Dictionary (RFC 8941 §3.2) whose `u` (urgency, an Integer 0..7)
 * and `i` (incremental, a Boolean) parameters say how a response is to be
 * scheduled against the others of its connection.
 *
 * Ownership: pure. Nothing here allocates, keeps a pointer or calls back;
 * no function reads outside [v, v + len).
 *
 * Floor: a leaf (csrc/http/priority.c); HTTP/2 (h2.c) uses it for what
 * nghttp2 does not do itself: the `priority` field of a response (RFC 9218
 * §8) and the client's signals that field is merged with.
 */
#ifndef SCALWS_PRIORITY_H
#define SCALWS_PRIORITY_H

#include <stddef.h>

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

#endif
