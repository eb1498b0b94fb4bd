/* The peer as text (put_peer, csrc/net/peer.c): what X-Forwarded-For,
 * REMOTE_ADDR and the access log write. Written by hand since it was
 * sprintf; every case is checked against the sprintf formatting it
 * replaced (kept here as the reference), over the edges and 200,000
 * random addresses of each family. Linked with peer.c alone. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "context.h"
#include "guard.h"

static void reference(char *p, const sws_conn_t *c)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const unsigned char *a = c->peer;
    if (c->is_unix) {
        strcpy(p, "unix:");
    } else if (c->peer_family == AF_INET) {
        sprintf(p, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
    } else if (memcmp(a, mapped, 12) == 0) {
        sprintf(p, "%u.%u.%u.%u", a[12], a[13], a[14], a[15]);
    } else {
        for (int i = 0; i < 16; i += 2)
            p += sprintf(p, "%s%x", i ? ":" : "", (unsigned)(a[i] << 8 | a[i + 1]));
    }
}

static void same(const sws_conn_t *c)
{
    char want[64], got[64];
    memset(got, 'X', sizeof got);
    reference(want, c);
    char *end = put_peer(got, c);
    CHECK((size_t)(end - got) == strlen(want) && memcmp(got, want, strlen(want)) == 0,
          "got %.*s, want %s", (int)(end - got), got, want);
    CHECK((size_t)(end - got) <= 40, "%zu bytes", (size_t)(end - got));
}

static sws_conn_t conn(int family, const char *text)
{
    sws_conn_t c;
    memset(&c, 0, sizeof c);
    c.peer_family = (unsigned char)family;
    if (inet_pton(family, text, c.peer) != 1)
        abort();
    return c;
}

int main(void)
{
    const char *v4[] = {"0.0.0.0", "127.0.0.1", "9.99.100.255", "255.255.255.255", "10.0.0.10"};
    for (size_t i = 0; i < sizeof v4 / sizeof *v4; i++) {
        sws_conn_t c = conn(AF_INET, v4[i]);
        same(&c);
        char got[64];
        *put_peer(got, &c) = 0;
        CHECK(strcmp(got, v4[i]) == 0, "got %s, want %s", got, v4[i]);
    }
    t_end();
    const char *v6[] = {"::", "::1", "2001:db8::abcd:1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                        "fe80::10:100:1000", "::ffff:192.0.2.7"};
    for (size_t i = 0; i < sizeof v6 / sizeof *v6; i++) {
        sws_conn_t c = conn(AF_INET6, v6[i]);
        same(&c);
    }
    sws_conn_t mapped = conn(AF_INET6, "::ffff:192.0.2.7");
    char got[64];
    *put_peer(got, &mapped) = 0;
    CHECK(strcmp(got, "192.0.2.7") == 0, "mapped: %s", got);
    sws_conn_t full = conn(AF_INET6, "2001:db8::abcd:1");
    *put_peer(got, &full) = 0;
    CHECK(strcmp(got, "2001:db8:0:0:0:0:abcd:1") == 0, "full form: %s", got);
    t_end();
    sws_conn_t unix_peer;
    memset(&unix_peer, 0, sizeof unix_peer);
    unix_peer.is_unix = 1;
    same(&unix_peer);
    t_end();
    srand(36);
    for (int n = 0; n < 200000; n++) {
        sws_conn_t c;
        memset(&c, 0, sizeof c);
        c.peer_family = n & 1 ? AF_INET6 : AF_INET;
        for (int i = 0; i < 16; i++) /* small values often: the one- and two-digit paths */
            c.peer[i] = (unsigned char)(rand() % 3 ? rand() : rand() % 16);
        if (n % 10 == 1)
            memcpy(c.peer, (const unsigned char[12]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 12);
        same(&c);
    }
    t_end();
    return t_summary();
}
