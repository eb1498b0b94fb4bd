/* HTTP and log time strings, rebuilt once a second by the engine.
 *
 * Both functions write a fixed number of bytes and no NUL terminator; the
 * caller owns `out`. Time is passed in (Unix seconds) so tests need no clock.
 *
 * Floor: a leaf (csrc/core/httpdate.c); it calls nothing of the engine's.
 */
#ifndef SCALWS_HTTPDATE_H
#define SCALWS_HTTPDATE_H

#include <time.h>

#define SWS_HTTP_DATE_LEN 29   /* "Wed, 02 Dec 2026 12:00:00 GMT" */
#define SWS_LOG_TIME_LEN 26    /* "02/Dec/2026:12:00:00 +0000" (nginx $time_local) */
#define SWS_ISO_TIME_LEN 25    /* "2026-12-02T12:00:00+00:00" (nginx $time_iso8601) */
#define SWS_ERR_TIME_LEN 19    /* "2026/12/02 12:00:00" (nginx error log) */

/* IMF-fixdate, RFC 9110 §5.6.7. */
void sws_http_date(time_t t, char out[SWS_HTTP_DATE_LEN]);

/* Local time with numeric UTC offset, as nginx's access and error logs. */
void sws_log_times(time_t t, char log[SWS_LOG_TIME_LEN], char iso[SWS_ISO_TIME_LEN],
                   char err[SWS_ERR_TIME_LEN]);

#endif
