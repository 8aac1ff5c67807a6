/*
 * rdma software flush: the error completions of WRs the NIC will never
 * complete.
 *
 * An RC QP in error flushes every outstanding WR and receive as an error
 * CQE, and the transport contract builds on that. Sometimes no CQE comes:
 *   - DEVICE_FATAL: the device is gone; a provider (mlx5) no longer
 *     writes CQEs and ibv_poll_cq returns 0 for good;
 *   - CQ_ERR: a CQ in error takes no more CQEs;
 *   - ibv_poll_cq, ibv_req_notify_cq or ibv_get_cq_event fails: the CQ
 *     cannot be read or cannot wake anyone;
 *   - the async fd is dead (async.c): as DEVICE_FATAL;
 *   - an ep in error still has WRs outstanding progress_timeout_ms after it
 *     failed (the backstop: a NIC that never flushed).
 * The eps concerned are marked sw_flush on their CQ (flush_list). cq_poll
 * then completes their ring entries itself: the send queue from sq_done to
 * sq_head, in order, one completion per WR of the caller (signaled or not,
 * each WRITE of a gathered ibv WR too: post.c; a completion
 * of WR X covering unsignaled WRs before X is what callers expect, so one
 * per WR is as good), then the receive queue, each with the ep's error
 * status, releasing region references as real completions do. Entries of
 * a refused post (`hidden`) are freed without a completion. From the mark
 * on, the ep's real CQEs are dropped (cq.c), so no WR completes twice.
 *
 * The flush list and the marks are the poller's (rdma.h): cq_poll runs the
 * backstop and the flush; rdma_cq_fail marks eps under the CQ's lock with
 * the poller excluded. rdma_device_dead takes tp->lock, then each CQ's lock
 * (the order of rdma.h).
 *
 * The backstop looks at most once per progress_timeout_ms, and only while
 * an ep of the CQ is in error (failed_eps, one relaxed load per cq_poll).
 * It runs when the CQ's owner polls: an owner asleep on an armed CQ that
 * gets no event waits for its next wakeup.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* The poller's, or cq->lock held and the poller excluded. */
static void flush_mark(rdma_cq_t *cq, rdma_ep_t *ep)
{
    if (ep->sw_flush)
        return;
    ep->sw_flush = true;
    ep->flush_next = cq->flush_list;
    cq->flush_list = ep;
}

/*
 * A dead completion channel polls POLLERR for good, which wakes whoever
 * sleeps on cq_fd at once, again and again. Put an eventfd that never
 * fires in its place (same fd number, so the channel's destroy closes it):
 * an epoll set that held the fd drops it with the old file, and a poll()
 * on it sleeps out its timeout. cq_arm answers PDX_ERR_IO from now on, so
 * the CQ's owner sleeps bounded.
 */
static void channel_retire(rdma_cq_t *cq)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    if (fd < 0 || dup3(fd, cq->channel->fd, O_CLOEXEC) < 0)
        pdx_error("rdma: %s: cannot retire the completion channel of a CQ in error (%s): "
                  "sleepers on its fd may wake at once", cq->tp->dev.name, strerror(errno));
    if (fd >= 0)
        close(fd);
}

uint32_t rdma_cq_fail_excluded(rdma_cq_t *cq, const char *what)
{
    uint32_t n = 0;

    if (!atomic_load_explicit(&cq->dead, memory_order_relaxed)) {
        atomic_store_explicit(&cq->dead, true, memory_order_release);
        channel_retire(cq);
    }
    for (uint32_t i = 0; i < cq->nslots; i++) {
        rdma_ep_t *ep = atomic_load_explicit(&cq->slots[i].ep, memory_order_relaxed);

        if (!ep)
            continue;
        rdma_ep_kill(ep, PDX_ERR_PEER, RDMA_ERR_CAUSE, "%s, QP 0x%x", what, ep->qpn);
        flush_mark(cq, ep);
        n++;
    }
    return n;
}

uint32_t rdma_cq_fail(rdma_cq_t *cq, const char *what)
{
    uint32_t n;

    pthread_mutex_lock(&cq->lock);
    rdma_cq_exclude(cq);
    n = rdma_cq_fail_excluded(cq, what);
    rdma_cq_include(cq);
    pthread_mutex_unlock(&cq->lock);
    return n;
}

void rdma_device_dead(rdma_tp_t *tp, const char *why)
{
    uint32_t neps = 0, ncqs = 0;

    if (atomic_exchange_explicit(&tp->dead, true, memory_order_acq_rel))
        return;
    pthread_mutex_lock(&tp->lock);
    for (rdma_cq_t *cq = tp->cqs; cq; cq = cq->next) {
        neps += rdma_cq_fail(cq, why);
        ncqs++;
    }
    pthread_mutex_unlock(&tp->lock);
    pdx_error("rdma: %s port %u: %s: the device is gone; %u endpoints on %u CQs failed, their "
              "work requests complete in software", tp->dev.name, tp->dev.port, why, neps, ncqs);
}

/* One queue of a flushed ep: completions of [done, head) while room. */
static int flush_queue(rdma_ep_t *ep, bool rq, pdx_status_t status, pdx_tp_wc_t *wc, int max)
{
    _Atomic uint64_t *const done_p = rq ? &ep->rq_done : &ep->sq_done;
    const rdma_wqe_t *const ring = rq ? ep->rq : ep->sq;
    const uint32_t mask = rq ? ep->rq_mask : ep->sq_mask;
    const uint64_t head = atomic_load_explicit(rq ? &ep->rq_head : &ep->sq_head,
                                               memory_order_acquire);
    uint64_t done = atomic_load_explicit(done_p, memory_order_relaxed);
    int got = 0;

    for (; done != head && got < max; done++) {
        const rdma_wqe_t *e = &ring[done & mask];

        if (!e->hidden)
            wc[got++] = (pdx_tp_wc_t){.wr_id = e->wr_id, .ep = rdma_ep_pub(ep),
                                      .status = status, .opcode = (pdx_tp_opcode_t)e->opcode};
        rdma_mr_unref(e->mr);
    }
    /* the entries are free once their contents were read */
    atomic_store_explicit(done_p, done, memory_order_release);
    return got;
}

int rdma_flush_poll(rdma_cq_t *cq, pdx_tp_wc_t *wc, int max)
{
    int got = 0;

    for (rdma_ep_t *ep = cq->flush_list; ep && got < max; ep = ep->flush_next) {
        int why = atomic_load_explicit(&ep->err, memory_order_acquire);
        pdx_status_t status = why ? (pdx_status_t)why : PDX_ERR_PEER;

        got += flush_queue(ep, false, status, wc + got, max - got);
        got += flush_queue(ep, true, status, wc + got, max - got);
    }
    return got;
}

void rdma_flush_backstop(rdma_cq_t *cq)
{
    const uint64_t timeout = cq->tp->progress_timeout_ns;
    uint64_t now, next;

    if (!timeout)
        return;
    now = pdx_now_ns();
    if (now < cq->backstop_at)
        return;
    next = now + timeout;
    for (uint32_t i = 0; i < cq->nslots; i++) {
        /* ep_destroy retires a slot only with this poll excluded: an ep
         * found here is not freed under it */
        rdma_ep_t *ep = atomic_load_explicit(&cq->slots[i].ep, memory_order_acquire);
        uint64_t since, sq, rq;

        if (!ep || ep->sw_flush || !atomic_load_explicit(&ep->err, memory_order_acquire))
            continue;
        since = atomic_load_explicit(&ep->err_ns, memory_order_relaxed);
        sq = atomic_load_explicit(&ep->sq_head, memory_order_acquire) -
             atomic_load_explicit(&ep->sq_done, memory_order_relaxed);
        rq = atomic_load_explicit(&ep->rq_head, memory_order_acquire) -
             atomic_load_explicit(&ep->rq_done, memory_order_relaxed);
        if (sq == 0 && rq == 0)
            continue;
        if (since == 0 || now - since < timeout) {
            next = PDX_MIN(next, since ? since + timeout : now + timeout / 8 + 1);
            continue;
        }
        pdx_warn("rdma: %s: endpoint QP 0x%x failed %llu ms ago and the NIC has completed "
                 "neither its %llu work requests nor its %llu receives: completing them in "
                 "software", cq->tp->dev.name, ep->qpn,
                 (unsigned long long)((now - since) / 1000000u), (unsigned long long)sq,
                 (unsigned long long)rq);
        flush_mark(cq, ep);
    }
    cq->backstop_at = next;
}
