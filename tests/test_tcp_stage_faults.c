/*
 * The tcp transport's GPU staging when copies fail, cannot start, stall or
 * outlive their ep, without a GPU (the rig and fake copier of
 * test_tcp_stage.c): the ep fails with a message naming the copy, every
 * outstanding WR completes with an error, and no staging is freed while a
 * copy may still use it.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "stage_rig.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* Post up to n writes of 64 KiB (every other one signaled), then a SEND;
 * returns how many WRs went in before the ep failed (the SEND is WR n). */
static int post_batch(rig_t *r, int n)
{
    pdx_status_t st;

    for (int i = 0; i < n; i++) {
        pdx_tp_write_t w = wr_make(r, (uint64_t)i, (uint64_t)i << 16, 1u << 16,
                                   (uint64_t)i << 16, i % 2 == 0);

        st = ops->post_write(r->ep[0], &w, 1);
        if (st == PDX_ERR_PEER)
            return i; /* failed already */
        cr_assert_eq(st, PDX_OK);
    }
    st = ops->post_send(r->ep[0], 1000, "notify", 6, PDX_TP_SIGNALED);
    if (st == PDX_ERR_PEER)
        return n;
    cr_assert_eq(st, PDX_OK);
    return n + 1;
}

/* Every WR post_batch(n) posted (`posted` of them) completes: some in order,
 * then the rest with an error, each on its own (signaled or not). */
static void expect_all_failed_after(rig_t *r, int n, int posted)
{
    pdx_tp_wc_t wc[64];
    uint64_t next = 0; /* WRs before it are covered */
    bool failed = false;

    while (next < (uint64_t)posted) {
        int k = wait_some(r->cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(k, 0, "%llu of %d WRs completed", (unsigned long long)next, posted);
        for (int i = 0; i < k; i++) {
            uint64_t idx = wc[i].wr_id == 1000 ? (uint64_t)n : wc[i].wr_id;

            cr_assert_geq(idx, next, "completions out of order");
            if (wc[i].status == PDX_OK) {
                cr_assert(!failed, "WR %llu succeeded after one failed", (unsigned long long)idx);
            } else {
                /* on its own: only unsignaled writes that succeeded come before it */
                for (uint64_t j = next; j < idx; j++)
                    cr_assert(!failed && j % 2 == 1, "WR %llu never completed",
                              (unsigned long long)j);
                failed = true;
            }
            next = idx + 1;
        }
    }
    cr_assert(failed, "no WR failed");
}

Test(tcp_stage, receiver_copy_error_fails_the_ep)
{
    uint8_t rbuf[PDX_TP_SEND_MAX];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc[4];
    rig_t r;

    fx_gpu_start(200, 1000);
    fx_gpu_fail(PDX_TCP_COPY_H2D, 5);
    rig_open(&r, 16u << 16, &(rig_opts_t){.staging = 256u << 10, .sq = 32, .rq = 2});
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 7, rmr, 0, sizeof(rbuf)), PDX_OK);
    cr_assert_eq(ops->post_recv(r.ep[1], 8, rmr, 0, sizeof(rbuf)), PDX_OK);
    expect_all_failed_after(&r, 16, post_batch(&r, 16));
    /* the receiver: named the copy; its receives completed with an error */
    cr_assert_eq(wait_wc(r.cq[1], wc, 2, WAIT_MS), 2);
    fx_expect_wc(&wc[0], 7, PDX_ERR_IO, PDX_TP_OP_RECV);
    fx_expect_wc(&wc[1], 8, PDX_ERR_IO, PDX_TP_OP_RECV);
    cr_assert(strstr(ops->ep_error(r.ep[1]), "host-to-device copy") &&
              strstr(ops->ep_error(r.ep[1]), "injected copy error"), "%s",
              ops->ep_error(r.ep[1]));
    cr_assert_str_neq(ops->ep_error(r.ep[0]), "");
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, sender_copy_error_fails_the_ep)
{
    rig_t r;

    fx_gpu_start(200, 1000);
    fx_gpu_fail(PDX_TCP_COPY_D2H, 9);
    rig_open(&r, 16u << 16, &(rig_opts_t){.staging = 256u << 10, .sq = 32});
    expect_all_failed_after(&r, 16, post_batch(&r, 16));
    cr_assert(strstr(ops->ep_error(r.ep[0]), "device-to-host copy") &&
              strstr(ops->ep_error(r.ep[0]), "injected copy error"), "%s",
              ops->ep_error(r.ep[0]));
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, copy_that_cannot_start_fails_the_ep)
{
    rig_t r;

    fx_gpu_start(0, 100);
    fx_gpu_refuse(PDX_TCP_COPY_D2H, 3);
    rig_open(&r, 16u << 16, &(rig_opts_t){.staging = 256u << 10, .sq = 32});
    expect_all_failed_after(&r, 16, post_batch(&r, 16));
    cr_assert(strstr(ops->ep_error(r.ep[0]), "could not start") &&
              strstr(ops->ep_error(r.ep[0]), "injected refusal"), "%s", ops->ep_error(r.ep[0]));
    rig_close(&r, true);
    fx_gpu_stop(3); /* the copy might run still: its staging and run lists are never freed */
}

Test(tcp_stage, ep_fail_and_destroy_with_copies_in_flight)
{
    pdx_tp_wc_t wc[64];
    int got = 0;
    rig_t r;

    fx_gpu_start(20000, 40000); /* 20-40 ms a copy */
    rig_open(&r, 16u << 16, &(rig_opts_t){.staging = 256u << 10, .sq = 32});
    for (int i = 0; i < 16; i++) {
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, (uint64_t)i << 16, 1u << 16,
                                   (uint64_t)i << 16, false);

        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    }
    fx_gpu_wait_running(true);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "aborted with copies in flight");
    while (got < 16) {
        int n = wait_some(r.cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(n, 0);
        for (int i = 0; i < n; i++)
            fx_expect_wc(&wc[i], (uint64_t)got + (uint64_t)i, PDX_ERR_ABORTED, PDX_TP_OP_WRITE);
        got += n;
    }
    cr_assert_gt(fx_gpu_running(), 0, "the copies finished before the test could fail the ep");
    /* destroying both eps while copies still run into and out of their staging */
    ops->ep_destroy(r.ep[0]);
    ops->ep_destroy(r.ep[1]);
    r.ep[0] = r.ep[1] = NULL;
    cr_assert_eq(fx_gpu_running(), 0, "ep_destroy returned while its copies ran");
    rig_close(&r, false);
    fx_gpu_stop(0);
}

/* One signaled 4 KiB write from GPU memory, posted; returns once its copy runs. */
static void one_copy_running(rig_t *r, uint64_t wr_id)
{
    pdx_tp_write_t w = wr_make(r, wr_id, 0, 4096, 0, true);

    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_OK);
    fx_gpu_wait_running(false);
}

static void destroy_eps(rig_t *r)
{
    ops->ep_destroy(r->ep[0]);
    ops->ep_destroy(r->ep[1]);
    r->ep[0] = r->ep[1] = NULL;
}

/* The source region deregisters once nothing holds it (within WAIT_MS), and
 * is registered again for rig_close. */
static void source_freed(rig_t *r)
{
    uint64_t deadline = pdx_deadline_ns(WAIT_MS);
    pdx_status_t st;

    while ((st = ops->mr_dereg(r->smr)) == PDX_ERR_STATE && pdx_now_ns() < deadline)
        fx_nap_ms(5);
    cr_assert_eq(st, PDX_OK);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, r->len, DEV);
}

Test(tcp_stage, destroy_keeps_staging_of_copies_past_the_deadline)
{
    pdx_tp_wc_t wc[4];
    pdx_tp_write_t w;
    rig_t r;

    fx_gpu_start(0, 0);
    /* the tps' timeout (300 ms) bounds how long ep_destroy waits for copies */
    rig_open(&r, 1u << 20, &(rig_opts_t){.staging = 256u << 10, .sq = 8, .timeout_ms = 300});
    w = wr_make(&r, 1, 0, 4096, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 1, PDX_OK, PDX_TP_OP_WRITE);
    fx_gpu_delay(700000, 700000); /* then one copy takes 700 ms */
    one_copy_running(&r, 2);
    destroy_eps(&r);
    cr_assert_gt(fx_gpu_running(), 0, "ep_destroy waited past its deadline");
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "a copy still reads the region");
    source_freed(&r); /* once the copy finished, the staging goes and the region is free */
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, destroy_frees_staging_of_a_copy_that_failed)
{
    rig_t r;

    fx_gpu_start(0, 0);
    rig_open(&r, 1u << 20, &(rig_opts_t){.staging = 256u << 10, .sq = 8, .timeout_ms = 2000});
    fx_gpu_delay(300000, 300000);
    fx_gpu_fail(PDX_TCP_COPY_D2H, 1); /* fails once it ends, after the ep is gone */
    one_copy_running(&r, 1);
    destroy_eps(&r);
    cr_assert_eq(fx_gpu_running(), 0, "ep_destroy returned while its copy ran");
    /* a failed copy no longer reads the region: nothing keeps it or the staging */
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_OK);
    r.smr = fx_mr_new(ops, r.tp[0], r.src, r.len, DEV);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, destroy_that_cannot_ask_keeps_the_staging)
{
    uint64_t t0;
    rig_t r;

    fx_gpu_start(0, 0);
    rig_open(&r, 1u << 20, &(rig_opts_t){.staging = 256u << 10, .sq = 8, .timeout_ms = 2000});
    fx_gpu_delay(300000, 300000);
    one_copy_running(&r, 1);
    fx_gpu_blind(true);
    t0 = pdx_now_ns();
    destroy_eps(&r);
    /* nothing to wait for that it could see end: kept, not freed, at once */
    cr_assert_lt(pdx_now_ns() - t0, 1000000000ull,
                 "ep_destroy waited for copies it cannot ask about");
    cr_assert_gt(fx_gpu_running(), 0);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "a copy may still read the region");
    fx_gpu_blind(false);
    source_freed(&r); /* a thread that can ask frees it once the copy ended */
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, stuck_copy_fails_the_ep_at_its_deadline)
{
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    fx_gpu_start(0, 0);
    fx_gpu_delay_h2d(900000); /* three times the receiver's deadline */
    /* the receiver has no WR outstanding: only its copy deadline fails it */
    rig_open(&r, 65536, &(rig_opts_t){.staging = 256u << 10, .sq = 8, .rx_timeout_ms = 300});
    w = wr_make(&r, 1, 0, 4096, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[1]), "GPU copies"), "%s", ops->ep_error(r.ep[1]));
    cr_assert_gt(fx_gpu_running(), 0, "the copy outlives the failed ep");
    while (fx_gpu_running())
        fx_nap_ms(10);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, close_waits_for_copies_of_destroyed_eps)
{
    rig_t r;

    fx_gpu_start(0, 0);
    /* ep_destroy waits 1 s for the 1.5 s copy, close up to 1 s more: half a
     * second each way for a loaded machine to run this thread late */
    rig_open(&r, 1u << 20, &(rig_opts_t){.staging = 256u << 10, .sq = 8, .timeout_ms = 1000});
    fx_gpu_delay(1500000, 1500000);
    one_copy_running(&r, 1);
    ops->ep_destroy(r.ep[0]);
    r.ep[0] = NULL;
    cr_assert_gt(fx_gpu_running(), 0);
    /* closing tp 0 frees its region and the kept staging once the copy finished */
    ops->cq_destroy(r.cq[0]);
    ops->close(r.tp[0]);
    cr_assert_eq(fx_gpu_running(), 0, "close returned while a copy of its staging ran");
    ops->ep_destroy(r.ep[1]);
    cr_assert_eq(ops->mr_dereg(r.dmr), PDX_OK);
    ops->cq_destroy(r.cq[1]);
    ops->close(r.tp[1]);
    fx_gpu_free(r.src);
    fx_gpu_free(r.dst);
    fx_env_end(&r.env, false);
    fx_gpu_stop(0);
}
