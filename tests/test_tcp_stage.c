/*
 * The tcp transport with GPU memory, without a GPU: both sides register
 * fake device memory (fake_gpu.h, fx_gpu_*) with PDX_TP_ACCESS_DEVICE,
 * which only the fake copier reaches: any byte the transport touched itself
 * would fail the ep (EFAULT) or crash the test. Copies finish late (a delay
 * each, in order, on the copier's thread), and the copier records what
 * finished, so the tests check when completions may come. Every test ends
 * with no copy running and no staging, stream or event leaked or freed
 * while a copy used it.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "stage_rig.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- tests */

Test(tcp_stage, random_writes_land_byte_exact)
{
    static const uint64_t sizes[] = {1, 2, 7, 64, 4095, 4096, 4097, 65536, 65537, 262144,
                                     MAXMSG, 1000, 3, 0};
    fx_gpu_stats_t stats;
    uint8_t *expect;
    pdx_tp_wc_t wc[64];
    uint64_t last = 0;
    int done = 0, signaled = 0;
    rig_t r;

    fx_gpu_start(0, 200);
    /* 256 KiB of staging: pieces of 16 KiB, rings that wrap many times */
    rig_open(&r, 4u << 20, &(rig_opts_t){.staging = 256u << 10, .sq = 64});
    expect = calloc(1, r.len);
    for (int i = 0; i < 400; i++) {
        uint64_t len = sizes[i % PDX_ARRAY_SIZE(sizes)];
        uint64_t so = fx_rng() % (r.len - len + 1);
        uint64_t doff = i >= 300 ? 4096 : fx_rng() % (r.len - len + 1); /* the last hit one spot */
        bool sig = i % 4 == 3 || i == 399;
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, so, len, doff, sig);

        memcpy(expect + doff, r.src_sh + so, len);
        done += post_wait(&r, &w, expect_ok, &last);
        signaled += sig;
    }
    while (done < signaled) {
        int n = wait_some(r.cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(n, 0, "only %d of %d signaled writes completed", done, signaled);
        for (int i = 0; i < n; i++)
            expect_ok(&r, &wc[i], &last);
        done += n;
    }
    cr_assert_eq(last, 400u, "the last write completes last");
    cr_assert_eq(memcmp(r.dst_sh, expect, r.len), 0, "destination differs from in-order result");
    for (size_t i = r.len; i < 2 * r.len; i++)
        cr_assert_eq(r.dst_sh[i], 0, "byte %zu past the region was written", i);
    fx_gpu_stats(&stats);
    cr_assert_gt(stats.issued[PDX_TCP_COPY_D2H], 0);
    cr_assert_gt(stats.issued[PDX_TCP_COPY_H2D], 0);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "");
    free(expect);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

/* Writes posted at once, of 4 KiB but for the large ones (lens[i] != 0);
 * the receiver held until they are in its socket, so that one pass of each
 * side sees most of them. The last two hit the same destination. Returns the
 * copier's counts. */
typedef enum copier_kind { BATCHES, ONE_BY_ONE, PREPARE_FAILS } copier_kind_t;

static fx_gpu_stats_t posted_at_once(int n, const uint64_t *lens, copier_kind_t kind)
{
    pdx_tp_write_t w[32];
    pdx_tp_wc_t wc[1];
    fx_gpu_stats_t stats;
    uint8_t *expect;
    uint64_t off = 0;
    rig_t r;

    cr_assert_leq(n, 32);
    fx_gpu_start(0, 100);
    if (kind == ONE_BY_ONE)
        fx_gpu_one_by_one();
    else if (kind == PREPARE_FAILS)
        fx_gpu_prepare_fails();
    /* 16 MiB of staging: pieces of 1 MiB, so no write is cut */
    rig_open(&r, 8u << 20, &(rig_opts_t){.staging = 16u << 20, .sq = 64});
    expect = calloc(1, r.len);
    for (int i = 0; i < n; i++) {
        uint64_t len = lens && lens[i] ? lens[i] : 4096;
        uint64_t doff = i == n - 1 ? off - len : off; /* the last overwrites the one before */

        w[i] = wr_make(&r, (uint64_t)i, off + 4096, len, doff, i == n - 1);
        memcpy(expect + doff, r.src_sh + off + 4096, len);
        off += len;
    }
    pdx_tcp_pause(r.tp[1], true);
    cr_assert_eq(ops->post_write(r.ep[0], w, (uint32_t)n), PDX_OK);
    fx_nap_ms(100);
    pdx_tcp_pause(r.tp[1], false);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], (uint64_t)n - 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst_sh, expect, r.len), 0, "destination differs from in-order result");
    fx_gpu_stats(&stats);
    cr_assert_eq(stats.issued[PDX_TCP_COPY_D2H], (uint64_t)n);
    cr_assert_eq(stats.issued[PDX_TCP_COPY_H2D], (uint64_t)n);
    free(expect);
    rig_close(&r, kind == PREPARE_FAILS); /* its warning */
    fx_gpu_stop(0);
    return stats;
}

Test(tcp_stage, small_writes_are_copied_in_batches)
{
    fx_gpu_stats_t st = posted_at_once(32, NULL, BATCHES);

    cr_assert_eq(st.prepared, 2, "one runs_prepare per tp");
    /* the sender's pass saw all 32 */
    cr_assert_eq(st.batches[PDX_TCP_COPY_D2H], 1, "%llu batches",
                 (unsigned long long)st.batches[PDX_TCP_COPY_D2H]);
    /* the receiver's passes took what its socket had: at least one batch of
     * several (the overwrite goes after it, alone or in the next) */
    cr_assert_geq(st.batches[PDX_TCP_COPY_H2D], 1);
    cr_assert_lt(st.batches[PDX_TCP_COPY_H2D], 32);
}

Test(tcp_stage, large_writes_are_copied_alone)
{
    static const uint64_t lens[7] = {0, 0, 300u << 10, 0, 0, 256u << 10, 0};
    fx_gpu_stats_t st = posted_at_once(7, lens, BATCHES);

    /* 4 KiB, 4 KiB | 300 KiB | 4 KiB, 4 KiB | 256 KiB | 4 KiB, which overwrites:
     * two batches and three copies alone */
    cr_assert_eq(st.batches[PDX_TCP_COPY_D2H], 2, "%llu batches",
                 (unsigned long long)st.batches[PDX_TCP_COPY_D2H]);
    cr_assert_leq(st.batches[PDX_TCP_COPY_H2D], 2);
}

Test(tcp_stage, a_copier_without_batches_copies_piece_by_piece)
{
    fx_gpu_stats_t st = posted_at_once(32, NULL, ONE_BY_ONE);

    cr_assert_eq(st.batches[PDX_TCP_COPY_D2H] + st.batches[PDX_TCP_COPY_H2D], 0);
}

Test(tcp_stage, a_batch_copier_that_cannot_prepare_copies_piece_by_piece)
{
    fx_gpu_stats_t st = posted_at_once(32, NULL, PREPARE_FAILS);

    cr_assert_eq(st.prepared, 2);
    cr_assert_eq(st.batches[PDX_TCP_COPY_D2H] + st.batches[PDX_TCP_COPY_H2D], 0);
}

Test(tcp_stage, eps_made_after_the_first_gpu_region)
{
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    fx_gpu_start(0, 50);
    rig_open(&r, 3u << 20, &(rig_opts_t){.staging = 1u << 20, .sq = 8, .regions_first = true});
    for (int i = 0; i < 3; i++) {
        w = wr_make(&r, (uint64_t)i, (uint64_t)i << 20, 1u << 20, (uint64_t)i << 20, true);
        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
        cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
        fx_expect_wc(&wc, (uint64_t)i, PDX_OK, PDX_TP_OP_WRITE);
    }
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, r.len), 0);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

/* A completion tells that its write's bytes are in GPU memory. */
static void expect_placed(const rig_t *r, const pdx_tp_wc_t *wc, void *arg)
{
    const uint64_t *len = arg;
    uint64_t id = wc->wr_id;

    cr_assert_eq(wc->status, PDX_OK, "wr %llu: %s", (unsigned long long)id,
                 pdx_status_str(wc->status));
    cr_assert_eq(fx_gpu_placed(r->dst + (id << 16), len[id]), len[id],
                 "write %llu completed before its host-to-device copies finished",
                 (unsigned long long)id);
}

Test(tcp_stage, write_completes_only_after_its_copy)
{
    uint64_t len[64];
    pdx_tp_wc_t wc[64];
    int done = 0;
    rig_t r;

    fx_gpu_start(500, 3000); /* copies finish 0.5-3 ms after they start, in order */
    rig_open(&r, 64u << 16, &(rig_opts_t){.staging = 512u << 10, .sq = 16});
    for (int i = 0; i < 64; i++) {
        pdx_tp_write_t w;

        len[i] = 1 + fx_rng() % (1u << 16);
        w = wr_make(&r, (uint64_t)i, (uint64_t)i << 16, len[i], (uint64_t)i << 16, true);
        done += post_wait(&r, &w, expect_placed, len);
    }
    while (done < 64) {
        int n = wait_some(r.cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(n, 0, "only %d of 64 writes completed", done);
        for (int i = 0; i < n; i++)
            expect_placed(&r, &wc[i], len);
        done += n;
    }
    for (int i = 0; i < 64; i++)
        cr_assert_eq(memcmp(r.dst_sh + ((size_t)i << 16), r.src_sh + ((size_t)i << 16), len[i]),
                     0);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, send_after_writes_arrives_after_their_copies)
{
    uint8_t rbuf[2][PDX_TP_SEND_MAX], hbuf[4096], msg[40];
    pdx_tp_mr_t *rmr, *hmr;
    pdx_tp_rkey_t hrk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc[8];
    uint64_t total = 0;
    rig_t r;

    fx_gpu_start(2000, 4000);
    rig_open(&r, 16u << 16, &(rig_opts_t){.staging = 4u << 20, .sq = 64, .rq = 4});
    memset(rbuf, 0, sizeof(rbuf));
    memset(hbuf, 0, sizeof(hbuf));
    fx_fill_random(msg, sizeof(msg));
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    hmr = fx_mr_new(ops, r.tp[1], hbuf, sizeof(hbuf), RW); /* host memory next to GPU memory */
    ops->mr_remote(hmr, &hrk);
    cr_assert_eq(ops->post_recv(r.ep[1], 55, rmr, PDX_TP_SEND_MAX, PDX_TP_SEND_MAX), PDX_OK);
    for (int i = 0; i < 16; i++) {
        w = wr_make(&r, (uint64_t)i, (uint64_t)i << 16, 1u << 16, (uint64_t)i << 16, false);
        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
        total += 1u << 16;
    }
    /* behind them, frames that wait for their placement: a write into host
     * memory, a write outside the region (fails alone), then the SEND */
    w = wr_make(&r, 100, 0, sizeof(hbuf), 0, false);
    w.remote_addr = hrk.addr;
    w.rkey = hrk.rkey;
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    w = wr_make(&r, 101, 0, 64, r.len - 32, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(ops->post_send(r.ep[0], 99, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);

    cr_assert_eq(wait_wc(r.cq[1], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 55, PDX_OK, PDX_TP_OP_RECV);
    cr_assert_eq(fx_gpu_placed(r.dst, r.len), total, "the SEND overtook the copies of the writes");
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, r.len), 0);
    cr_assert_eq(memcmp(hbuf, r.src_sh, sizeof(hbuf)), 0);
    cr_assert_eq(wc[0].byte_len, sizeof(msg));
    cr_assert_eq(memcmp(rbuf[1], msg, sizeof(msg)), 0);

    cr_assert_eq(wait_wc(r.cq[0], wc, 2, WAIT_MS), 2);
    fx_expect_wc(&wc[0], 101, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    fx_expect_wc(&wc[1], 99, PDX_OK, PDX_TP_OP_SEND);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(hmr), PDX_OK);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, staging_smaller_than_the_data_in_flight)
{
    fx_gpu_stats_t stats;
    pdx_tp_wc_t wc[64];
    uint64_t last = 0;
    int done = 0, signaled = 0;
    rig_t r;

    fx_gpu_start(0, 100);
    /* 64 KiB of staging per ep (32 KiB a direction) for 4 MiB of writes of up to 1 MiB */
    rig_open(&r, 4u << 20, &(rig_opts_t){.staging = 64u << 10, .sq = 32});
    for (int i = 0, off = 0; off < (4 << 20); i++) {
        uint64_t want = i % 3 == 0 ? MAXMSG : 1 + fx_rng() % 200000;
        uint64_t len = PDX_MIN(want, (uint64_t)(4 << 20) - (uint64_t)off);
        bool sig = i % 5 == 4 || off + (int)len == (4 << 20);
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, (uint64_t)off, len, (uint64_t)off, sig);

        done += post_wait(&r, &w, expect_ok, &last);
        signaled += sig;
        off += (int)len;
    }
    while (done < signaled) {
        int n = wait_some(r.cq[0], wc, 64, WAIT_MS);

        cr_assert_gt(n, 0, "only %d of %d signaled writes completed", done, signaled);
        for (int i = 0; i < n; i++)
            expect_ok(&r, &wc[i], &last);
        done += n;
    }
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, r.len), 0);
    fx_gpu_stats(&stats);
    for (int d = 0; d < 2; d++)
        cr_assert_leq(stats.max_inflight[d], 32u << 10, "%llu bytes copying at once",
                      (unsigned long long)stats.max_inflight[d]);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, both_directions_at_once_through_small_staging)
{
    const size_t len = 2u << 20;
    uint8_t *src1, *dst0, *src1_sh, *dst0_sh;
    pdx_tp_mr_t *smr1, *dmr0;
    pdx_tp_rkey_t rk0;
    uint64_t off[2] = {0, 0};
    int done[2] = {0, 0}, posted[2] = {0, 0};
    pdx_tp_wc_t wc[64];
    uint64_t deadline;
    rig_t r;

    fx_gpu_start(0, 100);
    /* tp 0 writes into tp 1 (the rig) and tp 1 into tp 0, both through 64 KiB */
    rig_open(&r, len, &(rig_opts_t){.staging = 64u << 10, .sq = 16});
    src1 = fx_gpu_alloc(len, &src1_sh);
    dst0 = fx_gpu_alloc(len, &dst0_sh);
    fx_fill_random(src1_sh, len);
    smr1 = fx_mr_new(ops, r.tp[1], src1, len, DEV);
    dmr0 = fx_mr_new(ops, r.tp[0], dst0, len, RW | DEV);
    ops->mr_remote(dmr0, &rk0);
    deadline = pdx_deadline_ns(WAIT_MS);
    while (done[0] < posted[0] || done[1] < posted[1] || off[0] < len || off[1] < len) {
        for (int d = 0; d < 2; d++) {
            uint64_t want = 1 + fx_rng() % 300000, n = PDX_MIN(want, len - off[d]);
            pdx_tp_write_t w = {.wr_id = off[d], .mr = d ? smr1 : r.smr, .offset = off[d],
                                .length = n, .flags = PDX_TP_SIGNALED,
                                .remote_addr = (d ? rk0.addr : r.rk.addr) + off[d],
                                .rkey = d ? rk0.rkey : r.rk.rkey};
            int k;

            if (off[d] < len && ops->post_write(r.ep[d], &w, 1) == PDX_OK) {
                off[d] += n;
                posted[d]++;
            }
            k = ops->cq_poll(r.cq[d], wc, 64);
            for (int i = 0; i < k; i++)
                cr_assert_eq(wc[i].status, PDX_OK, "%s", pdx_status_str(wc[i].status));
            done[d] += k;
        }
        cr_assert_lt(pdx_now_ns(), deadline, "stuck: %d/%d and %d/%d writes done", done[0],
                     posted[0], done[1], posted[1]);
    }
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, len), 0);
    cr_assert_eq(memcmp(dst0_sh, src1_sh, len), 0);
    ops->ep_destroy(r.ep[0]);
    ops->ep_destroy(r.ep[1]);
    r.ep[0] = r.ep[1] = NULL;
    cr_assert_eq(ops->mr_dereg(smr1), PDX_OK);
    cr_assert_eq(ops->mr_dereg(dmr0), PDX_OK);
    fx_gpu_free(src1);
    fx_gpu_free(dst0);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, other_eps_progress_while_copies_run)
{
    uint8_t hsrc[4096], hdst[4096];
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *ep[2];
    pdx_tp_mr_t *hsmr, *hdmr;
    pdx_tp_rkey_t hrk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    fx_gpu_start(0, 0);
    rig_open(&r, 65536, &(rig_opts_t){.staging = 256u << 10, .sq = 8});
    for (int i = 0; i < 2; i++) { /* a second ep pair on the same tps, host memory only */
        cq[i] = fx_cq_new(ops, r.tp[i], 8);
        ep[i] = fx_ep_new(ops, r.tp[i], cq[i], 8, 0);
    }
    fx_connect_eps(ops, ep[0], ep[1]);
    fx_fill_random(hsrc, sizeof(hsrc));
    hsmr = fx_mr_new(ops, r.tp[0], hsrc, sizeof(hsrc), 0);
    hdmr = fx_mr_new(ops, r.tp[1], hdst, sizeof(hdst), RW);
    ops->mr_remote(hdmr, &hrk);

    fx_gpu_delay(400000, 400000); /* one write from and into GPU memory: 800 ms of copies */
    w = wr_make(&r, 1, 0, 4096, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    fx_gpu_wait_running(false);
    for (int i = 0; i < 20; i++) {
        w = (pdx_tp_write_t){.wr_id = 100 + (uint64_t)i, .mr = hsmr, .length = sizeof(hsrc),
                             .remote_addr = hrk.addr, .rkey = hrk.rkey, .flags = PDX_TP_SIGNALED};
        cr_assert_eq(ops->post_write(ep[0], &w, 1), PDX_OK);
        /* far less than a copy takes: the progress threads never wait for one */
        cr_assert_eq(wait_wc(cq[0], &wc, 1, 200), 1, "host write %d waited for a copy", i);
        fx_expect_wc(&wc, 100 + (uint64_t)i, PDX_OK, PDX_TP_OP_WRITE);
    }
    cr_assert_eq(memcmp(hdst, hsrc, sizeof(hsrc)), 0);
    cr_assert_eq(ops->cq_poll(r.cq[0], &wc, 1), 0, "host writes waited for the GPU copies");
    cr_assert_gt(fx_gpu_running(), 0);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, 4096), 0);
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(ep[i]);
        ops->cq_destroy(cq[i]);
    }
    cr_assert_eq(ops->mr_dereg(hsmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(hdmr), PDX_OK);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, out_of_range_write_fails_only_itself)
{
    static const pdx_status_t want[] = {PDX_OK, PDX_ERR_RANGE, PDX_OK, PDX_ERR_RANGE,
                                        PDX_ERR_RANGE, PDX_OK, PDX_ERR_RANGE, PDX_OK};
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[8];
    rig_t r;

    fx_gpu_start(100, 2000);
    rig_open(&r, MAXMSG, &(rig_opts_t){.staging = 256u << 10, .sq = 8});
    w[0] = wr_make(&r, 0, 0, 1024, 0, true);
    w[1] = wr_make(&r, 1, 0, 1024, 1024, false); /* failed: completes although unsignaled */
    w[1].rkey ^= 1u << 20;
    w[2] = wr_make(&r, 2, 1024, 1024, 1024, true);
    w[3] = wr_make(&r, 3, 0, 200, r.len - 100, true); /* runs past the end */
    w[4] = wr_make(&r, 4, 0, 16, 0, true);
    w[4].remote_addr = r.rk.addr - 8; /* starts before the region */
    w[5] = wr_make(&r, 5, 2048, 2048, 2048, true);
    w[6] = wr_make(&r, 6, 0, MAXMSG, 4096, true); /* a whole MiB to skip */
    w[7] = wr_make(&r, 7, 4096, r.len - 4096, 4096, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(wait_wc(r.cq[0], &wc[i], 1, WAIT_MS), 1);
        fx_expect_wc(&wc[i], (uint64_t)i, want[i], PDX_TP_OP_WRITE);
        /* an ERR covers the writes before it too: only once they are placed */
        if (want[i] == PDX_OK)
            cr_assert_eq(fx_gpu_placed(r.dst + (w[i].remote_addr - r.rk.addr), w[i].length),
                         w[i].length, "write %d completed before its copies finished", i);
    }
    cr_assert_eq(memcmp(r.dst_sh, r.src_sh, r.len), 0);
    for (size_t i = r.len; i < 2 * r.len; i++)
        cr_assert_eq(r.dst_sh[i], 0, "byte %zu past the region was written", i);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "");
    cr_assert_eq(ops->post_write(r.ep[0], &w[0], 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 0, PDX_OK, PDX_TP_OP_WRITE);
    rig_close(&r, false);
    fx_gpu_stop(0);
}

Test(tcp_stage, gpu_regions_without_a_gpu_runtime_are_refused)
{
    fx_env_t env;
    pdx_tp_mr_t *mr = NULL;
    pdx_tp_t *tp;
    uint8_t buf[4096];

    /* the default copier: malloc'ed memory is no GPU memory (and this host
     * may have no GPU at all) */
    fx_env_begin(&env);
    tp = tp_open(LONG_MS, 1u << 20);
    cr_assert_eq(ops->mr_reg(tp, buf, sizeof(buf), RW | DEV, &mr), PDX_ERR_UNSUPPORTED);
    cr_assert_null(mr, "output written on failure");
    cr_assert_eq(ops->mr_reg(tp, buf, sizeof(buf), RW, &mr), PDX_OK, "host memory still works");
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    ops->close(tp);
    fx_env_end(&env, true);
}

Test(tcp_stage, gpu_memory_is_no_receive_buffer)
{
    pdx_tp_mr_t *mr;
    rig_t r;

    fx_gpu_start(0, 0);
    rig_open(&r, 65536, &(rig_opts_t){.staging = 256u << 10, .sq = 4, .rq = 4});
    cr_assert_eq(ops->post_recv(r.ep[1], 1, r.dmr, 0, 64), PDX_ERR_INVALID);
    mr = fx_mr_new(ops, r.tp[1], r.dst + r.len, 4096, RW | DEV);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    rig_close(&r, true);
    fx_gpu_stop(0);
}
