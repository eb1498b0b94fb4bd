/*
 * h2sess_raw.h — tests/fuzz/h2sess_harness.h's raw mode (hx_init_raw): the
 * client's bytes as given, and every frame our session writes parsed and
 * checked (hx_out_check; what it requires is in the harness's head).
 * Included by h2sess_harness.h after the exchange, whose hx_t and helpers
 * it uses.
 */
#ifndef SCALWS_TEST_H2SESS_RAW_H
#define SCALWS_TEST_H2SESS_RAW_H

/* A plan for a stream the raw client opened: the answer only, from the
 * stream id and the input's flags. */
static hx_plan_t *hx_raw_plan(hx_t *x, int32_t id)
{
    static const size_t ssizes[] = {0, 1, 5, 100, 16383, 16384, 16385, 70000};
    static const size_t none[] = {0};
    hx_rng_t r = {.s = (uint64_t)id * 1000003u + x->raw_flags};
    hx_gen_t g = {none, ssizes, 1, sizeof ssizes / sizeof ssizes[0], 6, 3000};
    hx_plan_t *p = hx_plan_gen(&r, &g);
    p->id = id;
    p->srv_rst = (x->raw_flags & 0x08) && id % 5 == 3;
    p->o_win = x->m_init_win; /* corrected by the mirror when its HEADERS is read */
    hx_add_plan(x, p);
    return p;
}

/* Raw mode: the client's bytes are data[0..n) (the preface first unless
 * flags bit 0 says they hold their own), fed in chunks of up to chunk
 * bytes (0: all at once); flags (bits 3-6) vary how we answer. */
__attribute__((unused))
static void hx_init_raw(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r, uint8_t flags)
{
    hx_init_common(x, conf, r);
    x->raw = 1;
    x->raw_flags = flags;
    x->m_conn_win = x->m_init_win = 65535;
    x->o_blk_id = 0;
    nghttp2_hd_inflate_new(&x->inf);
    uint32_t cap = conf->header_table;
    /* our encoder starts at min(4096, cap); above 4096 it follows the
     * client's settings up to cap, which the ACKs tell the inflater */
    if (cap < 4096)
        nghttp2_hd_inflate_change_table_size(x->inf, cap);
}


/* The session took the frame at m_off (its header says type, flags, id,
 * len): the mirror reads it as the session should, for the windows and
 * the HEADER_TABLE_SIZE our ACKs apply. */
static void hx_raw_mirror(hx_t *x, uint8_t type, uint8_t flags, int32_t id, uint32_t len)
{
    if (x->m_bad)
        return;
    if (x->m_off == 0) {
        if (x->c2s.n < H2_PREFACE_LEN) {
            x->m_bad = 1;
            return;
        }
        x->m_off = H2_PREFACE_LEN;
    }
    const uint8_t *h = x->c2s.p + x->m_off;
    if (x->m_off + 9 > x->c2s.n || hx_get24(h) != len || h[3] != type || h[4] != flags ||
        (int32_t)(h2_get32(h + 5) & 0x7fffffff) != id || x->m_off + 9 + len > x->c2s.n) {
        hx_fail(x, "the frame callback's header is not the frame at offset %zu", x->m_off);
        x->m_bad = 1;
        return;
    }
    const uint8_t *p = h + 9;
    x->m_off += 9 + len;
    switch (type) {
    case H2_SETTINGS:
        if (flags & H2_F_ACK)
            break;
        if (x->m_nset == x->m_setcap) {
            x->m_setcap = x->m_setcap ? x->m_setcap * 2 : 8;
            x->m_tables = realloc(x->m_tables, x->m_setcap * sizeof *x->m_tables);
            if (!x->m_tables)
                abort();
        }
        x->m_tables[x->m_nset] = 0;
        for (uint32_t i = 0; i + 6 <= len; i += 6) {
            uint16_t k = (uint16_t)(p[i] << 8 | p[i + 1]);
            uint32_t v = h2_get32(p + i + 2);
            if (k == H2_SET_HEADER_TABLE_SIZE)
                x->m_tables[x->m_nset] = (v > 1u << 30 ? 1u << 30 : v) + 1;
            if (k == H2_SET_INITIAL_WINDOW_SIZE && v <= H2_WINDOW_MAX) {
                int64_t d = (int64_t)v - x->m_init_win;
                for (size_t j = 0; j < x->nplans; j++)
                    x->plans[j]->o_win += d;
                x->m_init_win = v;
            }
        }
        x->m_nset++;
        break;
    case H2_WINDOW_UPDATE:
        if (len == 4) {
            uint32_t inc = h2_get32(p) & 0x7fffffff;
            if (id == 0) {
                x->m_conn_win += inc;
            } else {
                hx_plan_t *pl = hx_find(x, id);
                if (pl)
                    pl->o_win += inc;
            }
        }
        break;
    case H2_HEADERS:
        if (id > x->m_max_id && (id & 1))
            x->m_max_id = id;
        break;
    }
}

/* Every HEADERS on a new stream opens it with the window in force then:
 * the plan (made inside the session's begin callback, after the frame
 * callback) takes m_init_win. */

static int hx_inflate(hx_t *x, const uint8_t *in, size_t n, hx_list_t *out)
{
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t k = nghttp2_hd_inflate_hd2(x->inf, &nv, &fl, in, n, 1);
        if (k < 0)
            return (int)k;
        in += k;
        n -= (size_t)k;
        if (fl & NGHTTP2_HD_INFLATE_EMIT)
            hl_add(out, nv.name, nv.namelen, nv.value, nv.valuelen,
                   (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) ? 1 : 0);
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(x->inf);
            return 0;
        }
        if (k == 0 && n == 0)
            return -1;
    }
}

/* A whole header block of ours on stream id (flags: the HEADERS'). */
static void hx_out_block(hx_t *x, int32_t id, uint8_t flags)
{
    hx_list_t got = {0};
    int rc = hx_inflate(x, x->o_blk.p, x->o_blk.n, &got);
    x->o_blk.n = 0;
    if (rc != 0) {
        hx_fail(x, "nghttp2's inflater refuses our block on stream %d: %s", (int)id,
                nghttp2_strerror(rc));
        x->o_dead = 1;
        hl_free(&got);
        return;
    }
    hx_plan_t *p = hx_find(x, id);
    if (!p) {
        hx_fail(x, "HEADERS on stream %d, which we never opened", (int)id);
        hl_free(&got);
        return;
    }
    const hx_list_t *want[3];
    int nw = hx_plan_blocks(p, want);
    size_t at;
    if (p->o_end || p->o_rst) {
        hx_fail(x, "HEADERS on stream %d after its end or our RST_STREAM", (int)id);
    } else if (p->o_blk >= nw) {
        hx_fail(x, "stream %d: a header block more than we submitted", (int)id);
    } else if (!hl_eq(&got, want[p->o_blk], 1, &at)) {
        hx_fail(x, "stream %d: block %d differs at field %zu", (int)id, p->o_blk, at);
        hl_print("got", &got);
        hl_print("sent", want[p->o_blk]);
    } else {
        int final = want[p->o_blk] == &p->resp, tr = want[p->o_blk] == &p->str;
        if (final)
            p->o_final = 1;
        if (tr && p->o_off != p->slen)
            hx_fail(x, "stream %d: trailers after %zu of %zu body bytes", (int)id, p->o_off, p->slen);
        int end_due = (final && !p->body) || tr;
        if (!!(flags & H2_F_END_STREAM) != end_due)
            hx_fail(x, "stream %d: block %d END_STREAM %d", (int)id, p->o_blk, !!(flags & H2_F_END_STREAM));
        if (flags & H2_F_END_STREAM)
            p->o_end = 1;
        p->o_blk++;
    }
    hl_free(&got);
}

/* Raw mode: our output from s2c[from..) parsed and checked (see the top). */
static void hx_out_check(hx_t *x, size_t from)
{
    size_t off = from;
    const uint8_t *b = x->s2c.p;
    while (off < x->s2c.n && !x->o_dead) {
        if (x->s2c.n - off < 9) {
            hx_fail(x, "a frame cut short in our output");
            return;
        }
        const uint8_t *h = b + off, *p = h + 9;
        uint32_t len = hx_get24(h);
        uint8_t type = h[3], fl = h[4];
        int32_t id = (int32_t)(h2_get32(h + 5) & 0x7fffffff);
        if (h[5] & 0x80)
            hx_fail(x, "the reserved bit set");
        if (off + 9 + len > x->s2c.n) {
            hx_fail(x, "a frame of %u bytes cut short in our output", len);
            return;
        }
        off += 9 + len;
        if (len > H2_FRAME_MAX)
            hx_fail(x, "a frame of type %u of %u bytes", type, len);
        if (x->o_frames++ == 0 && (type != H2_SETTINGS || (fl & H2_F_ACK)))
            hx_fail(x, "our first frame is of type %u, not SETTINGS", type);
        if (x->o_blk_id && type != H2_CONTINUATION) {
            hx_fail(x, "a frame of type %u inside our header block", type);
            x->o_blk_id = 0;
        }
        hx_plan_t *pl = NULL;
        if (type == H2_DATA || type == H2_HEADERS || type == H2_CONTINUATION || type == H2_RST_STREAM) {
            if (id == 0 || !(id & 1)) {
                hx_fail(x, "a frame of type %u on stream %d", type, (int)id);
                continue;
            }
            pl = hx_find(x, id);
        }
        switch (type) {
        case H2_DATA:
            if (fl & ~H2_F_END_STREAM)
                hx_fail(x, "DATA with flags %#x", fl);
            if (!pl || !pl->o_final || pl->o_end || pl->o_rst) {
                hx_fail(x, "DATA on stream %d before its head, after its end or reset", (int)id);
                break;
            }
            if ((int64_t)len > x->m_conn_win || (int64_t)len > pl->o_win)
                hx_fail(x, "DATA of %u bytes on stream %d, windows %lld / %lld", len, (int)id,
                        (long long)x->m_conn_win, (long long)pl->o_win);
            x->m_conn_win -= len;
            pl->o_win -= len;
            for (uint32_t i = 0; i < len; i++)
                if (p[i] != hx_body_byte(pl->sseed, pl->o_off + i)) {
                    hx_fail(x, "stream %d: body byte %zu differs", (int)id, pl->o_off + i);
                    break;
                }
            pl->o_off += len;
            if (pl->o_off > pl->slen)
                hx_fail(x, "stream %d: %zu body bytes, %zu planned", (int)id, pl->o_off, pl->slen);
            if (fl & H2_F_END_STREAM) {
                if (pl->o_off != pl->slen || pl->strailers)
                    hx_fail(x, "stream %d: END_STREAM after %zu of %zu bytes", (int)id, pl->o_off,
                            pl->slen);
                pl->o_end = 1;
            }
            break;
        case H2_HEADERS:
        case H2_CONTINUATION:
            if (type == H2_HEADERS && (fl & ~(H2_F_END_STREAM | H2_F_END_HEADERS)))
                hx_fail(x, "HEADERS with flags %#x", fl);
            if (type == H2_CONTINUATION && (fl & ~H2_F_END_HEADERS))
                hx_fail(x, "CONTINUATION with flags %#x", fl);
            if (type == H2_CONTINUATION && id != x->o_blk_id) {
                hx_fail(x, "CONTINUATION on stream %d outside its block", (int)id);
                break;
            }
            if (type == H2_HEADERS) {
                x->o_blk_id = id;
                x->o_blk_flags = fl;
                x->o_blk.n = 0;
            }
            hx_put(&x->o_blk, p, len);
            if (fl & H2_F_END_HEADERS) {
                x->o_blk_id = 0;
                hx_out_block(x, id, x->o_blk_flags);
            }
            break;
        case H2_RST_STREAM:
            if (len != 4 || fl)
                hx_fail(x, "RST_STREAM of %u bytes, flags %#x", len, fl);
            if (pl)
                pl->o_rst = 1; /* a second one may come: DATA on a stream closed long ago */
            break;
        case H2_SETTINGS:
            if (id != 0 || (fl & ~H2_F_ACK) || ((fl & H2_F_ACK) ? len != 0 : len % 6 != 0)) {
                hx_fail(x, "SETTINGS on %d, flags %#x, %u bytes", (int)id, fl, len);
                break;
            }
            if (fl & H2_F_ACK) {
                if (x->o_acks >= x->m_nset) {
                    hx_fail(x, "a SETTINGS ACK more than the client's SETTINGS");
                    break;
                }
                uint32_t t = x->m_tables[x->o_acks++];
                if (t && nghttp2_hd_inflate_change_table_size(x->inf, t - 1) != 0)
                    hx_fail(x, "inflate_change_table_size");
            }
            break;
        case H2_PING:
            if (id != 0 || len != 8 || (fl & ~H2_F_ACK))
                hx_fail(x, "PING on %d, flags %#x, %u bytes", (int)id, fl, len);
            break;
        case H2_GOAWAY:
            if (id != 0 || len < 8 || fl)
                hx_fail(x, "GOAWAY on %d, flags %#x, %u bytes", (int)id, fl, len);
            else if (h2_get32(p + 4) != 0)
                x->o_dead = 1; /* nothing may follow */
            break;
        case H2_WINDOW_UPDATE: {
            uint32_t inc = len == 4 ? h2_get32(p) & 0x7fffffff : 0;
            if (len != 4 || fl || inc == 0 || (id && !(id & 1)))
                hx_fail(x, "WINDOW_UPDATE on %d, flags %#x, %u bytes, +%u", (int)id, fl, len, inc);
            hx_plan_t *w = id ? hx_find(x, id) : NULL;
            if (w && w->o_rst)
                hx_fail(x, "WINDOW_UPDATE on stream %d after our RST_STREAM", (int)id);
            break;
        }
        default:
            hx_fail(x, "a frame of type %u from us", type);
        }
    }
    if (x->o_dead && off < x->s2c.n)
        hx_fail(x, "%zu bytes after our GOAWAY with an error code", x->s2c.n - off);
}

/* Raw mode: client bytes data[0..n), fed whole frames at a time up to
 * the chunk bound, answered, our output checked. */
__attribute__((unused))
static void hx_raw_feed(hx_t *x, const uint8_t *data, size_t n, int preface)
{
    if (preface)
        hx_put(&x->c2s, H2_PREFACE, H2_PREFACE_LEN);
    hx_put(&x->c2s, data, n);
    hx_pump(x, 0);
    if (x->o_blk_id)
        hx_fail(x, "our output ends inside a header block");
}

#endif
