/*
 * softnic control verbs: device list and configuration, device, port and
 * GID queries (RoCE GID tables, InfiniBand ports), the QP state machine,
 * creation limits of QPs, MRs and CQs, completion channels, async events,
 * and the object and fd accounting.
 */
#include "softnic_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

TestSuite(softnic_verbs, .timeout = 60);

Test(softnic_verbs, no_devices_is_an_empty_list)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    int n = -1;

    softnic_config_default(&cfg);
    cfg.no_devices = true;
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(&n);
    cr_assert_not_null(list);
    cr_assert_eq(n, 0);
    cr_assert_null(list[0]);
    ibv_free_device_list(list);
}

Test(softnic_verbs, environment_configures_at_first_call)
{
    struct ibv_device **list;
    struct ibv_context *ctx;
    int n = 0;

    setenv("SOFTNIC_DEVICES", "3", 1);
    setenv("SOFTNIC_MODE", "null", 1);
    list = ibv_get_device_list(&n);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(ibv_get_device_name(list[2]), "softnic2");
    ctx = ibv_open_device(list[2]);
    cr_assert_not_null(ctx);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}

Test(softnic_verbs, configure_refuses_new_limits_while_open)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;

    softnic_config_default(&cfg);
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(NULL);
    ctx = ibv_open_device(list[0]);
    cr_assert_not_null(ctx);
    cfg.devices = 2;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cfg.devices = 1;
    cfg.delay_us = 5; /* mode, delay, bandwidth: at once */
    cfg.mode = SOFTNIC_ON_POLL;
    cr_assert_eq(softnic_configure(&cfg), 0);
    cfg.devices = 9;
    cr_assert_eq(softnic_configure(&cfg), -1);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}

Test(softnic_verbs, device_port_and_gid_queries)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    struct ibv_gid_entry ge;
    union ibv_gid gid;
    static const uint8_t v2[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    int n;

    softnic_config_default(&cfg);
    cfg.devices = 2;
    cfg.active_mtu = IBV_MTU_1024;
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(&n);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(ibv_get_device_name(list[0]), "softnic0");
    ctx = ibv_open_device(list[1]);
    cr_assert_not_null(ctx);
    cr_assert_eq(ctx->device, list[1]);
    cr_assert_geq(ctx->async_fd, 0);
    cr_assert_geq(ctx->num_comp_vectors, 1);
    cr_assert_eq(ibv_query_device(ctx, &da), 0);
    cr_assert_str_eq(da.fw_ver, "softnic");
    cr_assert_eq(da.phys_port_cnt, 1);
    cr_assert_eq(da.max_qp_wr, 32768);
    cr_assert_eq(da.max_sge, 30);
    cr_assert_eq(da.max_cqe, 4194303);
    cr_assert_eq(da.max_mr_size, 1ull << 40);
    cr_assert_eq(da.max_qp_rd_atom, 16);
    cr_assert_eq(da.max_qp_init_rd_atom, 16);
    cr_assert_gt(da.max_qp, 0);
    cr_assert_gt(da.max_cq, 0);
    cr_assert_gt(da.max_mr, 0);
    cr_assert_gt(da.max_pd, 0);
    cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
    cr_assert_eq(pa.active_mtu, IBV_MTU_1024);
    cr_assert_eq(pa.max_mtu, IBV_MTU_1024);
    cr_assert_eq(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    cr_assert_eq(pa.gid_tbl_len, 2);
    cr_assert_eq(pa.max_msg_sz, 1u << 31);
    cr_assert_eq(pa.lid, 0);
    cr_assert_str_eq(ibv_port_state_str(pa.state), "PORT_ACTIVE");
    cr_assert_eq(ibv_query_port(ctx, 2, &pa), EINVAL);
    cr_assert_eq(ibv_query_gid(ctx, 1, 1, &gid), 0);
    cr_assert_arr_eq(gid.raw, v2, 16);
    cr_assert_eq(ibv_query_gid(ctx, 1, 0, &gid), 0);
    cr_assert_eq(gid.raw[0], 0xfe);
    cr_assert_eq(gid.raw[1], 0x80);
    cr_assert_eq(ibv_query_gid(ctx, 1, 2, &gid), -1);
    cr_assert_eq(errno, EINVAL);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 0, &ge, 0), 0);
    cr_assert_eq(ge.gid_type, IBV_GID_TYPE_ROCE_V1);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), 0);
    cr_assert_eq(ge.gid_type, IBV_GID_TYPE_ROCE_V2);
    cr_assert_eq(ge.gid_index, 1);
    cr_assert_eq(ge.port_num, 1);
    cr_assert_arr_eq(ge.gid.raw, v2, 16);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 2, &ge, 0), EINVAL);
    cr_assert_eq(ibv_query_gid_ex(ctx, 2, 0, &ge, 0), EINVAL);
    cr_assert_str_eq(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
    cr_assert_str_neq(ibv_event_type_str(IBV_EVENT_PORT_ERR), "unknown");
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    return ibv_modify_qp(qp, a, mask);
}

Test(softnic_verbs, qp_state_machine)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_qp_attr a, q;
    struct ibv_qp_init_attr ia;
    const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

    fx_opts_default(&o);
    o.cfg.active_mtu = IBV_MTU_2048;
    fx_open(&f, &o);
    /* recorded attributes */
    cr_assert_eq(ibv_query_qp(f.a.qp, &q, IBV_QP_STATE, &ia), 0);
    cr_assert_eq(q.qp_state, IBV_QPS_RTS);
    cr_assert_eq(f.a.qp->state, IBV_QPS_RTS);
    cr_assert_eq(q.dest_qp_num, f.b.qp->qp_num);
    cr_assert_arr_eq(q.ah_attr.grh.dgid.raw, f.b.gid.raw, 16);
    cr_assert_eq(q.path_mtu, IBV_MTU_1024);
    cr_assert_eq(q.timeout, o.timeout);
    cr_assert_eq(q.retry_cnt, o.retry_cnt);
    cr_assert_eq(q.rnr_retry, o.rnr_retry);
    cr_assert_eq(q.min_rnr_timer, o.min_rnr_timer);
    cr_assert_eq(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    cr_assert_eq(q.cap.max_send_wr, o.cap.max_send_wr);
    cr_assert_eq(ia.send_cq, f.a.cq);
    cr_assert_eq(ia.qp_type, IBV_QPT_RC);
    /* RTS -> RTS may change min_rnr_timer, not timeout */
    memset(&a, 0, sizeof(a));
    a.min_rnr_timer = 3;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_MIN_RNR_TIMER), 0);
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_TIMEOUT), EINVAL);
    /* to RESET, then the transitions one by one */
    a.qp_state = IBV_QPS_RESET;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE), 0);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_RESET);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE), EINVAL, "RESET -> RTR");
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL,
                 "INIT without access flags");
    cr_assert_eq(modify(f.a.qp, &a, init_mask | IBV_QP_TIMEOUT), EINVAL, "an extra attribute");
    a.port_num = 2;
    cr_assert_eq(modify(f.a.qp, &a, init_mask), EINVAL, "port 2");
    a.port_num = 1;
    cr_assert_eq(modify(f.a.qp, &a, init_mask), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = f.b.qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = f.b.gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.port_num = 1;
    cr_assert_eq(modify(f.a.qp, &a, rtr_mask), EINVAL, "path MTU above the active MTU");
    a.path_mtu = IBV_MTU_2048;
    a.ah_attr.is_global = 0;
    cr_assert_eq(modify(f.a.qp, &a, rtr_mask), EINVAL, "RoCE needs a GRH");
    a.ah_attr.is_global = 1;
    cr_assert_eq(modify(f.a.qp, &a, rtr_mask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
    cr_assert_eq(modify(f.a.qp, &a, rtr_mask), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 8;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                 EINVAL, "retry_cnt 8");
    a.retry_cnt = 7;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                 0);
    cr_assert_eq(ibv_query_qp(f.a.qp, &q, IBV_QP_STATE, &ia), 0);
    cr_assert_eq(q.path_mtu, IBV_MTU_2048);
    cr_assert_eq(q.retry_cnt, 7);
    /* any -> ERR, ERR -> RESET */
    a.qp_state = IBV_QPS_ERR;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE), 0);
    cr_assert_eq(f.a.qp->state, IBV_QPS_ERR);
    a.qp_state = IBV_QPS_RTS;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE), EINVAL, "ERR -> RTS");
    a.qp_state = IBV_QPS_RESET;
    cr_assert_eq(modify(f.a.qp, &a, IBV_QP_STATE), 0);
    fx_close(&f);
}

Test(softnic_verbs, qp_creation_limits)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_qp_init_attr ia;
    struct ibv_qp *qp;
    uint32_t qpn;

    fx_opts_default(&o);
    fx_open(&f, &o);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = f.a.cq;
    ia.recv_cq = f.a.cq;
    ia.cap = o.cap;
    ia.qp_type = IBV_QPT_UD;
    errno = 0;
    cr_assert_null(ibv_create_qp(f.a.pd, &ia));
    cr_assert_eq(errno, EOPNOTSUPP);
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_inline_data = 221;
    cr_assert_null(ibv_create_qp(f.a.pd, &ia));
    cr_assert_eq(errno, EINVAL);
    ia.cap = o.cap;
    ia.cap.max_send_wr = 32769;
    cr_assert_null(ibv_create_qp(f.a.pd, &ia));
    ia.cap = o.cap;
    ia.cap.max_send_sge = 31;
    cr_assert_null(ibv_create_qp(f.a.pd, &ia));
    /* QPNs: nonzero, 24-bit, not reused at once */
    ia.cap = o.cap;
    qp = ibv_create_qp(f.a.pd, &ia);
    cr_assert_not_null(qp);
    qpn = qp->qp_num;
    cr_assert(qpn != 0 && qpn <= 0xffffff);
    cr_assert_neq(qpn, f.a.qp->qp_num);
    cr_assert_eq(qp->qp_context, NULL);
    cr_assert_eq(qp->pd, f.a.pd);
    cr_assert_eq(qp->state, IBV_QPS_RESET);
    cr_assert_eq(ibv_dealloc_pd(f.a.pd), EBUSY, "a PD with a QP and an MR");
    cr_assert_eq(ibv_destroy_cq(f.a.cq), EBUSY, "a CQ with QPs");
    cr_assert_eq(ibv_destroy_qp(qp), 0);
    qp = ibv_create_qp(f.a.pd, &ia);
    cr_assert_not_null(qp);
    cr_assert_neq(qp->qp_num, qpn);
    cr_assert_eq(ibv_destroy_qp(qp), 0);
    fx_close(&f);
}

Test(softnic_verbs, recv_queue_limits)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_sge sge[5];
    struct ibv_recv_wr wr = {.sg_list = sge, .num_sge = 5}, *bad;

    fx_opts_default(&o);
    o.cap.max_recv_wr = 2;
    fx_open(&f, &o);
    memset(sge, 0, sizeof(sge));
    cr_assert_eq(ibv_post_recv(f.b.qp, &wr, &bad), EINVAL, "num_sge 5 > max_recv_sge 4");
    cr_assert_eq(fx_recv(f.b.qp, 1, f.b.buf, 8, f.b.mr->lkey), 0);
    cr_assert_eq(fx_recv(f.b.qp, 2, f.b.buf, 8, f.b.mr->lkey), 0);
    cr_assert_eq(fx_recv(f.b.qp, 3, f.b.buf, 8, f.b.mr->lkey), ENOMEM);
    fx_close(&f);
}

Test(softnic_verbs, mr_rules)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *m1, *m2;
    static uint8_t buf[8192];

    softnic_config_default(&cfg);
    cfg.max_mr_size = 4096;
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(NULL);
    ctx = ibv_open_device(list[0]);
    pd = ibv_alloc_pd(ctx);
    cr_assert_not_null(pd);
    cr_assert_eq(pd->context, ctx);
    errno = 0;
    cr_assert_null(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE));
    cr_assert_eq(errno, EINVAL, "REMOTE_WRITE needs LOCAL_WRITE");
    cr_assert_null(ibv_reg_mr(pd, buf, 4097, IBV_ACCESS_LOCAL_WRITE));
    cr_assert_eq(errno, EINVAL, "above max_mr_size");
    m1 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    m2 = ibv_reg_mr_iova2(pd, buf + 4096, 4096, 0x1000, IBV_ACCESS_LOCAL_WRITE);
    cr_assert(m1 && m2);
    cr_assert_eq(m1->addr, buf);
    cr_assert_eq(m1->length, 4096);
    cr_assert_eq(m1->pd, pd);
    cr_assert_eq(m1->context, ctx);
    cr_assert_neq(m1->lkey, m1->rkey);
    cr_assert_neq(m1->lkey, m2->lkey);
    cr_assert_neq(m1->rkey, m2->rkey);
    cr_assert_eq(ibv_dealloc_pd(pd), EBUSY);
    cr_assert_eq(ibv_dereg_mr(m1), 0);
    cr_assert_eq(ibv_dereg_mr(m2), 0);
    cr_assert_eq(ibv_dealloc_pd(pd), 0);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}

/* softnic has no atomics: REMOTE_ATOMIC is refused wherever it is asked. */
Test(softnic_verbs, remote_atomic_is_refused)
{
    const int atomic = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    fx_opts_t o;
    fx_t f;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    struct ibv_qp *qp;
    int fd;

    fx_opts_default(&o);
    fx_open(&f, &o);
    errno = 0;
    cr_assert_null(ibv_reg_mr(f.a.pd, f.a.buf, 4096, atomic));
    cr_assert_eq(errno, EINVAL);
    errno = 0;
    cr_assert_null(ibv_reg_mr(f.a.pd, f.a.buf, 4096, IBV_ACCESS_LOCAL_WRITE |
                                                         IBV_ACCESS_REMOTE_ATOMIC));
    cr_assert_eq(errno, EINVAL);
    errno = 0;
    cr_assert_null(ibv_reg_mr_iova2(f.a.pd, f.a.buf, 4096, 0x1000, (unsigned int)atomic));
    cr_assert_eq(errno, EINVAL);
    fd = memfd_create("softnic-atomic", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 8192), 0);
    errno = 0;
    cr_assert_null(ibv_reg_dmabuf_mr(f.a.pd, 0, 4096, 0x2000, fd, atomic));
    cr_assert_eq(errno, EINVAL);
    close(fd);
    /* a QP's access flags: at INIT, and later */
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = f.a.cq;
    ia.recv_cq = f.a.cq;
    ia.cap = o.cap;
    ia.qp_type = IBV_QPT_RC;
    qp = ibv_create_qp(f.a.pd, &ia);
    cr_assert_not_null(qp);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS), EINVAL);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS), 0);
    cr_assert_eq(ibv_destroy_qp(qp), 0);
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    cr_assert_eq(ibv_modify_qp(f.a.qp, &a, IBV_QP_ACCESS_FLAGS), EINVAL, "RTS -> RTS");
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_RTS);
    fx_close(&f);
}

/* exact_cq_depth: the CQ holds exactly cqe entries, and overruns past them. */
Test(softnic_verbs, exact_cq_depth)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_cq *cq;
    struct ibv_wc wc[8];

    fx_opts_default(&o);
    o.cfg.exact_cq_depth = true;
    o.cqe = 5;
    fx_open(&f, &o);
    cr_assert_eq(f.a.cq->cqe, 5);
    cq = ibv_create_cq(f.a.ctx, 100, NULL, NULL, 0);
    cr_assert_not_null(cq);
    cr_assert_eq(cq->cqe, 100);
    cr_assert_eq(ibv_destroy_cq(cq), 0);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf, 8, f.a.mr->lkey,
                             (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS), "no IBV_EVENT_CQ_ERR");
    cr_assert_eq(ev.event_type, IBV_EVENT_CQ_ERR);
    ibv_ack_async_event(&ev);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS), "no IBV_EVENT_QP_FATAL");
    ibv_ack_async_event(&ev);
    cr_assert_eq(ibv_poll_cq(f.a.cq, 8, wc), 5, "the sixth CQE overran a CQ of 5");
    fx_close(&f);
}

Test(softnic_verbs, cq_sizes_and_channel_events)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_cq *cq, *ev_cq;
    void *ev_ctx;
    struct ibv_wc wc;
    struct pollfd p;
    int flags;

    fx_opts_default(&o);
    o.channel = true;
    fx_open(&f, &o);
    cq = ibv_create_cq(f.a.ctx, 100, NULL, NULL, 0);
    cr_assert_not_null(cq);
    cr_assert_eq(cq->cqe, 127, "2^k - 1 by default");
    cr_assert_eq(ibv_destroy_cq(cq), 0);
    errno = 0;
    cr_assert_null(ibv_create_cq(f.a.ctx, 4194304, NULL, NULL, 0));
    cr_assert_eq(errno, EINVAL);
    cr_assert_null(ibv_create_cq(f.a.ctx, 16, NULL, NULL, f.a.ctx->num_comp_vectors));
    cr_assert_eq(f.a.ch->refcnt, 1);
    cr_assert_eq(f.a.cq->channel, f.a.ch);
    cr_assert_eq(ibv_destroy_comp_channel(f.a.ch), EBUSY, "a channel with a CQ");

    /* nonblocking and nothing armed: EAGAIN */
    flags = fcntl(f.a.ch->fd, F_GETFL);
    cr_assert_eq(fcntl(f.a.ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
    cr_assert_eq(ibv_get_cq_event(f.a.ch, &ev_cq, &ev_ctx), -1);
    cr_assert_eq(errno, EAGAIN);
    /* armed: the next CQE raises one event */
    cr_assert_eq(ibv_req_notify_cq(f.a.cq, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    p.fd = f.a.ch->fd;
    p.events = POLLIN;
    cr_assert_eq(poll(&p, 1, FX_WAIT_MS), 1);
    cr_assert_eq(fcntl(f.a.ch->fd, F_SETFL, flags), 0);
    cr_assert_eq(ibv_get_cq_event(f.a.ch, &ev_cq, &ev_ctx), 0); /* blocking */
    cr_assert_eq(ev_cq, f.a.cq);
    cr_assert_eq(ev_ctx, &f.a);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    /* not re-armed: no event for the next CQE */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    cr_assert_eq(fcntl(f.a.ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
    cr_assert_eq(ibv_get_cq_event(f.a.ch, &ev_cq, &ev_ctx), -1);
    cr_assert_eq(errno, EAGAIN);
    /* an event read and not acknowledged keeps the CQ */
    cr_assert_eq(ibv_destroy_qp(f.a.qp), 0);
    f.a.qp = NULL;
    cr_assert_eq(ibv_destroy_cq(f.a.cq), EBUSY);
    ibv_ack_cq_events(f.a.cq, 1);
    cr_assert_eq(ibv_destroy_cq(f.a.cq), 0);
    f.a.cq = NULL;
    fx_close(&f);
}

Test(softnic_verbs, async_events_qp_fatal_and_port)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_async_event ev;
    struct ibv_port_attr pa;
    struct ibv_wc wc;
    int flags;

    fx_opts_default(&o);
    fx_open(&f, &o);
    flags = fcntl(f.a.ctx->async_fd, F_GETFL);
    cr_assert_eq(flags & O_NONBLOCK, 0, "async_fd starts blocking");
    cr_assert_eq(fcntl(f.a.ctx->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    cr_assert_eq(ibv_get_async_event(f.a.ctx, &ev), -1);
    cr_assert_eq(errno, EAGAIN);
    cr_assert_eq(fcntl(f.a.ctx->async_fd, F_SETFL, flags), 0);

    cr_assert_eq(softnic_qp_fatal(0xfffffe), -1);
    cr_assert_eq(fx_recv(f.a.qp, 5, f.a.buf, 8, f.a.mr->lkey), 0);
    cr_assert_eq(softnic_qp_fatal(f.a.qp->qp_num), 0);
    cr_assert(fx_async(f.a.ctx, &ev, FX_WAIT_MS));
    cr_assert_eq(ev.event_type, IBV_EVENT_QP_FATAL);
    cr_assert_eq(ev.element.qp, f.a.qp);
    cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_ERR);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
    cr_assert_eq(ibv_destroy_qp(f.a.qp), EBUSY, "an async event not acknowledged");
    ibv_ack_async_event(&ev);

    cr_assert_eq(softnic_async(7, IBV_EVENT_PORT_ERR), -1);
    cr_assert_eq(softnic_async(1, IBV_EVENT_QP_FATAL), -1);
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    cr_assert(fx_async(f.b.ctx, &ev, FX_WAIT_MS));
    cr_assert_eq(ev.event_type, IBV_EVENT_PORT_ERR);
    cr_assert_eq(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    cr_assert_eq(ibv_query_port(f.b.ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_DOWN);
    cr_assert_eq(fx_qp_state(f.b.qp), IBV_QPS_RTS, "a link going down moves no QP");
    cr_assert_eq(ibv_query_port(f.a.ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE, "only softnic1 went down");
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    cr_assert(fx_async(f.b.ctx, &ev, FX_WAIT_MS));
    cr_assert_eq(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    ibv_ack_async_event(&ev);
    cr_assert_eq(ibv_query_port(f.b.ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
    fx_close(&f);
}

Test(softnic_verbs, close_device_reports_leaked_objects)
{
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;
    uint32_t objs;
    int fds;

    softnic_config_default(&cfg);
    cr_assert_eq(softnic_configure(&cfg), 0);
    fds = fx_count_fds();
    objs = softnic_open_objects();
    list = ibv_get_device_list(NULL);
    ctx = ibv_open_device(list[0]);
    cr_assert_not_null(ibv_alloc_pd(ctx));
    cr_assert_not_null(ibv_create_comp_channel(ctx));
    cr_assert_eq(softnic_open_objects(), objs + 3);
    cr_assert_eq(ibv_close_device(ctx), 0);
    cr_assert_eq(softnic_open_objects(), objs + 2, "the PD and the channel were left open");
    cr_assert_eq(fx_count_fds(), fds);
    ibv_free_device_list(list);
}

/* The GID table of each `gids` choice: a RoCEv1 and a RoCEv2 entry per
 * address, link-local first. */
Test(softnic_verbs, roce_gid_tables)
{
    static const struct {
        softnic_gids_t gids;
        int            len;
        uint8_t        first[4]; /* raw[0] of each entry */
    } t[] = {
        {SOFTNIC_GIDS_IPV4, 2, {0xfe, 0}},
        {SOFTNIC_GIDS_LINK_LOCAL, 2, {0xfe, 0xfe}},
        {SOFTNIC_GIDS_IPV6, 4, {0xfe, 0xfe, 0x20, 0x20}},
    };
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_port_attr pa;
    struct ibv_gid_entry ge;

    for (size_t k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
        softnic_config_default(&cfg);
        cfg.gids = t[k].gids;
        cr_assert_eq(softnic_configure(&cfg), 0);
        list = ibv_get_device_list(NULL);
        ctx = ibv_open_device(list[0]);
        cr_assert_not_null(ctx);
        cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
        cr_assert_eq(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
        cr_assert_eq(pa.gid_tbl_len, t[k].len);
        cr_assert(pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS);
        for (int i = 0; i < t[k].len; i++) {
            cr_assert_eq(ibv_query_gid_ex(ctx, 1, (uint32_t)i, &ge, 0), 0);
            cr_assert_eq(ge.gid_type, i % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1);
            cr_assert_eq(ge.gid.raw[0], t[k].first[i], "gids %d, index %d", t[k].gids, i);
            cr_assert_eq(ge.gid.raw[15], 1, "device 0's address");
        }
        cr_assert_eq(ibv_query_gid_ex(ctx, 1, (uint32_t)t[k].len, &ge, 0), EINVAL);
        cfg.gids = t[k].gids == SOFTNIC_GIDS_IPV6 ? SOFTNIC_GIDS_IPV4 : SOFTNIC_GIDS_IPV6;
        cr_assert_eq(softnic_configure(&cfg), -1, "a new table while open");
        cr_assert_eq(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
}

/* An InfiniBand port: its LID, one GID of type IB and an empty entry, an AV
 * without a GRH taken, a GRH of the empty entry refused. */
Test(softnic_verbs, infiniband_port)
{
    static const uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 2};
    const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    softnic_config_t cfg;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_port_attr pa;
    struct ibv_gid_entry ge;
    struct ibv_qp_attr a;
    union ibv_gid g;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = 1, .max_recv_wr = 1,
                                          .max_send_sge = 1, .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};

    softnic_config_default(&cfg);
    cfg.devices = 2;
    cfg.lid_dev[1] = 0xc000;
    cr_assert_eq(softnic_configure(&cfg), -1, "a multicast LID");
    cfg.lid_dev[1] = 0x35;
    cfg.link_layer = 3;
    cr_assert_eq(softnic_configure(&cfg), -1, "no such link layer");
    cfg.link_layer = IBV_LINK_LAYER_INFINIBAND;
    cr_assert_eq(softnic_configure(&cfg), 0);
    list = ibv_get_device_list(NULL);
    ctx = ibv_open_device(list[1]);
    cr_assert_not_null(ctx);
    cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
    cr_assert_eq(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    cr_assert_eq(pa.lid, 0x35);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
    cr_assert_eq(pa.gid_tbl_len, 2);
    cr_assert_eq(pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS, 0u);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 0, &ge, 0), 0);
    cr_assert_eq(ge.gid_type, IBV_GID_TYPE_IB);
    cr_assert_arr_eq(ge.gid.raw, gid, 16, "fe80::<port GUID>");
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), ENODATA, "an empty entry");
    memset(&g, 0xff, sizeof(g));
    cr_assert_eq(ibv_query_gid(ctx, 1, 1, &g), 0, "as rdma-core: a zero GID");
    for (int i = 0; i < 16; i++)
        cr_assert_eq(g.raw[i], 0);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    cr_assert(pd && cq);
    ia.send_cq = ia.recv_cq = cq;
    qp = ibv_create_qp(pd, &ia);
    cr_assert_not_null(qp);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1};
    cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                               IBV_QP_ACCESS_FLAGS), 0);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                             .dest_qp_num = qp->qp_num, .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12,
                             .ah_attr = {.is_global = 1, .dlid = 0x35, .port_num = 1,
                                         .grh = {.sgid_index = 1}}};
    cr_assert_eq(ibv_modify_qp(qp, &a, rtr_mask), EINVAL, "a GRH of the empty entry");
    a.ah_attr.is_global = 0;
    cr_assert_eq(ibv_modify_qp(qp, &a, rtr_mask), 0, "no GRH on InfiniBand");
    cr_assert_eq(ibv_destroy_qp(qp), 0);
    cr_assert_eq(ibv_destroy_cq(cq), 0);
    cr_assert_eq(ibv_dealloc_pd(pd), 0);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
}
