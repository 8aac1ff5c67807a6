/*
 * The rdma transport under faults, over softnic (tests/softnic): async
 * events (a fatal QP, a port that goes down, an event of another port), a
 * device that dies, a CQ in error, a failing ibv_poll_cq or
 * ibv_req_notify_cq, an ep failed without a flush (the progress-timeout
 * backstop), a post the provider refuses part-way (of gathered WRITEs too),
 * the status of each kind of error completion, and one ibv CQ of a CQ split
 * past max_cqe in error, overrun or failing its poll (races with the
 * poller: test_rdma_poller.c). Where the NIC reports nothing more, every outstanding
 * WR and receive still completes, once, with an error. Each test checks
 * that it leaves no file descriptor and no verbs object behind.
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
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 5000
#define LEN     4096u
#define RW      (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE)

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

/* tp on softnic<dev>: progress_ms the backstop; ack_timeout PDX_IB_TIMEOUT or NULL */
static pdx_tp_t *tp_new(uint32_t dev, uint32_t progress_ms, const char *ack_timeout)
{
    pdx_tp_params_t params = {.progress_timeout_ms = progress_ms, .max_msg_size = 1u << 20};
    pdx_config_t cfg;
    pdx_tp_t *tp = NULL;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_IB_DEVICES", dev ? "softnic1" : "softnic0"), PDX_OK);
    if (ack_timeout)
        cr_assert_eq(pdx_config_set(&cfg, "PDX_IB_TIMEOUT", ack_timeout), PDX_OK);
    params.config = &cfg;
    cr_assert_eq(ops->open(&params, &tp), PDX_OK);
    return tp;
}

/* Collect `want` completions within timeout_ms; returns how many came. */
static int wait_wc(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms)
{
    return fx_wait_wc(ops, cq, wc, want, timeout_ms, 20u);
}

/* Wait, without polling, until ep_error(ep) holds `what`. */
static void wait_error(pdx_tp_ep_t *ep, const char *what)
{
    uint64_t deadline = pdx_deadline_ns(WAIT_MS);

    while (!strstr(ops->ep_error(ep), what) && pdx_now_ns() < deadline)
        usleep(1000);
    cr_assert(strstr(ops->ep_error(ep), what), "\"%s\", not \"%s\"", ops->ep_error(ep), what);
}

/* softnic0's ep[0] writes from src into dst on softnic1's ep[1]. */
typedef struct rig {
    int              fds;
    uint32_t         objects;
    softnic_config_t nic;
    pdx_tp_t        *tp[2];
    pdx_tp_cq_t     *cq[2];
    pdx_tp_ep_t     *ep[2];
    uint8_t          src[LEN], dst[LEN], rbuf[4 * 64];
    pdx_tp_mr_t     *smr, *dmr, *rmr[2];
    pdx_tp_rkey_t    rk;
} rig_t;

static rig_t *rig_open(const softnic_config_t *c, uint32_t progress_ms, const char *ack_timeout)
{
    rig_t *r = calloc(1, sizeof(*r));

    cr_assert_not_null(r);
    r->nic = c ? *c : fx_nic(2, SOFTNIC_THREAD);
    cr_assert_eq(softnic_configure(&r->nic), 0);
    softnic_faults_clear();
    r->fds = fx_count_fds();
    r->objects = softnic_open_objects();
    for (uint32_t i = 0; i < 2; i++) {
        r->tp[i] = tp_new(i, progress_ms, ack_timeout);
        r->cq[i] = NULL;
        cr_assert_eq(ops->cq_create(r->tp[i], 12, &r->cq[i]), PDX_OK);
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], 8, 4);
        r->rmr[i] = fx_mr_new(ops, r->tp[i], r->rbuf, sizeof(r->rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    }
    fx_connect_eps(ops, r->ep[0], r->ep[1]);
    for (size_t i = 0; i < LEN; i++)
        r->src[i] = (uint8_t)(i * 7 + 1);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, LEN, 0);
    r->dmr = fx_mr_new(ops, r->tp[1], r->dst, LEN, RW);
    ops->mr_remote(r->dmr, &r->rk);
    return r;
}

/* Eps first (they drop their WRs' hold on the regions); nothing leaks. */
static void rig_close(rig_t *r)
{
    for (int i = 0; i < 2; i++)
        if (r->ep[i])
            ops->ep_destroy(r->ep[i]);
    cr_assert_eq(ops->mr_dereg(r->smr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r->dmr), PDX_OK);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->mr_dereg(r->rmr[i]), PDX_OK);
        ops->cq_destroy(r->cq[i]);
        ops->close(r->tp[i]);
    }
    cr_assert_eq(softnic_open_objects(), r->objects, "verbs objects left open");
    cr_assert_eq(fx_count_fds(), r->fds, "file descriptors leaked");
    softnic_faults_clear();
    free(r);
}

static pdx_tp_write_t wr_make(const rig_t *r, uint64_t id, uint64_t off, uint64_t len,
                              bool signaled)
{
    return (pdx_tp_write_t){.wr_id = id, .mr = r->smr, .offset = off, .length = len,
                            .remote_addr = r->rk.addr + off, .rkey = r->rk.rkey,
                            .flags = signaled ? PDX_TP_SIGNALED : 0};
}

/* WRITEs 0..n-1 (the last signaled) and receives 100.. on ep 0; none runs yet. */
static void post_stuck(rig_t *r, int n, int nrecv)
{
    pdx_tp_write_t w[8];

    fx_nic_delay(&r->nic, 2000000);
    for (int i = 0; i < n; i++)
        w[i] = wr_make(r, (uint64_t)i, (uint64_t)i * 256, 256, i == n - 1);
    cr_assert_eq(ops->post_write(r->ep[0], w, (uint32_t)n), PDX_OK);
    for (int i = 0; i < nrecv; i++)
        cr_assert_eq(ops->post_recv(r->ep[0], 100u + (uint64_t)i, r->rmr[0], (uint64_t)i * 64, 64),
                     PDX_OK);
}

/* n WRITEs, then nrecv receives, each completed once with `status`, in order. */
static void expect_flushed(pdx_tp_cq_t *cq, int n, int nrecv, pdx_status_t status)
{
    pdx_tp_wc_t wc[16];
    int nwr = 0, nr = 0;

    cr_assert_eq(wait_wc(cq, wc, n + nrecv, WAIT_MS), n + nrecv, "completions lost");
    cr_assert_eq(wait_wc(cq, wc + n + nrecv, 1, 100), 0, "a WR completed twice");
    for (int i = 0; i < n + nrecv; i++) {
        bool recv = wc[i].opcode == PDX_TP_OP_RECV;

        fx_expect_wc(&wc[i], recv ? 100u + (uint64_t)nr : (uint64_t)nwr, status,
                     recv ? PDX_TP_OP_RECV : PDX_TP_OP_WRITE);
        *(recv ? &nr : &nwr) += 1;
    }
}

/* ------------------------------------------------------ async events */

/* The QP's flushes come before the async thread reads QP_FATAL: the event
 * then names the cause in place of the flush. */
Test(rdma_faults, qp_fatal_names_the_cause_behind_its_flushes)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    rdma_tp_t *tp = rdma_tp(r->tp[0]);

    post_stuck(r, 4, 0);
    pthread_mutex_lock(&tp->async_lock); /* the thread cannot read the event yet */
    cr_assert_eq(softnic_qp_fatal(rdma_ep(r->ep[0])->qpn), 0);
    expect_flushed(r->cq[0], 4, 0, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "WRITE: Work Request Flushed Error"), "%s",
              ops->ep_error(r->ep[0]));
    pthread_mutex_unlock(&tp->async_lock);
    wait_error(r->ep[0], "async event local work queue catastrophic error on QP 0x");
    cr_assert_str_eq(ops->ep_error(r->ep[1]), "");
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/* A link flap fails nothing; a link that stays down fails the WR when the
 * retries run out; another port's event is ignored. */
Test(rdma_faults, port_down_fails_only_when_the_retries_run_out)
{
    /* PDX_IB_TIMEOUT 24: 4.096 us * 2^24 / 1000 (softnic's scale) = 69 ms a try,
     * 8 tries: about 0.5 s of budget */
    rig_t *r = rig_open(NULL, 10000, "24");
    struct ibv_async_event ev = {.event_type = IBV_EVENT_PORT_ERR, .element.port_num = 2};
    uint64_t errors = pdx_log_error_count();
    pdx_tp_write_t w = wr_make(r, 1, 0, LEN, true);
    pdx_tp_wc_t wc;

    rdma_async_handle(rdma_tp(r->tp[0]), &ev); /* port 2: not ours */
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    usleep(50000);
    cr_assert(!ops->ep_error(r->ep[0])[0] && !ops->ep_error(r->ep[1])[0], "an ep failed");
    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, 30), 0, "completed while the link was down");
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r->dst, r->src, LEN), 0);

    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    w.wr_id = 2;
    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 2, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "WRITE: transport retry counter exceeded"), "%s",
              ops->ep_error(r->ep[0]));
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    cr_assert_eq(pdx_log_error_count(), errors, "a port event was logged as an error");
    rig_close(r);
}

/* ------------------------------------------- the NIC reports nothing */

Test(rdma_faults, device_fatal_completes_everything_in_software)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    pdx_tp_write_t w = wr_make(r, 9, 0, 64, true);
    struct pollfd pfd;
    pdx_tp_ep_t *ep;
    pdx_tp_cq_t *cq;
    uint64_t deadline = pdx_deadline_ns(WAIT_MS);

    post_stuck(r, 6, 3);
    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    while (!atomic_load(&rdma_tp(r->tp[0])->dead) && pdx_now_ns() < deadline)
        usleep(1000); /* the async thread's turn: then the message is its */
    expect_flushed(r->cq[0], 6, 3, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "async event local catastrophic error on "
                                               "softnic0, QP 0x"), "%s", ops->ep_error(r->ep[0]));
    pfd = (struct pollfd){.fd = ops->cq_fd(r->cq[0]), .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 50), 0, "the dead channel still wakes its sleepers");
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO, "no event will come: sleep bounded");
    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_ERR_PEER);
    cr_assert_eq(ops->ep_create(r->tp[0], r->cq[0], &attr, &ep), PDX_ERR_IO);
    cr_assert_eq(ops->cq_create(r->tp[0], 4, &cq), PDX_ERR_IO, "no new CQ on a dead device");
    cr_assert_eq(atomic_load(&rdma_mr(r->smr)->refs), 0u, "flushed WRs hold their region");
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/* The completion channel dies before the async thread hears of the device:
 * the CQ's owner finds out in cq_ack, and its eps are flushed the same way. */
Test(rdma_faults, dead_channel_fails_its_cq)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    rdma_tp_t *tp = rdma_tp(r->tp[0]);

    post_stuck(r, 3, 2);
    pthread_mutex_lock(&tp->async_lock);
    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    ops->cq_ack(r->cq[0]); /* as after the fd woke its sleeper */
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO);
    expect_flushed(r->cq[0], 3, 2, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "its completion channel failed, QP 0x"), "%s",
              ops->ep_error(r->ep[0]));
    pthread_mutex_unlock(&tp->async_lock);
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/*
 * A failing ibv_poll_cq (the provider returns -1): the CQ is in error for
 * good. Every WR and receive of its eps completes once, in software, with
 * the cause in ep_error; cq_arm answers PDX_ERR_IO, the fd no longer wakes,
 * the CQ takes no new ep; the peer's ep is left alone.
 */
Test(rdma_faults, failing_poll_completes_everything_in_software)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    pdx_tp_write_t w = wr_make(r, 9, 0, 64, true);
    uint64_t errors = pdx_log_error_count();
    struct pollfd pfd;
    pdx_tp_ep_t *ep;

    post_stuck(r, 5, 2);
    softnic_fault_poll_cq(0, 1); /* the next poll of softnic0's CQs */
    expect_flushed(r->cq[0], 5, 2, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "ibv_poll_cq failed, QP 0x"), "%s",
              ops->ep_error(r->ep[0]));
    cr_assert_geq(pdx_log_error_count(), errors + 1, "the failing poll was not reported");
    pfd = (struct pollfd){.fd = ops->cq_fd(r->cq[0]), .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 50), 0, "the CQ's fd still wakes its sleepers");
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO, "no event will come: sleep bounded");
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO, "for good");
    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_ERR_PEER);
    cr_assert_eq(ops->ep_create(r->tp[0], r->cq[0], &attr, &ep), PDX_ERR_IO, "a CQ in error");
    cr_assert_eq(atomic_load(&rdma_mr(r->smr)->refs), 0u, "flushed WRs hold their region");
    cr_assert_str_eq(ops->ep_error(r->ep[1]), "", "the peer failed");
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/* ibv_poll_cq fails while ep_destroy drains the CQ of what its QP left: the
 * CQ is failed there, as when its poller meets the failure (cq_arm says so,
 * and it takes no new ep). */
Test(rdma_faults, failing_drain_at_destroy_fails_its_cq)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    pdx_tp_ep_t *ep;

    post_stuck(r, 5, 2);
    softnic_fault_poll_cq(0, 1); /* the next poll of softnic0's CQs: the drain's */
    ops->ep_destroy(r->ep[0]);
    r->ep[0] = NULL;
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO, "the CQ is not in error");
    cr_assert_eq(ops->ep_create(r->tp[0], r->cq[0], &attr, &ep), PDX_ERR_IO, "a CQ in error");
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/* A failing ibv_req_notify_cq (here: the device died and the async thread
 * has not said so yet): cq_arm answers PDX_ERR_IO, and the CQ is failed and
 * flushed the same way. */
Test(rdma_faults, failing_arm_fails_its_cq)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    rdma_tp_t *tp = rdma_tp(r->tp[0]);

    post_stuck(r, 3, 1);
    pthread_mutex_lock(&tp->async_lock);
    cr_assert_eq(softnic_async(0, IBV_EVENT_DEVICE_FATAL), 0);
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO);
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO);
    expect_flushed(r->cq[0], 3, 1, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "ibv_req_notify_cq failed, QP 0x"), "%s",
              ops->ep_error(r->ep[0]));
    pthread_mutex_unlock(&tp->async_lock);
    fx_nic_delay(&r->nic, 0);
    rig_close(r);
}

/* CQ_ERR (injected: the reservations keep softnic's CQs from overrunning) */
Test(rdma_faults, cq_error_completes_everything_in_software)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    struct ibv_async_event ev = {.event_type = IBV_EVENT_CQ_ERR,
                                 .element.cq = rdma_cq(r->cq[0])->icqs[0].cq};
    rdma_tp_t *tp = rdma_tp(r->tp[0]);
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    pdx_tp_wc_t wc;
    pdx_tp_ep_t *ep;

    post_stuck(r, 5, 2);
    pthread_mutex_lock(&tp->async_lock); /* as the async thread calls it */
    rdma_async_handle(tp, &ev);
    pthread_mutex_unlock(&tp->async_lock);
    expect_flushed(r->cq[0], 5, 2, PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "async event CQ error, QP 0x"), "%s",
              ops->ep_error(r->ep[0]));
    fx_nic_delay(&r->nic, 0);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, 200), 0, "the NIC's own flushes came out too");
    cr_assert_eq(ops->cq_arm(r->cq[0]), PDX_ERR_IO);
    cr_assert_eq(ops->ep_create(r->tp[0], r->cq[0], &attr, &ep), PDX_ERR_IO, "a CQ in error");
    rig_close(r);
}

/* An ep in error whose WRs the NIC never completes: progress_timeout_ms
 * after it failed they complete in software, and the NIC's late
 * completions are dropped. */
Test(rdma_faults, backstop_flushes_an_ep_the_nic_forgot)
{
    rig_t *r = rig_open(NULL, 100, NULL);
    uint64_t t0;
    pdx_tp_wc_t wc;

    post_stuck(r, 3, 1);
    fx_nic_delay(&r->nic, 0); /* posted WRs keep their 2 s */
    t0 = pdx_now_ns();
    cr_assert(rdma_ep_set_error(rdma_ep(r->ep[0]), PDX_ERR_ABORTED, RDMA_ERR_FIRST,
                                "failed by the test, QP left alone"));
    expect_flushed(r->cq[0], 3, 1, PDX_ERR_ABORTED);
    cr_assert_geq(pdx_now_ns() - t0, 100000000u, "flushed before the progress timeout");
    cr_assert_lt(pdx_now_ns() - t0, 1500000000u, "flushed only when the NIC ran the WRs");
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, 2500), 0, "the NIC's late completion came out");
    rig_close(r);
}

/* ----------------------------------------------------- refused posts */

/* The provider refuses the ibv WR of the next post_write that starts at its
 * WRITE k, wrs[k] (an opcode it does not take; post_write writes no
 * opcode): the WRs before it are taken. */
static pdx_status_t post_refused_at(rig_t *r, uint32_t k, const pdx_tp_write_t *w, uint32_t n)
{
    rdma_ep_t *e = rdma_ep(r->ep[0]);
    pdx_status_t st;

    e->wrs[k].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    st = ops->post_write(r->ep[0], w, n);
    e->wrs[k].opcode = IBV_WR_RDMA_WRITE;
    return st;
}

/* The provider takes 2 WRs of a call of 4, then refuses one: the caller
 * gets PDX_ERR_PEER and no completion of any of the 4; the earlier calls'
 * WRs still complete, and the regions are released. */
Test(rdma_faults, partial_post_hands_out_nothing)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_ON_POLL); /* WRs run inside cq_poll */
    rig_t *r = rig_open(&c, 10000, NULL);
    pdx_tp_write_t w[6];
    pdx_tp_wc_t wc[4];

    /* each to a place of its own at the remote: not gathered, one ibv WR each */
    for (int i = 0; i < 6; i++)
        w[i] = (pdx_tp_write_t){.wr_id = (uint64_t)i + 1, .mr = r->smr,
                                .offset = (uint64_t)i * 512, .length = 512,
                                .remote_addr = r->rk.addr + (uint64_t)(5 - i) * 512,
                                .rkey = r->rk.rkey, .flags = i == 3 ? PDX_TP_SIGNALED : 0};
    cr_assert_eq(ops->post_write(r->ep[0], w, 2), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], wc, 1, 50), 0, "unsignaled WRs 1 and 2 ran silently");
    cr_assert_eq(post_refused_at(r, 2, w + 2, 4), PDX_ERR_PEER, "the third WR of the call");
    cr_assert(strstr(ops->ep_error(r->ep[0]), "after 2 of 4"), "%s", ops->ep_error(r->ep[0]));
    cr_assert_eq(wait_wc(r->cq[0], wc, 4, 300), 1, "WRs of the refused call completed");
    fx_expect_wc(&wc[0], 2, PDX_OK, PDX_TP_OP_WRITE); /* WR 3's flush covers WRs 1 and 2 */
    cr_assert_eq(atomic_load(&rdma_mr(r->smr)->refs), 0u, "the refused call holds its region");
    rig_close(r);
}

/* The same with gathered WRs: 7 WRITEs of one call go out as 3 ibv WRs
 * (3, 2 and 2 WRITEs: a signaled WRITE ends its WR, and a gap at the remote
 * does too); the provider takes 2 of them (5 WRITEs), then refuses the
 * third. The 5 are hidden: none of the 7 completes, an earlier call's
 * unsignaled WR is covered by their flushes, every region reference goes
 * back. */
Test(rdma_faults, partial_post_of_gathered_writes)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_ON_POLL);
    rig_t *r = rig_open(&c, 10000, NULL);
    static const uint64_t dst[7] = {0, 256, 512, 768, 1024, 2048, 2304};
    pdx_tp_write_t w[8];
    softnic_stats_t st0, st;
    pdx_tp_wc_t wc[8];

    w[7] = wr_make(r, 50, 3072, 256, false); /* an earlier call, unsignaled */
    cr_assert_eq(ops->post_write(r->ep[0], &w[7], 1), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], wc, 1, 50), 0, "unsignaled WR 50 ran silently");
    for (int i = 0; i < 7; i++) /* local ranges reversed: only the remote ones follow */
        w[i] = (pdx_tp_write_t){.wr_id = 60u + (uint64_t)i, .mr = r->smr,
                                .offset = (uint64_t)(6 - i) * 256, .length = 256,
                                .remote_addr = r->rk.addr + dst[i], .rkey = r->rk.rkey,
                                .flags = i == 2 || i == 6 ? PDX_TP_SIGNALED : 0};
    softnic_stats(&st0);
    cr_assert_eq(post_refused_at(r, 5, w, 7), PDX_ERR_PEER, "the WR of WRITEs 5 and 6");
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted - st0.wrs_posted, 2, "two gathered WRs taken");
    cr_assert(strstr(ops->ep_error(r->ep[0]), "after 5 of 7"), "%s", ops->ep_error(r->ep[0]));
    for (uint32_t i = 0; i < 5; i++)
        cr_assert(rdma_ep(r->ep[0])->sq[(1 + i) & rdma_ep(r->ep[0])->sq_mask].hidden);
    cr_assert_eq(wait_wc(r->cq[0], wc, 8, 300), 1, "WRs of the refused call completed");
    fx_expect_wc(&wc[0], 50, PDX_OK, PDX_TP_OP_WRITE); /* covered by the first hidden CQE */
    cr_assert_eq(atomic_load(&rdma_mr(r->smr)->refs), 0u, "the refused call holds its region");
    rig_close(r);
}

/* ---------------------------------------------------------- statuses */

Test(rdma_faults, error_statuses_and_messages)
{
    rig_t *r = rig_open(NULL, 10000, NULL);
    pdx_tp_write_t w = wr_make(r, 1, 0, 64, true);
    uint8_t msg[48] = {0};
    pdx_tp_wc_t wc;

    /* a local error of the NIC */
    softnic_fault_wr_status(rdma_ep(r->ep[0])->qpn, 1, IBV_WC_LOC_ACCESS_ERR);
    cr_assert_eq(ops->post_write(r->ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_ERR_IO, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "WRITE: local access error"), "%s",
              ops->ep_error(r->ep[0]));
    rig_close(r);

    /* a SEND larger than the peer's receive: both sides call it a protocol error */
    r = rig_open(NULL, 10000, NULL);
    cr_assert_eq(ops->post_recv(r->ep[1], 7, r->rmr[1], 0, 16), PDX_OK);
    cr_assert_eq(ops->post_send(r->ep[0], 8, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(wait_wc(r->cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 8, PDX_ERR_PROTO, PDX_TP_OP_SEND);
    cr_assert(strstr(ops->ep_error(r->ep[0]), "SEND: remote invalid request error"), "%s",
              ops->ep_error(r->ep[0]));
    cr_assert_eq(wait_wc(r->cq[1], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_ERR_PROTO, PDX_TP_OP_RECV);
    cr_assert(strstr(ops->ep_error(r->ep[1]), "RECV: local length error"), "%s",
              ops->ep_error(r->ep[1]));
    rig_close(r);
}

/* ---------------------------------------------- CQs past max_cqe */

/* Completions of `ep`, taken from wc[0, n): `want` of them, in order from
 * wr_id `first`, each with `status`. */
static void expect_ep_wcs(const pdx_tp_wc_t *wc, int n, pdx_tp_ep_t *ep, uint64_t first,
                          int want, pdx_status_t status)
{
    int got = 0;

    for (int i = 0; i < n; i++) {
        if (wc[i].ep != ep || wc[i].opcode == PDX_TP_OP_RECV)
            continue;
        fx_expect_wc(&wc[i], first + (uint64_t)got, status, PDX_TP_OP_WRITE);
        got++;
    }
    cr_assert_eq(got, want, "%d completions of the ep, not %d", got, want);
}

/*
 * A CQ of 24 on a NIC of max_cqe 12 is two ibv CQs, ep a on the first, b on
 * the second. CQ_ERR of the second fails both (a too: its CQ is in error),
 * with every WR and receive completed in software; an ep on another CQ of
 * the tp is left alone.
 */
Test(rdma_faults, cq_error_of_one_ibv_cq_fails_its_whole_cq)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    rig_t *r;
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *a[2], *b[2], *ep;
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    pdx_tp_write_t w[3];
    pdx_tp_wc_t wc[16];
    struct ibv_async_event ev = {.event_type = IBV_EVENT_CQ_ERR};
    rdma_tp_t *tp;
    int nrecv = 0;

    c.max_cqe = 12;
    r = rig_open(&c, 10000, NULL);
    tp = rdma_tp(r->tp[0]);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->cq_create(r->tp[i], 24, &cq[i]), PDX_OK);
        cr_assert_eq(rdma_cq(cq[i])->nicq, 2u);
        a[i] = fx_ep_new(ops, r->tp[i], cq[i], 8, 4);
        b[i] = fx_ep_new(ops, r->tp[i], cq[i], 8, 4);
        cr_assert(rdma_ep(a[i])->icq == 0 && rdma_ep(b[i])->icq == 1);
    }
    fx_connect_eps(ops, a[0], a[1]);
    fx_connect_eps(ops, b[0], b[1]);
    fx_nic_delay(&r->nic, 2000000);
    for (int i = 0; i < 3; i++) /* one gathered WRITE on each */
        w[i] = wr_make(r, (uint64_t)i, (uint64_t)i * 256, 256, i == 2);
    cr_assert_eq(ops->post_write(a[0], w, 3), PDX_OK);
    cr_assert_eq(ops->post_write(b[0], w, 2), PDX_OK);
    cr_assert_eq(ops->post_recv(a[0], 100, r->rmr[0], 0, 64), PDX_OK);
    cr_assert_eq(ops->post_recv(b[0], 101, r->rmr[0], 64, 64), PDX_OK);
    ev.element.cq = rdma_cq(cq[0])->icqs[1].cq;
    pthread_mutex_lock(&tp->async_lock); /* as the async thread calls it */
    rdma_async_handle(tp, &ev);
    pthread_mutex_unlock(&tp->async_lock);
    cr_assert_eq(wait_wc(cq[0], wc, 7, WAIT_MS), 7, "completions lost");
    cr_assert_eq(wait_wc(cq[0], wc + 7, 1, 100), 0, "a WR completed twice");
    expect_ep_wcs(wc, 7, a[0], 0, 3, PDX_ERR_PEER);
    expect_ep_wcs(wc, 7, b[0], 0, 2, PDX_ERR_PEER);
    for (int i = 0; i < 7; i++) {
        if (wc[i].opcode != PDX_TP_OP_RECV)
            continue;
        fx_expect_wc(&wc[i], wc[i].ep == a[0] ? 100 : 101, PDX_ERR_PEER, PDX_TP_OP_RECV);
        nrecv++;
    }
    cr_assert_eq(nrecv, 2);
    cr_assert(strstr(ops->ep_error(a[0]), "async event CQ error, QP 0x"), "%s",
              ops->ep_error(a[0]));
    cr_assert(strstr(ops->ep_error(b[0]), "async event CQ error, QP 0x"), "%s",
              ops->ep_error(b[0]));
    cr_assert_str_eq(ops->ep_error(r->ep[0]), "", "an ep of another CQ failed");
    cr_assert_eq(ops->cq_arm(cq[0]), PDX_ERR_IO);
    cr_assert_eq(ops->ep_create(r->tp[0], cq[0], &attr, &ep), PDX_ERR_IO, "a CQ in error");
    fx_nic_delay(&r->nic, 0);
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(a[i]);
        ops->ep_destroy(b[i]);
        ops->cq_destroy(cq[i]);
    }
    rig_close(r);
}

/*
 * A real overrun of one ibv CQ (softnic: CQ_ERR, QP_FATAL of its QPs), made
 * possible by overstating its depth so that two eps of 12 entries go onto
 * its 12: the async thread fails the whole CQ, ep a on the other ibv CQ
 * too, and every WR of the three eps completes once, in software.
 */
Test(rdma_faults, overrun_of_one_ibv_cq_fails_its_whole_cq)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    rig_t *r;
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *ep[2][3];
    softnic_stats_t st0, st;
    pdx_tp_write_t w[4];
    pdx_tp_wc_t wc[24];

    c.max_cqe = 12;
    r = rig_open(&c, 10000, NULL);
    cr_assert_eq(ops->cq_create(r->tp[0], 24, &cq[0]), PDX_OK);
    cr_assert_eq(ops->cq_create(r->tp[1], 36, &cq[1]), PDX_OK);
    ep[0][0] = fx_ep_new(ops, r->tp[0], cq[0], 8, 4);
    rdma_cq(cq[0])->icqs[1].depth = 36; /* the lie */
    for (int k = 0; k < 3; k++) {
        if (k)
            ep[0][k] = fx_ep_new(ops, r->tp[0], cq[0], 8, 4);
        ep[1][k] = fx_ep_new(ops, r->tp[1], cq[1], 8, 4);
        fx_connect_eps(ops, ep[0][k], ep[1][k]);
    }
    cr_assert(rdma_ep(ep[0][1])->icq == 1 && rdma_ep(ep[0][2])->icq == 1);
    softnic_stats(&st0);
    fx_nic_delay(&r->nic, 2000000); /* a's WRs wait */
    for (int i = 0; i < 4; i++)
        w[i] = wr_make(r, (uint64_t)i, (uint64_t)i * 256, 256, true);
    cr_assert_eq(ops->post_write(ep[0][0], w, 4), PDX_OK);
    fx_nic_delay(&r->nic, 200000); /* b's and c's: all posted before any runs */
    for (int i = 0; i < 8; i++) { /* 16 completions for 12 entries */
        w[0] = wr_make(r, (uint64_t)i, 0, 64, true);
        cr_assert_eq(ops->post_write(ep[0][1], w, 1), PDX_OK);
        cr_assert_eq(ops->post_write(ep[0][2], w, 1), PDX_OK);
    }
    wait_error(ep[0][0], "async event CQ error, QP 0x");
    softnic_stats(&st);
    cr_assert_eq(st.cq_overruns, st0.cq_overruns + 1);
    cr_assert_eq(wait_wc(cq[0], wc, 20, WAIT_MS), 20, "completions lost");
    cr_assert_eq(wait_wc(cq[0], wc + 20, 1, 100), 0, "a WR completed twice");
    expect_ep_wcs(wc, 20, ep[0][0], 0, 4, PDX_ERR_PEER);
    expect_ep_wcs(wc, 20, ep[0][1], 0, 8, PDX_ERR_PEER);
    expect_ep_wcs(wc, 20, ep[0][2], 0, 8, PDX_ERR_PEER);
    cr_assert_eq(atomic_load(&rdma_mr(r->smr)->refs), 0u, "flushed WRs hold their region");
    fx_nic_delay(&r->nic, 0);
    rdma_cq(cq[0])->icqs[1].depth = 12;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 3; k++)
            ops->ep_destroy(ep[i][k]);
        ops->cq_destroy(cq[i]);
    }
    rig_close(r);
}

/*
 * A failing ibv_poll_cq of the second ibv CQ of a CQ split past max_cqe
 * (cq_poll reads them in turn: the second poll) fails the whole CQ: ep a on
 * the first ibv CQ too, each WR and receive completed once in software;
 * the first ibv CQ still polls, the CQ's other eps' peer is left alone.
 */
Test(rdma_faults, failing_poll_of_one_ibv_cq_fails_its_whole_cq)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_ep_t *a[2], *b[2];
    pdx_tp_write_t w[3];
    pdx_tp_wc_t wc[16];
    pdx_tp_cq_t *cq[2];
    struct ibv_wc iw;
    rdma_cq_t *q;
    rig_t *r;

    c.max_cqe = 12;
    r = rig_open(&c, 10000, NULL);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->cq_create(r->tp[i], 24, &cq[i]), PDX_OK);
        a[i] = fx_ep_new(ops, r->tp[i], cq[i], 8, 4);
        b[i] = fx_ep_new(ops, r->tp[i], cq[i], 8, 4);
    }
    q = rdma_cq(cq[0]);
    cr_assert(q->nicq == 2 && rdma_ep(a[0])->icq == 0 && rdma_ep(b[0])->icq == 1);
    fx_connect_eps(ops, a[0], a[1]);
    fx_connect_eps(ops, b[0], b[1]);
    fx_nic_delay(&r->nic, 2000000);
    for (int i = 0; i < 3; i++) /* one gathered WRITE on each */
        w[i] = wr_make(r, (uint64_t)i, (uint64_t)i * 256, 256, i == 2);
    cr_assert_eq(ops->post_write(a[0], w, 3), PDX_OK);
    cr_assert_eq(ops->post_write(b[0], w, 2), PDX_OK);
    cr_assert_eq(ops->post_recv(a[0], 100, r->rmr[0], 0, 64), PDX_OK);
    cr_assert_eq(ops->post_recv(b[0], 101, r->rmr[0], 64, 64), PDX_OK);
    cr_assert_eq(q->poll_next, 0u, "the next cq_poll reads ibv CQ 0 first, then 1");
    softnic_fault_poll_cq(0, 2);
    cr_assert_eq(wait_wc(cq[0], wc, 7, WAIT_MS), 7, "completions lost");
    cr_assert_eq(wait_wc(cq[0], wc + 7, 1, 100), 0, "a WR completed twice");
    expect_ep_wcs(wc, 7, a[0], 0, 3, PDX_ERR_PEER);
    expect_ep_wcs(wc, 7, b[0], 0, 2, PDX_ERR_PEER);
    for (int i = 0; i < 7; i++)
        if (wc[i].opcode == PDX_TP_OP_RECV)
            fx_expect_wc(&wc[i], wc[i].ep == a[0] ? 100 : 101, PDX_ERR_PEER, PDX_TP_OP_RECV);
    for (int i = 0; i < 2; i++)
        cr_assert(strstr(ops->ep_error(i ? b[0] : a[0]), "ibv_poll_cq failed, QP 0x"), "%s",
                  ops->ep_error(i ? b[0] : a[0]));
    cr_assert_geq(ibv_poll_cq(q->icqs[0].cq, 1, &iw), 0, "the fault hit ibv CQ 0");
    cr_assert_eq(ibv_poll_cq(q->icqs[1].cq, 1, &iw), -1, "the fault missed ibv CQ 1");
    cr_assert_eq(ops->cq_arm(cq[0]), PDX_ERR_IO);
    cr_assert_str_eq(ops->ep_error(a[1]), "", "a peer failed");
    cr_assert_str_eq(ops->ep_error(r->ep[0]), "", "an ep of another CQ failed");
    fx_nic_delay(&r->nic, 0);
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(a[i]);
        ops->ep_destroy(b[i]);
        ops->cq_destroy(cq[i]);
    }
    rig_close(r);
}
