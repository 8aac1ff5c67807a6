/*
 * softnic data path with raw verbs: WRITE, READ, SEND, ordering, SQ slots,
 * inline data, dmabuf MRs, the three modes, pacing and a concurrent run.
 * Every test leaves the fds and softnic objects as it found them
 * (fx_close). Errors, faults and events: test_softnic_err.c; the control
 * verbs: test_softnic_verbs.c.
 */
#include "softnic_fixture.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

TestSuite(softnic, .timeout = 60);

static void expect_wc(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status st,
                      enum ibv_wc_opcode op)
{
    cr_assert_eq(wc->wr_id, wr_id, "wr_id %llu, expected %llu", (unsigned long long)wc->wr_id,
                 (unsigned long long)wr_id);
    cr_assert_eq(wc->status, st, "status %s, expected %s", ibv_wc_status_str(wc->status),
                 ibv_wc_status_str(st));
    if (st == IBV_WC_SUCCESS)
        cr_assert_eq(wc->opcode, op);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

Test(softnic, write_lands_byte_exact)
{
    static const uint32_t sizes[] = {1, 7, 4096, 65539, 300000};
    fx_opts_t o;
    fx_t f;
    uint64_t roff = 0;
    struct ibv_wc wc;

    fx_opts_default(&o);
    fx_open(&f, &o);
    fx_fill(f.a.buf, o.buf_len, 1);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint32_t len = sizes[i];
        uint64_t loff = 13 * i + 5;

        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, i, f.a.buf + loff, len, f.a.mr->lkey,
                             (uintptr_t)f.b.buf + roff, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
        cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
        expect_wc(&wc, i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
        cr_assert_eq(wc.qp_num, f.a.qp->qp_num);
        cr_assert_arr_eq(f.b.buf + roff, f.a.buf + loff, len);
        roff += len + 11;
    }
    cr_assert(all_zero(f.b.buf + roff - 11, o.buf_len - roff + 11), "bytes written past the WRITEs");
    fx_close(&f);
}

Test(softnic, write_gathers_sges)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_sge sge[3];
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;
    uint8_t expect[300];

    fx_opts_default(&o);
    fx_open(&f, &o);
    fx_fill(f.a.buf, 4096, 2);
    for (int i = 0; i < 3; i++) {
        sge[i].addr = (uintptr_t)f.a.buf + 1000u * (unsigned)i;
        sge[i].length = 100;
        sge[i].lkey = f.a.mr->lkey;
        memcpy(expect + 100 * i, f.a.buf + 1000 * i, 100);
    }
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 9;
    wr.sg_list = sge;
    wr.num_sge = 3;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)f.b.buf + 64;
    wr.wr.rdma.rkey = f.b.mr->rkey;
    cr_assert_eq(ibv_post_send(f.a.qp, &wr, &bad), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 9, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    cr_assert_arr_eq(f.b.buf + 64, expect, sizeof(expect));
    cr_assert(all_zero(f.b.buf, 64));
    cr_assert(all_zero(f.b.buf + 364, 4096));
    fx_close(&f);
}

Test(softnic, read_fetches_remote_bytes)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;

    fx_opts_default(&o);
    fx_open(&f, &o);
    fx_fill(f.b.buf, 8192, 3);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_READ, 5, f.a.buf + 10, 5000, f.a.mr->lkey,
                         (uintptr_t)f.b.buf + 100, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
    cr_assert_eq(wc.byte_len, 5000);
    cr_assert_arr_eq(f.a.buf + 10, f.b.buf + 100, 5000);
    cr_assert(all_zero(f.a.buf, 10));
    cr_assert(all_zero(f.a.buf + 5010, 1000));
    fx_close(&f);
}

Test(softnic, send_and_write_with_imm_complete_receives)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;

    fx_opts_default(&o);
    fx_open(&f, &o);
    fx_fill(f.a.buf, 256, 4);
    cr_assert_eq(fx_recv(f.b.qp, 100, f.b.buf + 4096, 512, f.b.mr->lkey), 0);
    cr_assert_eq(fx_recv(f.b.qp, 101, NULL, 0, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND_WITH_IMM, 7, f.a.buf, 200, f.a.mr->lkey, 0, 0,
                         IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 8, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf + 100, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV);
    cr_assert_eq(wc.byte_len, 200);
    cr_assert_eq(wc.qp_num, f.b.qp->qp_num);
    cr_assert_eq(wc.src_qp, f.a.qp->qp_num);
    cr_assert(wc.wc_flags & IBV_WC_WITH_IMM);
    cr_assert_eq(ntohl(wc.imm_data), 7);
    cr_assert_arr_eq(f.b.buf + 4096, f.a.buf, 200);
    cr_assert_eq(fx_poll(f.b.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 101, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
    cr_assert_eq(wc.byte_len, 64);
    cr_assert_eq(ntohl(wc.imm_data), 8);
    cr_assert_arr_eq(f.b.buf + 100, f.a.buf, 64);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 7, IBV_WC_SUCCESS, IBV_WC_SEND);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 8, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    fx_close(&f);
}

/* A SEND's receive completion is written after the WRITEs before it. */
Test(softnic, send_after_writes_is_ordered)
{
    enum { ITER = 300, WRITES = 4, CHUNK = 8192 };
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc[2];

    fx_opts_default(&o);
    fx_open(&f, &o);
    for (uint32_t it = 0; it < ITER; it++) {
        uint8_t *src = f.a.buf + (it % 2) * (WRITES * CHUNK);

        fx_fill(src, WRITES * CHUNK, it + 10);
        cr_assert_eq(fx_recv(f.b.qp, it, f.b.buf + 900000, 64, f.b.mr->lkey), 0);
        for (uint32_t w = 0; w < WRITES; w++)
            cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 0, src + w * CHUNK, CHUNK,
                                 f.a.mr->lkey, (uintptr_t)f.b.buf + w * CHUNK, f.b.mr->rkey, 0),
                         0);
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 1000 + it, src, 16, f.a.mr->lkey, 0, 0,
                             IBV_SEND_SIGNALED), 0);
        cr_assert_eq(fx_poll(f.b.cq, wc, 1, FX_WAIT_MS), 1);
        expect_wc(wc, it, IBV_WC_SUCCESS, IBV_WC_RECV);
        cr_assert_arr_eq(f.b.buf, src, WRITES * CHUNK, "iteration %u: RECV before the WRITEs' bytes",
                         it);
        cr_assert_eq(fx_poll(f.a.cq, wc, 1, FX_WAIT_MS), 1);
        expect_wc(wc, 1000 + it, IBV_WC_SUCCESS, IBV_WC_SEND);
    }
    fx_close(&f);
}

/* Unsignaled WRs hold their slots until a later signaled CQE is polled. */
Test(softnic, unsignaled_slots_free_on_poll)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    softnic_stats_t st;
    struct ibv_sge sge;
    struct ibv_send_wr wr[5], *bad = NULL;

    fx_opts_default(&o);
    o.cap.max_send_wr = 4;
    fx_open(&f, &o);
    softnic_stats_reset();
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, f.a.buf, 8, f.a.mr->lkey,
                             (uintptr_t)f.b.buf, f.b.mr->rkey, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 3, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 4, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), ENOMEM);
    cr_assert(fx_wait_executed(4, FX_WAIT_MS));
    /* executed, not polled: still full */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 4, f.a.buf, 8, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), ENOMEM);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    /* all four slots are free again: a chain of five posts four */
    sge.addr = (uintptr_t)f.a.buf;
    sge.length = 8;
    sge.lkey = f.a.mr->lkey;
    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < 5; i++) {
        wr[i].wr_id = 10 + (uint64_t)i;
        wr[i].next = i < 4 ? &wr[i + 1] : NULL;
        wr[i].sg_list = &sge;
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_WRITE;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].wr.rdma.remote_addr = (uintptr_t)f.b.buf;
        wr[i].wr.rdma.rkey = f.b.mr->rkey;
    }
    cr_assert_eq(ibv_post_send(f.a.qp, wr, &bad), ENOMEM);
    cr_assert_eq(bad, &wr[4]);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
        expect_wc(&wc, 10 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    }
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted, 8);
    cr_assert_eq(st.post_errors, 3);
    fx_close(&f);
}

Test(softnic, inline_data_is_copied_at_post)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    uint8_t src[80], copy[80];

    fx_opts_default(&o);
    o.cap.max_inline_data = 64;
    fx_open(&f, &o);
    fx_fill(src, sizeof(src), 5);
    memcpy(copy, src, sizeof(src));
    /* not registered, and no lkey: inline data needs neither */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, src, 64, 0, (uintptr_t)f.b.buf,
                         f.b.mr->rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
    memset(src, 0xee, sizeof(src));
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, src, 65, 0, (uintptr_t)f.b.buf,
                         f.b.mr->rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE), EINVAL);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_READ, 3, src, 8, 0, (uintptr_t)f.b.buf,
                         f.b.mr->rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE), EINVAL);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    cr_assert_arr_eq(f.b.buf, copy, 64);
    cr_assert(all_zero(f.b.buf + 64, 64));
    fx_close(&f);
}

Test(softnic, dmabuf_mr_over_memfd)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t offset = page + 256, iova = 0x7000000000ull;
    fx_opts_t o;
    fx_t f;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *view;
    int fd;

    fx_opts_default(&o);
    fx_open(&f, &o);
    fd = memfd_create("softnic-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(4 * page)), 0);
    view = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(view, MAP_FAILED);
    mr = ibv_reg_dmabuf_mr(f.b.pd, offset, 2 * page, iova, fd, (int)FX_RW);
    cr_assert_not_null(mr);
    cr_assert_eq((uintptr_t)mr->addr, offset);
    cr_assert_eq(mr->length, 2 * page);
    cr_assert_null(ibv_reg_dmabuf_mr(f.b.pd, 3 * page, 2 * page, iova, fd, (int)FX_RW),
                   "an MR past the end of the buffer");
    fx_fill(f.a.buf, 1000, 6);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 1000, f.a.mr->lkey, iova + 100,
                         mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    cr_assert_arr_eq(view + offset + 100, f.a.buf, 1000);
    cr_assert(all_zero(view, offset + 100));
    /* the MR ends at iova + 2 pages */
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, f.a.buf, 16, f.a.mr->lkey,
                         iova + 2 * page - 8, mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 2, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE);
    cr_assert_eq(ibv_dereg_mr(mr), 0);
    munmap(view, 4 * page);
    close(fd);
    fx_close(&f);
}

/* ON_POLL: nothing moves until a poll, and the order is fixed. */
static void on_poll_run(uint64_t *order, int n)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_qp *qp2, *qp3;
    struct ibv_qp_init_attr ia;
    struct ibv_wc wc[16];
    softnic_stats_t st;
    int got = 0;

    fx_opts_default(&o);
    o.cfg.mode = SOFTNIC_ON_POLL;
    fx_open(&f, &o);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = f.a.cq;
    ia.recv_cq = f.a.cq;
    ia.cap = o.cap;
    ia.qp_type = IBV_QPT_RC;
    qp2 = ibv_create_qp(f.a.pd, &ia);
    ia.send_cq = f.b.cq;
    ia.recv_cq = f.b.cq;
    qp3 = ibv_create_qp(f.b.pd, &ia);
    cr_assert(qp2 && qp3);
    cr_assert_eq(fx_connect(qp2, qp3->qp_num, &f.b.gid, &o), 0);
    cr_assert_eq(fx_connect(qp3, qp2->qp_num, &f.a.gid, &o), 0);
    softnic_stats_reset();
    fx_fill(f.a.buf, 64, 7);
    for (int i = 0; i < n / 2; i++) {
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 100 + (uint64_t)i, f.a.buf, 64,
                             f.a.mr->lkey, (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED),
                     0);
        cr_assert_eq(fx_post(qp2, IBV_WR_RDMA_WRITE, 200 + (uint64_t)i, f.a.buf, 64,
                             f.a.mr->lkey, (uintptr_t)f.b.buf + 64, f.b.mr->rkey,
                             IBV_SEND_SIGNALED), 0);
    }
    fx_sleep_ms(30);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_executed, 0, "ON_POLL executed WRs without a poll");
    cr_assert(all_zero(f.b.buf, 128));
    /* one poll runs everything pending */
    got = ibv_poll_cq(f.a.cq, 16, wc);
    cr_assert_eq(got, n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(wc[i].status, IBV_WC_SUCCESS);
        order[i] = wc[i].wr_id;
    }
    cr_assert_arr_eq(f.b.buf, f.a.buf, 64);
    cr_assert_arr_eq(f.b.buf + 64, f.a.buf, 64);
    cr_assert_eq(ibv_destroy_qp(qp2), 0);
    cr_assert_eq(ibv_destroy_qp(qp3), 0);
    fx_close(&f);
}

Test(softnic, on_poll_mode_is_deterministic)
{
    uint64_t first[8], second[8];

    on_poll_run(first, 8);
    on_poll_run(second, 8);
    cr_assert_arr_eq(first, second, sizeof(first));
    /* round-robin: the two QPs alternate */
    for (int i = 0; i < 8; i++)
        cr_assert_eq(first[i], (i % 2 ? 200u : 100u) + (uint64_t)(i / 2));
}

Test(softnic, null_mode_moves_nothing)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc[8];
    softnic_stats_t st;

    fx_opts_default(&o);
    o.cfg.mode = SOFTNIC_NULL;
    fx_open(&f, &o);
    softnic_stats_reset();
    fx_fill(f.a.buf, 64, 8);
    cr_assert_eq(fx_recv(f.b.qp, 50, f.b.buf + 4096, 64, f.b.mr->lkey), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, 0), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 2, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_SEND, 3, f.a.buf, 64, f.a.mr->lkey, 0, 0,
                         IBV_SEND_SIGNALED), 0);
    /* completed at post time: no waiting */
    cr_assert_eq(ibv_poll_cq(f.a.cq, 8, wc), 2);
    expect_wc(&wc[0], 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    expect_wc(&wc[1], 3, IBV_WC_SUCCESS, IBV_WC_SEND);
    cr_assert_eq(ibv_poll_cq(f.b.cq, 8, wc), 0, "NULL mode consumed a receive");
    cr_assert(all_zero(f.b.buf, 8192));
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted, 3);
    cr_assert_eq(st.bytes_placed, 0);
    /* the receive is still there: flushed when b goes to error */
    {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

        cr_assert_eq(ibv_modify_qp(f.b.qp, &a, IBV_QP_STATE), 0);
    }
    cr_assert_eq(ibv_poll_cq(f.b.cq, 8, wc), 1);
    expect_wc(&wc[0], 50, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
    fx_close(&f);
}

Test(softnic, delay_and_bandwidth_pace_completions)
{
    fx_opts_t o;
    fx_t f;
    struct ibv_wc wc;
    uint64_t t0, dt;

    fx_opts_default(&o);
    o.cfg.delay_us = 30000;
    fx_open(&f, &o);
    t0 = fx_now_us();
    cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 1, f.a.buf, 64, f.a.mr->lkey,
                         (uintptr_t)f.b.buf, f.b.mr->rkey, IBV_SEND_SIGNALED), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    dt = fx_now_us() - t0;
    cr_assert_geq(dt, 30000, "completed after %llu us, delay 30000", (unsigned long long)dt);

    /* 10 MB/s per QP: 8 x 64 KiB take at least ~45 ms after the first */
    o.cfg.delay_us = 0;
    o.cfg.qp_bw = 10 * 1000 * 1000;
    cr_assert_eq(softnic_configure(&o.cfg), 0);
    t0 = fx_now_us();
    for (int i = 0; i < 8; i++)
        cr_assert_eq(fx_post(f.a.qp, IBV_WR_RDMA_WRITE, 10 + (uint64_t)i, f.a.buf, 65536,
                             f.a.mr->lkey, (uintptr_t)f.b.buf, f.b.mr->rkey,
                             i == 7 ? IBV_SEND_SIGNALED : 0), 0);
    cr_assert_eq(fx_poll(f.a.cq, &wc, 1, FX_WAIT_MS), 1);
    expect_wc(&wc, 17, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    dt = fx_now_us() - t0;
    cr_assert_geq(dt, 40000, "8 x 64 KiB at 10 MB/s took %llu us", (unsigned long long)dt);
    fx_close(&f);
}

/* Posters, pollers and the NIC threads at once (TSan's test). */
typedef struct race_arg {
    fx_t    *f;
    uint32_t slot;
    int      rc;
} race_arg_t;

enum { RACE_WRS = 4000, RACE_SIG = 8, RACE_LEN = 256 };

static void *race_poster(void *p)
{
    race_arg_t *r = p;
    fx_t *f = r->f;
    uint8_t *src = f->a.buf + r->slot * RACE_LEN;
    uint64_t posted = 0, polled = 0;
    struct ibv_wc wc[16];

    while (polled < RACE_WRS / RACE_SIG) {
        if (posted < RACE_WRS) {
            unsigned flags = (posted + 1) % RACE_SIG == 0 ? IBV_SEND_SIGNALED : 0;
            int rc = fx_post(f->a.qp, IBV_WR_RDMA_WRITE, posted, src, RACE_LEN, f->a.mr->lkey,
                             (uintptr_t)f->b.buf + r->slot * RACE_LEN, f->b.mr->rkey, flags);

            if (rc == 0)
                posted++;
            else if (rc != ENOMEM)
                r->rc = rc;
        }
        for (int n = ibv_poll_cq(f->a.cq, 16, wc), i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                r->rc = -1;
            polled++;
        }
        if (r->rc)
            break;
    }
    return NULL;
}

Test(softnic, concurrent_post_poll_and_query)
{
    fx_opts_t o;
    fx_t f;
    pthread_t t;
    race_arg_t r = {.slot = 3};

    fx_opts_default(&o);
    o.cap.max_send_wr = 32;
    fx_open(&f, &o);
    r.f = &f;
    fx_fill(f.a.buf + 3 * RACE_LEN, RACE_LEN, 9);
    cr_assert_eq(pthread_create(&t, NULL, race_poster, &r), 0);
    for (int i = 0; i < 200; i++) {
        struct ibv_port_attr pa;
        softnic_stats_t st;

        cr_assert_eq(fx_qp_state(f.a.qp), IBV_QPS_RTS);
        cr_assert_eq(ibv_query_port(f.b.ctx, 1, &pa), 0);
        softnic_stats(&st);
        usleep(200);
    }
    pthread_join(t, NULL);
    cr_assert_eq(r.rc, 0);
    cr_assert_arr_eq(f.b.buf + 3 * RACE_LEN, f.a.buf + 3 * RACE_LEN, RACE_LEN);
    fx_close(&f);
}

/* A NIC thread with nothing to do sleeps. */
Test(softnic, idle_nic_uses_no_cpu)
{
    fx_opts_t o;
    fx_t f;
    struct timespec c0, c1;
    uint64_t cpu_us;

    fx_opts_default(&o);
    fx_open(&f, &o);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    fx_sleep_ms(300);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    cpu_us = (uint64_t)(c1.tv_sec - c0.tv_sec) * 1000000u + (uint64_t)(c1.tv_nsec - c0.tv_nsec) / 1000;
    cr_assert_lt(cpu_us, 30000, "idle NIC threads used %llu us of CPU in 300 ms",
                 (unsigned long long)cpu_us);
    fx_close(&f);
}
