/*
 * rdma completion queues over softnic: a CQ deeper than the device's
 * max_cqe is split into several ibv CQs on one completion channel (eps on
 * every one of them, one fd waking for each, fair polling, no overrun),
 * and the completions of an ep that was destroyed never come out. Each
 * test checks that it leaves no file descriptor and no verbs object behind
 * (rdma_fixture.h).
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

/* -------------------------------------------------- CQs past max_cqe */

#define SPLIT_EPS   8      /* eps per side at most */
#define SPLIT_PAGE  4096u
#define SPLIT_PAGES 16u    /* per ep: its slice of src and dst */
#define SPLIT_SENDS 12u    /* per ep, fewer than its receives: no RNR */
#define SPLIT_WRS   600u   /* WRITEs per ep */

/* Write j of an ep goes to page j % SPLIT_PAGES of its dst slice, from a page
 * of its src slice that depends only on that (not in order: gathered
 * WRITEs of scattered sources). */
static uint32_t split_src_page(uint32_t dst_page)
{
    return (dst_page * 5 + 3) % SPLIT_PAGES;
}

/*
 * A CQ of `depth` on a NIC of max_cqe 64 (exact: ibv_create_cq gives exactly
 * cqe entries, else 2^k - 1, capped at max_cqe): it holds `nicq` ibv CQs, eps
 * of sq 16 + rq 16 fill every one of them (`neps` in all, the next one is
 * PDX_ERR_FULL), the one cq_fd wakes for each ibv CQ, and WRITEs and SENDs on
 * every ep at once, in calls that overrun the send queues, all complete in
 * order, with their bytes and receives, without an overrun.
 */
static void split_run(bool exact, uint32_t depth, uint32_t nicq, uint32_t neps)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    const size_t slice = (size_t)SPLIT_PAGES * SPLIT_PAGE, len = SPLIT_EPS * slice;
    pdx_tp_ep_attr_t attr = {.sq_depth = 16, .rq_depth = 16};
    uint32_t per_icq[SPLIT_EPS] = {0}, posted[SPLIT_EPS] = {0}, sends[SPLIT_EPS] = {0};
    uint32_t recvs[SPLIT_EPS] = {0}, done_eps = 0;
    uint64_t last[SPLIT_EPS], errors, deadline;
    pdx_tp_ep_t *ep[2][SPLIT_EPS], *extra = NULL;
    pdx_tp_cq_t *cq[2];
    pdx_tp_t *tp[2];
    pdx_tp_mr_t *smr, *dmr, *rmr;
    pdx_tp_rkey_t rk;
    uint8_t *src, *dst, rbuf[SPLIT_EPS * 16][PDX_TP_SEND_MAX];
    softnic_stats_t st0, st;
    pdx_tp_wc_t wc[32];
    fx_nic_env_t env;

    c.max_cqe = 64;
    c.exact_cq_depth = exact;
    fx_nic_env_begin(&env, &c);
    softnic_stats(&st0);
    for (int i = 0; i < 2; i++) {
        rdma_cq_t *q;
        uint32_t sum = 0;

        cr_assert_eq(fx_tp_try(&tp[i], "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL),
                     PDX_OK);
        cq[i] = fx_cq_new(ops, tp[i], depth);
        q = rdma_cq(cq[i]);
        cr_assert_eq(q->nicq, nicq, "%u ibv CQs, not %u", q->nicq, nicq);
        for (uint32_t k = 0; k < nicq; k++) {
            cr_assert_leq(q->icqs[k].depth, 64u);
            cr_assert_geq((uint32_t)q->icqs[k].cq->cqe, q->icqs[k].depth);
            if (exact)
                cr_assert_eq((uint32_t)q->icqs[k].cq->cqe, q->icqs[k].depth);
            sum += q->icqs[k].depth;
        }
        cr_assert_eq(sum, depth);
        for (uint32_t k = 0; k < neps; k++) {
            ep[i][k] = fx_ep_new(ops, tp[i], cq[i], attr.sq_depth, attr.rq_depth);
            per_icq[rdma_ep(ep[i][k])->icq] += i == 0;
        }
        errors = pdx_log_error_count();
        cr_assert_eq(ops->ep_create(tp[i], cq[i], &attr, &extra), PDX_ERR_FULL,
                     "an ep past every ibv CQ");
        cr_assert_eq(pdx_log_error_count(), errors + 1, "one error says why");
    }
    for (uint32_t k = 0; k < nicq; k++)
        cr_assert_geq(per_icq[k], 1u, "no ep on ibv CQ %u", k);
    errors = pdx_log_error_count();
    src = malloc(len);
    dst = calloc(1, len);
    cr_assert(src && dst);
    fx_fill_random(src, len);
    smr = fx_mr_new(ops, tp[0], src, len, 0);
    dmr = fx_mr_new(ops, tp[1], dst, len, FX_RW);
    rmr = fx_mr_new(ops, tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    ops->mr_remote(dmr, &rk);
    for (uint32_t k = 0; k < neps; k++) {
        fx_connect_eps(ops, ep[0][k], ep[1][k]);
        for (uint32_t i = 0; i < 16; i++)
            cr_assert_eq(ops->post_recv(ep[1][k], i, rmr, ((uint64_t)k * 16 + i) * PDX_TP_SEND_MAX,
                                        PDX_TP_SEND_MAX), PDX_OK);
        last[k] = UINT64_MAX;
    }

    /* one wakeup of the one fd for each ibv CQ */
    for (uint32_t q = 0; q < nicq; q++) {
        struct pollfd pfd = {.fd = ops->cq_fd(cq[0]), .events = POLLIN};
        uint32_t k = 0;
        pdx_tp_write_t w;

        while (rdma_ep(ep[0][k])->icq != q)
            k++;
        cr_assert_eq(ops->cq_arm(cq[0]), PDX_OK);
        cr_assert_eq(ops->cq_poll(cq[0], wc, 1), 0);
        w = (pdx_tp_write_t){.wr_id = posted[k]++, .mr = smr, .offset = k * slice,
                             .length = 64, .remote_addr = rk.addr + k * slice, .rkey = rk.rkey,
                             .flags = PDX_TP_SIGNALED};
        cr_assert_eq(ops->post_write(ep[0][k], &w, 1), PDX_OK);
        cr_assert_eq(poll(&pfd, 1, FX_WAIT_MS), 1, "ibv CQ %u did not wake the fd", q);
        ops->cq_ack(cq[0]);
        cr_assert_eq(poll(&pfd, 1, 0), 0, "still readable after cq_ack");
        cr_assert_eq(fx_wait(cq[0], wc, 1, FX_WAIT_MS), 1);
        cr_assert(wc[0].ep == ep[0][k] && wc[0].status == PDX_OK);
        last[k] = wc[0].wr_id;
    }

    /* fair: 4 completions wait on ibv CQ 0, one on each other; nicq polls of
     * one completion each reach every ibv CQ */
    softnic_stats(&st);
    for (uint32_t q = 0, n = 0; q < nicq; q++) {
        uint32_t k = 0;

        while (rdma_ep(ep[0][k])->icq != q)
            k++;
        for (uint32_t i = 0; i < (q ? 1u : 4u); i++, n++) {
            pdx_tp_write_t w = {.wr_id = posted[k]++, .mr = smr, .offset = k * slice,
                                .length = 64, .remote_addr = rk.addr + k * slice,
                                .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};

            cr_assert_eq(ops->post_write(ep[0][k], &w, 1), PDX_OK);
        }
        if (q + 1 == nicq)
            for (uint64_t dl = pdx_deadline_ns(FX_WAIT_MS);
                 st.wrs_executed < st0.wrs_executed + nicq + n && pdx_now_ns() < dl;
                 usleep(1000))
                softnic_stats(&st);
    }
    memset(per_icq, 0, sizeof(per_icq));
    for (uint32_t i = 0; i < nicq + 3; i++) {
        uint32_t k = 0;

        cr_assert_eq(ops->cq_poll(cq[0], wc, 1), 1);
        while (ep[0][k] != wc[0].ep)
            k++;
        cr_assert_eq(wc[0].status, PDX_OK);
        last[k] = wc[0].wr_id;
        if (i < nicq)
            cr_assert_eq(per_icq[rdma_ep(ep[0][k])->icq]++, 0u,
                         "poll %u: ibv CQ %u again before the others", i,
                         rdma_ep(ep[0][k])->icq);
    }

    /* every ep at once, calls of up to 12 WRs, a SEND now and then */
    deadline = pdx_deadline_ns(4 * FX_WAIT_MS);
    while (done_eps < neps) {
        for (uint32_t k = 0; k < neps; k++) {
            uint32_t j = posted[k] - sends[k], n = PDX_MIN(1 + (j * 7 + k) % 12, SPLIT_WRS - j);
            pdx_tp_write_t w[12];

            if (j >= SPLIT_WRS)
                continue;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t page = (j + i) % SPLIT_PAGES;

                w[i] = (pdx_tp_write_t){
                    .wr_id = posted[k] + i, .mr = smr,
                    .offset = k * slice + (uint64_t)split_src_page(page) * SPLIT_PAGE,
                    .length = SPLIT_PAGE, .remote_addr = rk.addr + k * slice + page * SPLIT_PAGE,
                    .rkey = rk.rkey, .flags = i + 1 == n ? PDX_TP_SIGNALED : 0};
            }
            if (ops->post_write(ep[0][k], w, n) != PDX_OK)
                continue; /* the send queue is full: PDX_ERR_AGAIN */
            posted[k] += n;
            if (j + n == SPLIT_WRS)
                done_eps++;
            if (sends[k] < SPLIT_SENDS && j % 5 == 0 &&
                ops->post_send(ep[0][k], posted[k], "note", 4, PDX_TP_SIGNALED) == PDX_OK) {
                posted[k]++;
                sends[k]++;
            }
        }
        for (int n; (n = ops->cq_poll(cq[0], wc, 32)) > 0;) {
            for (int i = 0; i < n; i++) {
                uint32_t k = 0;

                while (k < neps && ep[0][k] != wc[i].ep)
                    k++;
                cr_assert_lt(k, neps, "a completion of no ep");
                cr_assert_eq(wc[i].status, PDX_OK, "%s", ops->ep_error(wc[i].ep));
                cr_assert(last[k] == UINT64_MAX || wc[i].wr_id > last[k], "out of order");
                last[k] = wc[i].wr_id;
            }
        }
        cr_assert_lt(pdx_now_ns(), deadline, "the send queues never drained");
    }
    for (uint32_t k = 0; k < neps; k++) {
        while (last[k] + 1 != posted[k]) {
            int n = fx_wait(cq[0], wc, 1, FX_WAIT_MS);

            cr_assert_eq(n, 1, "ep %u (ibv CQ %u): %llu of %u WRs completed", k,
                         rdma_ep(ep[0][k])->icq, (unsigned long long)(last[k] + 1), posted[k]);
            cr_assert_eq(wc[0].status, PDX_OK);
            for (uint32_t e = 0; e < neps; e++) {
                if (ep[0][e] != wc[0].ep)
                    continue;
                cr_assert_gt(wc[0].wr_id, last[e], "out of order");
                last[e] = wc[0].wr_id;
            }
        }
    }
    {
        uint32_t want = 0, got = 0;

        for (uint32_t k = 0; k < neps; k++)
            want += sends[k];
        while (got < want) {
            int n = fx_wait(cq[1], wc, 1, FX_WAIT_MS);

            cr_assert_eq(n, 1, "%u of %u receives completed", got, want);
            fx_expect_wc(&wc[0], wc[0].wr_id, PDX_OK, PDX_TP_OP_RECV);
            for (uint32_t k = 0; k < neps; k++)
                recvs[k] += ep[1][k] == wc[0].ep;
            got++;
        }
    }
    for (uint32_t k = 0; k < neps; k++) {
        cr_assert_eq(recvs[k], sends[k], "ep %u: %u receives, %u SENDs", k, recvs[k], sends[k]);
        cr_assert_gt(sends[k], 0u);
        for (uint32_t p = 0; p < SPLIT_PAGES; p++)
            cr_assert_eq(memcmp(dst + k * slice + p * SPLIT_PAGE,
                                src + k * slice + (size_t)split_src_page(p) * SPLIT_PAGE,
                                SPLIT_PAGE), 0, "ep %u, page %u", k, p);
    }
    softnic_stats(&st);
    cr_assert_eq(st.cq_overruns, st0.cq_overruns, "an ibv CQ overran");
    cr_assert_lt(st.wrs_posted - st0.wrs_posted, (uint64_t)neps * SPLIT_WRS, "nothing gathered");

    for (int i = 0; i < 2; i++)
        for (uint32_t k = 0; k < neps; k++)
            ops->ep_destroy(ep[i][k]);
    cr_assert_eq(ops->mr_dereg(smr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(dmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    for (int i = 0; i < 2; i++) {
        ops->cq_destroy(cq[i]);
        ops->close(tp[i]);
    }
    cr_assert_eq(pdx_log_error_count(), errors, "an error was logged (an ibv CQ not acked?)");
    free(src);
    free(dst);
    fx_nic_env_end(&env, true); /* the refused eps said why */
}

/* 4 x max_cqe: 4 ibv CQs of 64, 2 eps on each (an mlx5-like NIC) */
Test(rdma_cq, cq_past_max_cqe_is_split)
{
    split_run(false, 4 * 64, 4, 8);
}

/* exact depths (a bnxt_re-like NIC), and a last ibv CQ of the rest: 64, 64, 64
 * and 58 hold 2, 2, 2 and 1 eps */
Test(rdma_cq, cq_past_max_cqe_is_split_exact_depths)
{
    split_run(true, 4 * 64 - 6, 4, 7);
}

/* A CQ deeper than RDMA_CQ_MAX_ICQS ibv CQs of max_cqe gets that many, and a
 * warning says how deep it is instead. */
Test(rdma_cq, cq_past_the_most_ibv_cqs_is_capped)
{
    softnic_config_t c = fx_nic(1, SOFTNIC_THREAD);
    fx_log_capture_t cap;
    fx_nic_env_t env;
    pdx_tp_cq_t *cq;
    pdx_tp_t *tp;
    char *log;

    c.max_cqe = 4;
    fx_nic_env_begin(&env, &c);
    cr_assert_eq(fx_tp_try(&tp, NULL), PDX_OK);
    fx_log_capture_begin(&cap);
    cq = fx_cq_new(ops, tp, 4 * RDMA_CQ_MAX_ICQS + 1);
    log = fx_log_capture_end(&cap);
    cr_assert(strstr(log, "pdx warn ") && strstr(log, "a CQ of depth 1025 asked, the device's "
                                                      "max_cqe is 4: it gets 256 ibv CQs (depth "
                                                      "1024)"), "%s", log);
    free(log);
    cr_assert_eq(rdma_cq(cq)->nicq, RDMA_CQ_MAX_ICQS);
    cr_assert_eq(rdma_cq(cq)->depth, 4 * RDMA_CQ_MAX_ICQS);
    ops->cq_destroy(cq);
    ops->close(tp);
    fx_nic_env_end(&env, false);
}

/* ----------------------------------------------------- destroyed eps */

Test(rdma_cq, destroyed_ep_never_completes)
{
    pdx_tp_ep_t *b[2];
    pdx_tp_wc_t wc[16];
    pdx_tp_write_t w;
    softnic_stats_t st;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4096, 8, 0);
    for (int i = 0; i < 2; i++) { /* one CQ of 16 per tp for two pairs */
        ops->ep_destroy(r.ep[i]);
        ops->cq_destroy(r.cq[i]);
        r.cq[i] = fx_cq_new(ops, r.tp[i], 16);
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
        b[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
    }
    fx_connect_eps(ops, r.ep[0], r.ep[1]);
    fx_connect_eps(ops, b[0], b[1]);
    /* completions of both eps wait in the CQ when ep 0 is destroyed */
    softnic_stats(&st);
    for (uint64_t i = 0; i < 16; i++) {
        w = fx_wr(&r, i % 2 ? 1000 + i / 2 : i / 2, 0, 512, 0, true);
        cr_assert_eq(ops->post_write(i % 2 ? b[0] : r.ep[0], &w, 1), PDX_OK);
    }
    for (uint64_t n = st.wrs_executed + 16, end = pdx_deadline_ns(FX_WAIT_MS);
         st.wrs_executed < n && pdx_now_ns() < end; usleep(1000))
        softnic_stats(&st);
    for (int i = 0; i < 2; i++) { /* its share of the CQ is free again */
        ops->ep_destroy(r.ep[i]);
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
    }
    fx_connect_eps(ops, r.ep[0], r.ep[1]);
    w = fx_wr(&r, 77, 0, 512, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 9, FX_WAIT_MS), 9);
    for (int i = 0; i < 9; i++) {
        cr_assert(wc[i].status == PDX_OK && wc[i].ep == (i < 8 ? b[0] : r.ep[0]));
        cr_assert_eq(wc[i].wr_id, i < 8 ? 1000u + (uint64_t)i : 77u,
                     "kept completions first, in order; none of the destroyed ep");
    }
    /* WRs in flight when their ep goes are dropped too */
    fx_nic_delay(&r.nic, 100000);
    w = fx_wr(&r, 500, 0, 512, 0, true);
    cr_assert_eq(ops->post_write(b[0], &w, 1), PDX_OK);
    ops->ep_destroy(b[0]);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, 300), 0, "a completion of the destroyed ep came out");
    fx_nic_delay(&r.nic, 0);
    ops->ep_destroy(b[1]);
    fx_rig_close(&r, false);
}
