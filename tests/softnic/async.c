/*
 * softnic async events: a queue per context behind context->async_fd, the
 * events softnic raises by itself (CQ overrun, fatal QPs) or on request
 * (softnic_qp_fatal, softnic_async), and the verbs strings.
 *
 * async_fd is an eventfd in semaphore mode counting the queued events; it is
 * blocking, as in rdma-core, until the caller sets O_NONBLOCK on it. The
 * queue holds SN_ASYNC_EVENTS events; more are dropped (SOFTNIC_DEBUG says
 * so). Destroying a QP or CQ discards its queued events, as the kernel does;
 * events read and not acknowledged make ibv_destroy_qp / ibv_destroy_cq
 * return EBUSY (rdma-core would wait forever).
 *
 * softnic_async(PORT_ERR): the port goes DOWN, the QPs of the device go to
 * error (their WRs are flushed; no per-QP event), a remote WR aimed at the
 * device fails its retries. PORT_ACTIVE brings the port back (QPs stay in
 * error). DEVICE_FATAL moves every QP of the device to error. Other
 * port-scope events are queued as they are.
 */
#include "softnic_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
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
    uint64_t one = 1;

    pthread_mutex_lock(&ctx->async_lock);
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
    ctx->async_count++;
    if (write(ctx->vctx.context.async_fd, &one, sizeof(one)) != sizeof(one))
        SN_TRACE("async fd write failed");
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
    uint32_t kept = 0, dropped = 0;
    uint64_t v;

    pthread_mutex_lock(&ctx->async_lock);
    for (uint32_t i = 0; i < ctx->async_count; i++) {
        struct ibv_async_event ev = ctx->async_ring[(ctx->async_head + i) % SN_ASYNC_EVENTS];

        if (sn_ev_element(&ev) == element) {
            dropped++;
            continue;
        }
        ctx->async_ring[(ctx->async_head + kept) % SN_ASYNC_EVENTS] = ev;
        kept++;
    }
    ctx->async_count = kept;
    for (uint32_t i = 0; i < dropped; i++)
        if (read(ctx->vctx.context.async_fd, &v, sizeof(v)) != sizeof(v))
            break;
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
    uint64_t v;

    for (;;) {
        int flags;

        pthread_mutex_lock(&ctx->async_lock);
        if (ctx->async_count) {
            *event = ctx->async_ring[ctx->async_head];
            ctx->async_head = (ctx->async_head + 1) % SN_ASYNC_EVENTS;
            ctx->async_count--;
            if (read(context->async_fd, &v, sizeof(v)) != sizeof(v))
                SN_TRACE("async fd read failed");
            sn_async_count(event, false);
            pthread_mutex_unlock(&ctx->async_lock);
            return 0;
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
    if (sn_qp_state(qp) != IBV_QPS_ERR)
        sn_qp_to_error(qp);
    sn_async_push(qp->ctx, IBV_EVENT_QP_FATAL, &qp->ibqp, 0);
    sn_settle();
    pthread_mutex_unlock(&softnic_g.lock);
    return 0;
}

int softnic_async(uint32_t dev, enum ibv_event_type type)
{
    sn_list_t *pos, *q;
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
        if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_DEVICE_FATAL)
            sn_list_for(q, &ctx->qps) {
                sn_qp_t *qp = sn_container_of(q, sn_qp_t, link);

                if (sn_qp_state(qp) != IBV_QPS_ERR)
                    sn_qp_to_error(qp);
            }
        sn_async_push(ctx, type, NULL, SN_PORT);
    }
    sn_settle();
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
