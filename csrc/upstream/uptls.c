/* TLS to upstreams: a group's client context, the handshake after connect,
 * records in and out, session reuse, the input OpenSSL holds; contract in
 * scalws/upstream.h.
 *
 * A connection of a TLS group gets its SSL when it is made (uc_connect):
 * the expected name (SSL_set1_host, or the IP address when the name is
 * one), SNI (never an IP literal), and the last session its server gave
 * this worker. Once TCP is connected its owner steps the handshake
 * (uc_handshake) until it is done, under the connect timeout; then the
 * owner's reads and writes go through uc_recv/uc_send, which keep the
 * contract of recv/send (EAGAIN included) and remember when a read waits
 * for the socket to take bytes or a write waits for input: uc_set_mask adds
 * that event to whatever the owner asked for (uptls_mask), and uc_event
 * hands it to the owner as the event it waits for.
 *
 * Input epoll cannot see: a read that fills the caller's buffer may leave
 * decrypted bytes (or whole records, read ahead) inside OpenSSL. Such a
 * connection goes on the core's ready list (scalws/core.h), which gives it
 * an EPOLLIN event once it wants input: one that wants nothing yet (its
 * client is slow) stays listed until uc_set_mask gives it EPOLLIN again.
 *
 * Sessions: the client cache is ours alone (SSL_SESS_CACHE_NO_INTERNAL_STORE):
 * each server keeps the last session it gave (the new-session callback
 * fires at the end of a TLS 1.2 handshake and when a TLS 1.3 ticket
 * arrives), and its next connection offers it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "context.h"

/* The system's CA store, loaded whole now. A sandboxed worker may open no
 * file outside its document roots once it serves (ADR 0012), so the lookup
 * by hash in the CA folder that SSL_CTX_set_default_verify_paths leaves for
 * verification time would find nothing. The bundle (SSL_CERT_FILE, else
 * OpenSSL's default: Debian's ca-certificates.crt) when it loads; else every
 * file of the folders (SSL_CERT_DIR, else the default; a list split on ':').
 * 0, or -1 when no certificate could be loaded (OpenSSL's error queue says
 * why). */
static int load_system_store(SSL_CTX *ctx)
{
    const char *file = getenv(X509_get_default_cert_file_env());
    if (!file || !*file)
        file = X509_get_default_cert_file();
    if (access(file, R_OK) == 0 && SSL_CTX_load_verify_file(ctx, file) == 1)
        return 0;
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    const char *dirs = getenv(X509_get_default_cert_dir_env());
    if (!dirs || !*dirs)
        dirs = X509_get_default_cert_dir();
    int loaded = 0;
    char path[4096];
    for (const char *p = dirs; *p;) {
        size_t n = strcspn(p, ":");
        if (n > 0 && n < sizeof path - 256) {
            memcpy(path, p, n);
            path[n] = '\0';
            DIR *d = opendir(path);
            struct dirent *de;
            while (d && (de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.')
                    continue;
                snprintf(path + n, sizeof path - n, "/%s", de->d_name);
                struct stat st;
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
                    X509_STORE_load_file(store, path) == 1)
                    loaded++;
                path[n] = '\0';
            }
            if (d)
                closedir(d);
        }
        p += n;
        if (*p == ':')
            p++;
    }
    if (loaded)
        ERR_clear_error(); /* files of the folder that are not certificates */
    return loaded ? 0 : -1;
}

struct sws_uptls {
    SSL_CTX *ctx;
    int verify;
    int sni;
};

/* Our data on each SSL: its upstream connection (for the session callback). */
static int ex_uc = -1;

/* The reason of OpenSSL's most recent error, its queue emptied. */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long err = ERR_get_error(), next;
    if (!err) {
        snprintf(buf, len, "unknown error");
        return buf;
    }
    while ((next = ERR_get_error()) != 0)
        err = next; /* the last is the most specific */
    ERR_error_string_n(err, buf, len);
    return buf;
}

/* ---- the group's context ------------------------------------------------------------------ */

/* A session the server gave: it replaces the one its server kept. */
static int new_session_cb(SSL *s, SSL_SESSION *sess)
{
    upconn_t *uc = SSL_get_ex_data(s, ex_uc);
    if (!uc || !SSL_SESSION_is_resumable(sess))
        return 0;
    sws_upstream_server_t *srv = uc->srv;
    if (srv->tls_session)
        SSL_SESSION_free(srv->tls_session);
    srv->tls_session = sess; /* the callback's reference is ours */
    return 1;
}

sws_uptls_t *sws_uptls_new(const sws_uptls_conf_t *conf, char *err, size_t errlen)
{
    char why[256];
    if (ex_uc < 0)
        ex_uc = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    sws_uptls_t *t = calloc(1, sizeof *t);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!t || !ctx || ex_uc < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    ERR_clear_error();
    /* A TCP end without close_notify reads as the end of the stream, as
     * on a plain connection: the response's framing tells a cut body. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1);
    if (!SSL_CTX_set_min_proto_version(ctx, conf->min_version) ||
        !SSL_CTX_set_max_proto_version(ctx, conf->max_version)) {
        snprintf(err, errlen, "protocols: %s", ssl_reason(why, sizeof why));
        goto fail;
    }
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
    if (conf->verify) {
        if (conf->ca) {
            if (SSL_CTX_load_verify_locations(ctx, conf->ca, NULL) != 1) {
                snprintf(err, errlen, "ca %s: %s", conf->ca, ssl_reason(why, sizeof why));
                goto fail;
            }
        } else if (load_system_store(ctx) < 0) {
            snprintf(err, errlen, "the system's CA store: %s", ssl_reason(why, sizeof why));
            goto fail;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (conf->cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, conf->cert) != 1) {
            snprintf(err, errlen, "cert %s: %s", conf->cert, ssl_reason(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, conf->key, SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen, "key %s: %s", conf->key, ssl_reason(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            snprintf(err, errlen, "key %s does not match %s: %s", conf->key, conf->cert,
                     ssl_reason(why, sizeof why));
            goto fail;
        }
    }
    t->ctx = ctx;
    t->verify = conf->verify;
    t->sni = conf->sni;
    return t;
fail:
    ERR_clear_error();
    SSL_CTX_free(ctx);
    free(t);
    return NULL;
}

void sws_uptls_free(sws_uptls_t *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

void uptls_session_free(sws_upstream_server_t *s)
{
    SSL_SESSION_free(s->tls_session);
    s->tls_session = NULL;
}

/* ---- a connection ---------------------------------------------------------------------------- */

static int is_ip_literal(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

int uptls_attach(sws_engine_t *e, upconn_t *uc)
{
    const sws_uptls_t *t = uc->up->tls;
    sws_upstream_server_t *srv = uc->srv;
    SSL *s = SSL_new(t->ctx);
    if (!s || !SSL_set_fd(s, uc->fd) || !SSL_set_ex_data(s, ex_uc, uc))
        goto fail;
    SSL_set_connect_state(s);
    const char *name = srv->tls_name;
    if (name && *name) {
        int ip = is_ip_literal(name);
        if (t->sni && !ip && !SSL_set_tlsext_host_name(s, name))
            goto fail;
        if (t->verify) {
            if (ip ? !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), name)
                   : !SSL_set1_host(s, name))
                goto fail;
            SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        }
    }
    if (srv->tls_session && !SSL_set_session(s, srv->tls_session))
        ERR_clear_error(); /* a full handshake then */
    uc->ssl = s;
    return 0;
fail:
    ERR_clear_error();
    SSL_free(s);
    return -1;
}

int uc_handshake(sws_engine_t *e, upconn_t *uc, char *why, size_t len)
{
    SSL *s = uc->ssl;
    sws_upstream_server_t *srv = uc->srv;
    ERR_clear_error();
    int r = SSL_do_handshake(s);
    if (r == 1) {
        uc->up->tls_handshakes++;
        if (SSL_session_reused(s))
            uc->up->tls_resumed++;
        return 1;
    }
    int saved = errno;
    int err = SSL_get_error(s, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        uc_set_mask(e, uc, err == SSL_ERROR_WANT_READ ? EPOLLIN | EPOLLRDHUP : EPOLLOUT);
        return 0;
    }
    long vr = uc->up->tls->verify ? SSL_get_verify_result(s) : X509_V_OK;
    const char *name = srv->tls_name ? srv->tls_name : "";
    char reason[256];
    if (vr != X509_V_OK) {
        ERR_clear_error();
        snprintf(why, len, "upstream SSL certificate verify error: (%ld:%s) while SSL handshaking "
                 "to upstream, name: \"%s\"", vr, X509_verify_cert_error_string(vr), name);
    } else if (err == SSL_ERROR_SYSCALL && !ERR_peek_error()) {
        snprintf(why, len, "SSL handshake with the upstream failed (%s), name: \"%s\"",
                 saved ? strerror(saved) : "the upstream closed the connection", name);
    } else {
        snprintf(why, len, "SSL handshake with the upstream failed (%s), name: \"%s\"",
                 ssl_reason(reason, sizeof reason), name);
    }
    ERR_clear_error();
    SSL_set_quiet_shutdown(s, 1);
    if (srv->tls_session) { /* it led nowhere: the next connection starts afresh */
        SSL_SESSION_free(srv->tls_session);
        srv->tls_session = NULL;
    }
    return -1;
}

/* An SSL call failed for good: errno says how, no close_notify follows. */
static ssize_t tls_dead(SSL *s, int err, int saved)
{
    SSL_set_quiet_shutdown(s, 1);
    ERR_clear_error();
    errno = err == SSL_ERROR_SYSCALL ? (saved ? saved : ECONNRESET) : EPROTO;
    return -1;
}

ssize_t uc_recv(sws_engine_t *e, upconn_t *uc, char *buf, size_t len)
{
    SSL *s = uc->ssl;
    if (!s) {
        ssize_t n;
        do
            n = recv(uc->fd, buf, len, 0);
        while (n < 0 && errno == EINTR);
        return n;
    }
    if (uc->tls_eof)
        return 0;
    size_t total = 0;
    int again = 0; /* something waits inside OpenSSL: come back without epoll */
    ERR_clear_error();
    while (total < len) {
        size_t got;
        int r = SSL_read_ex(s, buf + total, len - total, &got);
        if (r) {
            total += got;
            uc->rd_want = 0;
            if (!SSL_has_pending(s))
                break; /* the socket may hold more: epoll says so */
            again = total == len; /* the buffer is full, OpenSSL is not empty */
            continue;
        }
        int saved = errno;
        int err = SSL_get_error(s, r);
        again = 0;
        if (err == SSL_ERROR_ZERO_RETURN) { /* close_notify, or a TCP end */
            uc->tls_eof = 1;
            again = total > 0; /* the end, read next time */
            break;
        }
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            /* a part of a record at most: the rest comes through the socket */
            uc->rd_want = err == SSL_ERROR_WANT_WRITE ? EPOLLOUT : 0;
            if (total)
                break;
            errno = EAGAIN;
            return -1;
        }
        if (total) {
            ERR_clear_error();
            again = 1; /* the error shows again on the next read */
            break;
        }
        return tls_dead(s, err, saved);
    }
    if (!total)
        return 0; /* uc->tls_eof */
    if (again)
        sws_ready_add(e, &uc->ev, &uc->evmask);
    else if (e->core.n_ready)
        sws_ready_remove(e, &uc->ev); /* read since: nothing is held */
    return (ssize_t)total;
}

ssize_t uc_send(sws_engine_t *e, upconn_t *uc, const char *buf, size_t len)
{
    SSL *s = uc->ssl;
    if (!s) {
        ssize_t n;
        do
            n = send(uc->fd, buf, len, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n;
    }
    size_t w;
    ERR_clear_error();
    int r = SSL_write_ex(s, buf, len, &w);
    if (r) {
        uc->wr_want = 0;
        return (ssize_t)w;
    }
    int saved = errno;
    int err = SSL_get_error(s, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        uc->wr_want = err == SSL_ERROR_WANT_READ ? EPOLLIN : 0;
        errno = EAGAIN;
        return -1;
    }
    return tls_dead(s, err, saved);
}

int uc_tls_pending(const upconn_t *uc)
{
    return uc->ssl && (uc->tls_eof || SSL_has_pending(uc->ssl));
}

uint32_t uptls_mask(const upconn_t *uc, uint32_t events)
{
    if ((events & EPOLLIN) && uc->rd_want)
        events |= EPOLLOUT;
    if ((events & EPOLLOUT) && uc->wr_want)
        events |= EPOLLIN;
    return events;
}

void uptls_close(sws_engine_t *e, upconn_t *uc)
{
    SSL *s = uc->ssl;
    sws_ready_remove(e, &uc->ev);
    if (SSL_is_init_finished(s) && !SSL_get_quiet_shutdown(s) &&
        !(SSL_get_shutdown(s) & SSL_SENT_SHUTDOWN))
        SSL_shutdown(s); /* close_notify; a full socket loses it, as a reset would */
    ERR_clear_error();
    SSL_free(s);
    uc->ssl = NULL;
}
