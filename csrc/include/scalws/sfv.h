/*
 * scalws/sfv.h — RFC 8941 Structured Field Dictionaries, for the fields
 * that are one: Priority (RFC 9218, priority.c) and the targeted cache
 * fields (RFC 9213, cachecc.c).
 *
 * Ownership: pure. Nothing here allocates or keeps a pointer; no function
 * reads outside [v, v + n). The callback gets pointers into v.
 *
 * Floor: a leaf (csrc/http/sfv.c), called by the leaves priority.c and
 * cachecc.c.
 */
#ifndef SCALWS_SFV_H
#define SCALWS_SFV_H

#include <stddef.h>
#include <stdint.h>

/* What a member's value is (RFC 8941 §3.3; an Inner List, §3.1.1, whole). */
enum { SWS_SF_INT, SWS_SF_DEC, SWS_SF_STR, SWS_SF_TOKEN, SWS_SF_BYTES, SWS_SF_BOOL, SWS_SF_INNER };

/* One member: its key k[0..kl), its kind, and for SWS_SF_INT its value,
 * for SWS_SF_BOOL 0 or 1 (a bare key is true); num means nothing else. */
typedef void (*sws_sf_member_fn)(void *arg, const char *k, size_t kl, int kind, int64_t num);

/*
 * Parses v[0..n) (the field's lines joined with ", ") as a Dictionary,
 * calling member for each member in order, a key given twice each time (the
 * last counts, §4.2.2, for the caller to keep). Returns the number of
 * members (0: an empty field, v may then be NULL), or -1 when v is not a
 * Dictionary, in which case the field is to be ignored whole (§4.2) and the
 * members already reported with it.
 */
int sws_sf_dict(const char *v, size_t n, sws_sf_member_fn member, void *arg);

#endif
