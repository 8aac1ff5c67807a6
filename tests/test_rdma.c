/*
 * The rdma transport alone over softnic (tests/softnic): tps on software
 * NICs of this process, eps connected through their addresses, no engine.
 * Each test sets the NIC up with softnic_configure and checks that it leaves
 * no file descriptor and no verbs object behind and, unless it provokes
 * them, logs no errors (rdma_fixture.h). Here: WRITEs, SENDs and READs, the
 * slots of the send queue, dmabuf regions, the errors of one ep and the
 * arguments refused. Elsewhere: devices and addressing (test_rdma_addr.c),
 * CQs split past max_cqe and completions of destroyed eps (test_rdma_cq.c),
 * gathered WRITEs and regions in pieces (test_rdma_gather.c); async events,
 * dead devices and CQs, refused posts and the error statuses
 * (test_rdma_faults.c).
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

/* -------------------------------------------------------------- data */

Test(rdma, write_both_ways_and_cq_fd)
{
    uint8_t back[4096] = {0};
    struct pollfd pfd;
    pdx_tp_mr_t *bmr;
    pdx_tp_rkey_t brk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    fx_rig_t r;

    fx_rig_open(&r, NULL, FX_MAXMSG, 8, 0);
    pfd = (struct pollfd){.fd = ops->cq_fd(r.cq[0]), .events = POLLIN};
    cr_assert_eq(ops->cq_arm(r.cq[0]), PDX_OK);
    cr_assert_eq(ops->cq_poll(r.cq[0], &wc, 1), 0);
    cr_assert_eq(poll(&pfd, 1, 0), 0, "readable before any completion");
    w = fx_wr(&r, 100, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(poll(&pfd, 1, FX_WAIT_MS), 1, "the completion did not wake the fd");
    ops->cq_ack(r.cq[0]);
    cr_assert_eq(poll(&pfd, 1, 0), 0, "still readable after cq_ack");
    cr_assert_eq(ops->cq_poll(r.cq[0], &wc, 1), 1);
    fx_expect_wc(&wc, 100, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[0]);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);

    bmr = fx_mr_new(ops, r.tp[0], back, sizeof(back), FX_RW);
    ops->mr_remote(bmr, &brk);
    cr_assert(brk.addr == (uintptr_t)back && brk.len == sizeof(back));
    w = (pdx_tp_write_t){.wr_id = 200, .mr = r.dmr, .offset = 1000, .length = sizeof(back),
                         .remote_addr = brk.addr, .rkey = brk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[1], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[1], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 200, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[1]);
    cr_assert_eq(memcmp(back, r.src + 1000, sizeof(back)), 0);
    cr_assert(!ops->ep_error(r.ep[0])[0] && !ops->ep_error(r.ep[1])[0]);
    cr_assert_eq(ops->mr_dereg(bmr), PDX_OK);
    fx_rig_close(&r, false);
}

Test(rdma, post_runs_checks_once_and_posts_whole)
{
    fx_rig_t r;

    fx_rig_open(&r, NULL, 2 * FX_MAXMSG, 16, 0);
    fx_check_post_runs(ops, r.ep[0], r.cq[0], r.smr, r.src, r.len, &r.rk, r.dst, FX_MAXMSG);
    fx_rig_close(&r, true); /* the bad windows are logged */
}

Test(rdma, signaled_and_unsignaled_slots)
{
    pdx_tp_write_t w[9];
    pdx_tp_wc_t wc;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 8192, 8, 0);
    for (int i = 0; i < 9; i++)
        w[i] = fx_wr(&r, (uint64_t)i, (uint64_t)i * 1024, 1024, (uint64_t)i * 1024, i == 7);
    cr_assert_eq(ops->post_write(r.ep[0], w, 9), PDX_ERR_INVALID, "more than the SQ holds");
    /* one signaled WR at the end: one completion, and it frees all 8 slots */
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_AGAIN, "nothing free yet");
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, 50), 0, "an unsignaled WR completed");
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0);
    /* a signaled WR in the middle frees the slots up to it, not after it */
    w[7].flags = 0;
    w[3].flags = PDX_TP_SIGNALED;
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 3, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(ops->post_write(r.ep[0], w, 5), PDX_ERR_AGAIN, "4 free, not 5");
    cr_assert_eq(ops->post_write(r.ep[0], w, 4), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1, "it covers the 4 unsignaled ones too");
    /* unsignaled only: no completion, and the slots stay taken */
    w[3].flags = 0;
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, 100), 0);
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_ERR_AGAIN);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "unsignaled WRs hold their region");
    fx_rig_close(&r, true); /* until their ep is destroyed; INVALID was logged */
}

Test(rdma, burst_larger_than_the_send_queue)
{
    const int total = 5000;
    pdx_tp_wc_t wc[32];
    int done = 0, signaled = 0;
    uint64_t last = 0;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4u << 20, 16, 0);
    for (int i = 1; i <= total; i++) {
        bool sig = i % 4 == 0 || i == total;
        uint64_t off = (uint64_t)(i % 1024) * 4096, deadline = pdx_deadline_ns(FX_WAIT_MS);
        pdx_tp_write_t w = fx_wr(&r, (uint64_t)i, off, 4096, off, sig);
        pdx_status_t st;

        while ((st = ops->post_write(r.ep[0], &w, 1)) == PDX_ERR_AGAIN) {
            done += fx_take(r.cq[0], wc, 32, 10, &last);
            cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
        }
        cr_assert_eq(st, PDX_OK);
        signaled += sig;
    }
    while (done < signaled) {
        int n = fx_take(r.cq[0], wc, 32, FX_WAIT_MS, &last);

        cr_assert_gt(n, 0, "only %d of %d signaled writes completed", done, signaled);
        done += n;
    }
    cr_assert_eq(last, (uint64_t)total);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);
    fx_rig_close(&r, false);
}

Test(rdma, send_after_writes_and_rnr)
{
    uint8_t msg[48], rbuf[2][PDX_TP_SEND_MAX] = {{0}};
    pdx_tp_write_t w[16];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 16u * 65536, 32, 4);
    fx_fill_random(msg, sizeof(msg));
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 55, rmr, PDX_TP_SEND_MAX, PDX_TP_SEND_MAX), PDX_OK);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_ERR_STATE, "a posted receive uses it");
    for (uint64_t i = 0; i < 16; i++)
        w[i] = fx_wr(&r, i, i * 65536, 65536, i * 65536, false);
    cr_assert_eq(ops->post_write(r.ep[0], w, 16), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "posted writes read it");
    cr_assert_eq(ops->post_send(r.ep[0], 99, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[1], &wc, 1, FX_WAIT_MS), 1);
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0, "the SEND overtook the writes before it");
    fx_expect_wc(&wc, 55, PDX_OK, PDX_TP_OP_RECV);
    cr_assert(wc.byte_len == sizeof(msg) && wc.ep == r.ep[1]);
    cr_assert_eq(memcmp(rbuf[1], msg, sizeof(msg)), 0);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 99, PDX_OK, PDX_TP_OP_SEND);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    /* no receive posted: RNR retries run out; failed WRs complete, unsignaled too */
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_ERR_PEER, PDX_TP_OP_SEND);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "RNR"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(ops->post_send(r.ep[0], 2, "x", 1, 0), PDX_ERR_PEER);
    fx_rig_close(&r, false); /* the SEND's completion released the writes' region */
}

/* ------------------------------------------------------------ dmabuf */

/* A WRITE into a dmabuf region at an offset, then a READ back from it */
Test(rdma, dmabuf_region_and_read)
{
    const size_t page = 4096, len = 2 * 4096;
    uint8_t local[4096] = {0}, *map;
    pdx_tp_mr_t *mr, *lmr;
    pdx_tp_rkey_t rk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    fx_rig_t r;
    int fd;

    fx_rig_open(&r, NULL, len, 4, 0);
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(page + len + page)), 0);
    map = mmap(NULL, page + len + page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    /* the engine sees the region at map + page: bytes [page, page + len) of the fd */
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map + page, len, fd, page,
                                    FX_RW | PDX_TP_ACCESS_REMOTE_READ, &mr), PDX_OK);
    close(fd); /* the caller may close it after return */
    ops->mr_remote(mr, &rk);
    cr_assert_eq(rk.addr, (uint64_t)(uintptr_t)(map + page));
    w = (pdx_tp_write_t){.wr_id = 1, .mr = r.smr, .offset = 0, .length = len - 100,
                         .remote_addr = rk.addr + 100, .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(map + page + 100, r.src, len - 100), 0);
    for (size_t i = 0; i < page + 100; i++)
        cr_assert_eq(map[i], 0, "byte %zu before the region's target was written", i);

    lmr = fx_mr_new(ops, r.tp[0], local, sizeof(local), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_read(r.ep[0], 7, lmr, 100, 3000, rk.addr + 500, rk.rkey), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_OK, PDX_TP_OP_READ);
    cr_assert_eq(memcmp(local + 100, r.src + 400, 3000), 0);
    cr_assert_eq(local[99] | local[3100], 0);
    cr_assert_eq(ops->post_read(r.ep[0], 8, r.smr, 0, 16, rk.addr, rk.rkey), PDX_ERR_INVALID,
                 "the target region lacks local write access");
    /* a region without REMOTE_READ refuses the READ; the QP goes to error */
    cr_assert_eq(ops->post_read(r.ep[0], 9, lmr, 0, 16, r.rk.addr, r.rk.rkey), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 9, PDX_ERR_RANGE, PDX_TP_OP_READ);
    cr_assert_eq(ops->mr_dereg(lmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, -1, 0, FX_RW, &mr), PDX_ERR_INVALID);
    munmap(map, page + len + page);
    fx_rig_close(&r, true);
}

/*
 * A provider or kernel without dmabuf (ibv_reg_dmabuf_mr fails with
 * EOPNOTSUPP, ENOSYS or EPROTONOSUPPORT): PDX_ERR_UNSUPPORTED, and the error
 * names the device; any other errno is PDX_ERR_IO. Nothing is left
 * registered either way, and the same call works once the provider does.
 */
Test(rdma, dmabuf_unsupported)
{
    static const int unsupported[] = {EOPNOTSUPP, ENOSYS, EPROTONOSUPPORT};
    const size_t len = 8192;
    pdx_tp_mr_t *mr = (pdx_tp_mr_t *)0x1;
    fx_log_capture_t cap;
    uint64_t errors;
    uint32_t objects;
    uint8_t *map;
    char *log;
    fx_rig_t r;
    int fd;

    fx_rig_open(&r, NULL, 4096, 4, 0);
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)len), 0);
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    objects = softnic_open_objects();
    fx_log_capture_begin(&cap);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(unsupported); i++) {
        r.nic.dmabuf_errno = unsupported[i];
        cr_assert_eq(softnic_configure(&r.nic), 0);
        errors = pdx_log_error_count();
        cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, fd, 0, FX_RW, &mr),
                     PDX_ERR_UNSUPPORTED, "errno %d", unsupported[i]);
        cr_assert_eq(pdx_log_error_count(), errors + 1, "one error says why");
    }
    r.nic.dmabuf_errno = EFAULT;
    cr_assert_eq(softnic_configure(&r.nic), 0);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, fd, 0, FX_RW, &mr), PDX_ERR_IO);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, fd, UINT64_MAX - 100, FX_RW, &mr),
                 PDX_ERR_INVALID, "an offset that wraps");
    log = fx_log_capture_end(&cap);
    cr_assert(strstr(log, "rdma: dmabuf registration not supported by softnic1: Operation not "
                          "supported"), "%s", log);
    cr_assert(strstr(log, "rdma: softnic1: ibv_reg_dmabuf_mr of 8192 bytes at offset 0 of "
                          "dmabuf fd"), "%s", log);
    free(log);
    cr_assert_eq(mr, (pdx_tp_mr_t *)0x1, "output written on failure");
    cr_assert_eq(softnic_open_objects(), objects, "a failed registration left an MR");
    r.nic.dmabuf_errno = 0;
    cr_assert_eq(softnic_configure(&r.nic), 0);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, fd, 0, FX_RW, &mr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    munmap(map, len);
    close(fd);
    fx_rig_close(&r, true);
}

/* ------------------------------------------------------------ errors */

Test(rdma, out_of_range_write_then_everything_flushed)
{
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[8];
    fx_rig_t r;

    fx_rig_open(&r, NULL, 65536, 8, 0);
    for (int i = 0; i < 8; i++)
        w[i] = fx_wr(&r, (uint64_t)i, 0, 1024, (uint64_t)i * 1024, i % 2 == 0);
    w[0].flags = 0;                                 /* succeeds silently */
    w[2].remote_addr = r.rk.addr + r.len - 100;     /* runs past the end */
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 6, FX_WAIT_MS), 6, "the failed WR and 5 flushed ones");
    cr_assert_eq(fx_wait(r.cq[0], wc + 6, 1, 50), 0);
    cr_assert_eq(wc[0].wr_id, 2u, "the unsignaled w0 and w1 before it succeeded silently");
    fx_expect_wc(&wc[0], 2, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    for (int i = 1; i < 6; i++) /* flushed, signaled or not */
        fx_expect_wc(&wc[i], (uint64_t)i + 2, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "remote access"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(memcmp(r.dst, r.src, 1024), 0);
    cr_assert_eq(memcmp(r.dst + 1024, r.src, 1024), 0);
    for (size_t i = 2048; i < 2 * r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu written after the failed WR", i);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_PEER);
    fx_rig_close(&r, false); /* flushed WRs released their region */
}

Test(rdma, ep_fail_flushes_everything)
{
    pdx_tp_write_t w[6];
    uint8_t rbuf[3 * 64];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc[16];
    int nwr = 0, nrecv = 0;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4096, 8, 4);
    rmr = fx_mr_new(ops, r.tp[0], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    fx_nic_delay(&r.nic, 2000000); /* nothing executes for 2 s */
    for (int i = 0; i < 6; i++)
        w[i] = fx_wr(&r, (uint64_t)i, 0, r.len, 0, i % 3 == 0);
    cr_assert_eq(ops->post_write(r.ep[0], w, 6), PDX_OK);
    cr_assert_eq(ops->post_send(r.ep[0], 6, "note", 4, 0), PDX_OK);
    for (uint64_t i = 0; i < 3; i++)
        cr_assert_eq(ops->post_recv(r.ep[0], 100 + i, rmr, i * 64, 64), PDX_OK);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "room aborted by the test");
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "room aborted by the test");
    cr_assert_eq(fx_wait(r.cq[0], wc, 10, FX_WAIT_MS), 10);
    cr_assert_eq(fx_wait(r.cq[0], wc + 10, 1, 50), 0);
    fx_nic_delay(&r.nic, 0);
    for (int i = 0; i < 10; i++) { /* each queue in order, with ep_fail's status */
        bool recv = wc[i].opcode == PDX_TP_OP_RECV;

        fx_expect_wc(&wc[i], recv ? 100u + (uint64_t)nrecv : (uint64_t)nwr, PDX_ERR_ABORTED,
                     recv ? PDX_TP_OP_RECV : nwr == 6 ? PDX_TP_OP_SEND : PDX_TP_OP_WRITE);
        *(recv ? &nrecv : &nwr) += 1;
    }
    cr_assert(nwr == 7 && nrecv == 3);
    ops->ep_fail(r.ep[0], PDX_ERR_TIMEOUT, "second");
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "room aborted by the test", "first error wins");
    cr_assert_eq(ops->post_write(r.ep[0], &(pdx_tp_write_t){.mr = r.smr, .length = 1}, 1),
                 PDX_ERR_PEER);
    cr_assert_eq(ops->post_recv(r.ep[0], 1, rmr, 0, 64), PDX_ERR_PEER);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK, "flushed WRs release their regions");
    fx_rig_close(&r, false);
}

/* ON_POLL: nothing runs unless someone polls; no inline: SENDs go from slots */
Test(rdma, on_poll_mode_and_sends_without_inline)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_ON_POLL);
    uint8_t rbuf[PDX_TP_SEND_MAX] = {0};
    char msg[PDX_TP_SEND_MAX];
    pdx_tp_mr_t *rmr;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    fx_rig_t r;

    c.max_inline = 0;
    fx_rig_open(&r, &c, 65536, 4, 4);
    cr_assert_eq(rdma_ep(r.ep[0])->max_inline, 0u, "the device refused inline data");
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    w = fx_wr(&r, 1, 0, r.len, 0, false);
    for (uint64_t i = 0; i < 6; i++) { /* more SENDs than SQ slots: slots are reused */
        memset(msg, 'a' + (int)i, sizeof(msg));
        cr_assert_eq(ops->post_recv(r.ep[1], i, rmr, 0, sizeof(rbuf)), PDX_OK);
        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
        cr_assert_eq(ops->post_send(r.ep[0], i, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
        memset(msg, 0, sizeof(msg)); /* copied before return */
        if (i == 0) {
            usleep(20000);
            for (size_t k = 0; k < r.len; k++)
                cr_assert_eq(r.dst[k], 0, "executed without a poll");
        }
        cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
        fx_expect_wc(&wc, i, PDX_OK, PDX_TP_OP_SEND);
        cr_assert_eq(fx_wait(r.cq[1], &wc, 1, FX_WAIT_MS), 1);
        fx_expect_wc(&wc, i, PDX_OK, PDX_TP_OP_RECV);
        cr_assert(wc.byte_len == sizeof(msg) && rbuf[0] == 'a' + i && rbuf[63] == 'a' + i);
    }
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    fx_rig_close(&r, false);
}

Test(rdma, bad_arguments_are_refused)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_mr_t *mr = (pdx_tp_mr_t *)0x1;
    pdx_tp_ep_t *ep = (pdx_tp_ep_t *)0x1, *ep2 = NULL, *more[3];
    pdx_tp_cq_t *cq = (pdx_tp_cq_t *)0x1;
    pdx_tp_ep_attr_t attr = {.sq_depth = 4, .rq_depth = 1};
    pdx_tp_addr_t junk = {.len = 3, .bytes = {1, 2, 3}}, good;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    char big[PDX_TP_SEND_MAX + 1] = {0};
    fx_rig_t r;

    c.max_mr_size = 1u << 20;
    c.max_cqe = 1024;
    c.max_qp_wr = 512;
    fx_rig_open(&r, &c, 4096, 4, 0);
    cr_assert_eq(ops->mr_reg(r.tp[0], NULL, 10, 0, &mr), PDX_ERR_INVALID);
    cr_assert_eq(ops->mr_reg(r.tp[0], r.src, (size_t)(PDX_TP_PIECES_MAX + 1) << 20, 0, &mr),
                 PDX_ERR_UNSUPPORTED, "more pieces of max_mr_size than a region may have");
    cr_assert_eq(mr, (pdx_tp_mr_t *)0x1, "output written on failure");
    cr_assert_eq(ops->cq_create(r.tp[0], 0, &cq), PDX_ERR_INVALID);
    cr_assert_eq(cq, (pdx_tp_cq_t *)0x1, "output written on failure");
    cr_assert_eq(ops->cq_create(r.tp[0], 4096, &cq), PDX_OK, "above max_cqe: split");
    cr_assert_eq(rdma_cq(cq)->nicq, 4u, "4 ibv CQs of max_cqe");
    attr = (pdx_tp_ep_attr_t){.sq_depth = 500, .rq_depth = 500};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep), PDX_OK);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 16, .rq_depth = 16};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep2), PDX_OK, "no longer FULL");
    cr_assert(rdma_ep(ep)->icq == 0 && rdma_ep(ep2)->icq == 1, "the first ibv CQ with room");
    ops->ep_destroy(ep2);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 512, .rq_depth = 512};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[0]), PDX_OK, "max_cqe entries");
    attr = (pdx_tp_ep_attr_t){.sq_depth = 500, .rq_depth = 500};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[1]), PDX_OK);
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[2]), PDX_OK);
    cr_assert(rdma_ep(more[0])->icq == 1 && rdma_ep(more[2])->icq == 3);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 16, .rq_depth = 16};
    ep2 = NULL;
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep2), PDX_ERR_FULL,
                 "72 entries free, but no ibv CQ has 32 of them");
    cr_assert_null(ep2, "output written on failure");
    for (int i = 0; i < 3; i++)
        ops->ep_destroy(more[i]);
    ops->ep_destroy(ep);
    ops->cq_destroy(cq);
    cq = (pdx_tp_cq_t *)0x1;
    ep = (pdx_tp_ep_t *)0x1;
    attr = (pdx_tp_ep_attr_t){.sq_depth = 4, .rq_depth = 1};
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_FULL, "CQ is full");
    cr_assert_eq(ops->ep_create(r.tp[1], r.cq[0], &attr, &ep), PDX_ERR_INVALID, "other tp");
    attr.sq_depth = 513;
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_UNSUPPORTED);
    cr_assert_eq(ep, (pdx_tp_ep_t *)0x1, "output written on failure");
    w = fx_wr(&r, 1, 0, FX_MAXMSG + 1, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_ERR_INVALID, "above max_msg_size");
    w = fx_wr(&r, 1, 4000, 200, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_ERR_INVALID, "past the source region");
    cr_assert_eq(ops->post_send(r.ep[0], 1, big, sizeof(big), 0), PDX_ERR_INVALID);
    cr_assert_eq(ops->post_recv(r.ep[1], 1, r.dmr, 0, 64), PDX_ERR_AGAIN, "rq_depth 0");
    cr_assert_eq(ops->post_recv(r.ep[0], 1, r.smr, 0, 64), PDX_ERR_INVALID, "no local write");
    cr_assert_eq(ops->ep_connect(r.ep[0], &junk), PDX_ERR_PROTO);
    ops->ep_address(r.ep[1], &good);
    cr_assert_eq(ops->ep_connect(r.ep[0], &good), PDX_ERR_STATE, "connected already");
    good.bytes[0] = 9;
    cr_assert_eq(ops->ep_connect(r.ep[0], &good), PDX_ERR_PROTO, "another version");
    /* nothing was posted: the ep still works */
    w = fx_wr(&r, 2, 0, 100, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 2, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    fx_rig_close(&r, true);
}

