/*
 * softnic post path: ibv_post_send and ibv_post_recv (ops.post_send,
 * ops.post_recv of every softnic context).
 *
 * ibv_post_send checks each WR of the chain in order, as providers do: the
 * QP state (RTS; RESET, INIT or RTR is EINVAL), the opcode (RDMA_WRITE,
 * RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ; others EINVAL),
 * num_sge <= max_send_sge (EINVAL), IBV_SEND_INLINE with at most
 * max_inline_data bytes and not on a READ (EINVAL), a free SQ slot (ENOMEM).
 * The first WR that fails is *bad_wr and the call returns its error; the
 * WRs before it are posted. A slot is free again once the WR's completion,
 * or that of a later WR of the QP, has been polled.
 *
 * Inline bytes are copied at post time (their lkeys are not looked at);
 * other sges are referenced, and their memory is read when the WR executes.
 *
 * A QP in ERR accepts WRs (send and receive) and flushes them at once with
 * IBV_WC_WR_FLUSH_ERR, as mlx5 does. A QP of a dead context (DEVICE_FATAL)
 * takes nothing: EIO, *bad_wr the first WR (one relaxed load per call).
 *
 * THREAD and ON_POLL: the WRs are copied into the QP's SQ ring under the
 * QP's lock, the tail is published, and the NIC thread is woken if it
 * sleeps (a load of one flag otherwise). NULL: under the send CQ's lock
 * only, each WR is validated and completed at once (a CQE for each signaled
 * WR, nothing moved): no malloc, no syscall unless the CQ is armed.
 */
#include "softnic_internal.h"

#include <errno.h>
#include <string.h>

/* The checks of one send WR; *len_p its bytes when `want_len` or inline. */
static inline int sn_send_check(const sn_qp_t *qp, const struct ibv_send_wr *wr, bool want_len,
                                uint64_t *len_p)
{
    uint64_t len = 0;

    if ((unsigned)wr->opcode > IBV_WR_RDMA_READ) {
        SN_TRACE("post_send QP %#x: opcode %d not supported", qp->qpn, (int)wr->opcode);
        return EINVAL;
    }
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge) {
        SN_TRACE("post_send QP %#x: num_sge %d > max_send_sge %u", qp->qpn, wr->num_sge,
                 qp->cap.max_send_sge);
        return EINVAL;
    }
    if (!want_len && !(wr->send_flags & IBV_SEND_INLINE))
        return 0;
    for (int i = 0; i < wr->num_sge; i++)
        len += wr->sg_list[i].length;
    if ((wr->send_flags & IBV_SEND_INLINE) &&
        (wr->opcode == IBV_WR_RDMA_READ || len > qp->cap.max_inline_data)) {
        SN_TRACE("post_send QP %#x: inline %llu bytes > max_inline_data %u (or a READ)", qp->qpn,
                 (unsigned long long)len, qp->cap.max_inline_data);
        return EINVAL;
    }
    *len_p = len;
    return 0;
}

static void sn_swqe_fill(sn_qp_t *qp, sn_swqe_t *w, const struct ibv_send_wr *wr, uint64_t len,
                         uint64_t not_before)
{
    w->wr_id = wr->wr_id;
    w->opcode = (uint8_t)wr->opcode;
    w->signaled = qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    w->remote_addr = wr->wr.rdma.remote_addr;
    w->rkey = wr->wr.rdma.rkey;
    w->imm = wr->imm_data;
    w->len = len;
    w->not_before = not_before;
    w->inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
    w->corrupt = 0;
    if (w->inl) {
        uint8_t *p = sn_swqe_inline(qp, w);

        for (int i = 0; i < wr->num_sge; i++) {
            memcpy(p, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
            p += wr->sg_list[i].length;
        }
        w->num_sge = 0;
    } else {
        w->num_sge = (uint32_t)wr->num_sge;
        if (wr->num_sge)
            memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
    }
}

/* A dead context refuses every post; false if the QP's context lives. */
static inline bool sn_post_dead(const sn_qp_t *qp)
{
    if (!sn_dead(qp->ctx))
        return false;
    SN_STAT_ADD(post_errors, 1);
    SN_TRACE("post QP %#x: %s is dead", qp->qpn, qp->ctx->dev->ibdev.name);
    return true;
}

/* WRs posted into a QP in ERR: flush them now. */
static void sn_post_flush(sn_qp_t *qp)
{
    pthread_mutex_lock(&softnic_g.lock);
    sn_qp_flush(qp);
    sn_settle();
    pthread_mutex_unlock(&softnic_g.lock);
}

static int sn_post_send_null(sn_qp_t *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    sn_cq_t *cq = qp->scq;
    struct ibv_wc wc = {.qp_num = qp->qpn};
    uint64_t tail, done, n = 0, cqes = 0;
    int state, err = 0;

    pthread_mutex_lock(&cq->lock);
    state = sn_qp_state(qp);
    tail = atomic_load_explicit(&qp->sq_tail, memory_order_relaxed);
    done = atomic_load_explicit(&qp->sq_done, memory_order_relaxed);
    for (; wr; wr = wr->next) {
        bool cqe = state == IBV_QPS_ERR || qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
        uint64_t len = 0;

        if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
            err = EINVAL;
            break;
        }
        err = sn_send_check(qp, wr, cqe, &len);
        if (err)
            break;
        if (tail - done >= qp->cap.max_send_wr) {
            err = ENOMEM;
            break;
        }
        if (cqe) {
            wc.wr_id = wr->wr_id;
            wc.status = state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR : IBV_WC_SUCCESS;
            wc.opcode = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
                        : wr->opcode <= IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RDMA_WRITE
                                                                   : IBV_WC_SEND;
            wc.byte_len = (uint32_t)len;
            cqes += sn_cq_push(cq, &wc, qp, tail, SN_CQE_SQ);
        }
        tail++;
        n++;
    }
    atomic_store_explicit(&qp->sq_tail, tail, memory_order_relaxed);
    atomic_store_explicit(&qp->sq_head, tail, memory_order_relaxed);
    pthread_mutex_unlock(&cq->lock);
    if (n) {
        SN_STAT_ADD(wrs_posted, n);
        SN_STAT_ADD(wrs_executed, n);
    }
    if (cqes)
        SN_STAT_ADD(cqes, cqes);
    if (err) {
        SN_STAT_ADD(post_errors, 1);
        *bad_wr = wr;
    }
    if (atomic_load_explicit(&softnic_g.overrun_pending, memory_order_relaxed)) {
        pthread_mutex_lock(&softnic_g.lock);
        sn_settle();
        pthread_mutex_unlock(&softnic_g.lock);
    }
    return err;
}

int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    sn_qp_t *qp = sn_qp(ibqp);
    int mode = atomic_load_explicit(&softnic_g.mode, memory_order_relaxed);
    uint32_t delay_us;
    uint64_t tail, done, n = 0, not_before = 0;
    int state, err = 0;

    if (sn_post_dead(qp)) {
        *bad_wr = wr;
        return EIO;
    }
    if (mode == SOFTNIC_NULL)
        return sn_post_send_null(qp, wr, bad_wr);
    delay_us = atomic_load_explicit(&softnic_g.delay_us, memory_order_relaxed);
    if (delay_us)
        not_before = sn_now_ns() + (uint64_t)delay_us * 1000;
    pthread_mutex_lock(&qp->lock);
    state = sn_qp_state(qp);
    tail = atomic_load_explicit(&qp->sq_tail, memory_order_relaxed);
    done = atomic_load_explicit(&qp->sq_done, memory_order_acquire);
    for (; wr; wr = wr->next) {
        uint64_t len;

        if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
            SN_TRACE("post_send QP %#x: state %d is not RTS", qp->qpn, state);
            err = EINVAL;
            break;
        }
        err = sn_send_check(qp, wr, true, &len);
        if (err)
            break;
        if (tail - done >= qp->cap.max_send_wr)
            done = atomic_load_explicit(&qp->sq_done, memory_order_acquire);
        if (tail - done >= qp->cap.max_send_wr) {
            err = ENOMEM;
            break;
        }
        sn_swqe_fill(qp, sn_swqe(qp, tail), wr, len, not_before);
        tail++;
        n++;
    }
    atomic_store(&qp->sq_tail, tail);
    pthread_mutex_unlock(&qp->lock);
    if (err) {
        SN_STAT_ADD(post_errors, 1);
        *bad_wr = wr;
    }
    if (!n)
        return err;
    SN_STAT_ADD(wrs_posted, n);
    if (sn_qp_state(qp) == IBV_QPS_ERR)
        sn_post_flush(qp);
    else if (mode == SOFTNIC_THREAD)
        sn_nic_kick(qp->ctx);
    return err;
}

int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    sn_qp_t *qp = sn_qp(ibqp);
    uint64_t tail, done, n = 0;
    int state, err = 0;

    if (sn_post_dead(qp)) {
        *bad_wr = wr;
        return EIO;
    }
    pthread_mutex_lock(&qp->lock);
    state = sn_qp_state(qp);
    tail = atomic_load_explicit(&qp->rq_tail, memory_order_relaxed);
    done = atomic_load_explicit(&qp->rq_done, memory_order_acquire);
    for (; wr; wr = wr->next) {
        sn_rwqe_t *r;

        if (state == IBV_QPS_RESET) {
            SN_TRACE("post_recv QP %#x: QP in RESET", qp->qpn);
            err = EINVAL;
            break;
        }
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_recv_sge) {
            SN_TRACE("post_recv QP %#x: num_sge %d > max_recv_sge %u", qp->qpn, wr->num_sge,
                     qp->cap.max_recv_sge);
            err = EINVAL;
            break;
        }
        if (tail - done >= qp->cap.max_recv_wr)
            done = atomic_load_explicit(&qp->rq_done, memory_order_acquire);
        if (tail - done >= qp->cap.max_recv_wr) {
            err = ENOMEM;
            break;
        }
        r = sn_rwqe(qp, tail);
        r->wr_id = wr->wr_id;
        r->num_sge = (uint32_t)wr->num_sge;
        if (wr->num_sge)
            memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
        tail++;
        n++;
    }
    atomic_store(&qp->rq_tail, tail);
    pthread_mutex_unlock(&qp->lock);
    if (err) {
        SN_STAT_ADD(post_errors, 1);
        *bad_wr = wr;
    }
    if (n && sn_qp_state(qp) == IBV_QPS_ERR)
        sn_post_flush(qp);
    return err;
}
