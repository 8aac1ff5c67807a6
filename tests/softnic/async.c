/*
 * softnic async events: a queue per context behind context->async_fd, the
 * events softnic raises by itself (CQ overrun, fatal QPs) or on request
 * (softnic_qp_fatal, softnic_async), and the verbs strings.
 *
 * Event fds (async_fd, and every completion channel's fd: cq.c): the
 * caller's end of a connected AF_UNIX stream pair, softnic keeping the other
 * end. It holds one byte, so polls POLLIN, while events are queued
 * (sn_evfd_raise / sn_evfd_lower, under the queue's lock), and is blocking,
 * as in rdma-core, until the caller sets O_NONBLOCK on it. softnic's end
 * holds one byte the caller's end sent and nobody reads: closing it
 * (sn_evfd_kill) resets the caller's end, which from then on polls POLLERR
 * (with POLLHUP and POLLIN) on the same file, so poll() and epoll sets that
 * hold it see it, as the kernel's event files of a disassociated device
 * report EPOLLERR (alone, there). A blocked poll() wakes at once. The
 * async queue holds SN_ASYNC_EVENTS events; more are dropped (SOFTNIC_DEBUG
 * so). Destroying a QP or CQ discards its queued events, as the kernel does;
 * events read and not acknowledged make ibv_destroy_qp / ibv_destroy_cq
 * return EBUSY (rdma-core would wait forever).
 *
 * softnic_async(PORT_ERR): the port goes DOWN and nothing else changes, as
 * on hardware: no QP changes state, but packets to or from the port are
 * dropped (xfer.c), so requesters retry and fail with RETRY_EXC once
 * retry_cnt is spent. PORT_ACTIVE brings the port back; WRs still retrying
 * then go through. Other port-scope events are queued as they are.
 *
 * softnic_async(DEVICE_FATAL) kills every context open on the device
 * (sn_context_kill), as the kernel disassociates a device: the event is
 * queued, then the context is dead. A dead context queues no more events;
 * its async fd polls POLLIN while events are queued and, once
 * ibv_get_async_event has taken the last one, is killed (POLLERR);
 * ibv_get_async_event then fails with EIO. Its channels are killed at once
 * (cq.c: sn_channel_kill).
 */
#include "softnic_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { SN_EV_PORT, SN_EV_QP, SN_EV_CQ, SN_EV_OTHER };

static int sn_ev_kind(enum ibv_event_type t)
{
    switch (t) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return SN_EV_QP;
    case IBV_EVENT_CQ_ERR:
        return SN_EV_CQ;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_WQ_FATAL:
        return SN_EV_OTHER;
    default:
        return SN_EV_PORT;
    }
}

int sn_fd_wait(int fd, uint64_t timeout_ns)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};

    return ppoll(&p, 1, &ts, NULL);
}

/* ---- event fds ---- */

int sn_evfd_open(int *fd_p, int *peer_p)
{
    int sv[2];
    char b = 0;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return errno;
    if (send(sv[0], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
        int err = errno;

        close(sv[0]);
        close(sv[1]);
        return err;
    }
    *fd_p = sv[0];
    *peer_p = sv[1];
    return 0;
}

void sn_evfd_raise(int peer)
{
    char b = 1;

    if (peer >= 0 && send(peer, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
        SN_TRACE("event fd: send: %s", strerror(errno));
}

void sn_evfd_lower(int fd, int peer)
{
    char b;

    if (peer >= 0 && recv(fd, &b, 1, MSG_DONTWAIT) != 1)
        SN_TRACE("event fd: recv: %s", strerror(errno));
}

void sn_evfd_kill(int *peer_p)
{
    if (*peer_p < 0)
        return;
    close(*peer_p);
    *peer_p = -1;
}

void sn_evfd_close(int fd, int peer)
{
    close(fd);
    if (peer >= 0)
        close(peer);
}

/* A dead context's async fd, once no event is queued; async_lock held. */
static void sn_async_settle_dead(sn_context_t *ctx)
{
    if (ctx->async_count == 0 && sn_dead(ctx))
        sn_evfd_kill(&ctx->async_peer);
}

void sn_async_init(sn_context_t *ctx)
{
    pthread_mutex_init(&ctx->async_lock, NULL);
}

void sn_async_fini(sn_context_t *ctx)
{
    pthread_mutex_destroy(&ctx->async_lock);
}

void sn_async_push(sn_context_t *ctx, enum ibv_event_type type, void *element, int port)
{
    struct ibv_async_event *ev;

    pthread_mutex_lock(&ctx->async_lock);
    if (sn_dead(ctx)) {
        pthread_mutex_unlock(&ctx->async_lock);
        SN_TRACE("%s is dead: async event %s dropped", ctx->dev->ibdev.name,
                 ibv_event_type_str(type));
        return;
    }
    if (ctx->async_count == SN_ASYNC_EVENTS) {
        pthread_mutex_unlock(&ctx->async_lock);
        SN_TRACE("async queue of %s full: %s dropped", ctx->dev->ibdev.name,
                 ibv_event_type_str(type));
        return;
    }
    ev = &ctx->async_ring[(ctx->async_head + ctx->async_count) % SN_ASYNC_EVENTS];
    memset(ev, 0, sizeof(*ev));
    ev->event_type = type;
    switch (sn_ev_kind(type)) {
    case SN_EV_QP:
        ev->element.qp = element;
        break;
    case SN_EV_CQ:
        ev->element.cq = element;
        break;
    default:
        ev->element.port_num = port;
        break;
    }
    if (ctx->async_count++ == 0)
        sn_evfd_raise(ctx->async_peer);
    pthread_mutex_unlock(&ctx->async_lock);
    SN_TRACE("%s: async event %s", ctx->dev->ibdev.name, ibv_event_type_str(type));
}

static void *sn_ev_element(const struct ibv_async_event *ev)
{
    switch (sn_ev_kind(ev->event_type)) {
    case SN_EV_QP:
        return ev->element.qp;
    case SN_EV_CQ:
        return ev->element.cq;
    default:
        return NULL;
    }
}

void sn_async_forget(sn_context_t *ctx, void *element)
{
    uint32_t kept = 0, had;

    pthread_mutex_lock(&ctx->async_lock);
    had = ctx->async_count;
    for (uint32_t i = 0; i < had; i++) {
        struct ibv_async_event ev = ctx->async_ring[(ctx->async_head + i) % SN_ASYNC_EVENTS];

        if (sn_ev_element(&ev) == element)
            continue;
        ctx->async_ring[(ctx->async_head + kept) % SN_ASYNC_EVENTS] = ev;
        kept++;
    }
    ctx->async_count = kept;
    if (had && !kept) {
        sn_evfd_lower(ctx->vctx.context.async_fd, ctx->async_peer);
        sn_async_settle_dead(ctx);
    }
    pthread_mutex_unlock(&ctx->async_lock);
}

int sn_async_busy_qp(sn_qp_t *qp)
{
    int busy;

    pthread_mutex_lock(&qp->ctx->async_lock);
    busy = qp->async_got != qp->async_acked;
    pthread_mutex_unlock(&qp->ctx->async_lock);
    return busy;
}

int sn_async_busy_cq(sn_cq_t *cq)
{
    int busy;

    pthread_mutex_lock(&cq->ctx->async_lock);
    busy = cq->async_got != cq->async_acked;
    pthread_mutex_unlock(&cq->ctx->async_lock);
    return busy;
}

static void sn_async_count(const struct ibv_async_event *ev, bool acked)
{
    void *el = sn_ev_element(ev);

    if (!el)
        return;
    if (sn_ev_kind(ev->event_type) == SN_EV_QP) {
        sn_qp_t *qp = sn_qp(el);

        *(acked ? &qp->async_acked : &qp->async_got) += 1;
    } else {
        sn_cq_t *cq = sn_cq(el);

        *(acked ? &cq->async_acked : &cq->async_got) += 1;
    }
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    sn_context_t *ctx = sn_ctx(context);

    for (;;) {
        int flags;

        pthread_mutex_lock(&ctx->async_lock);
        if (ctx->async_count) {
            *event = ctx->async_ring[ctx->async_head];
            ctx->async_head = (ctx->async_head + 1) % SN_ASYNC_EVENTS;
            if (--ctx->async_count == 0) {
                sn_evfd_lower(context->async_fd, ctx->async_peer);
                sn_async_settle_dead(ctx);
            }
            sn_async_count(event, false);
            pthread_mutex_unlock(&ctx->async_lock);
            return 0;
        }
        if (sn_dead(ctx)) {
            pthread_mutex_unlock(&ctx->async_lock);
            errno = EIO;
            return -1;
        }
        pthread_mutex_unlock(&ctx->async_lock);
        flags = fcntl(context->async_fd, F_GETFL);
        if (flags < 0)
            return -1;
        if (flags & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        if (sn_fd_wait(context->async_fd, SN_IDLE_NS) < 0 && errno == EINTR)
            return -1;
    }
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
    void *el = sn_ev_element(event);
    sn_context_t *ctx;

    if (!el)
        return;
    if (sn_ev_kind(event->event_type) == SN_EV_QP)
        ctx = sn_qp(el)->ctx;
    else
        ctx = sn_cq(el)->ctx;
    pthread_mutex_lock(&ctx->async_lock);
    sn_async_count(event, true);
    pthread_mutex_unlock(&ctx->async_lock);
}

/* ---- injected events ---- */

int softnic_qp_fatal(uint32_t qpn)
{
    sn_qp_t *qp;

    pthread_mutex_lock(&softnic_g.lock);
    qp = sn_qp_find(qpn);
    if (!qp) {
        pthread_mutex_unlock(&softnic_g.lock);
        return -1;
    }
    if (sn_dead(qp->ctx)) {
        pthread_mutex_unlock(&softnic_g.lock);
        return 0;
    }
    if (sn_qp_state(qp) != IBV_QPS_ERR)
        sn_qp_to_error(qp);
    sn_async_push(qp->ctx, IBV_EVENT_QP_FATAL, &qp->ibqp, 0);
    sn_settle();
    pthread_mutex_unlock(&softnic_g.lock);
    return 0;
}

void sn_context_kill(sn_context_t *ctx)
{
    sn_list_t *pos;

    atomic_store(&ctx->dead, true);
    sn_list_for(pos, &ctx->channels)
        sn_channel_kill(sn_container_of(pos, sn_channel_t, link));
    pthread_mutex_lock(&ctx->async_lock);
    sn_async_settle_dead(ctx);
    pthread_mutex_unlock(&ctx->async_lock);
    SN_TRACE("%s: context dead (DEVICE_FATAL)", ctx->dev->ibdev.name);
}

int softnic_async(uint32_t dev, enum ibv_event_type type)
{
    sn_list_t *pos;
    sn_device_t *d;

    if (sn_ev_kind(type) != SN_EV_PORT)
        return -1;
    pthread_mutex_lock(&softnic_g.lock);
    sn_config_ready();
    if (dev >= softnic_g.cfg.devices || softnic_g.cfg.no_devices) {
        pthread_mutex_unlock(&softnic_g.lock);
        return -1;
    }
    d = &softnic_g.dev[dev];
    if (type == IBV_EVENT_PORT_ERR)
        atomic_store(&d->port_state, IBV_PORT_DOWN);
    else if (type == IBV_EVENT_PORT_ACTIVE)
        atomic_store(&d->port_state, IBV_PORT_ACTIVE);
    sn_list_for(pos, &softnic_g.contexts) {
        sn_context_t *ctx = sn_container_of(pos, sn_context_t, link);

        if (ctx->dev != d)
            continue;
        sn_async_push(ctx, type, NULL, type == IBV_EVENT_DEVICE_FATAL ? 0 : SN_PORT);
        if (type == IBV_EVENT_DEVICE_FATAL && !sn_dead(ctx))
            sn_context_kill(ctx);
    }
    pthread_mutex_unlock(&softnic_g.lock);
    return 0;
}

/* ---- strings ---- */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const s[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory window bind error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };

    if ((unsigned)status >= sizeof(s) / sizeof(s[0]) || !s[status])
        return "unknown";
    return s[status];
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const s[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };

    if ((unsigned)event >= sizeof(s) / sizeof(s[0]) || !s[event])
        return "unknown";
    return s[event];
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    static const char *const s[] = {
        [IBV_PORT_NOP] = "PORT_NOP",
        [IBV_PORT_DOWN] = "PORT_DOWN",
        [IBV_PORT_INIT] = "PORT_INIT",
        [IBV_PORT_ARMED] = "PORT_ARMED",
        [IBV_PORT_ACTIVE] = "PORT_ACTIVE",
        [IBV_PORT_ACTIVE_DEFER] = "PORT_ACTIVE_DEFER",
    };

    if ((unsigned)port_state >= sizeof(s) / sizeof(s[0]) || !s[port_state])
        return "unknown";
    return s[port_state];
}
