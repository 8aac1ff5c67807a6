/*
 * softnic queue pairs: creation, the state machine of ibv_modify_qp, the
 * QPN registry of the fabric, and the error paths every QP shares (moving
 * to error, flushing, CQ overrun).
 *
 * Only RC QPs without SRQ exist (others: NULL, errno EOPNOTSUPP). QPNs are
 * 24-bit, nonzero, handed out in sequence, so a QPN comes back only after
 * 16M others. The caps are granted as asked (max_send_wr <= max_qp_wr,
 * sges <= max_sge, max_inline_data <= max_inline; more is EINVAL).
 *
 * ibv_modify_qp checks what verbs require: the transition (RESET->INIT,
 * INIT->INIT, INIT->RTR, RTR->RTS, RTS->RTS, any->RESET, any->ERR), the
 * required attributes of each and nothing outside its optional ones,
 * port 1, pkey index 0, an AV that is global on RoCE (optional on
 * InfiniBand) with the sgid_index of a GID the port has, a path
 * MTU no larger than the local port's active MTU, qp_access_flags without
 * REMOTE_ATOMIC, max_dest_rd_atomic <= max_rd_atom and max_rd_atomic <=
 * max_init_rd_atom (the configured device limits), and the ranges of
 * timeout, retry_cnt, rnr_retry and min_rnr_timer; anything else is EINVAL.
 * On a dead context (DEVICE_FATAL) ibv_create_qp, ibv_modify_qp and
 * ibv_query_qp fail with EIO, and nothing the NIC does to the QP writes a
 * CQE; ibv_destroy_qp works. As rdma-core, a successful ibv_modify_qp (or
 * ibv_query_qp) with IBV_QP_STATE updates ibv_qp.state; softnic never
 * writes it from its own threads: ibv_query_qp tells whether the NIC moved
 * the QP to error.
 *
 * Moving to RESET drops the posted WRs without completions (CQEs already in
 * the CQs stay). Moving to ERR, by the user or the NIC, flushes every
 * outstanding send WR and posted receive with IBV_WC_WR_FLUSH_ERR, one CQE
 * each, signaled or not. A QP's CQEs stay in its CQs after ibv_destroy_qp.
 */
#include "softnic_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- registry (fabric lock) ---- */

sn_qp_t *sn_qp_find(uint32_t qpn)
{
    sn_qp_t *qp = softnic_g.qp_hash[qpn % SN_QP_BUCKETS];

    while (qp && qp->qpn != qpn)
        qp = qp->hash_next;
    return qp;
}

static uint32_t sn_qpn_alloc(void)
{
    uint32_t qpn;

    do {
        qpn = softnic_g.next_qpn;
        softnic_g.next_qpn = (qpn + 1) & SN_QPN_MASK;
    } while (qpn == 0 || sn_qp_find(qpn));
    return qpn;
}

static void sn_qp_unhash(sn_qp_t *qp)
{
    sn_qp_t **p = &softnic_g.qp_hash[qp->qpn % SN_QP_BUCKETS];

    while (*p != qp)
        p = &(*p)->hash_next;
    *p = qp->hash_next;
}

/* ---- creation ---- */

static size_t sn_align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static int sn_qp_caps_ok(const struct ibv_qp_init_attr *ia)
{
    const softnic_config_t *cfg = &softnic_g.cfg;
    const struct ibv_qp_cap *c = &ia->cap;

    return c->max_send_wr <= cfg->max_qp_wr && c->max_recv_wr <= cfg->max_qp_wr &&
           c->max_send_sge <= cfg->max_sge && c->max_recv_sge <= cfg->max_sge &&
           c->max_inline_data <= cfg->max_inline;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *ibpd, struct ibv_qp_init_attr *ia)
{
    sn_pd_t *pd = sn_container_of(ibpd, sn_pd_t, ibpd);
    sn_qp_t *qp;
    int err = sn_fault_call(SOFTNIC_CALL_CREATE_QP, -1);

    if (err || sn_dead(pd->ctx)) {
        errno = err ? err : EIO;
        return NULL;
    }
    err = EINVAL;
    if (ia->qp_type != IBV_QPT_RC || ia->srq) {
        SN_TRACE("ibv_create_qp: only RC QPs without SRQ");
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!ia->send_cq || !ia->recv_cq || ia->send_cq->context != ibpd->context ||
        ia->recv_cq->context != ibpd->context)
        goto err_out;
    pthread_mutex_lock(&softnic_g.lock);
    if (!sn_qp_caps_ok(ia)) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_create_qp: caps (wr %u/%u, sge %u/%u, inline %u) above the device's",
                 ia->cap.max_send_wr, ia->cap.max_recv_wr, ia->cap.max_send_sge,
                 ia->cap.max_recv_sge, ia->cap.max_inline_data);
        goto err_out;
    }
    pthread_mutex_unlock(&softnic_g.lock);
    qp = calloc(1, sizeof(*qp));
    if (!qp) {
        err = ENOMEM;
        goto err_out;
    }
    qp->cap = ia->cap;
    qp->sq_slot = sn_align16(sizeof(sn_swqe_t) + ia->cap.max_send_sge * sizeof(struct ibv_sge) +
                             ia->cap.max_inline_data);
    qp->rq_slot = sn_align16(sizeof(sn_rwqe_t) + ia->cap.max_recv_sge * sizeof(struct ibv_sge));
    qp->sq = calloc(ia->cap.max_send_wr ? ia->cap.max_send_wr : 1, qp->sq_slot);
    qp->rq = calloc(ia->cap.max_recv_wr ? ia->cap.max_recv_wr : 1, qp->rq_slot);
    if (!qp->sq || !qp->rq) {
        err = ENOMEM;
        goto err_free;
    }
    qp->ctx = pd->ctx;
    qp->pd = pd;
    qp->scq = sn_cq(ia->send_cq);
    qp->rcq = sn_cq(ia->recv_cq);
    qp->sig_all = ia->sq_sig_all != 0;
    qp->attr.port_num = SN_PORT;
    pthread_mutex_init(&qp->lock, NULL);
    pthread_mutex_init(&qp->ibqp.mutex, NULL);
    pthread_cond_init(&qp->ibqp.cond, NULL);
    qp->ibqp.context = ibpd->context;
    qp->ibqp.qp_context = ia->qp_context;
    qp->ibqp.pd = ibpd;
    qp->ibqp.send_cq = ia->send_cq;
    qp->ibqp.recv_cq = ia->recv_cq;
    qp->ibqp.state = IBV_QPS_RESET;
    qp->ibqp.qp_type = IBV_QPT_RC;
    atomic_init(&qp->state, IBV_QPS_RESET);

    pthread_mutex_lock(&softnic_g.lock);
    qp->qpn = sn_qpn_alloc();
    qp->ibqp.qp_num = qp->qpn;
    qp->ibqp.handle = qp->qpn;
    qp->hash_next = softnic_g.qp_hash[qp->qpn % SN_QP_BUCKETS];
    softnic_g.qp_hash[qp->qpn % SN_QP_BUCKETS] = qp;
    sn_list_add_tail(&pd->ctx->qps, &qp->link);
    pd->users++;
    qp->scq->qps++;
    qp->rcq->qps++;
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_opened();
    return &qp->ibqp;

err_free:
    free(qp->sq);
    free(qp->rq);
    free(qp);
err_out:
    errno = err;
    return NULL;
}

/* Detach and free a QP; fabric lock held. */
void sn_qp_free(sn_qp_t *qp)
{
    sn_qp_unhash(qp);
    sn_list_del(&qp->link);
    sn_cq_forget_qp(qp->scq, qp);
    if (qp->rcq != qp->scq)
        sn_cq_forget_qp(qp->rcq, qp);
    sn_async_forget(qp->ctx, &qp->ibqp);
    qp->scq->qps--;
    qp->rcq->qps--;
    qp->pd->users--;
    pthread_mutex_destroy(&qp->lock);
    pthread_mutex_destroy(&qp->ibqp.mutex);
    pthread_cond_destroy(&qp->ibqp.cond);
    free(qp->sq);
    free(qp->rq);
    free(qp);
}

int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    sn_qp_t *qp = sn_qp(ibqp);

    pthread_mutex_lock(&softnic_g.lock);
    if (sn_async_busy_qp(qp)) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_destroy_qp %#x: async event(s) not acknowledged", qp->qpn);
        return EBUSY;
    }
    sn_qp_free(qp);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_closed();
    return 0;
}

/* ---- errors, flush, overrun (fabric lock) ---- */

static enum ibv_wc_opcode sn_wc_opcode(int wr_opcode)
{
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    default:
        return IBV_WC_SEND;
    }
}

void sn_sq_complete(sn_qp_t *qp, enum ibv_wc_status status, uint32_t byte_len)
{
    uint64_t head = atomic_load(&qp->sq_head);
    sn_swqe_t *w = sn_swqe(qp, head);
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = status, .opcode = sn_wc_opcode(w->opcode),
                        .byte_len = byte_len, .qp_num = qp->qpn};
    bool pushed = false;

    pthread_mutex_lock(&qp->scq->lock);
    if (w->signaled || status != IBV_WC_SUCCESS)
        pushed = sn_cq_push(qp->scq, &wc, qp, head, SN_CQE_SQ);
    atomic_store(&qp->sq_head, head + 1);
    pthread_mutex_unlock(&qp->scq->lock);
    if (pushed)
        SN_STAT_ADD(cqes, 1);
    SN_STAT_ADD(wrs_executed, 1);
    memset(&qp->cur, 0, sizeof(qp->cur));
    if (status != IBV_WC_SUCCESS) {
        SN_TRACE("QP %#x: WR %#llx failed: %s", qp->qpn, (unsigned long long)wc.wr_id,
                 ibv_wc_status_str(status));
        sn_qp_to_error(qp);
    }
}

void sn_qp_flush(sn_qp_t *qp)
{
    struct ibv_wc wc = {.status = IBV_WC_WR_FLUSH_ERR, .qp_num = qp->qpn};
    uint64_t h, tail, n = 0;

    pthread_mutex_lock(&qp->scq->lock);
    tail = atomic_load(&qp->sq_tail);
    for (h = atomic_load(&qp->sq_head); h != tail; h++) {
        sn_swqe_t *w = sn_swqe(qp, h);

        wc.wr_id = w->wr_id;
        wc.opcode = sn_wc_opcode(w->opcode);
        n += sn_cq_push(qp->scq, &wc, qp, h, SN_CQE_SQ);
    }
    atomic_store(&qp->sq_head, tail);
    pthread_mutex_unlock(&qp->scq->lock);
    memset(&qp->cur, 0, sizeof(qp->cur));

    wc.opcode = IBV_WC_RECV;
    pthread_mutex_lock(&qp->rcq->lock);
    tail = atomic_load(&qp->rq_tail);
    for (h = atomic_load(&qp->rq_head); h != tail; h++) {
        wc.wr_id = sn_rwqe(qp, h)->wr_id;
        n += sn_cq_push(qp->rcq, &wc, qp, h, SN_CQE_RQ);
    }
    atomic_store(&qp->rq_head, tail);
    pthread_mutex_unlock(&qp->rcq->lock);
    if (n)
        SN_STAT_ADD(cqes, n);
}

void sn_qp_to_error(sn_qp_t *qp)
{
    atomic_store(&qp->state, IBV_QPS_ERR);
    sn_qp_flush(qp);
}

/* Fail the CQs that overran and every QP on them. */
void sn_settle(void)
{
    sn_list_t *c, *q, *x;

    while (atomic_exchange(&softnic_g.overrun_pending, false)) {
        sn_list_for(c, &softnic_g.contexts) {
            sn_context_t *ctx = sn_container_of(c, sn_context_t, link);

            sn_list_for(x, &ctx->cqs) {
                sn_cq_t *cq = sn_container_of(x, sn_cq_t, link);

                if (!atomic_exchange(&cq->overrun_pending, false))
                    continue;
                sn_async_push(ctx, IBV_EVENT_CQ_ERR, &cq->ibcq, 0);
                sn_list_for(q, &ctx->qps) {
                    sn_qp_t *qp = sn_container_of(q, sn_qp_t, link);

                    if (qp->scq != cq && qp->rcq != cq)
                        continue;
                    if (sn_qp_state(qp) != IBV_QPS_ERR)
                        sn_qp_to_error(qp);
                    sn_async_push(ctx, IBV_EVENT_QP_FATAL, &qp->ibqp, 0);
                }
            }
        }
    }
}

/* RESET: drop what is posted, forget the attributes. */
static void sn_qp_reset(sn_qp_t *qp)
{
    uint64_t t;

    pthread_mutex_lock(&qp->lock);
    pthread_mutex_lock(&qp->scq->lock);
    t = atomic_load(&qp->sq_tail);
    atomic_store(&qp->sq_head, t);
    atomic_store(&qp->sq_done, t);
    pthread_mutex_unlock(&qp->scq->lock);
    pthread_mutex_lock(&qp->rcq->lock);
    t = atomic_load(&qp->rq_tail);
    atomic_store(&qp->rq_head, t);
    atomic_store(&qp->rq_done, t);
    pthread_mutex_unlock(&qp->rcq->lock);
    atomic_store(&qp->state, IBV_QPS_RESET);
    pthread_mutex_unlock(&qp->lock);
    memset(&qp->cur, 0, sizeof(qp->cur));
    memset(&qp->attr, 0, sizeof(qp->attr));
    qp->attr.port_num = SN_PORT;
    qp->pace_ns = 0;
}

/* ---- modify / query ---- */

#define M(x) IBV_QP_##x

static const struct sn_trans {
    int cur, next, req, opt;
} sn_trans[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS), 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS)},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) | M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER),
     M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX)},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) | M(SQ_PSN) | M(MAX_QP_RD_ATOMIC),
     M(CUR_STATE) | M(ALT_PATH) | M(ACCESS_FLAGS) | M(MIN_RNR_TIMER) | M(PATH_MIG_STATE)},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0,
     M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) | M(PATH_MIG_STATE) | M(MIN_RNR_TIMER)},
};

static int sn_trans_ok(int cur, int next, int mask)
{
    int attrs = mask & ~M(STATE);

    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return (mask & M(STATE)) && attrs == 0;
    for (size_t i = 0; i < sizeof(sn_trans) / sizeof(sn_trans[0]); i++) {
        const struct sn_trans *t = &sn_trans[i];

        if (t->cur == cur && t->next == next)
            return (attrs & t->req) == t->req && (attrs & ~(t->req | t->opt)) == 0;
    }
    return 0;
}

/* The first bad attribute of the mask, or NULL; fabric lock held. */
static const char *sn_attr_check(const sn_qp_t *qp, const struct ibv_qp_attr *a, int mask)
{
    const unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ;
    const softnic_config_t *cfg = &softnic_g.cfg;

    if ((mask & M(PORT)) && a->port_num != SN_PORT)
        return "port_num";
    if ((mask & M(PKEY_INDEX)) && a->pkey_index != 0)
        return "pkey_index";
    if ((mask & M(ACCESS_FLAGS)) && (a->qp_access_flags & ~access))
        return "qp_access_flags (REMOTE_ATOMIC or unknown bits)";
    if ((mask & M(AV)) && a->ah_attr.port_num > SN_PORT)
        return "ah_attr.port_num";
    if ((mask & M(AV)) && !a->ah_attr.is_global &&
        qp->ctx->dev->link_layer == IBV_LINK_LAYER_ETHERNET)
        return "ah_attr (RoCE needs is_global)";
    if ((mask & M(AV)) && a->ah_attr.is_global &&
        !sn_gid_ok(qp->ctx->dev, a->ah_attr.grh.sgid_index))
        return "ah_attr.grh.sgid_index (no such GID)";
    if ((mask & M(PATH_MTU)) &&
        (a->path_mtu < IBV_MTU_256 || (uint32_t)a->path_mtu > sn_dev_mtu(qp->ctx->dev)))
        return "path_mtu (above the port's active MTU)";
    if ((mask & M(DEST_QPN)) && a->dest_qp_num > SN_QPN_MASK)
        return "dest_qp_num";
    if ((mask & M(MAX_DEST_RD_ATOMIC)) && a->max_dest_rd_atomic > cfg->max_rd_atom)
        return "max_dest_rd_atomic (above max_qp_rd_atom)";
    if ((mask & M(MAX_QP_RD_ATOMIC)) && a->max_rd_atomic > cfg->max_init_rd_atom)
        return "max_rd_atomic (above max_qp_init_rd_atom)";
    if ((mask & M(MIN_RNR_TIMER)) && a->min_rnr_timer > 31)
        return "min_rnr_timer";
    if ((mask & M(TIMEOUT)) && a->timeout > 31)
        return "timeout";
    if ((mask & M(RETRY_CNT)) && a->retry_cnt > 7)
        return "retry_cnt";
    if ((mask & M(RNR_RETRY)) && a->rnr_retry > 7)
        return "rnr_retry";
    return NULL;
}

static void sn_attr_record(sn_qp_t *qp, const struct ibv_qp_attr *a, int mask)
{
    struct ibv_qp_attr *r = &qp->attr;

    if (mask & M(PORT))
        r->port_num = a->port_num;
    if (mask & M(PKEY_INDEX))
        r->pkey_index = a->pkey_index;
    if (mask & M(ACCESS_FLAGS))
        r->qp_access_flags = a->qp_access_flags;
    if (mask & M(AV))
        r->ah_attr = a->ah_attr;
    if (mask & M(PATH_MTU))
        r->path_mtu = a->path_mtu;
    if (mask & M(DEST_QPN))
        r->dest_qp_num = a->dest_qp_num;
    if (mask & M(RQ_PSN))
        r->rq_psn = a->rq_psn & SN_QPN_MASK;
    if (mask & M(SQ_PSN))
        r->sq_psn = a->sq_psn & SN_QPN_MASK;
    if (mask & M(MAX_DEST_RD_ATOMIC))
        r->max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & M(MAX_QP_RD_ATOMIC))
        r->max_rd_atomic = a->max_rd_atomic;
    if (mask & M(MIN_RNR_TIMER))
        r->min_rnr_timer = a->min_rnr_timer;
    if (mask & M(TIMEOUT))
        r->timeout = a->timeout;
    if (mask & M(RETRY_CNT))
        r->retry_cnt = a->retry_cnt;
    if (mask & M(RNR_RETRY))
        r->rnr_retry = a->rnr_retry;
}

int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
    sn_qp_t *qp = sn_qp(ibqp);
    const char *bad;
    int cur, next;
    int err = sn_fault_call(SOFTNIC_CALL_MODIFY_QP,
                            (attr_mask & IBV_QP_STATE) ? (int)attr->qp_state : -1);

    if (err)
        return err;
    pthread_mutex_lock(&softnic_g.lock);
    if (sn_dead(qp->ctx)) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_modify_qp %#x: %s is dead", qp->qpn, qp->ctx->dev->ibdev.name);
        return EIO;
    }
    cur = sn_qp_state(qp);
    next = (attr_mask & M(STATE)) ? (int)attr->qp_state : cur;
    if (!sn_trans_ok(cur, next, attr_mask)) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_modify_qp %#x: %d -> %d with mask %#x is not a valid transition", qp->qpn,
                 cur, next, attr_mask);
        return EINVAL;
    }
    bad = sn_attr_check(qp, attr, attr_mask);
    if (bad) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_modify_qp %#x: bad %s", qp->qpn, bad);
        return EINVAL;
    }
    if (next == IBV_QPS_RESET) {
        sn_qp_reset(qp);
    } else {
        sn_attr_record(qp, attr, attr_mask);
        if (next == IBV_QPS_ERR)
            sn_qp_to_error(qp);
        else
            atomic_store(&qp->state, next);
    }
    sn_settle();
    pthread_mutex_unlock(&softnic_g.lock);
    if (attr_mask & M(STATE))
        ibqp->state = (enum ibv_qp_state)next;
    return 0;
}

int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
                 struct ibv_qp_init_attr *init_attr)
{
    sn_qp_t *qp = sn_qp(ibqp);

    if (sn_dead(qp->ctx))
        return EIO;
    pthread_mutex_lock(&softnic_g.lock);
    *attr = qp->attr;
    attr->qp_state = (enum ibv_qp_state)sn_qp_state(qp);
    attr->cur_qp_state = attr->qp_state;
    attr->cap = qp->cap;
    pthread_mutex_unlock(&softnic_g.lock);
    if (init_attr) {
        memset(init_attr, 0, sizeof(*init_attr));
        init_attr->qp_context = ibqp->qp_context;
        init_attr->send_cq = ibqp->send_cq;
        init_attr->recv_cq = ibqp->recv_cq;
        init_attr->cap = qp->cap;
        init_attr->qp_type = IBV_QPT_RC;
        init_attr->sq_sig_all = qp->sig_all;
    }
    if (attr_mask & M(STATE))
        ibqp->state = attr->qp_state;
    return 0;
}
