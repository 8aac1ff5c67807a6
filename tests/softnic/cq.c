/*
 * softnic completion queues and completion channels.
 *
 * A CQ is a fixed ring. ibv_create_cq rounds cqe up to 2^k - 1 (as mlx5;
 * exactly cqe with exact_cq_depth) and the CQ holds exactly ibv_cq.cqe
 * unpolled entries. A CQE written into a full CQ is an overrun: the CQE is
 * dropped, the CQ is in error for good (every later CQE is dropped too, and
 * raises no completion event; ibv_poll_cq still returns the entries written
 * before, then 0, as mlx5), IBV_EVENT_CQ_ERR is raised on the context and
 * every QP using the CQ goes to error with IBV_EVENT_QP_FATAL (qp.c:
 * sn_settle).
 *
 * A dead context (DEVICE_FATAL) writes no CQE into its CQs; ibv_poll_cq
 * returns what they hold, then 0. ibv_req_notify_cq and ibv_get_cq_event
 * fail with EIO, each channel drops its unread events and its fd is killed:
 * it polls POLLERR (async.c: event fds), as the kernel's completion event
 * file of a disassociated device. ibv_create_cq and
 * ibv_create_comp_channel fail with EIO; the destroy calls work.
 *
 * Polling a CQE releases SQ or RQ slots: a send WR occupies its slot until
 * its completion, or that of a later WR of the same QP, has been polled.
 *
 * A poll fault (fault.c) breaks the CQ it hits, as a provider that finds a
 * CQE it cannot parse: that ibv_poll_cq and every later one on the CQ
 * return -1 with errno EIO, and return no CQE. The NIC still writes CQEs
 * into it (an overrun is possible), events and destroy work as usual.
 *
 * ibv_req_notify_cq arms the CQ: the next CQE written raises one event on
 * the channel (CQEs already in the CQ do not: arm, then poll). A channel's
 * fd is an event fd (async.c), readable while its FIFO holds events;
 * ibv_get_cq_event blocks unless the caller set O_NONBLOCK on it. Every
 * wait is a bounded ppoll() in a loop; in ON_POLL mode the loop runs the
 * pending WRs, so a blocking ibv_get_cq_event makes progress by itself.
 *
 * ibv_destroy_cq of a CQ with events read and not acknowledged returns
 * EBUSY (rdma-core would wait forever), as it does while QPs use the CQ.
 * Events queued and not yet read are discarded with the CQ, as the kernel
 * does. ibv_destroy_comp_channel with CQs on it returns EBUSY.
 */
#include "softnic_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- channels ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    sn_context_t *ctx = sn_ctx(context);
    sn_channel_t *ch;
    int err = sn_fault_call(SOFTNIC_CALL_CREATE_COMP_CHANNEL, -1);

    if (err || sn_dead(ctx)) {
        errno = err ? err : EIO;
        return NULL;
    }
    ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ctx = ctx;
    ch->ibch.context = context;
    ch->ibch.refcnt = 0;
    err = sn_evfd_open(&ch->ibch.fd, &ch->peer);
    if (err)
        goto err_free;
    pthread_mutex_init(&ch->lock, NULL);
    sn_list_init(&ch->fifo);
    pthread_mutex_lock(&softnic_g.lock);
    sn_list_add_tail(&ctx->channels, &ch->link);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_opened();
    return &ch->ibch;

err_free:
    free(ch);
    errno = err;
    return NULL;
}

void sn_channel_free(sn_channel_t *ch)
{
    sn_list_del(&ch->link);
    sn_evfd_close(ch->ibch.fd, ch->peer);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ibch)
{
    sn_channel_t *ch = sn_container_of(ibch, sn_channel_t, ibch);

    pthread_mutex_lock(&softnic_g.lock);
    if (ibch->refcnt) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_destroy_comp_channel: %d CQ(s) still use it", ibch->refcnt);
        return EBUSY;
    }
    sn_channel_free(ch);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_closed();
    return 0;
}

void sn_channel_kill(sn_channel_t *ch)
{
    pthread_mutex_lock(&ch->lock);
    if (!sn_list_empty(&ch->fifo))
        sn_evfd_lower(ch->ibch.fd, ch->peer);
    while (!sn_list_empty(&ch->fifo)) {
        sn_cq_t *cq = sn_container_of(ch->fifo.next, sn_cq_t, ch_link);

        sn_list_del(&cq->ch_link);
        cq->ev_queued = 0;
    }
    sn_evfd_kill(&ch->peer);
    pthread_mutex_unlock(&ch->lock);
}

/* Queue one event of the CQ on its channel; cq->lock held. */
static void sn_channel_event(sn_cq_t *cq)
{
    sn_channel_t *ch = cq->ch;

    pthread_mutex_lock(&ch->lock);
    if (ch->peer < 0) { /* killed */
        pthread_mutex_unlock(&ch->lock);
        return;
    }
    if (sn_list_empty(&ch->fifo))
        sn_evfd_raise(ch->peer);
    if (cq->ev_queued++ == 0)
        sn_list_add_tail(&ch->fifo, &cq->ch_link);
    pthread_mutex_unlock(&ch->lock);
}

int ibv_get_cq_event(struct ibv_comp_channel *ibch, struct ibv_cq **cq_p, void **cq_context_p)
{
    sn_channel_t *ch = sn_container_of(ibch, sn_channel_t, ibch);

    for (;;) {
        bool on_poll = atomic_load(&softnic_g.mode) == SOFTNIC_ON_POLL;
        int flags;

        if (on_poll)
            sn_progress();
        pthread_mutex_lock(&ch->lock);
        if (sn_dead(ch->ctx)) {
            pthread_mutex_unlock(&ch->lock);
            SN_TRACE("ibv_get_cq_event: %s is dead", ch->ctx->dev->ibdev.name);
            errno = EIO;
            return -1;
        }
        if (!sn_list_empty(&ch->fifo)) {
            sn_cq_t *cq = sn_container_of(ch->fifo.next, sn_cq_t, ch_link);

            sn_list_del(&cq->ch_link);
            if (--cq->ev_queued)
                sn_list_add_tail(&ch->fifo, &cq->ch_link);
            cq->ev_got++;
            if (sn_list_empty(&ch->fifo))
                sn_evfd_lower(ibch->fd, ch->peer);
            pthread_mutex_unlock(&ch->lock);
            *cq_p = &cq->ibcq;
            *cq_context_p = cq->ibcq.cq_context;
            return 0;
        }
        pthread_mutex_unlock(&ch->lock);
        flags = fcntl(ibch->fd, F_GETFL);
        if (flags < 0)
            return -1;
        if (flags & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        if (sn_fd_wait(ibch->fd, on_poll ? 100000 : SN_IDLE_NS) < 0 && errno == EINTR)
            return -1;
    }
}

void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
    sn_cq_t *cq = sn_cq(ibcq);

    if (!cq->ch)
        return;
    pthread_mutex_lock(&cq->ch->lock);
    cq->ev_acked += nevents;
    pthread_mutex_unlock(&cq->ch->lock);
}

/* ---- CQs ---- */

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    sn_context_t *ctx = sn_ctx(context);
    uint32_t cap = 1, max_cqe;
    bool exact;
    sn_cq_t *cq;
    int err = sn_fault_call(SOFTNIC_CALL_CREATE_CQ, -1);

    if (err)
        goto err_out;
    err = EINVAL;
    if (sn_dead(ctx)) {
        err = EIO;
        goto err_out;
    }
    pthread_mutex_lock(&softnic_g.lock);
    max_cqe = softnic_g.cfg.max_cqe;
    exact = softnic_g.cfg.exact_cq_depth;
    pthread_mutex_unlock(&softnic_g.lock);
    if (cqe < 1 || (uint32_t)cqe > max_cqe || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors || (channel && channel->context != context)) {
        SN_TRACE("ibv_create_cq: cqe %d (1..%u), comp_vector %d or channel invalid", cqe, max_cqe,
                 comp_vector);
        goto err_out;
    }
    if (exact) {
        cap = (uint32_t)cqe;
    } else {
        while (cap < (uint32_t)cqe + 1)
            cap <<= 1;
        cap -= 1;
        if (cap > max_cqe)
            cap = max_cqe;
    }
    cq = calloc(1, sizeof(*cq));
    if (!cq) {
        err = ENOMEM;
        goto err_out;
    }
    cq->ring = calloc((size_t)cap + 1, sizeof(*cq->ring));
    if (!cq->ring) {
        err = ENOMEM;
        goto err_free;
    }
    cq->cap = cap;
    cq->slots = cap + 1;
    cq->ctx = ctx;
    cq->ch = channel ? sn_container_of(channel, sn_channel_t, ibch) : NULL;
    cq->ibcq.context = context;
    cq->ibcq.channel = channel;
    cq->ibcq.cq_context = cq_context;
    cq->ibcq.cqe = (int)cap;
    pthread_mutex_init(&cq->ibcq.mutex, NULL);
    pthread_cond_init(&cq->ibcq.cond, NULL);
    pthread_mutex_init(&cq->lock, NULL);
    sn_list_init(&cq->ch_link);
    pthread_mutex_lock(&softnic_g.lock);
    cq->ibcq.handle = ++softnic_g.next_handle;
    sn_list_add_tail(&ctx->cqs, &cq->link);
    if (channel)
        channel->refcnt++;
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_opened();
    return &cq->ibcq;

err_free:
    free(cq);
err_out:
    errno = err;
    return NULL;
}

/* Detach and free a CQ; fabric lock held. */
void sn_cq_free(sn_cq_t *cq)
{
    sn_channel_t *ch = cq->ch;

    if (ch) {
        pthread_mutex_lock(&ch->lock);
        if (cq->ev_queued) {
            sn_list_del(&cq->ch_link);
            cq->ev_queued = 0;
            if (sn_list_empty(&ch->fifo))
                sn_evfd_lower(ch->ibch.fd, ch->peer);
        }
        pthread_mutex_unlock(&ch->lock);
        ch->ibch.refcnt--;
    }
    sn_async_forget(cq->ctx, &cq->ibcq);
    sn_list_del(&cq->link);
    pthread_mutex_destroy(&cq->lock);
    pthread_mutex_destroy(&cq->ibcq.mutex);
    pthread_cond_destroy(&cq->ibcq.cond);
    free(cq->ring);
    free(cq);
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    sn_cq_t *cq = sn_cq(ibcq);
    int busy = 0;

    pthread_mutex_lock(&softnic_g.lock);
    if (cq->qps) {
        SN_TRACE("ibv_destroy_cq: %u QP(s) still use the CQ", cq->qps);
        busy = EBUSY;
    }
    if (!busy && cq->ch) {
        pthread_mutex_lock(&cq->ch->lock);
        if (cq->ev_got != cq->ev_acked) {
            SN_TRACE("ibv_destroy_cq: %u completion event(s) not acknowledged",
                     cq->ev_got - cq->ev_acked);
            busy = EBUSY;
        }
        pthread_mutex_unlock(&cq->ch->lock);
    }
    if (!busy && sn_async_busy_cq(cq)) {
        SN_TRACE("ibv_destroy_cq: async event(s) of the CQ not acknowledged");
        busy = EBUSY;
    }
    if (!busy)
        sn_cq_free(cq);
    pthread_mutex_unlock(&softnic_g.lock);
    if (!busy)
        sn_obj_closed();
    return busy;
}

bool sn_cq_push(sn_cq_t *cq, const struct ibv_wc *wc, sn_qp_t *qp, uint64_t idx, int queue)
{
    uint64_t tail = atomic_load_explicit(&cq->tail, memory_order_relaxed);
    sn_cqe_t *e;

    if (cq->overrun || sn_dead(cq->ctx))
        return false;
    if (tail - atomic_load_explicit(&cq->head, memory_order_relaxed) >= cq->cap) {
        cq->overrun = true;
        SN_STAT_ADD(cq_overruns, 1);
        atomic_store(&cq->overrun_pending, true);
        atomic_store(&softnic_g.overrun_pending, true);
        SN_TRACE("CQ overrun (%u entries): the CQ and its QPs go to error", cq->cap);
        return false;
    }
    e = &cq->ring[tail % cq->slots];
    e->wc = *wc;
    e->qp = qp;
    e->idx = idx;
    e->queue = queue;
    atomic_store_explicit(&cq->tail, tail + 1, memory_order_release);
    if (cq->armed && cq->ch) {
        cq->armed = false;
        sn_channel_event(cq);
    }
    return true;
}

/* Forget a QP in the CQEs still queued: they stay, releasing nothing. */
void sn_cq_forget_qp(sn_cq_t *cq, sn_qp_t *qp)
{
    pthread_mutex_lock(&cq->lock);
    for (uint64_t i = atomic_load(&cq->head); i != atomic_load(&cq->tail); i++)
        if (cq->ring[i % cq->slots].qp == qp)
            cq->ring[i % cq->slots].qp = NULL;
    pthread_mutex_unlock(&cq->lock);
}

static void sn_cqe_release(const sn_cqe_t *e)
{
    _Atomic uint64_t *done = e->queue == SN_CQE_SQ ? &e->qp->sq_done : &e->qp->rq_done;

    if (atomic_load_explicit(done, memory_order_relaxed) < e->idx + 1)
        atomic_store_explicit(done, e->idx + 1, memory_order_release);
}

int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    sn_cq_t *cq = sn_cq(ibcq);
    uint64_t head, tail;
    int i = 0;

    if (atomic_load_explicit(&softnic_g.poll_faults, memory_order_relaxed) && sn_fault_poll(cq))
        atomic_store(&cq->broken, true);
    if (atomic_load_explicit(&cq->broken, memory_order_relaxed)) {
        SN_TRACE("ibv_poll_cq: CQ %u is broken (a poll fault): -1", cq->ibcq.handle);
        errno = EIO;
        return -1;
    }
    if (atomic_load_explicit(&softnic_g.mode, memory_order_relaxed) == SOFTNIC_ON_POLL)
        sn_progress();
    if (atomic_load_explicit(&cq->head, memory_order_relaxed) ==
        atomic_load_explicit(&cq->tail, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&cq->lock);
    head = atomic_load_explicit(&cq->head, memory_order_relaxed);
    tail = atomic_load_explicit(&cq->tail, memory_order_relaxed);
    while (i < n && head != tail) {
        const sn_cqe_t *e = &cq->ring[head % cq->slots];

        wc[i++] = e->wc;
        if (e->qp)
            sn_cqe_release(e);
        head++;
    }
    atomic_store_explicit(&cq->head, head, memory_order_relaxed);
    pthread_mutex_unlock(&cq->lock);
    return i;
}

int sn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    sn_cq_t *cq = sn_cq(ibcq);
    int err = sn_fault_call(SOFTNIC_CALL_REQ_NOTIFY_CQ, -1);

    (void)solicited_only; /* every CQE is an event: a superset of solicited ones */
    if (err)
        return err;
    if (sn_dead(cq->ctx))
        return EIO;
    pthread_mutex_lock(&cq->lock);
    cq->armed = true;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}
