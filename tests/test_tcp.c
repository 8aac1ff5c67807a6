/*
 * The tcp transport alone over 127.0.0.1: two or three tps per test, eps
 * connected through their addresses, no engine. Every test checks that it
 * leaves no file descriptor behind (/proc/self/fd before and after) and,
 * unless it provokes them, logs no errors.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "tcp/tcp.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define MAXMSG   (1u << 20)
#define LONG_MS  10000u /* progress timeout of tps that must not time out */
#define WAIT_MS  5000   /* how long a test waits for completions it expects */
#define RW       (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE)

static const pdx_transport_ops_t *const ops = &pdx_tcp_ops;

static pdx_tp_t *tp_open(uint32_t timeout_ms)
{
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = timeout_ms,
                              .max_msg_size = MAXMSG};
    pdx_tp_t *tp = NULL;

    cr_assert_eq(ops->open(&params, &tp), PDX_OK);
    cr_assert_not_null(tp);
    return tp;
}

/* Collect `want` completions within timeout_ms; returns how many came. */
static int wait_wc(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms)
{
    return fx_wait_wc(ops, cq, wc, want, timeout_ms, 50u);
}

/* Wait up to timeout_ms for at least one completion; returns how many (<= max). */
static int wait_some(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms)
{
    int n = wait_wc(cq, wc, 1, timeout_ms);

    return n ? n + ops->cq_poll(cq, wc + 1, max - 1) : 0;
}

/* Wait until ep_error(ep) says something (the peer's side of a failure). */
static void wait_error(pdx_tp_ep_t *ep, pdx_tp_cq_t *cq)
{
    uint64_t deadline = pdx_deadline_ns(WAIT_MS);
    pdx_tp_wc_t wc;

    while (!ops->ep_error(ep)[0] && pdx_now_ns() < deadline)
        wait_wc(cq, &wc, 1, 10);
    cr_assert_str_neq(ops->ep_error(ep), "", "the peer's ep never noticed");
}

/*
 * The usual setup: tp 0 writes from `src` (len bytes) into `dst` on tp 1.
 * dst is twice as long as its registered part, so a test can check that
 * nothing landed past the region.
 */
typedef struct rig {
    fx_env_t      env;
    pdx_tp_t     *tp[2];
    pdx_tp_cq_t  *cq[2];
    pdx_tp_ep_t  *ep[2];
    size_t        len;
    uint8_t      *src, *dst;
    pdx_tp_mr_t  *smr, *dmr;
    pdx_tp_rkey_t rk;
} rig_t;

/* one_tp: both eps on one tp and one CQ (tp[1] == tp[0]). */
static void rig_open_ex(rig_t *r, size_t len, uint32_t sq, uint32_t rq, bool one_tp)
{
    memset(r, 0, sizeof(*r));
    fx_env_begin(&r->env);
    for (int i = 0; i < 2; i++) {
        r->tp[i] = one_tp && i ? r->tp[0] : tp_open(LONG_MS);
        r->cq[i] = one_tp && i ? r->cq[0] : fx_cq_new(ops, r->tp[i], (sq + rq) * (one_tp ? 2 : 1));
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], sq, rq);
    }
    fx_connect_eps(ops, r->ep[0], r->ep[1]); /* one tp: one listener, the tokens decide who dials */
    r->len = len;
    r->src = malloc(len);
    r->dst = calloc(2, len);
    cr_assert(r->src && r->dst);
    fx_fill_random(r->src, len);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, len, 0);
    r->dmr = fx_mr_new(ops, r->tp[1], r->dst, len, RW);
    ops->mr_remote(r->dmr, &r->rk);
}

static void rig_open(rig_t *r, size_t len, uint32_t sq, uint32_t rq)
{
    rig_open_ex(r, len, sq, rq, false);
}

static void rig_close(rig_t *r, bool errors_expected)
{
    if (r->smr)
        cr_assert_eq(ops->mr_dereg(r->smr), PDX_OK);
    if (r->tp[1])
        cr_assert_eq(ops->mr_dereg(r->dmr), PDX_OK);
    for (int i = 0; i < 2; i++)
        if (r->tp[i] && r->ep[i])
            ops->ep_destroy(r->ep[i]);
    for (int i = 0; i < 2; i++) {
        if (!r->tp[i] || (i && r->tp[1] == r->tp[0]))
            continue; /* closed by the test (with everything on it), or shared */
        ops->cq_destroy(r->cq[i]);
        ops->close(r->tp[i]);
    }
    free(r->src);
    free(r->dst);
    fx_env_end(&r->env, errors_expected);
}

/* A WRITE from offset 0 of src to the start of dst. */
static pdx_tp_write_t wr_to(pdx_tp_mr_t *src, const pdx_tp_rkey_t *dst, uint64_t id,
                            uint64_t len, bool signaled)
{
    pdx_tp_write_t w = {.wr_id = id, .mr = src, .length = len, .remote_addr = dst->addr,
                        .rkey = dst->rkey, .flags = signaled ? PDX_TP_SIGNALED : 0};
    return w;
}

static pdx_tp_write_t wr_make(const rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                              uint64_t dst_off, bool signaled)
{
    pdx_tp_write_t w = wr_to(r->smr, &r->rk, id, len, signaled);

    w.offset = src_off;
    w.remote_addr += dst_off;
    return w;
}

static void expect_wc(const pdx_tp_wc_t *wc, uint64_t wr_id, pdx_status_t status,
                      pdx_tp_opcode_t opcode)
{
    cr_assert_eq(wc->wr_id, wr_id, "wr_id %llu", (unsigned long long)wc->wr_id);
    cr_assert_eq(wc->status, status, "wr %llu: %s", (unsigned long long)wr_id,
                 pdx_status_str(wc->status));
    cr_assert_eq(wc->opcode, opcode);
}

Test(tcp, connect_and_write_both_ways)
{
    uint8_t back[4096];
    pdx_tp_mr_t *bmr;
    pdx_tp_rkey_t brk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, 65536, 8, 0);
    w = wr_make(&r, 100, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 100, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[0]);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);

    /* and back, from the destination region into a buffer of tp 0 */
    memset(back, 0, sizeof(back));
    bmr = fx_mr_new(ops, r.tp[0], back, sizeof(back), RW);
    ops->mr_remote(bmr, &brk);
    w = (pdx_tp_write_t){.wr_id = 200, .mr = r.dmr, .offset = 1000, .length = sizeof(back),
                         .remote_addr = brk.addr, .rkey = brk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[1], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 200, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[1]);
    cr_assert_eq(memcmp(back, r.src + 1000, sizeof(back)), 0);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "");
    cr_assert_eq(ops->mr_dereg(bmr), PDX_OK);
    rig_close(&r, false);
}

Test(tcp, two_eps_of_one_tp)
{
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open_ex(&r, 4096, 4, 0, true);
    w = wr_make(&r, 7, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 7, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[0]);
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0);
    rig_close(&r, false);
}

/* Check successful completions in posting order; returns n. */
static int take_ordered(const pdx_tp_wc_t *wc, int n, uint64_t *last_p)
{
    for (int k = 0; k < n; k++) {
        cr_assert_eq(wc[k].status, PDX_OK);
        cr_assert_gt(wc[k].wr_id, *last_p, "completions out of posting order");
        *last_p = wc[k].wr_id;
    }
    return n;
}

Test(tcp, ordered_writes_land_byte_exact)
{
    static const uint64_t sizes[] = {1, 2, 7, 64, 4095, 4096, 4097, 65536, 65537, 262144,
                                     MAXMSG, 1000, 3};
    uint8_t *expect;
    pdx_tp_wc_t wc[64];
    int done = 0, signaled = 0;
    uint64_t last = 0;
    rig_t r;

    rig_open(&r, 8u << 20, 64, 0);
    expect = calloc(1, r.len);
    /* random, overlapping destinations: only in-order placement gives `expect` */
    for (int i = 0; i < 600; i++) {
        uint64_t len = sizes[i % PDX_ARRAY_SIZE(sizes)];
        uint64_t so = fx_rng() % (r.len - len + 1);
        uint64_t doff = i >= 500 ? 4096 : fx_rng() % (r.len - len + 1); /* the last hit one spot */
        bool sig = i % 4 == 3 || i == 599;
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, so, len, doff, sig);
        uint64_t deadline = pdx_deadline_ns(WAIT_MS);
        pdx_status_t st;

        memcpy(expect + doff, r.src + so, len);
        while ((st = ops->post_write(r.ep[0], &w, 1)) == PDX_ERR_AGAIN) {
            int n = wait_some(r.cq[0], wc, 64, 10);

            done += take_ordered(wc, n, &last);
            cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
        }
        cr_assert_eq(st, PDX_OK);
        signaled += sig;
    }
    while (done < signaled) {
        int n = wait_some(r.cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(n, 0, "only %d of %d signaled writes completed", done, signaled);
        done += take_ordered(wc, n, &last);
    }
    cr_assert_eq(done, signaled);
    cr_assert_eq(last, 599u, "completions come in posting order");
    cr_assert_eq(memcmp(r.dst, expect, r.len), 0, "destination differs from in-order result");
    free(expect);
    rig_close(&r, false);
}

Test(tcp, signaled_and_unsignaled_completions)
{
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[8];
    rig_t r;

    rig_open(&r, 8192, 8, 0);
    for (int i = 0; i < 8; i++)
        w[i] = wr_make(&r, (uint64_t)i, (uint64_t)i * 1024, 1024, (uint64_t)i * 1024, i == 7);
    /* one signaled WR at the end: one completion, and it frees all 8 slots */
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
        cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
        expect_wc(&wc[0], 7, PDX_OK, PDX_TP_OP_WRITE);
        cr_assert_eq(wait_wc(r.cq[0], wc, 1, 50), 0, "an unsignaled WR completed");
    }
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0);
    /* unsignaled only: no completion, and the slots stay taken */
    for (int i = 0; i < 8; i++)
        w[i].flags = 0;
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, 200), 0);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_AGAIN);
    rig_close(&r, false); /* placed WRs no longer hold their source region */
}

Test(tcp, write_completes_only_after_placement)
{
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, 256u << 10, 4, 0);
    pdx_tcp_pause(r.tp[1], true);
    w = wr_make(&r, 1, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, 200), 0, "completed before the receiver placed it");
    for (size_t i = 0; i < r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu placed while the receiver was paused", i);
    pdx_tcp_pause(r.tp[1], false);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0);
    rig_close(&r, false);
}

Test(tcp, send_arrives_after_writes_in_posted_recv)
{
    uint8_t msg[48], rbuf[2][PDX_TP_SEND_MAX];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, 16u * 65536, 32, 4);
    fx_fill_random(msg, sizeof(msg));
    memset(rbuf, 0, sizeof(rbuf));
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 55, rmr, PDX_TP_SEND_MAX, PDX_TP_SEND_MAX), PDX_OK);
    for (int i = 0; i < 16; i++) {
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, (uint64_t)i * 65536, 65536,
                                   (uint64_t)i * 65536, false);

        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    }
    cr_assert_eq(ops->post_send(r.ep[0], 99, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);

    cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0, "the SEND overtook the writes before it");
    expect_wc(&wc, 55, PDX_OK, PDX_TP_OP_RECV);
    cr_assert_eq(wc.byte_len, sizeof(msg));
    cr_assert_eq(wc.ep, r.ep[1]);
    cr_assert_eq(memcmp(rbuf[1], msg, sizeof(msg)), 0);

    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 99, PDX_OK, PDX_TP_OP_SEND);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    rig_close(&r, false);
}

Test(tcp, send_without_posted_recv_fails_the_ep)
{
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, 64, 4, 4);
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 1, PDX_ERR_PEER, PDX_TP_OP_SEND);
    cr_assert_str_neq(ops->ep_error(r.ep[0]), "");
    wait_error(r.ep[1], r.cq[1]);
    cr_assert(strstr(ops->ep_error(r.ep[1]), "no receive"), "%s", ops->ep_error(r.ep[1]));
    rig_close(&r, false);
}

Test(tcp, out_of_range_write_fails_only_itself)
{
    static const pdx_status_t want[] = {PDX_OK, PDX_ERR_RANGE, PDX_OK, PDX_ERR_RANGE,
                                        PDX_ERR_RANGE, PDX_OK, PDX_ERR_RANGE, PDX_OK};
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[8];
    rig_t r;

    rig_open(&r, MAXMSG, 8, 0);
    w[0] = wr_make(&r, 0, 0, 1024, 0, true);
    w[1] = wr_make(&r, 1, 0, 1024, 1024, false); /* failed: completes although unsignaled */
    w[1].rkey ^= 1u << 20;                       /* same slot, another generation */
    w[2] = wr_make(&r, 2, 1024, 1024, 1024, true);
    w[3] = wr_make(&r, 3, 0, 200, r.len - 100, true); /* runs past the end */
    w[4] = wr_make(&r, 4, 0, 16, 0, true);
    w[4].remote_addr = r.rk.addr - 8; /* starts before the region */
    w[5] = wr_make(&r, 5, 2048, 2048, 2048, true);
    w[6] = wr_make(&r, 6, 0, MAXMSG, 4096, true); /* a whole MiB to skip */
    w[7] = wr_make(&r, 7, 4096, r.len - 4096, 4096, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 8, WAIT_MS), 8);
    for (int i = 0; i < 8; i++)
        expect_wc(&wc[i], (uint64_t)i, want[i], PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);
    for (size_t i = r.len; i < 2 * r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu past the region was written", i);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "");
    /* the ep keeps working */
    cr_assert_eq(ops->post_write(r.ep[0], &w[0], 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    expect_wc(&wc[0], 0, PDX_OK, PDX_TP_OP_WRITE);
    rig_close(&r, false);
}

Test(tcp, post_runs_checks_once_and_posts_whole)
{
    rig_t r;

    rig_open(&r, 2 * MAXMSG, 16, 0);
    fx_check_post_runs(ops, r.ep[0], r.cq[0], r.smr, r.src, r.len, &r.rk, r.dst, MAXMSG);
    rig_close(&r, true); /* the bad windows are logged */
}

Test(tcp, full_send_queue_is_again)
{
    pdx_tp_write_t w[5];
    pdx_tp_wc_t wc[5];
    rig_t r;

    rig_open(&r, 4096, 4, 0);
    for (int i = 0; i < 5; i++)
        w[i] = wr_make(&r, (uint64_t)i, 0, 1024, 0, true);
    pdx_tcp_pause(r.tp[1], true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 3), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], &w[3], 2), PDX_ERR_AGAIN, "2 WRs into 1 free slot");
    cr_assert_eq(ops->post_write(r.ep[0], &w[3], 1), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], &w[4], 1), PDX_ERR_AGAIN);
    cr_assert_eq(ops->post_send(r.ep[0], 9, "x", 1, PDX_TP_SIGNALED), PDX_ERR_AGAIN);
    pdx_tcp_pause(r.tp[1], false);
    cr_assert_eq(wait_wc(r.cq[0], wc, 4, WAIT_MS), 4);
    for (int i = 0; i < 4; i++)
        expect_wc(&wc[i], (uint64_t)i, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, 50), 0, "the AGAIN calls posted nothing");
    cr_assert_eq(ops->post_write(r.ep[0], w, 4), PDX_OK, "consumed completions free slots");
    cr_assert_eq(wait_wc(r.cq[0], wc, 4, WAIT_MS), 4);
    rig_close(&r, false);
}

Test(tcp, stalled_peer_times_out_while_others_progress)
{
    const size_t big = 1u << 20, small = 65536;
    fx_env_t env;
    pdx_tp_t *s, *rx[2];
    pdx_tp_cq_t *cq, *rcq[2];
    pdx_tp_ep_t *ep[2], *rep[2];
    uint8_t *src, *dst[2];
    pdx_tp_mr_t *smr, *dmr[2];
    pdx_tp_rkey_t rk[2];
    pdx_tp_wc_t wc[32];
    int stalled_done = 0, before = 0, posted = 0, done = 0;
    uint64_t deadline;

    fx_env_begin(&env);
    s = tp_open(400); /* the sender gives up on a silent peer after 400 ms */
    cq = fx_cq_new(ops, s, 64);
    src = malloc(big);
    fx_fill_random(src, big);
    smr = fx_mr_new(ops, s, src, big, 0);
    for (int i = 0; i < 2; i++) {
        rx[i] = tp_open(LONG_MS);
        rcq[i] = fx_cq_new(ops, rx[i], 32);
        ep[i] = fx_ep_new(ops, s, cq, 32, 0); /* both eps of the sender share its CQ */
        rep[i] = fx_ep_new(ops, rx[i], rcq[i], 32, 0);
        fx_connect_eps(ops, ep[i], rep[i]);
        dst[i] = calloc(1, big);
        dmr[i] = fx_mr_new(ops, rx[i], dst[i], big, RW);
        ops->mr_remote(dmr[i], &rk[i]);
    }
    /* rx 0 stops reading: 32 MiB toward it fill every socket buffer on the way */
    pdx_tcp_pause(rx[0], true);
    for (int i = 0; i < 32; i++) {
        pdx_tp_write_t w = wr_to(smr, &rk[0], (uint64_t)i, big, i % 8 == 7);

        cr_assert_eq(ops->post_write(ep[0], &w, 1), PDX_OK);
    }
    deadline = pdx_deadline_ns(WAIT_MS);
    while (stalled_done < 32 && pdx_now_ns() < deadline) {
        int n;

        if (posted - done < 16) {
            pdx_tp_write_t w = wr_to(smr, &rk[1], 1000 + (uint64_t)posted++, small, true);

            cr_assert_eq(ops->post_write(ep[1], &w, 1), PDX_OK);
        }
        n = wait_some(cq, wc, 32, 5);
        for (int i = 0; i < n; i++) {
            if (wc[i].ep == ep[0]) {
                cr_assert_eq(wc[i].status, PDX_ERR_TIMEOUT, "%s", pdx_status_str(wc[i].status));
                stalled_done++;
                continue;
            }
            cr_assert_eq(wc[i].ep, ep[1]);
            cr_assert_eq(wc[i].status, PDX_OK);
            done++;
            before += stalled_done == 0;
        }
    }
    cr_assert_eq(stalled_done, 32, "every WR to the silent peer fails, signaled or not");
    cr_assert_gt(before, 0, "the other ep stalled behind the silent peer");
    cr_assert(strstr(ops->ep_error(ep[0]), "no progress"), "%s", ops->ep_error(ep[0]));
    cr_assert_str_eq(ops->ep_error(ep[1]), "");
    cr_assert_eq(ops->post_write(ep[0], &(pdx_tp_write_t){.mr = smr, .length = 1}, 1),
                 PDX_ERR_PEER);
    while (done < posted) {
        int n = wait_some(cq, wc, 32, WAIT_MS);

        cr_assert_gt(n, 0, "the other ep stopped completing");
        done += n;
    }
    for (int i = 0; i < 8; i++) { /* and it keeps going */
        pdx_tp_write_t w = wr_to(smr, &rk[1], 5000, small, true);

        cr_assert_eq(ops->post_write(ep[1], &w, 1), PDX_OK);
        cr_assert_eq(wait_wc(cq, wc, 1, WAIT_MS), 1);
        expect_wc(&wc[0], 5000, PDX_OK, PDX_TP_OP_WRITE);
    }
    cr_assert_eq(memcmp(dst[1], src, small), 0);

    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(ep[i]);
        ops->ep_destroy(rep[i]);
        cr_assert_eq(ops->mr_dereg(dmr[i]), PDX_OK);
        ops->cq_destroy(rcq[i]);
        ops->close(rx[i]);
        free(dst[i]);
    }
    cr_assert_eq(ops->mr_dereg(smr), PDX_OK);
    ops->cq_destroy(cq);
    ops->close(s);
    free(src);
    fx_env_end(&env, false);
}

Test(tcp, closed_peer_fails_writes_in_flight)
{
    pdx_tp_wc_t wc[9];
    rig_t r;

    rig_open(&r, 8192, 16, 0);
    pdx_tcp_pause(r.tp[1], true);
    for (int i = 0; i < 8; i++) {
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, 0, r.len, 0, i == 3);

        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    }
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, 100), 0);
    ops->close(r.tp[1]); /* closes its ep, CQ and regions too */
    r.tp[1] = NULL;
    cr_assert_eq(wait_wc(r.cq[0], wc, 8, WAIT_MS), 8);
    cr_assert_eq(wait_wc(r.cq[0], wc + 8, 1, 50), 0);
    for (int i = 0; i < 8; i++) /* signaled or not */
        expect_wc(&wc[i], (uint64_t)i, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "127.0.0.1:"), "error names no peer: %s",
              ops->ep_error(r.ep[0]));
    {
        pdx_tp_write_t w = wr_make(&r, 9, 0, 1, 0, true);

        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_ERR_PEER);
    }
    rig_close(&r, false);
}

Test(tcp, ep_fail_flushes_everything)
{
    uint8_t rbuf[3 * 64], pbuf[64];
    pdx_tp_mr_t *rmr, *pmr;
    pdx_tp_wc_t wc[16];
    int nwr = 0, nrecv = 0;
    rig_t r;

    rig_open(&r, 4096, 8, 4);
    rmr = fx_mr_new(ops, r.tp[0], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    /* connected both ways before tp 1 stops reading (ep_connect returns
     * before the connection is made): a SEND and its receive */
    pmr = fx_mr_new(ops, r.tp[1], pbuf, sizeof(pbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 50, pmr, 0, sizeof(pbuf)), PDX_OK);
    cr_assert_eq(ops->post_send(r.ep[0], 51, "ping", 4, PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[1], wc, 1, WAIT_MS), 1);
    expect_wc(&wc[0], 50, PDX_OK, PDX_TP_OP_RECV);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    expect_wc(&wc[0], 51, PDX_OK, PDX_TP_OP_SEND);
    pdx_tcp_pause(r.tp[1], true);
    for (int i = 0; i < 6; i++) {
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, 0, r.len, 0, i % 3 == 0);

        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    }
    cr_assert_eq(ops->post_send(r.ep[0], 6, "note", 4, 0), PDX_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ops->post_recv(r.ep[0], 100 + (uint64_t)i, rmr, (uint64_t)i * 64, 64),
                     PDX_OK);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "room aborted by the test");
    /* ep_fail returns with every completion queued */
    cr_assert_eq(ops->cq_poll(r.cq[0], wc, 16), 10);
    for (int i = 0; i < 10; i++) {
        if (wc[i].opcode == PDX_TP_OP_RECV) {
            expect_wc(&wc[i], 100u + (uint64_t)nrecv, PDX_ERR_ABORTED, PDX_TP_OP_RECV);
            nrecv++;
        } else {
            expect_wc(&wc[i], (uint64_t)nwr, PDX_ERR_ABORTED,
                      nwr == 6 ? PDX_TP_OP_SEND : PDX_TP_OP_WRITE);
            nwr++;
        }
    }
    cr_assert_eq(nwr, 7);
    cr_assert_eq(nrecv, 3);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "room aborted by the test");
    cr_assert_eq(ops->post_write(r.ep[0], &(pdx_tp_write_t){.mr = r.smr, .length = 1}, 1),
                 PDX_ERR_PEER);
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_ERR_PEER);
    cr_assert_eq(ops->post_recv(r.ep[0], 1, rmr, 0, 64), PDX_ERR_PEER);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK, "flushed WRs release their regions");
    pdx_tcp_pause(r.tp[1], false); /* the peer learns it once it reads again */
    wait_error(r.ep[1], r.cq[1]);
    cr_assert_eq(ops->mr_dereg(pmr), PDX_OK);
    rig_close(&r, false);
}

Test(tcp, mr_dereg_refused_while_in_use)
{
    uint8_t rbuf[64];
    pdx_tp_mr_t *rmr;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, 4096, 4, 4);
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 1, rmr, 0, sizeof(rbuf)), PDX_OK);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_ERR_STATE, "a posted receive uses it");
    pdx_tcp_pause(r.tp[1], true);
    w = wr_make(&r, 2, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "a posted write reads it");
    pdx_tcp_pause(r.tp[1], false);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 2, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_OK, "free again once the write completed");
    r.smr = fx_mr_new(ops, r.tp[0], r.src, r.len, 0);
    cr_assert_eq(ops->post_send(r.ep[0], 3, "hello", 5, PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_RECV);
    cr_assert_eq(wc.byte_len, 5u);
    cr_assert_eq(memcmp(rbuf, "hello", 5), 0);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    /* destroying an ep drops its WRs and releases their regions */
    pdx_tcp_pause(r.tp[1], true);
    w = wr_make(&r, 4, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE);
    ops->ep_destroy(r.ep[0]);
    r.ep[0] = NULL;
    rig_close(&r, false);
}

Test(tcp, connection_failure_fails_the_ep)
{
    fx_env_t env;
    pdx_tp_t *a, *c;
    pdx_tp_cq_t *cq;
    pdx_tp_ep_t *ea, *ec;
    pdx_tp_addr_t addr;
    uint8_t src[64];
    pdx_tp_mr_t *smr;
    pdx_tp_wc_t wc;
    pdx_tp_write_t w;

    fx_env_begin(&env);
    a = tp_open(300);
    c = tp_open(300);
    cq = fx_cq_new(ops, a, 4);
    ea = fx_ep_new(ops, a, cq, 4, 0);
    ec = fx_ep_new(ops, c, fx_cq_new(ops, c, 4), 4, 0);
    ops->ep_address(ec, &addr);
    ops->close(c); /* nothing listens there any more */
    smr = fx_mr_new(ops, a, src, sizeof(src), 0);
    w = wr_to(smr, &(pdx_tp_rkey_t){.addr = 4096, .rkey = 1}, 1, sizeof(src), true);
    cr_assert_eq(ops->post_write(ea, &w, 1), PDX_OK, "WRs may be posted before connecting");
    cr_assert_eq(ops->ep_connect(ea, &addr), PDX_OK);
    cr_assert_eq(ops->ep_connect(ea, &addr), PDX_ERR_STATE);
    cr_assert_eq(wait_wc(cq, &wc, 1, WAIT_MS), 1);
    /* refused if this side dials, a timeout if it waits for the dead peer */
    cr_assert(wc.status == PDX_ERR_PEER || wc.status == PDX_ERR_TIMEOUT, "%s",
              pdx_status_str(wc.status));
    cr_assert_str_neq(ops->ep_error(ea), "");
    ops->ep_destroy(ea);
    cr_assert_eq(ops->mr_dereg(smr), PDX_OK);
    ops->cq_destroy(cq);
    ops->close(a);
    fx_env_end(&env, true);
}

Test(tcp, bad_arguments_are_refused)
{
    pdx_tp_mr_t *mr = (pdx_tp_mr_t *)0x1;
    pdx_tp_ep_t *ep = (pdx_tp_ep_t *)0x1;
    pdx_tp_cq_t *cq = (pdx_tp_cq_t *)0x1;
    pdx_tp_ep_attr_t attr = {.sq_depth = 4, .rq_depth = 1};
    pdx_tp_addr_t junk = {.len = 3, .bytes = {1, 2, 3}};
    pdx_tp_write_t w[5];
    pdx_tp_wc_t wc;
    char big[PDX_TP_SEND_MAX + 1] = {0};
    rig_t r;

    rig_open(&r, 4096, 4, 0);
    cr_assert_eq(ops->mr_reg(r.tp[0], NULL, 10, 0, &mr), PDX_ERR_INVALID);
    cr_assert_eq(mr, (pdx_tp_mr_t *)0x1, "output written on failure");
    w[0] = wr_make(&r, 1, 0, MAXMSG + 1, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_INVALID, "above max_msg_size");
    w[0] = wr_make(&r, 1, 4000, 200, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_INVALID, "past the source region");
    for (int i = 0; i < 5; i++)
        w[i] = wr_make(&r, 1, 0, 8, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 5), PDX_ERR_INVALID, "more than the SQ holds");
    cr_assert_eq(ops->post_send(r.ep[0], 1, big, sizeof(big), 0), PDX_ERR_INVALID);
    cr_assert_eq(ops->post_recv(r.ep[1], 1, r.dmr, 0, 64), PDX_ERR_AGAIN, "rq_depth 0");
    cr_assert_eq(ops->post_recv(r.ep[0], 1, r.smr, 0, 64), PDX_ERR_INVALID, "no local write");
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_FULL, "CQ is full");
    cr_assert_eq(ep, (pdx_tp_ep_t *)0x1, "output written on failure");
    cr_assert_eq(ops->ep_create(r.tp[1], r.cq[0], &attr, &ep), PDX_ERR_INVALID, "other tp");
    cr_assert_eq(ops->ep_connect(r.ep[0], &junk), PDX_ERR_INVALID);
    cr_assert_eq(ops->cq_create(r.tp[0], 0, &cq), PDX_ERR_INVALID);
    cr_assert_eq(cq, (pdx_tp_cq_t *)0x1, "output written on failure");
    /* nothing was posted: the ep still works */
    w[0] = wr_make(&r, 2, 0, 100, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    expect_wc(&wc, 2, PDX_OK, PDX_TP_OP_WRITE);
    rig_close(&r, true);
}
