/*
 * softnic error paths with raw verbs: posting in the wrong state, remote
 * access errors and the flush that follows, RNR, unreachable remotes, short
 * receives, CQ overrun, every fault of softnic.h, and a provider without
 * dmabuf.
 */
#include "softnic_fixture.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

TestSuite(softnic_err, .timeout = 60);

static void expect_status(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status st)
{
    cr_assert_eq(wc->wr_id, wr_id, "wr_id %llu, expected %llu", (unsigned long long)wc->wr_id,
                 (unsigned long long)wr_id);
    cr_assert_eq(wc->status, st, "wr %llu: %s, expected %s", (unsigned long long)wr_id,
                 ibv_wc_status_str(wc->status), ibv_wc_status_str(st));
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static void to_error(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

    cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
}

Test(softnic_err, post_before_rts_fails_with_bad_wr)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    struct ibv_qp *qp;
    struct ibv_sge sge;
    struct ibv_send_wr wr[3], *bad = NULL;
    struct ibv_wc wc[4];

    fx_opts_default(&o);
    fx_open(&f, &o);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = f.a.cq;
    ia.recv_cq = f.a.cq;
    ia.cap = o.cap;
    ia.qp_type = IBV_QPT_RC;
    qp = ibv_create_qp(f.a.pd, &ia);
    cr_assert_not_null(qp);
    /* RESET: neither send nor receive */
    cr_assert_eq(fx_post(qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 8, f.a.mr->lkey, (uintptr_t)f.b.buf,
                         f.b.mr->rkey, IBV_SEND_SIGNALED), EINVAL);
    cr_assert_eq(fx_recv(qp, 1, f.a.buf, 8, f.a.mr->lkey), EINVAL);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS), 0);
    /* INIT: receives yes, sends no */
    cr_assert_eq(fx_post(qp, IBV_WR_SEND, 2, f.a.buf, 8, f.a.mr->lkey, 0, 0, 0), EINVAL);
    cr_assert_eq(fx_recv(qp, 2, f.a.buf, 8, f.a.mr->lkey), 0);
    cr_assert_eq(ibv_destroy_qp(qp), 0);

    /* RTS: a chain whose second WR is bad posts only the first */
    sge.addr = (uintptr_t)f.a.buf;
    sge.length = 8;
    sge.lkey = f.a.mr->lkey;
    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < 3; i++) {
        wr[i].wr_id = 10 + (uint64_t)i;
        wr[i].next = i < 2 ? &wr[i + 1] : NULL;
        wr[i].sg_list = &sge;
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_WRITE;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].wr.rdma.remote_addr = (uintptr_t)f.b.buf;
        wr[i].wr.rdma.rkey = f.b.mr->rkey;
    }
    wr[1].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    cr_assert_eq(ibv_post_send(f.a.qp, wr, &bad), EINVAL);
    cr_assert_eq(bad, &wr[1]);
    wr[1].opcode = IBV_WR_RDMA_WRITE;
    wr[1].num_sge = 5; /* max_send_sge is 4 */
    cr_assert_eq(ibv_post_send(f.a.qp, &wr[1], &bad), EINVAL);
    cr_assert_eq(bad, &wr[1]);
    cr_assert_eq(fx_poll(f.a.cq, wc, 4, 300), 1);
    expect_status(&wc[0], 10, IBV_WC_SUCCESS);
    fx_close(&f);
}

/* A refused remote access fails the requester and moves the responder QP
 * to error too (QP_ACCESS_ERR on its context, its receives flushed); what
 * follows is flushed and nothing is written anywhere. */
static void access_error_case(int which)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_mr *ro = NULL;
    struct ibv_async_event ev;
    struct ibv_wc wc[8];
    softnic_stats_t st;
    enum ibv_wr_opcode op = which == 3 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    uint64_t raddr;
    uint32_t rkey;

    fx_opts_default(&o);
    fx_open(&f, &o);
    softnic_stats_reset();
    fx_fill(f.a.buf, 4096, 11);
    raddr = (uintptr_t)f.b.buf;
    rkey = f.b.mr->rkey;
    if (which == 0) {
        rkey ^= 0x5a5a5a5a;
    } else if (which == 1) {
        raddr = (uintptr_t)f.b.buf + o.buf_len - 10;
    } else {
        /* 2: a WRITE to an MR without REMOTE_WRITE, 3: a READ without REMOTE_READ */
        ro = ibv_reg_mr(f.b.pd, f.b.buf, 4096,
                        IBV_ACCESS_LOCAL_WRITE |
                            (which == 2 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE));
        cr_assert_not_null(ro);
        rkey = ro->rkey;
    }
    cr_assert_eq(fx_recv(f.b.qp, 50, f.b.buf + 8192, 64, f.b.mr->lkey), 0);
    cr_assert_eq(fx_post(f.a.qp, op, 1, f.a.buf + 8192, 100, f.a.mr->lkey, raddr, rkey, 0), 0);
    for (int i = 2; i <= 4; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf, 100, f.a.mr->lkey,
                             (uintptr_t)f.b.buf, f.b.mr->rkey, i == 3 ? IBV_SEND_SIGNALED : 0),
                     0);
    cr_assert_eq(fx_poll(f.a.cq, wc, 8, 500), 4, "one CQE per outstanding WR");
    expect_status(&wc[0], 1, IBV_WC_REM_ACCESS_ERR);
    for (int i = 1; i < 4; i++)
        expect_status(&wc[i], (uint64_t)i + 1, IBV_WC_WR_FLUSH_ERR);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_ERR, "the responder goes to error too");
    cr_assert(fx_async(f.b.ctx, &ev, FX_WAIT_MS), "no IBV_EVENT_QP_ACCESS_ERR");
    cr_assert_eq(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    cr_assert_eq(ev.element.qp, f.b.qp);
    ibv_ack_async_event(&ev);
    cr_assert_not(fx_async(f.a.ctx, &ev, 50), "the requester got an async event");
    cr_assert_eq(fx_poll(f.b.cq, wc, 8, 300), 1, "the responder's receive is flushed");
    expect_status(&wc[0], 50, IBV_WC_WR_FLUSH_ERR);
    cr_assert(all_zero(f.b.buf, o.buf_len), "a refused or flushed WRITE placed bytes");
    cr_assert(all_zero(f.a.buf + 8192, 100), "a refused READ placed bytes");
    softnic_stats(&st);
    cr_assert_eq(st.access_errors, 1);
    /* the responder takes WRs and flushes them at once, as any QP in error */
    cr_assert_eq(fx_post(f.b.qp, IBV_WR_RDMA_WRITE, 60, f.b.buf, 8, f.b.mr->lkey,
                         (uintptr_t)f.a.buf, f.a.mr->rkey, 0), 0);
    cr_assert_eq(ibv_poll_cq(f.b.cq, 8, wc), 1);
    expect_status(&wc[0], 60, IBV_WC_WR_FLUSH_ERR);
    /* a QP in error takes WRs and flushes them at once */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 9, f.a.buf, 100, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, 0), 0);
    cr_assert_eq(fx_recv(f.a.qp, 10, f.a.buf, 100, f.a.mr->lkey), 0);
    cr_assert_eq(ibv_poll_cq(f.a.cq, 8, wc), 2);
    expect_status(&wc[0], 9, IBV_WC_WR_FLUSH_ERR);
    expect_status(&wc[1], 10, IBV_WC_WR_FLUSH_ERR);
    cr_assert_eq(wc[1].opcode, IBV_WC_RECV);
    if (ro)
        cr_assert_eq(ibv_dereg_mr(ro), 0);
    fx_close(&f);
}

Test(softnic_err, bad_rkey_is_remote_access_error)
{
    access_error_case(0);
}

Test(softnic_err, out_of_bounds_is_remote_access_error)
{
    access_error_case(1);
}

Test(softnic_err, no_remote_write_is_remote_access_error)
{
    access_error_case(2);
}

Test(softnic_err, no_remote_read_is_remote_access_error)
{
    access_error_case(3);
}

Test(softnic_err, local_key_errors)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_mr *mr, *ro;
    struct ibv_wc wc;
    uint32_t lkey;

    fx_opts_default(&o);
    fx_open(&f, &o);
    mr = ibv_reg_mr(f.a.pd, f.a.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    cr_assert_not_null(mr);
    lkey = mr->lkey;
    cr_assert_eq(ibv_dereg_mr(mr), 0);
    /* a deregistered lkey */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_LOC_PROT_ERR);
    fx_close(&f);

    /* READ into an MR without LOCAL_WRITE */
    fx_open(&f, &o);
    ro = ibv_reg_mr(f.a.pd, f.a.buf, 4096, 0);
    cr_assert_not_null(ro);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_READ, 2, f.a.buf, 64, ro->lkey, (uintptr_t)f.b.buf,
                         f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 2, IBV_WC_LOC_PROT_ERR);
    cr_assert_eq(ibv_dereg_mr(ro), 0);
    fx_close(&f);
}

Test(softnic_err, short_receive_fails_both_sides)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;

    fx_opts_default(&o);
    fx_open(&f, &o);
    cr_assert_eq(fx_recv(f.b.qp, 20, f.b.buf, 100, f.b.mr->lkey), 0);
    cr_assert_eq(fx_recv(f.b.qp, 21, f.b.buf, 100, f.b.mr->lkey), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1, f.a.buf, 101, f.a.mr->lkey, 0, 0, 0), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_REM_INV_REQ_ERR);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 20, IBV_WC_LOC_LEN_ERR);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 21, IBV_WC_WR_FLUSH_ERR);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_ERR);
    fx_close(&f);
}

Test(softnic_err, rnr_retries_then_fails)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    softnic_stats_t st;

    fx_opts_default(&o);
    o.rnr_retry = 2;
    o.min_rnr_timer = 1;
    fx_open(&f, &o);
    softnic_stats_reset();
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1, f.a.buf, 8, f.a.mr->lkey, 0, 0,
                         IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_RNR_RETRY_EXC_ERR);
    softnic_stats(&st);
    cr_assert_eq(st.rnr_naks, 3, "the first try and rnr_retry retries");
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    fx_close(&f);

    /* a WRITE_WITH_IMM needs a receive too, and places nothing without one */
    fx_open(&f, &o);
    fx_fill(f.a.buf, 64, 15);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 2, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 2, IBV_WC_RNR_RETRY_EXC_ERR);
    cr_assert(all_zero(f.b.buf, 64));
    fx_close(&f);
}

Test(softnic_err, receive_posted_during_rnr_retries_succeeds)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    softnic_stats_t st;

    fx_opts_default(&o);
    o.cfg.timeout_scale = 1;
    o.rnr_retry = 6;
    o.min_rnr_timer = 22; /* 20.48 ms per NAK: >= 120 ms in all */
    fx_open(&f, &o);
    softnic_stats_reset();
    fx_fill(f.a.buf, 64, 12);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1, f.a.buf, 64, f.a.mr->lkey, 0, 0,
                         IBV_SEND_SIGNALED), 0);
    for (int i = 0; i < 1000; i++) {
        softnic_stats(&st);
        if (st.rnr_naks)
            break;
        fx_sleep_ms(1);
    }
    cr_assert_geq(st.rnr_naks, 1);
    cr_assert_eq(fx_recv(f.b.qp, 7, f.b.buf, 64, f.b.mr->lkey), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_SUCCESS);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 7, IBV_WC_SUCCESS);
    cr_assert_arr_eq(f.b.buf, f.a.buf, 64);
    fx_close(&f);
}

/* A remote that does not answer: retry_cnt retries, then RETRY_EXC_ERR. */
static void unreachable_case(int which)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    softnic_stats_t st;
    union ibv_gid gid;

    fx_opts_default(&o);
    o.retry_cnt = 2;
    o.timeout = 10; /* 4.2 ms / 1000 */
    fx_open(&f, &o);
    softnic_stats_reset();
    cr_assert_eq(ibv_modify_qp(f.a.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET},
                               IBV_QP_STATE), 0);
    gid = f.b.gid;
    if (which == 0)
        cr_assert_eq(fx_connect(f.a.qp, 0xabcdef, &gid, &o), 0); /* no such QPN */
    else if (which == 1)
        cr_assert_eq(fx_connect(f.a.qp, f.b.qp->qp_num, &f.a.gid, &o), 0); /* wrong GID */
    else {
        cr_assert_eq(fx_connect(f.a.qp, f.b.qp->qp_num, &gid, &o), 0);
        cr_assert_eq(ibv_modify_qp(f.b.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET},
                                   IBV_QP_STATE), 0); /* remote not in RTR/RTS */
    }
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, 0), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_RETRY_EXC_ERR);
    softnic_stats(&st);
    cr_assert_eq(st.retries, 2);
    cr_assert(all_zero(f.b.buf, 64));
    fx_close(&f);
}

Test(softnic_err, no_such_remote_qp_retries)
{
    unreachable_case(0);
}

Test(softnic_err, wrong_gid_retries)
{
    unreachable_case(1);
}

Test(softnic_err, remote_not_ready_retries)
{
    unreachable_case(2);
}

Test(softnic_err, cq_overrun_fails_cq_and_qps)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_wc wc[8];
    softnic_stats_t st;

    fx_opts_default(&o);
    o.cqe = 3;
    o.channel = true;
    fx_open(&f, &o);
    cr_assert_eq(f.a.cq->cqe, 3);
    softnic_stats_reset();
    for (int i = 0; i < 5; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf, 8, f.a.mr->lkey,
                             (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS), "no IBV_EVENT_CQ_ERR");
    cr_assert_eq(ev.event_type, IBV_EVENT_CQ_ERR);
    cr_assert_eq(ev.element.cq, f.a.cq);
    ibv_ack_async_event(&ev);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS), "no IBV_EVENT_QP_FATAL");
    cr_assert_eq(ev.event_type, IBV_EVENT_QP_FATAL);
    cr_assert_eq(ev.element.qp, f.a.qp);
    ibv_ack_async_event(&ev);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    /* what was written before the overrun can be polled, nothing after */
    cr_assert_eq(ibv_poll_cq(f.a.cq, 8, wc), 3);
    for (int i = 0; i < 3; i++)
        expect_status(&wc[i], (uint64_t)i, IBV_WC_SUCCESS);
    cr_assert_eq(ibv_poll_cq(f.a.cq, 8, wc), 0);
    softnic_stats(&st);
    cr_assert_eq(st.cq_overruns, 1);
    /* the CQ has room again, and still takes nothing: flushes of later WRs
     * and receives write no CQE and raise no completion event */
    cr_assert_eq(ibv_req_notify_cq(f.a.cq, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 7, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_recv(f.a.qp, 8, f.a.buf, 8, f.a.mr->lkey), 0);
    cr_assert_eq(fx_poll(f.a.cq, wc, 8, 100), 0, "an overrun CQ took a CQE");
    cr_assert_eq(poll(&(struct pollfd){.fd = f.a.ch->fd, .events = POLLIN}, 1, 0), 0,
                 "an overrun CQ raised a completion event");
    softnic_stats(&st);
    cr_assert_eq(st.cq_overruns, 1);
    fx_close(&f);
}

Test(softnic_err, fault_wr_status)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc[4];

    fx_opts_default(&o);
    fx_open(&f, &o);
    fx_fill(f.a.buf, 300, 13);
    softnic_fault_wr_status(f.a.qp->qp_num, 2, IBV_WC_REM_OP_ERR);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf + 100 * i, 100,
                             f.a.mr->lkey, (uintptr_t)f.b.buf + 100 * i, f.b.mr->rkey,
                             IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, wc, 3, FX_WAIT_MS), 3);
    expect_status(&wc[0], 0, IBV_WC_SUCCESS);
    expect_status(&wc[1], 1, IBV_WC_REM_OP_ERR);
    expect_status(&wc[2], 2, IBV_WC_WR_FLUSH_ERR);
    cr_assert_arr_eq(f.b.buf, f.a.buf, 100);
    cr_assert(all_zero(f.b.buf + 100, 200), "a faulted or flushed WR placed bytes");
    fx_close(&f);

    /* qpn 0 counts the WRs of every QP; a cleared fault never hits */
    fx_open(&f, &o);
    softnic_fault_wr_status(0, 1, IBV_WC_GENERAL_ERR);
    softnic_faults_clear();
    softnic_fault_wr_status(0, 2, IBV_WC_GENERAL_ERR);
    cr_assert_eq(fx_post(f.b.qp, IBV_WR_RDMA_WRITE, 1, f.b.buf, 8, f.b.mr->lkey,
                         (uintptr_t)f.a.buf, f.a.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.b.cq, wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc[0], 1, IBV_WC_SUCCESS);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc[0], 2, IBV_WC_GENERAL_ERR);
    fx_close(&f);
}

/* A lost ACK: the requester retries retry_cnt times, each an ACK timeout. */
static void lost_ack_case(bool placed)
{
    const uint64_t timeout_us = (4096ull << 14) / 10 / 1000; /* 6.7 ms */
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    softnic_stats_t st;
    uint64_t t0, dt;

    fx_opts_default(&o);
    o.cfg.timeout_scale = 10;
    o.timeout = 14;
    o.retry_cnt = 3;
    fx_open(&f, &o);
    softnic_stats_reset();
    fx_fill(f.a.buf, 64, 14);
    cr_assert_eq(fx_recv(f.b.qp, 30, f.b.buf, 64, f.b.mr->lkey), 0);
    softnic_fault_lost_ack(f.a.qp->qp_num, 1, placed);
    t0 = fx_now_us();
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1, f.a.buf, 64, f.a.mr->lkey, 0, 0, 0), 0);
    if (placed) {
        cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
        expect_status(&wc, 30, IBV_WC_SUCCESS);
        cr_assert_arr_eq(f.b.buf, f.a.buf, 64);
    }
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    dt = fx_now_us() - t0;
    expect_status(&wc, 1, IBV_WC_RETRY_EXC_ERR);
    cr_assert_geq(dt, 4 * timeout_us * 9 / 10, "failed after %llu us, expected about %llu",
                  (unsigned long long)dt, (unsigned long long)(4 * timeout_us));
    softnic_stats(&st);
    cr_assert_eq(st.retries, 3);
    if (!placed) {
        cr_assert(all_zero(f.b.buf, 64));
        to_error(f.b.qp); /* the receive was never consumed */
        cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
        expect_status(&wc, 30, IBV_WC_WR_FLUSH_ERR);
    }
    fx_close(&f);
}

Test(softnic_err, fault_lost_ack_placed)
{
    lost_ack_case(true);
}

Test(softnic_err, fault_lost_ack_not_placed)
{
    lost_ack_case(false);
}

Test(softnic_err, flush_counts_every_outstanding_wr)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc[32];
    int n;

    fx_opts_default(&o);
    o.cfg.delay_us = 200000; /* keep the WRs outstanding */
    fx_open(&f, &o);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf, 8, f.a.mr->lkey,
                             (uintptr_t)f.b.buf, f.b.mr->rkey, i == 9 ? IBV_SEND_SIGNALED : 0),
                     0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(fx_recv(f.a.qp, 100 + (uint64_t)i, f.a.buf, 8, f.a.mr->lkey), 0);
    to_error(f.a.qp);
    n = fx_poll(f.a.cq, wc, 32, 300);
    cr_assert_eq(n, 15);
    for (int i = 0; i < 10; i++)
        expect_status(&wc[i], (uint64_t)i, IBV_WC_WR_FLUSH_ERR);
    for (int i = 0; i < 5; i++)
        expect_status(&wc[10 + i], 100 + (uint64_t)i, IBV_WC_WR_FLUSH_ERR);
    cr_assert(all_zero(f.b.buf, 64));
    fx_close(&f);
}

/* The nth poll of a device's CQs fails, and that CQ fails every poll after
 * it; another device's CQs and the CQE count are left alone. */
Test(softnic_err, fault_poll_cq)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;

    fx_opts_default(&o);
    fx_open(&f, &o);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert(fx_wait_executed(1, FX_WAIT_MS));
    softnic_fault_poll_cq(0, 2);
    softnic_fault_poll_cq(1, 5); /* dropped unspent below */
    cr_assert_eq(ibv_poll_cq(f.b.cq, 1, &wc), 0, "softnic1: not the device of the fault");
    cr_assert_eq(ibv_poll_cq(f.a.cq, 0, &wc), 0, "the first poll of softnic0");
    errno = 0;
    cr_assert_eq(ibv_poll_cq(f.a.cq, 1, &wc), -1, "the second");
    cr_assert_eq(errno, EIO);
    cr_assert_eq(ibv_poll_cq(f.a.cq, 1, &wc), -1, "the CQ is broken for good");
    softnic_faults_clear();
    for (int i = 0; i < 8; i++)
        cr_assert_eq(ibv_poll_cq(f.b.cq, 1, &wc), 0);
    fx_close(&f);
}

/* dmabuf_errno: ibv_reg_dmabuf_mr fails with it and registers nothing. */
Test(softnic_err, dmabuf_unsupported)
{
    fx_opts_t o;
    fx_t f;
    uint32_t objs;
    int fd;

    fx_opts_default(&o);
    o.cfg.dmabuf_errno = EOPNOTSUPP;
    fx_open(&f, &o);
    fd = memfd_create("softnic-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    objs = softnic_open_objects();
    errno = 0;
    cr_assert_null(ibv_reg_dmabuf_mr(f.a.pd, 0, 4096, 0x10000, fd, IBV_ACCESS_LOCAL_WRITE));
    cr_assert_eq(errno, EOPNOTSUPP);
    cr_assert_eq(softnic_open_objects(), objs);
    close(fd);
    fx_close(&f);
}
