/*
 * softnic's call faults (softnic_fault_call, softnic_fault_modify_qp) on raw
 * verbs: the nth call of an entry point fails, once, as verbs says that call
 * fails, and changes nothing. The rdma transport under them:
 * tests/test_rdma_setup.c.
 */
#include "softnic_fixture.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

/* A verbs call that fails with NULL and errno err. */
#define NULL_ERRNO(call, err)                                    \
    do {                                                          \
        errno = 0;                                                \
        cr_assert_null(call, "%s did not fail", #call);           \
        cr_assert_eq(errno, (err), "%s: errno %d", #call, errno); \
    } while (0)

/* The nth call fails, not one before it and none after it; other entry
 * points do not count; nth 0, no errno or no such call are ignored; a clear
 * drops an unspent fault; two faults on one call are both spent, the first
 * registered gives the errno. */
Test(softnic_calls, call_fault_fires_once_on_the_nth_call)
{
    softnic_config_t nic;
    struct ibv_pd *pd[8];
    struct ibv_device **list;
    struct ibv_context *ctx;
    uint32_t objects;
    int n = 0, npd = 0;

    softnic_config_default(&nic);
    cr_assert_eq(softnic_configure(&nic), 0);
    softnic_faults_clear();
    objects = softnic_open_objects();
    list = ibv_get_device_list(&n);
    cr_assert(list && n == 1);
    ctx = ibv_open_device(list[0]);
    cr_assert_not_null(ctx);
    pd[npd++] = ibv_alloc_pd(ctx); /* before the fault: not counted */

    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 3, ENOMEM);
    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 0, EIO);
    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 1, 0);
    softnic_fault_call(SOFTNIC_CALL_COUNT, 1, EIO);
    for (int i = 1; i <= 2; i++) {
        pd[npd] = ibv_alloc_pd(ctx);
        cr_assert_not_null(pd[npd++], "call %d of 3 failed", i);
    }
    NULL_ERRNO(ibv_alloc_pd(ctx), ENOMEM); /* the 3rd call */
    for (int i = 4; i <= 5; i++) {
        pd[npd] = ibv_alloc_pd(ctx);
        cr_assert_not_null(pd[npd++], "call %d failed: the fault fired again", i);
    }

    softnic_fault_call(SOFTNIC_CALL_CREATE_COMP_CHANNEL, 1, EMFILE);
    pd[npd] = ibv_alloc_pd(ctx);
    cr_assert_not_null(pd[npd++], "another entry point's fault hit ibv_alloc_pd");
    NULL_ERRNO(ibv_create_comp_channel(ctx), EMFILE);

    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 1, EIO);
    softnic_faults_clear();
    pd[npd] = ibv_alloc_pd(ctx);
    cr_assert_not_null(pd[npd++], "a cleared fault fired");

    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 1, EPERM);
    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 1, EIO);
    NULL_ERRNO(ibv_alloc_pd(ctx), EPERM); /* the first registered one's errno */
    pd[npd] = ibv_alloc_pd(ctx);
    cr_assert_not_null(pd[npd++], "the second fault on the same call was not spent");

    cr_assert_eq(softnic_open_objects(), objects + 1 + (uint32_t)npd);
    for (int i = 0; i < npd; i++)
        cr_assert_eq(ibv_dealloc_pd(pd[i]), 0);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
    cr_assert_eq(softnic_open_objects(), objects);
}

/* Each entry point fails as verbs says it fails, and a failed call changed
 * nothing: the QP stays in its state, a refused receive is not posted. */
Test(softnic_calls, call_faults_fail_as_verbs_say)
{
    softnic_config_t nic;
    struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                          .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1}, err_attr = {
        .qp_state = IBV_QPS_ERR};
    const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    struct ibv_recv_wr rwr = {.wr_id = 1}, *bad = NULL;
    struct ibv_device_attr_ex dax;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    struct ibv_gid_entry ge;
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qia;
    struct ibv_wc wc[2];
    union ibv_gid gid;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_qp *qp;
    static uint8_t buf[4096];
    uint32_t objects;
    int n = 0, fds, fd, got = 0;

    softnic_config_default(&nic);
    cr_assert_eq(softnic_configure(&nic), 0);
    softnic_faults_clear();
    objects = softnic_open_objects();
    fds = fx_count_fds();

    softnic_fault_call(SOFTNIC_CALL_GET_DEVICE_LIST, 1, ENOMEM);
    NULL_ERRNO(ibv_get_device_list(&n), ENOMEM);
    list = ibv_get_device_list(&n);
    cr_assert(list && n == 1);
    softnic_fault_call(SOFTNIC_CALL_OPEN_DEVICE, 1, EPERM);
    NULL_ERRNO(ibv_open_device(list[0]), EPERM);
    ctx = ibv_open_device(list[0]);
    cr_assert_not_null(ctx);

    softnic_fault_call(SOFTNIC_CALL_QUERY_DEVICE, 1, EIO);
    cr_assert_eq(ibv_query_device(ctx, &da), EIO);
    softnic_fault_call(SOFTNIC_CALL_QUERY_DEVICE, 1, ENOTTY);
    cr_assert_eq(ibv_query_device_ex(ctx, NULL, &dax), ENOTTY, "_ex falls back to it");
    cr_assert_eq(ibv_query_device(ctx, &da), 0);
    softnic_fault_call(SOFTNIC_CALL_QUERY_PORT, 1, EIO);
    cr_assert_eq(ibv_query_port(ctx, 1, &pa), EIO);
    cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID, 1, EIO);
    errno = 0;
    cr_assert_eq(ibv_query_gid(ctx, 1, 1, &gid), -1);
    cr_assert_eq(errno, EIO);
    cr_assert_eq(ibv_query_gid(ctx, 1, 1, &gid), 0);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 1, ENODEV);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), ENODEV);
    cr_assert_eq(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), 0);

    softnic_fault_call(SOFTNIC_CALL_ALLOC_PD, 1, ENOMEM);
    NULL_ERRNO(ibv_alloc_pd(ctx), ENOMEM);
    pd = ibv_alloc_pd(ctx);
    cr_assert_not_null(pd);
    softnic_fault_call(SOFTNIC_CALL_REG_MR, 1, ENOMEM);
    softnic_fault_call(SOFTNIC_CALL_REG_MR, 2, EFAULT);
    NULL_ERRNO((ibv_reg_mr)(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), ENOMEM);
    /* ibv_reg_mr_iova2 counts as ibv_reg_mr */
    NULL_ERRNO(ibv_reg_mr_iova2(pd, buf, sizeof(buf), 0, IBV_ACCESS_LOCAL_WRITE), EFAULT);
    mr = (ibv_reg_mr)(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    cr_assert_not_null(mr);
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert(fd >= 0 && ftruncate(fd, 4096) == 0);
    softnic_fault_call(SOFTNIC_CALL_REG_DMABUF_MR, 1, EOPNOTSUPP);
    NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, fd, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
    close(fd);

    softnic_fault_call(SOFTNIC_CALL_CREATE_COMP_CHANNEL, 1, EMFILE);
    NULL_ERRNO(ibv_create_comp_channel(ctx), EMFILE);
    ch = ibv_create_comp_channel(ctx);
    cr_assert_not_null(ch);
    softnic_fault_call(SOFTNIC_CALL_CREATE_CQ, 1, ENOMEM);
    NULL_ERRNO(ibv_create_cq(ctx, 16, NULL, ch, 0), ENOMEM);
    cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
    cr_assert_not_null(cq);
    softnic_fault_call(SOFTNIC_CALL_REQ_NOTIFY_CQ, 1, EIO);
    cr_assert_eq(ibv_req_notify_cq(cq, 0), EIO);
    cr_assert_eq(ibv_req_notify_cq(cq, 0), 0);

    ia.send_cq = ia.recv_cq = cq;
    softnic_fault_call(SOFTNIC_CALL_CREATE_QP, 1, ENOMEM);
    NULL_ERRNO(ibv_create_qp(pd, &ia), ENOMEM);
    qp = ibv_create_qp(pd, &ia);
    cr_assert_not_null(qp);
    softnic_fault_call(SOFTNIC_CALL_MODIFY_QP, 1, EPERM);
    cr_assert_eq(ibv_modify_qp(qp, &init, init_mask), EPERM);
    cr_assert_eq(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), 0);
    cr_assert_eq(qa.qp_state, IBV_QPS_RESET, "a failed ibv_modify_qp moved the QP");
    softnic_fault_modify_qp(IBV_QPS_ERR, 1, EBUSY);
    cr_assert_eq(ibv_modify_qp(qp, &init, init_mask), 0, "a move to INIT counted");
    softnic_fault_call(SOFTNIC_CALL_POST_RECV, 1, ENOMEM);
    cr_assert_eq(ibv_post_recv(qp, &rwr, &bad), ENOMEM);
    cr_assert_eq(bad, &rwr);
    cr_assert_eq(ibv_modify_qp(qp, &err_attr, IBV_QP_STATE), EBUSY);
    cr_assert_eq(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), 0);
    cr_assert_eq(qa.qp_state, IBV_QPS_INIT);
    cr_assert_eq(ibv_modify_qp(qp, &err_attr, IBV_QP_STATE), 0);
    rwr.wr_id = 2; /* in ERR: flushed at once */
    cr_assert_eq(ibv_post_recv(qp, &rwr, &bad), 0);
    for (uint64_t deadline = fx_now_us() + 200000; got < 2 && fx_now_us() < deadline;)
        got += ibv_poll_cq(cq, 2 - got, wc + got);
    cr_assert_eq(got, 1, "the refused receive was posted");
    cr_assert_eq(wc[0].wr_id, 2u);
    cr_assert_eq(wc[0].status, IBV_WC_WR_FLUSH_ERR);

    cr_assert_eq(ibv_destroy_qp(qp), 0);
    cr_assert_eq(ibv_destroy_cq(cq), 0);
    cr_assert_eq(ibv_destroy_comp_channel(ch), 0);
    cr_assert_eq(ibv_dereg_mr(mr), 0);
    cr_assert_eq(ibv_dealloc_pd(pd), 0);
    cr_assert_eq(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
    cr_assert_eq(softnic_open_objects(), objects, "verbs objects left open");
    cr_assert_eq(fx_count_fds(), fds, "file descriptors leaked");
}
