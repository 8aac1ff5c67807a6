/*
 * softnic links, devices and limits with raw verbs: a port going down and
 * coming back (packets dropped, retries, no QP state change), a device
 * dying (DEVICE_FATAL: no CQE, EIO, POLLERR fds), per-device MTUs (the RTR
 * check, dropped packets) and the rd atomic depths.
 */
#include "softnic_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

TestSuite(softnic_link, .timeout = 60);

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

/* What poll() reports for POLLIN on fd within timeout_ms (0: nothing). */
static short revents(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);

    cr_assert_geq(n, 0);
    return n ? p.revents : 0;
}

static void wait_retries(uint64_t n)
{
    softnic_stats_t st;

    for (int i = 0; i < FX_WAIT_MS; i++) {
        softnic_stats(&st);
        if (st.retries >= n)
            return;
        fx_sleep_ms(1);
    }
    cr_assert_fail("no retry in %d ms", FX_WAIT_MS);
}

/* ---- ports ---- */

/* A port DOWN moves no QP: packets to and from it are dropped, the
 * requesters retry and fail with RETRY_EXC, and only then go to error. */
Test(softnic_link, port_down_drops_packets_until_retries_run_out)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_wc wc[4];
    softnic_stats_t st;

    fx_opts_default(&o);
    o.retry_cnt = 2;
    o.timeout = 10;
    fx_open(&f, &o);
    cr_assert_eq(fx_recv(f.b.qp, 40, f.b.buf + 4096, 64, f.b.mr->lkey), 0);
    softnic_stats_reset();
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    cr_assert(fx_async(f.b.ctx, &ev, FX_WAIT_MS));
    cr_assert_eq(ev.event_type, IBV_EVENT_PORT_ERR);
    ibv_ack_async_event(&ev);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_RTS);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_RTS, "a link going down moves no QP");
    cr_assert_eq(fx_poll(f.b.cq, wc, 1, 50), 0, "a receive was flushed");
    /* towards the DOWN port, and from it */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, 0), 0);
    cr_assert_eq(fx_post(f.b.qp, IBV_WR_RDMA_WRITE, 2, f.b.buf, 64, f.b.mr->lkey,
                         (uintptr_t)f.a.buf + 4096, f.a.mr->rkey, 0), 0);
    cr_assert_eq(fx_poll(f.a.cq, wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc[0], 1, IBV_WC_RETRY_EXC_ERR);
    cr_assert_eq(fx_poll(f.b.cq, wc, 2, FX_WAIT_MS), 2);
    expect_status(&wc[0], 2, IBV_WC_RETRY_EXC_ERR);
    expect_status(&wc[1], 40, IBV_WC_WR_FLUSH_ERR); /* b went to error with it */
    softnic_stats(&st);
    cr_assert_eq(st.retries, 4, "retry_cnt retries each");
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_ERR);
    cr_assert(all_zero(f.b.buf, 64) && all_zero(f.a.buf + 4096, 64),
              "a dropped WRITE placed bytes");
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    fx_close(&f);
}

/* The port comes back before retry_cnt is spent: the WR goes through. */
Test(softnic_link, port_back_before_the_retries_run_out)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_wc wc;

    fx_opts_default(&o);
    o.cfg.timeout_scale = 1;
    o.timeout = 14;  /* 67 ms per try */
    o.retry_cnt = 7; /* about 0.5 s before RETRY_EXC */
    fx_open(&f, &o);
    fx_fill(f.a.buf, 64, 21);
    cr_assert_eq(fx_recv(f.b.qp, 40, f.b.buf, 64, f.b.mr->lkey), 0);
    softnic_stats_reset();
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1, f.a.buf, 64, f.a.mr->lkey, 0, 0,
                         IBV_SEND_SIGNALED), 0);
    wait_retries(1);
    cr_assert_eq(ibv_poll_cq(f.a.cq, 1, &wc), 0);
    cr_assert_eq(ibv_poll_cq(f.b.cq, 1, &wc), 0);
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_SUCCESS);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 40, IBV_WC_SUCCESS);
    cr_assert_arr_eq(f.b.buf, f.a.buf, 64);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_RTS);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_RTS);
    for (int i = 0; i < 2; i++) { /* PORT_ERR, PORT_ACTIVE */
        cr_assert(fx_async(f.b.ctx, &ev, FX_WAIT_MS));
        ibv_ack_async_event(&ev);
    }
    cr_assert_eq(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    fx_close(&f);
}

/* ---- a dead device ---- */

Test(softnic_link, device_fatal_kills_the_context)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_port_attr pa;
    struct ibv_device_attr da;
    struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
    struct ibv_qp_init_attr ia;
    struct ibv_context *ctx2;
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    struct ibv_wc wc[4];
    softnic_stats_t st;
    short re;

    fx_opts_default(&o);
    o.channel = true;
    fx_open(&f, &o);
    softnic_stats_reset();
    /* before: a CQE in a's CQ and a completion event on its channel, unread */
    cr_assert_eq(ibv_req_notify_cq(f.a.cq, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert(fx_wait_executed(1, FX_WAIT_MS));
    cr_assert_eq(revents(f.a.ch->fd, FX_WAIT_MS), POLLIN);
    /* outstanding at the time: a WRITE held back by the delay, a receive */
    o.cfg.delay_us = 300000;
    cr_assert_eq(softnic_configure(&o.cfg), 0);
    fx_fill(f.a.buf + 4096, 64, 22);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, f.a.buf + 4096, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf + 4096, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_recv(f.a.qp, 3, f.a.buf + 8192, 64, f.a.mr->lkey), 0);

    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    /* the event, once; then POLLERR and EIO */
    cr_assert_eq(revents(f.a.ctx->async_fd, FX_WAIT_MS), POLLIN);
    cr_assert_eq(ibv_get_async_event(f.a.ctx, &ev), 0);
    cr_assert_eq(ev.event_type, IBV_EVENT_DEVICE_FATAL);
    ibv_ack_async_event(&ev);
    re = revents(f.a.ctx->async_fd, 0);
    cr_assert(re & POLLERR, "async fd: revents %#x", re);
    errno = 0;
    cr_assert_eq(ibv_get_async_event(f.a.ctx, &ev), -1, "blocking, and dead: EIO at once");
    cr_assert_eq(errno, EIO);
    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    cr_assert_eq(ibv_get_async_event(f.a.ctx, &ev), -1, "a second DEVICE_FATAL was queued");
    /* the channel: its unread event dropped, POLLERR, EIO */
    re = revents(f.a.ch->fd, 0);
    cr_assert(re & POLLERR, "channel fd: revents %#x", re);
    errno = 0;
    cr_assert_eq(ibv_get_cq_event(f.a.ch, &ev_cq, &ev_ctx), -1);
    cr_assert_eq(errno, EIO);
    /* what the CQ held, then nothing: no completion, no flush, ever */
    cr_assert_eq(fx_poll(f.a.cq, wc, 4, 600), 1);
    expect_status(&wc[0], 1, IBV_WC_SUCCESS);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_executed, 1);
    cr_assert(all_zero(f.b.buf + 4096, 64), "the held-back WRITE was executed");
    /* every call that needs the device: EIO */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 4, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), EIO);
    cr_assert_eq(fx_recv(f.a.qp, 5, f.a.buf, 8, f.a.mr->lkey), EIO);
    cr_assert_eq(ibv_req_notify_cq(f.a.cq, 0), EIO);
    cr_assert_eq(ibv_modify_qp(f.a.qp, &qa, IBV_QP_STATE), EIO);
    cr_assert_eq(ibv_query_qp(f.a.qp, &qa, IBV_QP_STATE, &ia), EIO);
    cr_assert_eq(ibv_query_port(f.a.ctx, 1, &pa), EIO);
    cr_assert_eq(ibv_query_device(f.a.ctx, &da), EIO);
    errno = 0;
    cr_assert_null(ibv_alloc_pd(f.a.ctx));
    cr_assert_eq(errno, EIO);
    errno = 0;
    cr_assert_null(ibv_create_cq(f.a.ctx, 4, NULL, NULL, 0));
    cr_assert_eq(errno, EIO);
    errno = 0;
    cr_assert_null(ibv_create_comp_channel(f.a.ctx));
    cr_assert_eq(errno, EIO);
    errno = 0;
    cr_assert_null(ibv_reg_mr(f.a.pd, f.a.buf, 4096, IBV_ACCESS_LOCAL_WRITE));
    cr_assert_eq(errno, EIO);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = f.a.cq;
    ia.recv_cq = f.a.cq;
    ia.cap = o.cap;
    ia.qp_type = IBV_QPT_RC;
    errno = 0;
    cr_assert_null(ibv_create_qp(f.a.pd, &ia));
    cr_assert_eq(errno, EIO);
    /* the peer lives; the dead device ACKs nothing */
    o.cfg.delay_us = 0;
    cr_assert_eq(softnic_configure(&o.cfg), 0);
    cr_assert_eq(fx_post(f.b.qp, IBV_WR_RDMA_WRITE, 6, f.b.buf, 8, f.b.mr->lkey,
                         (uintptr_t)f.a.buf, f.a.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.b.cq, wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc[0], 6, IBV_WC_RETRY_EXC_ERR);
    cr_assert_not(fx_async(f.b.ctx, &ev, 50), "softnic1 got an event");
    cr_assert_eq(ibv_query_port(f.b.ctx, 1, &pa), 0);
    /* the device recovered: a new context works */
    ctx2 = ibv_open_device(f.list[0]);
    cr_assert_not_null(ctx2);
    cr_assert_eq(ibv_query_port(ctx2, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
    cr_assert_eq(ibv_close_device(ctx2), 0);
    fx_close(&f); /* destroy, dereg, dealloc and close work; no fd left */
}

typedef struct waiter {
    fx_t *f;
    int   rc, err;
} waiter_t;

static void *cq_event_waiter(void *p)
{
    waiter_t *w = p;
    struct ibv_cq *cq;
    void *ctx;

    w->rc = ibv_get_cq_event(w->f->a.ch, &cq, &ctx);
    w->err = errno;
    return NULL;
}

/* Blocked waiters wake: ibv_get_cq_event fails with EIO, a poll() on the
 * channel fd returns; NULL mode posts fail too. */
Test(softnic_link, device_fatal_wakes_blocked_waiters)
{
    fx_opts_t o;
    fx_t f;
    pthread_t t;
    waiter_t w = {.rc = 1};
    struct ibv_async_event ev;
    uint64_t t0;

    fx_opts_default(&o);
    o.channel = true;
    o.cfg.mode = SOFTNIC_NULL;
    fx_open(&f, &o);
    w.f = &f;
    cr_assert_eq(pthread_create(&t, NULL, cq_event_waiter, &w), 0);
    fx_sleep_ms(50); /* blocked in ibv_get_cq_event */
    t0 = fx_now_us();
    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    cr_assert(revents(f.a.ch->fd, FX_WAIT_MS) & POLLERR);
    pthread_join(t, NULL);
    cr_assert_eq(w.rc, -1);
    cr_assert_eq(w.err, EIO);
    cr_assert_lt(fx_now_us() - t0, 2000000, "the waiter woke late");
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), EIO);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS));
    cr_assert_eq(ev.event_type, IBV_EVENT_DEVICE_FATAL);
    ibv_ack_async_event(&ev);
    fx_close(&f);
}

/* ---- MTUs ---- */

Test(softnic_link, packets_above_the_receiving_port_mtu_are_dropped)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_port_attr pa;
    struct ibv_qp_attr a;
    struct ibv_wc wc;
    softnic_stats_t st;

    fx_opts_default(&o);
    o.cfg.active_mtu_dev[1] = IBV_MTU_1024; /* softnic0 keeps 4096 */
    fx_open(&f, &o);
    cr_assert_eq(ibv_query_port(f.a.ctx, 1, &pa), 0);
    cr_assert_eq(pa.active_mtu, IBV_MTU_4096);
    cr_assert_eq(ibv_query_port(f.b.ctx, 1, &pa), 0);
    cr_assert_eq(pa.active_mtu, IBV_MTU_1024);
    cr_assert_eq(pa.max_mtu, IBV_MTU_1024);
    /* RTR checks the local port: a may use 4096, b may not use 2048 */
    cr_assert_eq(ibv_modify_qp(f.a.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET},
                               IBV_QP_STATE), 0);
    o.path_mtu = IBV_MTU_4096;
    cr_assert_eq(fx_connect(f.a.qp, f.b.qp->qp_num, &f.b.gid, &o), 0);
    cr_assert_eq(ibv_query_qp(f.a.qp, &a, IBV_QP_PATH_MTU, NULL), 0);
    cr_assert_eq(a.path_mtu, IBV_MTU_4096);
    {
        struct ibv_qp_init_attr ia = {.send_cq = f.b.cq, .recv_cq = f.b.cq, .cap = o.cap,
                                      .qp_type = IBV_QPT_RC};
        struct ibv_qp *qp = ibv_create_qp(f.b.pd, &ia);

        cr_assert_not_null(qp);
        o.path_mtu = IBV_MTU_2048;
        cr_assert_eq(fx_connect(qp, f.a.qp->qp_num, &f.a.gid, &o), EINVAL);
        cr_assert_eq(ibv_destroy_qp(qp), 0);
    }
    softnic_stats_reset();
    fx_fill(f.a.buf, 8192, 23);
    fx_fill(f.b.buf + 65536, 8192, 24);
    /* a -> b WRITE of 1024 bytes: one packet of 1024 fits b's port */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 1024, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 1, IBV_WC_SUCCESS);
    cr_assert_arr_eq(f.b.buf, f.a.buf, 1024);
    /* a READ of 4096 from b: b answers with its path MTU, 1024, into a 4096 port */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_READ, 2, f.a.buf + 16384, 4096, f.a.mr->lkey,
                         (uintptr_t)f.b.buf + 65536, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 2, IBV_WC_SUCCESS);
    cr_assert_arr_eq(f.a.buf + 16384, f.b.buf + 65536, 4096);
    /* a -> b WRITE of 1025 bytes: a 1025-byte packet, dropped by b's port */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 3, f.a.buf, 1025, f.a.mr->lkey,
                         (uintptr_t)f.b.buf + 8192, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 3, IBV_WC_RETRY_EXC_ERR);
    cr_assert(all_zero(f.b.buf + 8192, 1025));
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_RTS);
    /* a connected again; b READs 2048 from it: a answers with packets of
     * 2048 (its path MTU is 4096), too big for b's port */
    cr_assert_eq(ibv_modify_qp(f.a.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET},
                               IBV_QP_STATE), 0);
    o.path_mtu = IBV_MTU_4096;
    cr_assert_eq(fx_connect(f.a.qp, f.b.qp->qp_num, &f.b.gid, &o), 0);
    cr_assert_eq(fx_post(f.b.qp, IBV_WR_RDMA_READ, 4, f.b.buf + 32768, 2048, f.b.mr->lkey,
                         (uintptr_t)f.a.buf, f.a.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_status(&wc, 4, IBV_WC_RETRY_EXC_ERR);
    cr_assert(all_zero(f.b.buf + 32768, 2048));
    softnic_stats(&st);
    cr_assert_eq(st.retries, 2 * o.retry_cnt);
    fx_close(&f);
}

/* ---- configuration of the limits ---- */

Test(softnic_link, rd_atomic_depths_are_device_limits)
{
    const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    const int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    fx_opts_t o;
    fx_t f;
    struct ibv_device_attr da;
    struct ibv_qp_attr a;

    fx_opts_default(&o);
    o.cfg.max_rd_atom = 8;
    o.cfg.max_init_rd_atom = 4;
    o.max_dest_rd_atomic = 8;
    o.max_rd_atomic = 4;
    fx_open(&f, &o);
    cr_assert_eq(ibv_query_device(f.a.ctx, &da), 0);
    cr_assert_eq(da.max_qp_rd_atom, 8);
    cr_assert_eq(da.max_qp_init_rd_atom, 4);
    cr_assert_eq(da.max_res_rd_atom, 8 << 17);
    cr_assert_eq(ibv_modify_qp(f.a.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET},
                               IBV_QP_STATE), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                             IBV_QP_ACCESS_FLAGS), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = f.b.qp->qp_num;
    a.max_dest_rd_atomic = 9;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = f.b.gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.port_num = 1;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, rtr), EINVAL, "max_dest_rd_atomic above 8");
    a.max_dest_rd_atomic = 8;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, rtr), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.max_rd_atomic = 5;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, rts), EINVAL, "max_rd_atomic above 4");
    a.max_rd_atomic = 4;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, rts), 0);
    fx_close(&f);
}

Test(softnic_link, configure_checks_the_new_fields)
{
    softnic_config_t cfg;

    softnic_config_default(&cfg);
    cr_assert_eq(cfg.max_rd_atom, 16);
    cr_assert_eq(cfg.max_init_rd_atom, 16);
    cr_assert_not(cfg.exact_cq_depth);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(cfg.active_mtu_dev[i], 0);
    cfg.max_rd_atom = 0;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.max_rd_atom = 256;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.max_rd_atom = 16;
    cfg.max_init_rd_atom = 0;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.max_init_rd_atom = 16;
    cfg.active_mtu_dev[7] = IBV_MTU_4096 + 1;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.active_mtu_dev[7] = IBV_MTU_256;
    cr_assert_eq(softnic_configure(&cfg), 0);
}

/* Per-device MTUs and the depths are device limits: fixed while open. */
Test(softnic_link, configure_refuses_new_device_limits_while_open)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;

    softnic_config_default(&cfg);
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(NULL);
    ctx = ibv_open_device(list[0]);
    cr_assert_not_null(ctx);
    cfg.active_mtu_dev[0] = IBV_MTU_512;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.active_mtu_dev[0] = 0;
    cfg.max_init_rd_atom = 2;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.max_init_rd_atom = 16;
    cfg.exact_cq_depth = true;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}
