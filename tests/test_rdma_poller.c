/*
 * The rdma CQ's poller against other threads, over softnic: ep_destroy
 * racing the poll that handles the ep's completions (run under ASan and
 * TSan), and a poll that goes on while another thread holds the CQ's table
 * lock (cq_poll takes no lock: rdma/cq.c).
 */
#include <criterion/criterion.h>

#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

typedef struct poller {
    pdx_tp_cq_t  *cq;
    _Atomic bool  stop;
    uint64_t      got;
} poller_t;

static void *poller_main(void *arg)
{
    poller_t *p = arg;
    pdx_tp_wc_t wc[16];

    while (!atomic_load_explicit(&p->stop, memory_order_relaxed))
        p->got += (uint64_t)ops->cq_poll(p->cq, wc, 16);
    return NULL;
}

/* ep_destroy while the poller handles the ep's first error CQE (the one
 * that records and logs the error). */
Test(rdma_poller, destroy_races_the_poller, .timeout = 60)
{
    fx_rig_t r;
    poller_t p;
    pdx_tp_write_t w[4];
    pthread_t th;

    fx_rig_open(&r, NULL, 4096, 8, 4);
    p = (poller_t){.cq = r.cq[0]};
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(r.ep[i]);
        r.ep[i] = NULL;
    }
    cr_assert_eq(pthread_create(&th, NULL, poller_main, &p), 0);
    for (int i = 0; i < 200; i++) {
        pdx_tp_ep_t *a = fx_ep_new(ops, r.tp[0], r.cq[0], 8, 4);
        pdx_tp_ep_t *b = fx_ep_new(ops, r.tp[1], r.cq[1], 8, 4);

        fx_connect_eps(ops, a, b);
        softnic_fault_wr_status(rdma_ep(a)->qpn, 1, IBV_WC_REM_OP_ERR);
        for (int k = 0; k < 4; k++)
            w[k] = fx_wr(&r, (uint64_t)k, 0, 64, 0, true);
        cr_assert_eq(ops->post_write(a, w, 4), PDX_OK); /* one call: the first fails */
        if (i % 8 == 0)
            usleep(2000); /* now and then the completions surely arrive first */
        else if (i % 4)
            usleep((useconds_t)(i % 40));
        ops->ep_destroy(a);
        ops->ep_destroy(b);
    }
    atomic_store(&p.stop, true);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_gt(p.got, 0u, "the poller never met a completion");
    fx_rig_close(&r, true);
}

/* A poller that waits for one completion, against a deadline. */
typedef struct lone_poller {
    pdx_tp_cq_t *cq;
    _Atomic int  got;      /* completions it took */
    pdx_tp_wc_t  wc;
} lone_poller_t;

static void *lone_poller_main(void *arg)
{
    lone_poller_t *p = arg;
    const uint64_t until = pdx_deadline_ns(5000);

    while (!atomic_load(&p->got) && pdx_now_ns() < until)
        atomic_store(&p->got, ops->cq_poll(p->cq, &p->wc, 1));
    return NULL;
}

/* cq_poll completes while another thread holds the CQ's table lock (as
 * ep_create does); it would wait for the lock if it took it. */
Test(rdma_poller, poll_runs_while_the_cq_lock_is_held, .timeout = 60)
{
    fx_rig_t r;
    lone_poller_t p;
    pdx_tp_write_t w;
    pthread_mutex_t *lock;
    pthread_t th;
    int got;

    fx_rig_open(&r, NULL, 4096, 8, 4);
    p = (lone_poller_t){.cq = r.cq[0]};
    w = fx_wr(&r, 42, 0, 64, 0, true);
    lock = &rdma_cq(r.cq[0])->lock;
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    pthread_mutex_lock(lock);
    cr_assert_eq(pthread_create(&th, NULL, lone_poller_main, &p), 0);
    for (int i = 0; i < 5000 && !atomic_load(&p.got); i++)
        usleep(1000);
    got = atomic_load(&p.got);
    pthread_mutex_unlock(lock);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(got, 1, "cq_poll waited for the CQ's lock");
    fx_expect_wc(&p.wc, 42, PDX_OK, PDX_TP_OP_WRITE);
    fx_rig_close(&r, false);
}
