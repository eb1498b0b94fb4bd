#include "scalws/httpdate.h"

#include <stdio.h>
#include <string.h>

static const char WDAY[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char MON[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static void put2(char *p, int v) { p[0] = (char)('0' + v / 10 % 10); p[1] = (char)('0' + v % 10); }
static void put4(char *p, int v) { put2(p, v / 100); put2(p + 2, v % 100); }

void sws_http_date(time_t t, char out[SWS_HTTP_DATE_LEN])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    memcpy(out, WDAY[tm.tm_wday], 3);
    out[3] = ',';
    out[4] = ' ';
    put2(out + 5, tm.tm_mday);
    out[7] = ' ';
    memcpy(out + 8, MON[tm.tm_mon], 3);
    out[11] = ' ';
    put4(out + 12, tm.tm_year + 1900);
    out[16] = ' ';
    put2(out + 17, tm.tm_hour);
    out[19] = ':';
    put2(out + 20, tm.tm_min);
    out[22] = ':';
    put2(out + 23, tm.tm_sec);
    memcpy(out + 25, " GMT", 4);
}

void sws_log_times(time_t t, char log[SWS_LOG_TIME_LEN], char iso[SWS_ISO_TIME_LEN],
                   char err[SWS_ERR_TIME_LEN])
{
    struct tm tm;
    char buf[64];
    localtime_r(&t, &tm);
    long off = tm.tm_gmtoff / 60;
    char sign = off < 0 ? '-' : '+';
    if (off < 0)
        off = -off;
    snprintf(buf, sizeof buf, "%02d/%s/%04d:%02d:%02d:%02d %c%02ld%02ld", tm.tm_mday,
             MON[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, sign,
             off / 60 % 100, off % 60);
    memcpy(log, buf, SWS_LOG_TIME_LEN);
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, sign, off / 60 % 100,
             off % 60);
    memcpy(iso, buf, SWS_ISO_TIME_LEN);
    snprintf(buf, sizeof buf, "%04d/%02d/%02d %02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    memcpy(err, buf, SWS_ERR_TIME_LEN);
}
