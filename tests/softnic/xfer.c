/*
 * softnic transfers: what one send WR does on the fabric once exec.c lets
 * it go (fabric lock held). The requester's QP reaches its remote by
 * (dest GID, dest QPN) on RoCE, by (DLID, dest QPN) on InfiniBand (and the
 * dest GID with a GRH); the responder checks what a NIC checks.
 *
 * Local sges (not inline): the lkey must exist, belong to the QP's PD and
 * cover [addr, addr + length); the sges of a READ and of a receive must
 * also have IBV_ACCESS_LOCAL_WRITE. Otherwise IBV_WC_LOC_PROT_ERR.
 *
 * RDMA WRITE / WRITE_WITH_IMM: the rkey must exist at the responder, belong
 * to the responder QP's PD, have REMOTE_WRITE, and so must the responder
 * QP's qp_access_flags; [remote_addr, +len) must lie in the MR (a zero-length
 * WRITE checks nothing). Otherwise the requester completes with
 * IBV_WC_REM_ACCESS_ERR and goes to error, and so does the responder QP
 * (IB spec, mlx5): its posted receives and send WRs are flushed and its
 * context gets IBV_EVENT_QP_ACCESS_ERR.
 * WITH_IMM consumes a receive (RNR if none) and completes it with
 * IBV_WC_RECV_RDMA_WITH_IMM, byte_len = len, the immediate data.
 *
 * SEND / SEND_WITH_IMM: consume a receive (none: RNR) and scatter into its
 * sges. A receive shorter than the message: responder IBV_WC_LOC_LEN_ERR,
 * requester IBV_WC_REM_INV_REQ_ERR, both QPs to error. A receive whose sges
 * fail the local checks: responder IBV_WC_LOC_PROT_ERR, requester
 * IBV_WC_REM_OP_ERR, both to error.
 *
 * RDMA READ: the rkey needs REMOTE_READ (MR and responder QP), as above;
 * the bytes are scattered into the local sges; the CQE has byte_len = len.
 *
 * MTU: a packet carries min(len, path_mtu of its sender) bytes and is
 * dropped by a port whose active MTU is smaller: a WRITE's or SEND's by the
 * responder's port, a READ's responses (after the access checks) by the
 * requester's. A dropped packet is no ACK: SN_X_UNREACHABLE, retried.
 *
 * Bytes move only with move_data; each receive completion is written after
 * the bytes it announces, and before the requester's completion.
 */
#include "softnic_internal.h"

#include <string.h>

/* ---- scatter/gather cursors ---- */

typedef struct sn_it {
    const struct ibv_sge *sge; /* NULL: the flat buffer */
    uint32_t              n, i;
    uint64_t              off;
    uint8_t              *flat;
    uint64_t              flat_len;
} sn_it_t;

static void sn_it_sges(sn_it_t *it, const struct ibv_sge *sge, uint32_t n)
{
    memset(it, 0, sizeof(*it));
    it->sge = sge;
    it->n = n;
}

static void sn_it_flat(sn_it_t *it, uint8_t *p, uint64_t len)
{
    memset(it, 0, sizeof(*it));
    it->flat = p;
    it->flat_len = len;
}

/* The contiguous bytes at the cursor: their count, *p their address. */
static uint64_t sn_it_span(sn_it_t *it, uint8_t **p)
{
    if (!it->sge) {
        *p = it->flat + it->off;
        return it->flat_len - it->off;
    }
    while (it->i < it->n && it->off == it->sge[it->i].length) {
        it->i++;
        it->off = 0;
    }
    if (it->i == it->n)
        return 0;
    *p = sn_mr_ptr(sn_mr_lkey(it->sge[it->i].lkey), it->sge[it->i].addr, it->sge[it->i].length) +
         it->off;
    return it->sge[it->i].length - it->off;
}

static void sn_it_copy(sn_it_t *dst, sn_it_t *src, uint64_t len)
{
    while (len) {
        uint8_t *d, *s;
        uint64_t a = sn_it_span(dst, &d), b = sn_it_span(src, &s), n = len;

        if (a < n)
            n = a;
        if (b < n)
            n = b;
        if (!n)
            break;
        memmove(d, s, n);
        dst->off += n;
        src->off += n;
        len -= n;
    }
}

/* ---- checks ---- */

static bool sn_sges_ok(const sn_qp_t *qp, const struct ibv_sge *sge, uint32_t n, bool write,
                       uint64_t *total_p)
{
    uint64_t total = 0;

    for (uint32_t i = 0; i < n; i++) {
        sn_mr_t *mr;

        total += sge[i].length;
        if (sge[i].length == 0)
            continue;
        mr = sn_mr_lkey(sge[i].lkey);
        if (!mr || mr->pd != qp->pd || !sn_mr_ptr(mr, sge[i].addr, sge[i].length) ||
            (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
            return false;
    }
    if (total_p)
        *total_p = total;
    return true;
}

/* The responder's MR for [addr, +len) with `need` access, or NULL. */
static sn_mr_t *sn_remote_mr(const sn_qp_t *r, uint32_t rkey, uint64_t addr, uint64_t len,
                             unsigned int need)
{
    sn_mr_t *mr = sn_mr_rkey(rkey);

    if (!mr || mr->pd != r->pd || !(mr->access & need) || !(r->attr.qp_access_flags & need) ||
        !sn_mr_ptr(mr, addr, len))
        return NULL;
    return mr;
}

/* Whether the QP's AV names the port of `r`: on RoCE its GID at the
 * local sgid_index; on InfiniBand its LID (a port without one is reached
 * by no packet), and with a GRH that GID too. */
static bool sn_av_reaches(const sn_qp_t *qp, const sn_qp_t *r)
{
    const struct ibv_ah_attr *ah = &qp->attr.ah_attr;
    const sn_device_t *d = r->ctx->dev;

    if (d->link_layer != qp->ctx->dev->link_layer)
        return false;
    if (d->link_layer == IBV_LINK_LAYER_INFINIBAND && (ah->dlid == 0 || ah->dlid != d->lid))
        return false;
    return !ah->is_global || (sn_gid_ok(d, ah->grh.sgid_index) &&
                              memcmp(&d->gid[ah->grh.sgid_index].gid, &ah->grh.dgid,
                                     sizeof(ah->grh.dgid)) == 0);
}

/* The responder of the QP, or NULL when it cannot be reached. */
static sn_qp_t *sn_resolve(const sn_qp_t *qp)
{
    sn_qp_t *r;
    int st;

    if (atomic_load(&qp->ctx->dev->port_state) != IBV_PORT_ACTIVE)
        return NULL;
    r = sn_qp_find(qp->attr.dest_qp_num);
    if (!r)
        return NULL;
    st = sn_qp_state(r);
    if ((st != IBV_QPS_RTR && st != IBV_QPS_RTS) || sn_dead(r->ctx) ||
        atomic_load(&r->ctx->dev->port_state) != IBV_PORT_ACTIVE || !sn_av_reaches(qp, r) ||
        r->attr.dest_qp_num != qp->qpn)
        return NULL;
    return r;
}

/* Whether the largest packet `from` sends for len bytes fits the port of `to`. */
static bool sn_mtu_fits(const sn_qp_t *from, const sn_qp_t *to, uint64_t len)
{
    uint64_t pkt = 128ull << from->attr.path_mtu, mtu = 128ull << sn_dev_mtu(to->ctx->dev);

    if (len < pkt)
        pkt = len;
    if (pkt <= mtu)
        return true;
    SN_TRACE("QP %#x -> QP %#x: a %llu-byte packet above the %llu-byte MTU of %s: dropped",
             from->qpn, to->qpn, (unsigned long long)pkt, (unsigned long long)mtu,
             to->ctx->dev->ibdev.name);
    return false;
}

/* A remote access refused: both QPs to error, IBV_EVENT_QP_ACCESS_ERR for the
 * responder's. */
static int sn_access_error(sn_qp_t *qp, sn_qp_t *r)
{
    SN_STAT_ADD(access_errors, 1);
    sn_sq_complete(qp, IBV_WC_REM_ACCESS_ERR, 0);
    if (sn_qp_state(r) != IBV_QPS_ERR) {
        sn_qp_to_error(r);
        sn_async_push(r->ctx, IBV_EVENT_QP_ACCESS_ERR, &r->ibqp, 0);
    }
    return SN_X_DONE;
}

/* ---- the responder's receive ---- */

static bool sn_rq_empty(sn_qp_t *r)
{
    return atomic_load(&r->rq_head) == atomic_load(&r->rq_tail);
}

static void sn_recv_complete(sn_qp_t *r, struct ibv_wc *wc)
{
    uint64_t h = atomic_load(&r->rq_head);
    bool pushed;

    wc->wr_id = sn_rwqe(r, h)->wr_id;
    wc->qp_num = r->qpn;
    pthread_mutex_lock(&r->rcq->lock);
    pushed = sn_cq_push(r->rcq, wc, r, h, SN_CQE_RQ);
    atomic_store(&r->rq_head, h + 1);
    pthread_mutex_unlock(&r->rcq->lock);
    if (pushed)
        SN_STAT_ADD(cqes, 1);
}

/* The requester fails with `req`; the responder too, with `resp`. */
static int sn_fail_both(sn_qp_t *qp, sn_qp_t *r, enum ibv_wc_status req, enum ibv_wc_status resp,
                        struct ibv_wc *rwc)
{
    rwc->status = resp;
    sn_recv_complete(r, rwc);
    sn_sq_complete(qp, req, 0);
    if (sn_qp_state(r) != IBV_QPS_ERR)
        sn_qp_to_error(r);
    return SN_X_DONE;
}

static void sn_source(sn_qp_t *qp, sn_swqe_t *w, sn_it_t *it)
{
    if (w->inl)
        sn_it_flat(it, sn_swqe_inline(qp, w), w->len);
    else
        sn_it_sges(it, w->sge, w->num_sge);
}

/* ---- operations ---- */

static int sn_write(sn_qp_t *qp, sn_qp_t *r, sn_swqe_t *w, bool move, bool imm)
{
    struct ibv_wc rwc = {.opcode = IBV_WC_RECV_RDMA_WITH_IMM, .src_qp = qp->qpn};
    sn_it_t src, dst;
    sn_mr_t *mr = NULL;

    if (w->len) {
        mr = sn_remote_mr(r, w->rkey, w->remote_addr, w->len, IBV_ACCESS_REMOTE_WRITE);
        if (!mr)
            return sn_access_error(qp, r);
    }
    if (imm && sn_rq_empty(r))
        return SN_X_RNR;
    if (mr && move) {
        sn_source(qp, w, &src);
        sn_it_flat(&dst, sn_mr_ptr(mr, w->remote_addr, w->len), w->len);
        sn_it_copy(&dst, &src, w->len);
        SN_STAT_ADD(bytes_placed, w->len);
        if (w->corrupt)
            sn_mr_ptr(mr, w->remote_addr, w->len)[w->len / 2] ^= 0x10;
    }
    if (imm) {
        rwc.byte_len = (uint32_t)w->len;
        rwc.imm_data = w->imm;
        rwc.wc_flags = IBV_WC_WITH_IMM;
        sn_recv_complete(r, &rwc);
    }
    return SN_X_PLACED;
}

static int sn_send(sn_qp_t *qp, sn_qp_t *r, sn_swqe_t *w, bool move, bool imm)
{
    struct ibv_wc rwc = {.opcode = IBV_WC_RECV, .src_qp = qp->qpn};
    sn_rwqe_t *rw;
    sn_it_t src, dst;
    uint64_t room;

    if (sn_rq_empty(r))
        return SN_X_RNR;
    rw = sn_rwqe(r, atomic_load(&r->rq_head));
    if (!sn_sges_ok(r, rw->sge, rw->num_sge, true, &room))
        return sn_fail_both(qp, r, IBV_WC_REM_OP_ERR, IBV_WC_LOC_PROT_ERR, &rwc);
    if (room < w->len)
        return sn_fail_both(qp, r, IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR, &rwc);
    if (move && w->len) {
        sn_source(qp, w, &src);
        sn_it_sges(&dst, rw->sge, rw->num_sge);
        sn_it_copy(&dst, &src, w->len);
        SN_STAT_ADD(bytes_placed, w->len);
    }
    rwc.byte_len = (uint32_t)w->len;
    if (imm) {
        rwc.imm_data = w->imm;
        rwc.wc_flags = IBV_WC_WITH_IMM;
    }
    sn_recv_complete(r, &rwc);
    return SN_X_PLACED;
}

static int sn_read(sn_qp_t *qp, sn_qp_t *r, sn_swqe_t *w, bool move)
{
    sn_it_t src, dst;
    sn_mr_t *mr = NULL;

    if (w->len) {
        mr = sn_remote_mr(r, w->rkey, w->remote_addr, w->len, IBV_ACCESS_REMOTE_READ);
        if (!mr)
            return sn_access_error(qp, r);
    }
    if (!sn_mtu_fits(r, qp, w->len))
        return SN_X_UNREACHABLE; /* the responses are dropped */
    if (mr && move) {
        sn_it_flat(&src, sn_mr_ptr(mr, w->remote_addr, w->len), w->len);
        sn_it_sges(&dst, w->sge, w->num_sge);
        sn_it_copy(&dst, &src, w->len);
        SN_STAT_ADD(bytes_placed, w->len);
    }
    return SN_X_PLACED;
}

int sn_xfer(sn_qp_t *qp, sn_swqe_t *w, bool hold_ack, uint64_t *rnr_ns_p)
{
    bool move = atomic_load_explicit(&softnic_g.move_data, memory_order_relaxed);
    sn_qp_t *r = sn_resolve(qp);
    int rc;

    if (!r)
        return SN_X_UNREACHABLE;
    if (w->len > SN_MAX_MSG) {
        sn_sq_complete(qp, IBV_WC_LOC_LEN_ERR, 0);
        return SN_X_DONE;
    }
    if (!w->inl && !sn_sges_ok(qp, w->sge, w->num_sge, w->opcode == IBV_WR_RDMA_READ, NULL)) {
        sn_sq_complete(qp, IBV_WC_LOC_PROT_ERR, 0);
        return SN_X_DONE;
    }
    if (w->opcode != IBV_WR_RDMA_READ && !sn_mtu_fits(qp, r, w->len))
        return SN_X_UNREACHABLE;
    switch (w->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        rc = sn_write(qp, r, w, move, w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
        break;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        rc = sn_send(qp, r, w, move, w->opcode == IBV_WR_SEND_WITH_IMM);
        break;
    default:
        rc = sn_read(qp, r, w, move);
        break;
    }
    if (rc == SN_X_RNR)
        *rnr_ns_p = sn_rnr_ns(r->attr.min_rnr_timer);
    if (rc != SN_X_PLACED || hold_ack)
        return rc;
    sn_sq_complete(qp, IBV_WC_SUCCESS, (uint32_t)w->len);
    return SN_X_DONE;
}
