/*
 * READs on the tcp transport alone over 127.0.0.1: bytes exact and nothing
 * past the target, a READ after a WRITE on one endpoint sees the WRITE,
 * both sides reading megabytes from each other at once (the RDATA frames
 * go out while each side's own stream is busy), refused READs failing only
 * themselves, bad arguments, GPU memory (the fake copier) refused on either
 * side, and READs flushed when the endpoint fails.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "fake_gpu.h"
#include "tcp/tcp.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define MAXMSG  (1u << 20)
#define LONG_MS 10000u
#define WAIT_MS 10000
#define LW      PDX_TP_ACCESS_LOCAL_WRITE
#define ALL     (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE | \
                 PDX_TP_ACCESS_REMOTE_READ)

static const pdx_transport_ops_t *const ops = &pdx_tcp_ops;

/* Two tps, an ep pair; on each side a region `mine` the other may read and
 * write, and `into`, a local buffer READs land in (twice as long as its
 * registered part: a guard). */
typedef struct rig {
    fx_env_t      env;
    pdx_tp_t     *tp[2];
    pdx_tp_cq_t  *cq[2];
    pdx_tp_ep_t  *ep[2];
    size_t        len;
    uint8_t      *mine[2], *into[2];
    pdx_tp_mr_t  *mine_mr[2], *into_mr[2];
    pdx_tp_rkey_t rk[2];    /* of mine[i] */
} rig_t;

static void rig_open(rig_t *r, size_t len, uint32_t sq)
{
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = LONG_MS,
                              .max_msg_size = MAXMSG};

    memset(r, 0, sizeof(*r));
    fx_env_begin(&r->env);
    r->len = len;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->open(&params, &r->tp[i]), PDX_OK);
        r->cq[i] = fx_cq_new(ops, r->tp[i], sq);
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], sq, 0);
        r->mine[i] = malloc(len);
        r->into[i] = calloc(2, len);
        cr_assert(r->mine[i] && r->into[i]);
        fx_fill_random(r->mine[i], len);
        r->mine_mr[i] = fx_mr_new(ops, r->tp[i], r->mine[i], len, ALL);
        r->into_mr[i] = fx_mr_new(ops, r->tp[i], r->into[i], len, LW);
        ops->mr_remote(r->mine_mr[i], &r->rk[i]);
    }
    fx_connect_eps(ops, r->ep[0], r->ep[1]);
}

static void rig_close(rig_t *r, bool errors_expected)
{
    for (int i = 0; i < 2; i++)
        ops->ep_destroy(r->ep[i]);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->mr_dereg(r->mine_mr[i]), PDX_OK);
        cr_assert_eq(ops->mr_dereg(r->into_mr[i]), PDX_OK);
        ops->cq_destroy(r->cq[i]);
        ops->close(r->tp[i]);
        free(r->mine[i]);
        free(r->into[i]);
    }
    fx_env_end(&r->env, errors_expected);
}

/* ep[i] reads len bytes of the peer's region at off into its `into` at loff. */
static pdx_status_t read_at(rig_t *r, int i, uint64_t id, uint64_t loff, uint64_t off,
                            uint32_t len)
{
    return ops->post_read(r->ep[i], id, r->into_mr[i], loff, len, r->rk[1 - i].addr + off,
                          r->rk[1 - i].rkey);
}

Test(tcp_read, reads_land_byte_exact)
{
    const uint32_t sizes[] = {1, 7, 4096, 65536, MAXMSG, 100000, 3};
    pdx_tp_wc_t wc[8];
    uint64_t at = 0;
    rig_t r;

    rig_open(&r, 4u << 20, 16);
    for (uint32_t k = 0; k < 7; k++) {
        cr_assert_eq(read_at(&r, 0, 100 + k, at, (at * 7 + 13) % (r.len - sizes[k]), sizes[k]),
                     PDX_OK);
        at += sizes[k];
    }
    cr_assert_eq(fx_wait_wc(ops, r.cq[0], wc, 7, WAIT_MS, 50u), 7);
    at = 0;
    for (uint32_t k = 0; k < 7; k++) {
        fx_expect_wc(&wc[k], 100 + k, PDX_OK, PDX_TP_OP_READ);
        cr_assert_eq(memcmp(r.into[0] + at, r.mine[1] + (at * 7 + 13) % (r.len - sizes[k]),
                            sizes[k]), 0, "READ %u", k);
        at += sizes[k];
    }
    for (size_t i = at; i < 2 * r.len; i++)
        cr_assert_eq(r.into[0][i], 0, "byte %zu past the READs", i);
    rig_close(&r, false);
}

/* A WRITE, then a READ of the same bytes, on one endpoint: RC order. */
Test(tcp_read, read_after_write_sees_it)
{
    pdx_tp_write_t w;
    pdx_tp_wc_t wc[2];
    rig_t r;

    rig_open(&r, 1u << 20, 8);
    memset(r.into[0] + 512, 0x77, 4096); /* the source of the WRITE */
    w = (pdx_tp_write_t){.wr_id = 1, .mr = r.into_mr[0], .offset = 512, .length = 4096,
                         .remote_addr = r.rk[1].addr + 8192, .rkey = r.rk[1].rkey};
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(read_at(&r, 0, 2, 65536, 8192, 4096), PDX_OK);
    cr_assert_eq(fx_wait_wc(ops, r.cq[0], wc, 1, WAIT_MS, 50u), 1, "only the READ is signaled");
    fx_expect_wc(&wc[0], 2, PDX_OK, PDX_TP_OP_READ);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(r.into[0][65536 + i], 0x77, "byte %d: the READ passed the WRITE", i);
    rig_close(&r, false);
}

/* Both sides READ 32 MiB from each other at once, in 1 MiB pieces. */
Test(tcp_read, both_ways_at_once)
{
    enum { N = 32 };
    pdx_tp_wc_t wc[N];
    rig_t r;

    rig_open(&r, 32u << 20, N);
    for (int i = 0; i < 2; i++)
        for (uint64_t k = 0; k < N; k++)
            cr_assert_eq(read_at(&r, i, k, k * MAXMSG, (N - 1 - k) * MAXMSG, MAXMSG), PDX_OK);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_wait_wc(ops, r.cq[i], wc, N, WAIT_MS, 50u), N, "side %d", i);
        for (uint64_t k = 0; k < N; k++) {
            fx_expect_wc(&wc[k], k, PDX_OK, PDX_TP_OP_READ);
            cr_assert_eq(memcmp(r.into[i] + k * MAXMSG, r.mine[1 - i] + (N - 1 - k) * MAXMSG,
                                MAXMSG), 0, "side %d READ %llu", i, (unsigned long long)k);
        }
    }
    rig_close(&r, false);
}

/* Past the region, and a region without remote read access: an error for
 * each, in order, and the endpoint goes on. */
Test(tcp_read, refused_reads_fail_only_themselves)
{
    pdx_tp_rkey_t wo;
    pdx_tp_mr_t *mr;
    pdx_tp_wc_t wc[4];
    uint8_t *buf = calloc(1, 4096);
    rig_t r;

    rig_open(&r, 1u << 20, 8);
    mr = fx_mr_new(ops, r.tp[1], buf, 4096, LW | PDX_TP_ACCESS_REMOTE_WRITE);
    ops->mr_remote(mr, &wo);
    cr_assert_eq(read_at(&r, 0, 1, 0, r.len - 10, 20), PDX_OK);
    cr_assert_eq(ops->post_read(r.ep[0], 2, r.into_mr[0], 0, 16, wo.addr, wo.rkey), PDX_OK);
    cr_assert_eq(read_at(&r, 0, 3, 100, 200, 300), PDX_OK);
    cr_assert_eq(fx_wait_wc(ops, r.cq[0], wc, 3, WAIT_MS, 50u), 3);
    fx_expect_wc(&wc[0], 1, PDX_ERR_RANGE, PDX_TP_OP_READ);
    fx_expect_wc(&wc[1], 2, PDX_ERR_RANGE, PDX_TP_OP_READ);
    fx_expect_wc(&wc[2], 3, PDX_OK, PDX_TP_OP_READ);
    cr_assert_eq(memcmp(r.into[0] + 100, r.mine[1] + 200, 300), 0);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "", "the endpoint stays up");
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    free(buf);
    rig_close(&r, true);
}

Test(tcp_read, bad_arguments_are_refused)
{
    pdx_tp_mr_t *ro;
    uint8_t *buf = calloc(1, 4096);
    rig_t r;

    rig_open(&r, 1u << 20, 2);
    ro = fx_mr_new(ops, r.tp[0], buf, 4096, 0);
    cr_assert_eq(ops->post_read(r.ep[0], 1, ro, 0, 16, r.rk[1].addr, r.rk[1].rkey),
                 PDX_ERR_INVALID, "no local write access");
    cr_assert_eq(read_at(&r, 0, 2, r.len - 8, 0, 16), PDX_ERR_INVALID, "past the local region");
    cr_assert_eq(read_at(&r, 0, 3, 0, 0, MAXMSG + 1), PDX_ERR_INVALID, "above the limit");
    cr_assert_eq(read_at(&r, 0, 4, 0, 0, 8), PDX_OK);
    cr_assert_eq(read_at(&r, 0, 5, 8, 0, 8), PDX_OK);
    cr_assert_eq(read_at(&r, 0, 6, 16, 0, 8), PDX_ERR_AGAIN, "the send queue holds 2");
    {
        pdx_tp_wc_t wc[2];

        cr_assert_eq(fx_wait_wc(ops, r.cq[0], wc, 2, WAIT_MS, 50u), 2);
    }
    cr_assert_eq(ops->mr_dereg(ro), PDX_OK);
    free(buf);
    rig_close(&r, true);
}

/* GPU memory (the fake copier): a READ into it is refused at post, a READ
 * of it by the peer is answered with an error. */
Test(tcp_read, gpu_memory_is_refused_on_either_side)
{
    uint8_t *sh, *dev;
    pdx_tp_mr_t *dmr;
    pdx_tp_rkey_t drk;
    pdx_tp_wc_t wc;
    rig_t r;

    fx_gpu_start(0, 0);
    rig_open(&r, 1u << 20, 4);
    dev = fx_gpu_alloc(8192, &sh);
    dmr = fx_mr_new(ops, r.tp[0], dev, 8192, ALL | PDX_TP_ACCESS_DEVICE);
    cr_assert_eq(ops->post_read(r.ep[0], 1, dmr, 0, 64, r.rk[1].addr, r.rk[1].rkey),
                 PDX_ERR_UNSUPPORTED);
    ops->mr_remote(dmr, &drk);
    cr_assert_eq(ops->post_read(r.ep[1], 2, r.into_mr[1], 0, 64, drk.addr, drk.rkey), PDX_OK);
    cr_assert_eq(fx_wait_wc(ops, r.cq[1], &wc, 1, WAIT_MS, 50u), 1);
    fx_expect_wc(&wc, 2, PDX_ERR_UNSUPPORTED, PDX_TP_OP_READ);
    cr_assert_eq(ops->mr_dereg(dmr), PDX_OK);
    rig_close(&r, true);
    fx_gpu_free(dev);
    fx_gpu_stop(0);
}

/* The endpoint fails with READs in flight: each completes, in order, those
 * still outstanding in error. A loaded machine may let all 8 finish before
 * the failure: then the run is made again, a few times at most. */
Test(tcp_read, ep_fail_flushes_reads)
{
    bool flushed = false;

    for (int attempt = 0; attempt < 5 && !flushed; attempt++) {
        pdx_tp_wc_t wc[8];
        int got = 0;
        rig_t r;

        rig_open(&r, 8u << 20, 8);
        for (uint64_t k = 0; k < 8; k++)
            cr_assert_eq(read_at(&r, 0, k, k * MAXMSG, k * MAXMSG, MAXMSG), PDX_OK);
        ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "test");
        got = fx_wait_wc(ops, r.cq[0], wc, 8, WAIT_MS, 50u);
        cr_assert_eq(got, 8, "every READ completes");
        for (int k = 0; k < got; k++) {
            cr_assert_eq(wc[k].wr_id, (uint64_t)k);
            if (k > 0 && wc[k - 1].status != PDX_OK)
                cr_assert_neq(wc[k].status, PDX_OK, "READ %d finished after one failed", k);
        }
        flushed = wc[7].status != PDX_OK;
        rig_close(&r, true);
    }
    cr_assert(flushed, "in 5 runs the failure never met a READ in flight");
}
