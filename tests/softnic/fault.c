/*
 * softnic faults and counters.
 *
 * A fault is matched when a WR is first tried (after its delay and pacing),
 * once per WR: every fault whose QPN is 0 or the WR's QP counts it, and the
 * fault whose count reaches nth hits it and is spent. When two faults reach
 * their nth on the same WR, the first registered applies and both are
 * spent. A status fault of IBV_WC_SUCCESS, or nth 0, is ignored.
 *
 * Poll faults count ibv_poll_cq calls instead, on the CQs of contexts of
 * their device; while one is armed (poll_faults) each poll takes the fabric
 * lock to count, otherwise polls never look at the list.
 *
 * Call faults count the calls of one verbs entry point (softnic_call_t),
 * ibv_modify_qp ones optionally only those to one state. Each hooked call
 * asks sn_fault_call first thing, without the fabric lock held; while none
 * is armed (call_faults) that is one atomic load. Two call faults that
 * reach their nth on the same call are both spent; the first registered
 * gives the errno.
 *
 * The counters are relaxed atomics: a snapshot is not one instant, but each
 * counter is exact once the NIC is idle.
 */
#include "softnic_internal.h"

#include <stdlib.h>
#include <string.h>

enum { SN_FAULT_STATUS, SN_FAULT_LOST_ACK, SN_FAULT_POLL_CQ, SN_FAULT_CALL, SN_FAULT_CORRUPT };

typedef struct sn_fault {
    sn_list_t          link;
    int                kind;
    uint32_t           qpn;     /* SN_FAULT_POLL_CQ: the device index */
    uint64_t           nth, count;
    enum ibv_wc_status status;
    bool               placed;
    softnic_call_t     call;    /* SN_FAULT_CALL: the entry point, */
    int                to;      /* the target state of ibv_modify_qp (-1: any call), */
    int                err;     /* the errno value it fails with */
} sn_fault_t;

static const char *const sn_call_names[SOFTNIC_CALL_COUNT] = {
    [SOFTNIC_CALL_GET_DEVICE_LIST]     = "ibv_get_device_list",
    [SOFTNIC_CALL_OPEN_DEVICE]         = "ibv_open_device",
    [SOFTNIC_CALL_QUERY_DEVICE]        = "ibv_query_device",
    [SOFTNIC_CALL_QUERY_PORT]          = "ibv_query_port",
    [SOFTNIC_CALL_QUERY_GID]           = "ibv_query_gid",
    [SOFTNIC_CALL_QUERY_GID_EX]        = "ibv_query_gid_ex",
    [SOFTNIC_CALL_ALLOC_PD]            = "ibv_alloc_pd",
    [SOFTNIC_CALL_REG_MR]              = "ibv_reg_mr",
    [SOFTNIC_CALL_REG_DMABUF_MR]       = "ibv_reg_dmabuf_mr",
    [SOFTNIC_CALL_CREATE_COMP_CHANNEL] = "ibv_create_comp_channel",
    [SOFTNIC_CALL_CREATE_CQ]           = "ibv_create_cq",
    [SOFTNIC_CALL_REQ_NOTIFY_CQ]       = "ibv_req_notify_cq",
    [SOFTNIC_CALL_CREATE_QP]           = "ibv_create_qp",
    [SOFTNIC_CALL_MODIFY_QP]           = "ibv_modify_qp",
    [SOFTNIC_CALL_POST_RECV]           = "ibv_post_recv",
};

/* Register a copy of *proto (nth 0: none). */
static void sn_fault_add(const sn_fault_t *proto)
{
    sn_fault_t *f;

    if (proto->nth == 0)
        return;
    f = calloc(1, sizeof(*f));
    if (!f)
        return;
    *f = *proto;
    f->count = 0;
    pthread_mutex_lock(&softnic_g.lock);
    sn_list_add_tail(&softnic_g.faults, &f->link);
    if (f->kind == SN_FAULT_POLL_CQ)
        atomic_fetch_add(&softnic_g.poll_faults, 1);
    else if (f->kind == SN_FAULT_CALL)
        atomic_fetch_add(&softnic_g.call_faults, 1);
    pthread_mutex_unlock(&softnic_g.lock);
}

void softnic_fault_wr_status(uint32_t qpn, uint64_t nth, enum ibv_wc_status status)
{
    if (status != IBV_WC_SUCCESS)
        sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_STATUS, .qpn = qpn, .nth = nth,
                                   .status = status});
}

void softnic_fault_lost_ack(uint32_t qpn, uint64_t nth, bool placed)
{
    sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_LOST_ACK, .qpn = qpn, .nth = nth,
                               .placed = placed});
}

void softnic_fault_corrupt(uint32_t qpn, uint64_t nth)
{
    sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_CORRUPT, .qpn = qpn, .nth = nth});
}

void softnic_fault_poll_cq(uint32_t dev, uint64_t nth)
{
    if (dev < SN_MAX_DEVICES)
        sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_POLL_CQ, .qpn = dev, .nth = nth});
}

void softnic_fault_call(softnic_call_t call, uint64_t nth, int err)
{
    if ((unsigned)call < SOFTNIC_CALL_COUNT && err > 0)
        sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_CALL, .call = call, .to = -1, .nth = nth,
                                   .err = err});
}

void softnic_fault_modify_qp(enum ibv_qp_state to, uint64_t nth, int err)
{
    if ((unsigned)to <= IBV_QPS_ERR && err > 0)
        sn_fault_add(&(sn_fault_t){.kind = SN_FAULT_CALL, .call = SOFTNIC_CALL_MODIFY_QP,
                                   .to = (int)to, .nth = nth, .err = err});
}

void softnic_faults_clear(void)
{
    sn_list_t *pos, *tmp;

    pthread_mutex_lock(&softnic_g.lock);
    sn_list_for_safe(pos, tmp, &softnic_g.faults) {
        sn_list_del(pos);
        free(sn_container_of(pos, sn_fault_t, link));
    }
    atomic_store(&softnic_g.poll_faults, 0);
    atomic_store(&softnic_g.call_faults, 0);
    pthread_mutex_unlock(&softnic_g.lock);
}

int sn_fault_call(softnic_call_t call, int to)
{
    sn_list_t *pos, *tmp;
    int err = 0;

    if (atomic_load(&softnic_g.call_faults) == 0)
        return 0;
    pthread_mutex_lock(&softnic_g.lock);
    sn_list_for_safe(pos, tmp, &softnic_g.faults) {
        sn_fault_t *f = sn_container_of(pos, sn_fault_t, link);

        if (f->kind != SN_FAULT_CALL || f->call != call || (f->to >= 0 && f->to != to) ||
            ++f->count < f->nth)
            continue;
        if (!err) {
            err = f->err;
            if (f->to >= 0)
                SN_TRACE("ibv_modify_qp: call fault hits call %llu to state %d: %s",
                         (unsigned long long)f->nth, f->to, strerror(err));
            else
                SN_TRACE("%s: call fault hits call %llu: %s", sn_call_names[call],
                         (unsigned long long)f->nth, strerror(err));
        }
        sn_list_del(pos);
        free(f);
        atomic_fetch_sub(&softnic_g.call_faults, 1);
    }
    pthread_mutex_unlock(&softnic_g.lock);
    return err;
}

int sn_fault_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    int err = sn_fault_call(SOFTNIC_CALL_POST_RECV, -1);

    if (err) {
        *bad_wr = wr;
        return err;
    }
    return sn_post_recv(ibqp, wr, bad_wr);
}

bool sn_fault_poll(sn_cq_t *cq)
{
    sn_list_t *pos, *tmp;
    bool hit = false;

    pthread_mutex_lock(&softnic_g.lock);
    sn_list_for_safe(pos, tmp, &softnic_g.faults) {
        sn_fault_t *f = sn_container_of(pos, sn_fault_t, link);

        if (f->kind != SN_FAULT_POLL_CQ || f->qpn != cq->ctx->dev->index || ++f->count < f->nth)
            continue;
        if (!hit)
            SN_TRACE("%s: poll fault hits poll %llu of its CQs: CQ %u broken",
                     cq->ctx->dev->ibdev.name, (unsigned long long)f->nth, cq->ibcq.handle);
        hit = true;
        sn_list_del(pos);
        free(f);
        atomic_fetch_sub(&softnic_g.poll_faults, 1);
    }
    pthread_mutex_unlock(&softnic_g.lock);
    return hit;
}

void sn_fault_match(sn_qp_t *qp, sn_cur_t *cur, sn_swqe_t *w)
{
    const bool data_write = (w->opcode == IBV_WR_RDMA_WRITE ||
                             w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) && w->len;
    sn_list_t *pos, *tmp;
    bool hit = false;

    sn_list_for_safe(pos, tmp, &softnic_g.faults) {
        sn_fault_t *f = sn_container_of(pos, sn_fault_t, link);

        if (f->kind == SN_FAULT_CORRUPT) {
            if (!data_write || (f->qpn != 0 && f->qpn != qp->qpn) || ++f->count < f->nth)
                continue;
            w->corrupt = 1;
            SN_TRACE("QP %#x: corruption fault hits a WRITE of %llu bytes", qp->qpn,
                     (unsigned long long)w->len);
            sn_list_del(pos);
            free(f);
            continue;
        }
        if ((f->kind != SN_FAULT_STATUS && f->kind != SN_FAULT_LOST_ACK) ||
            (f->qpn != 0 && f->qpn != qp->qpn))
            continue;
        if (++f->count < f->nth)
            continue;
        if (!hit) {
            hit = true;
            if (f->kind == SN_FAULT_STATUS) {
                cur->status = f->status;
            } else {
                cur->lost_ack = true;
                cur->placed = f->placed;
            }
            SN_TRACE("QP %#x: fault (%s) hits WR %llu of the QP", qp->qpn,
                     f->kind == SN_FAULT_STATUS ? ibv_wc_status_str(f->status) : "lost ACK",
                     (unsigned long long)f->nth);
        }
        sn_list_del(pos);
        free(f);
    }
}

void softnic_stats(softnic_stats_t *s)
{
#define SN_RD(f) s->f = atomic_load_explicit(&softnic_g.st.f, memory_order_relaxed)
    SN_RD(wrs_posted);
    SN_RD(wrs_executed);
    SN_RD(bytes_placed);
    SN_RD(access_errors);
    SN_RD(rnr_naks);
    SN_RD(retries);
    SN_RD(cqes);
    SN_RD(cq_overruns);
    SN_RD(post_errors);
#undef SN_RD
}

void softnic_stats_reset(void)
{
#define SN_ZERO(f) atomic_store_explicit(&softnic_g.st.f, 0, memory_order_relaxed)
    SN_ZERO(wrs_posted);
    SN_ZERO(wrs_executed);
    SN_ZERO(bytes_placed);
    SN_ZERO(access_errors);
    SN_ZERO(rnr_naks);
    SN_ZERO(retries);
    SN_ZERO(cqes);
    SN_ZERO(cq_overruns);
    SN_ZERO(post_errors);
#undef SN_ZERO
}
