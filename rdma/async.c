/*
 * rdma async events: the device's own reports of fatal conditions.
 *
 * DESIGN
 * - What the thread does: one thread per tp waits in poll() (bounded
 *   timeout) on the device context's async_fd (nonblocking) and on a stop
 *   eventfd. It reads every pending event with ibv_get_async_event, acts on
 *   it and acks it before reading the next:
 *     QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR  that ep fails ("async event ...")
 *                                          and its QP goes to ERR
 *     CQ_ERR                               every ep on that CQ, likewise
 *     PORT_ERR, DEVICE_FATAL               every ep of the tp, likewise
 *     PORT_ACTIVE and the rest             logged
 *   A QP in ERR flushes its outstanding WRs as error CQEs, so the engine
 *   learns of the failure from its CQ (and from ep_error) as for any other.
 * - What feeds it: the kernel's event queue of the context; close() writes
 *   the stop eventfd and joins the thread with a deadline.
 * - Locks: tp->async_lock from reading events until the last is acked;
 *   inside it tp->lock, while it looks up and fails eps. The ep is found
 *   through the tp's list, never through a pointer alone: ep_destroy unlinks
 *   the ep under tp->lock before it destroys the QP, so the thread never
 *   touches an ep being freed. ibv_destroy_qp/cq run under async_lock, so
 *   they never see an event of theirs read and not yet acked.
 * - Invariant: every event read is acked before the next is read and before
 *   the thread exits. Ep error state is written with the atomics of
 *   rdma_ep_set_error.
 */
#include "rdma/rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
            rdma_ep_kill(ep, PDX_ERR_PEER, "async event %s", event);
            return;
        }
    }
    pdx_debug("rdma: %s: async event %s for a QP already destroyed", tp->dev.name, event);
}

static void handle(rdma_tp_t *tp, const struct ibv_async_event *ev)
{
    const char *name = ibv_event_type_str(ev->event_type);
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
        pthread_mutex_lock(&tp->lock);
        for (rdma_ep_t *ep = tp->eps; ep; ep = ep->next) {
            if (ep->cq->cq == ev->element.cq) {
                rdma_ep_kill(ep, PDX_ERR_PEER, "async event %s", name);
                n++;
            }
        }
        pthread_mutex_unlock(&tp->lock);
        pdx_error("rdma: %s: async event %s: %u endpoints on the CQ failed", tp->dev.name, name,
                  n);
        return;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
        pthread_mutex_lock(&tp->lock);
        for (rdma_ep_t *ep = tp->eps; ep; ep = ep->next) {
            rdma_ep_kill(ep, PDX_ERR_PEER, "async event %s on %s port %u", name, tp->dev.name,
                         tp->dev.port);
            n++;
        }
        pthread_mutex_unlock(&tp->lock);
        pdx_error("rdma: %s port %u: async event %s: %u endpoints failed", tp->dev.name,
                  tp->dev.port, name, n);
        return;
    case IBV_EVENT_PORT_ACTIVE:
        pdx_info("rdma: %s port %u: async event %s", tp->dev.name, tp->dev.port, name);
        return;
    default:
        pdx_debug("rdma: %s: async event %s", tp->dev.name, name);
        return;
    }
}

static void *async_main(void *arg)
{
    rdma_tp_t *tp = arg;
    struct pollfd pfd[2] = {
        {.fd = tp->ctx->async_fd, .events = POLLIN},
        {.fd = tp->async_stop_fd, .events = POLLIN},
    };

    pthread_setname_np(pthread_self(), "pdx-rdma-async");
    for (;;) {
        struct ibv_async_event ev;
        int n = poll(pfd, 2, RDMA_ASYNC_POLL_MS);

        if (n < 0 && errno != EINTR) {
            struct timespec ts = {.tv_nsec = RDMA_ASYNC_POLL_MS * 1000000L};

            pdx_error("rdma: %s: poll on the async fd: %s", tp->dev.name, strerror(errno));
            nanosleep(&ts, NULL);
            continue;
        }
        if (n > 0 && (pfd[1].revents & POLLIN))
            break;
        if (n <= 0 || !(pfd[0].revents & (POLLIN | POLLERR | POLLHUP)))
            continue;
        /* nonblocking: EAGAIN once the queue is empty */
        pthread_mutex_lock(&tp->async_lock);
        while (ibv_get_async_event(tp->ctx, &ev) == 0) {
            handle(tp, &ev);
            ibv_ack_async_event(&ev);
        }
        pthread_mutex_unlock(&tp->async_lock);
    }
    return NULL;
}

pdx_status_t rdma_async_start(rdma_tp_t *tp)
{
    sigset_t all, old;
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
    /* The thread takes no signals: the caller's handlers stay the caller's. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&tp->async_thread, NULL, async_main, tp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    uint64_t one = 1;
    struct timespec ts;
    int rc;

    if (!tp->async_started)
        return true;
    if (write(tp->async_stop_fd, &one, sizeof(one)) < 0)
        pdx_error("rdma: %s: eventfd write: %s", tp->dev.name, strerror(errno));
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += RDMA_ASYNC_JOIN_MS / 1000;
    rc = pthread_timedjoin_np(tp->async_thread, NULL, &ts);
    if (rc) {
        pdx_error("rdma: %s: async-event thread did not stop within %u ms: %s", tp->dev.name,
                  RDMA_ASYNC_JOIN_MS, strerror(rc));
        return false;
    }
    tp->async_started = false;
    close(tp->async_stop_fd);
    tp->async_stop_fd = -1;
    return true;
}
