/*
 * rdma async events: the device's own reports of fatal conditions.
 *
 * DESIGN
 * - What the thread does: one thread per tp waits in poll() (bounded
 *   timeout) on the device context's async_fd (nonblocking) and on a stop
 *   eventfd. It reads every pending event with ibv_get_async_event, acts on
 *   it and acks it before reading the next:
 *     QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR  that ep fails ("async event ...
 *                                          on QP 0x..") and its QP goes to
 *                                          ERR: the NIC flushes its WRs
 *     CQ_ERR                               every ep on the pdx CQ holding
 *                                          that ibv CQ fails and is flushed
 *                                          in software (sw_flush.c): a CQ in
 *                                          error takes no more CQEs
 *     DEVICE_FATAL                         the device is gone: every ep of
 *                                          the tp, likewise (no CQE comes)
 *     PORT_ERR (our port)                  a warning, nothing fails: RC QPs
 *                                          ride out a link flap shorter
 *                                          than their retry budget, and if
 *                                          the link stays down, each WR
 *                                          ends in IBV_WC_RETRY_EXC_ERR by
 *                                          itself (PDX_IB_RETRY_COUNT x
 *                                          PDX_IB_TIMEOUT)
 *     PORT_ACTIVE (our port)               info
 *     port events of other ports           info, ignored
 *     the rest                             debug
 * - A dead async fd (POLLERR, POLLHUP or POLLNVAL: a disassociated device;
 *   or an ibv_get_async_event failure other than EAGAIN) is DEVICE_FATAL: the
 *   thread fails everything as above, marks the tp dead, and from then on
 *   polls only the stop fd (the dead fd would wake it at once, forever).
 * - What feeds it: the kernel's event queue of the context; close() writes
 *   the stop eventfd and joins the thread with a deadline.
 * - Locks: tp->async_lock from reading events until the last is acked;
 *   inside it tp->lock, while it looks up eps by QP, and each CQ's lock
 *   while it fails that CQ's eps (rdma.h: async_lock, tp->lock, CQ lock).
 *   ep_destroy unlinks the ep under tp->lock and retires its CQ slot under
 *   the CQ's lock before it destroys the QP, so the thread never touches an
 *   ep being freed. ibv_destroy_qp/cq run under async_lock, so they never
 *   see an event of theirs read and not yet acked.
 * - Invariant: every event read is acked before the next is read and before
 *   the thread exits. Ep error state is written with the atomics of
 *   rdma_ep_set_error.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RDMA_ASYNC_POLL_MS 200
#define RDMA_ASYNC_JOIN_MS 5000u

/* Fail the ep whose QP is qp, if it still exists (under tp->lock). */
static void fail_qp(rdma_tp_t *tp, const struct ibv_qp *qp, const char *event)
{
    for (rdma_ep_t *ep = tp->eps; ep; ep = ep->next) {
        if (ep->qp == qp) {
            rdma_ep_kill(ep, PDX_ERR_PEER, RDMA_ERR_CAUSE, "async event %s on QP 0x%x", event,
                         ep->qpn);
            return;
        }
    }
    /* the QP lives (its destroy waits for async_lock): its number is safe */
    pdx_debug("rdma: %s: async event %s for QP 0x%x, whose endpoint is gone", tp->dev.name,
              event, qp->qp_num);
}

static void port_event(rdma_tp_t *tp, const struct ibv_async_event *ev, const char *name)
{
    if (ev->element.port_num != (int)tp->dev.port) {
        pdx_info("rdma: %s: async event %s on port %d, not ours (%u): ignored", tp->dev.name,
                 name, ev->element.port_num, tp->dev.port);
        return;
    }
    if (ev->event_type == IBV_EVENT_PORT_ERR)
        pdx_warn("rdma: %s port %u: async event %s: the link is down; connections ride out a "
                 "short outage, else their work requests fail once the retries "
                 "(PDX_IB_RETRY_COUNT x PDX_IB_TIMEOUT) run out", tp->dev.name, tp->dev.port,
                 name);
    else
        pdx_info("rdma: %s port %u: async event %s", tp->dev.name, tp->dev.port, name);
}

void rdma_async_handle(rdma_tp_t *tp, const struct ibv_async_event *ev)
{
    const char *name = ibv_event_type_str(ev->event_type);
    char what[160];
    bool found = false;
    uint32_t n = 0;

    switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
        pthread_mutex_lock(&tp->lock);
        fail_qp(tp, ev->element.qp, name);
        pthread_mutex_unlock(&tp->lock);
        return;
    case IBV_EVENT_CQ_ERR:
        snprintf(what, sizeof(what), "async event %s", name);
        pthread_mutex_lock(&tp->lock);
        for (rdma_cq_t *cq = tp->cqs; cq && !found; cq = cq->next) {
            /* any of its ibv CQs (cq.c: split past max_cqe) fails all of it */
            for (uint32_t i = 0; i < cq->nicq && !found; i++)
                found = cq->icqs[i].cq == ev->element.cq;
            if (found)
                n = rdma_cq_fail(cq, what);
        }
        pthread_mutex_unlock(&tp->lock);
        pdx_error("rdma: %s: async event %s: the CQ takes no more completions; its %u "
                  "endpoints failed, their work requests complete in software", tp->dev.name,
                  name, n);
        return;
    case IBV_EVENT_DEVICE_FATAL:
        snprintf(what, sizeof(what), "async event %s on %s", name, tp->dev.name);
        rdma_device_dead(tp, what);
        return;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
        port_event(tp, ev, name);
        return;
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
        pdx_debug("rdma: %s: async event %s on port %d", tp->dev.name, name,
                  ev->element.port_num);
        return;
    default:
        pdx_debug("rdma: %s: async event %s", tp->dev.name, name);
        return;
    }
}

/* Read, handle and ack every queued event; false once the fd is dead. */
static bool drain_events(rdma_tp_t *tp)
{
    struct ibv_async_event ev;
    int err;

    pthread_mutex_lock(&tp->async_lock);
    while (ibv_get_async_event(tp->ctx, &ev) == 0) {
        rdma_async_handle(tp, &ev);
        ibv_ack_async_event(&ev);
    }
    err = errno; /* nonblocking: EAGAIN once the queue is empty */
    pthread_mutex_unlock(&tp->async_lock);
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
        return true;
    /* after DEVICE_FATAL this is expected: the device is gone already */
    if (!atomic_load_explicit(&tp->dead, memory_order_acquire))
        pdx_error("rdma: %s: ibv_get_async_event: %s", tp->dev.name, strerror(err));
    return false;
}

static void *async_main(void *arg)
{
    rdma_tp_t *tp = arg;
    struct pollfd pfd[2] = {
        {.fd = tp->async_stop_fd, .events = POLLIN},
        {.fd = tp->ctx->async_fd, .events = POLLIN},
    };
    nfds_t nfds = 2;

    pthread_setname_np(pthread_self(), "pdx-rdma-async");
    pdx_log_tag(tp->base.log_id, tp->base.log_engine);
    for (;;) {
        int n = poll(pfd, nfds, RDMA_ASYNC_POLL_MS);
        short rev;

        if (n < 0 && errno != EINTR) {
            struct timespec ts = {.tv_nsec = RDMA_ASYNC_POLL_MS * 1000000L};

            pdx_error("rdma: %s: poll on the async fd: %s", tp->dev.name, strerror(errno));
            nanosleep(&ts, NULL);
            continue;
        }
        if (n > 0 && (pfd[0].revents & POLLIN))
            break;
        rev = nfds == 2 && n > 0 ? pfd[1].revents : 0;
        if (!rev)
            continue;
        /* events queued before the device died come first */
        if ((rev & POLLNVAL) || !drain_events(tp) || (rev & (POLLERR | POLLHUP))) {
            rdma_device_dead(tp, rev & POLLNVAL ? "its async fd is closed"
                                 : "its async fd reports an error");
            nfds = 1; /* the stop fd alone: the dead fd would wake us at once */
        } else if (atomic_load_explicit(&tp->dead, memory_order_acquire)) {
            nfds = 1; /* DEVICE_FATAL: the fd is next to die */
        }
    }
    return NULL;
}

pdx_status_t rdma_async_start(rdma_tp_t *tp)
{
    int flags, rc;

    flags = fcntl(tp->ctx->async_fd, F_GETFL);
    if (flags < 0 || fcntl(tp->ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        pdx_error("rdma: %s: making the async fd nonblocking: %s", tp->dev.name,
                  strerror(errno));
        return PDX_ERR_IO;
    }
    tp->async_stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (tp->async_stop_fd < 0) {
        pdx_error("rdma: %s: eventfd: %s", tp->dev.name, strerror(errno));
        return PDX_ERR_IO;
    }
    rc = pdx_thread_start(&tp->async_thread, async_main, tp);
    if (rc) {
        pdx_error("rdma: %s: cannot start the async-event thread: %s", tp->dev.name,
                  strerror(rc));
        close(tp->async_stop_fd);
        tp->async_stop_fd = -1;
        return PDX_ERR_IO;
    }
    tp->async_started = true;
    return PDX_OK;
}

bool rdma_async_stop(rdma_tp_t *tp)
{
    char what[RDMA_DEVNAME_MAX + 40];
    uint64_t one = 1;

    if (!tp->async_started)
        return true;
    if (write(tp->async_stop_fd, &one, sizeof(one)) < 0)
        pdx_error("rdma: %s: eventfd write: %s", tp->dev.name, strerror(errno));
    snprintf(what, sizeof(what), "rdma: %s: the async-event thread", tp->dev.name);
    if (!pdx_thread_join(tp->async_thread, RDMA_ASYNC_JOIN_MS, what))
        return false;
    tp->async_started = false;
    close(tp->async_stop_fd);
    tp->async_stop_fd = -1;
    return true;
}
