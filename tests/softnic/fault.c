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
 * The counters are relaxed atomics: a snapshot is not one instant, but each
 * counter is exact once the NIC is idle.
 */
#include "softnic_internal.h"

#include <stdlib.h>
#include <string.h>

enum { SN_FAULT_STATUS, SN_FAULT_LOST_ACK, SN_FAULT_POLL_CQ };

typedef struct sn_fault {
    sn_list_t          link;
    int                kind;
    uint32_t           qpn;     /* SN_FAULT_POLL_CQ: the device index */
    uint64_t           nth, count;
    enum ibv_wc_status status;
    bool               placed;
} sn_fault_t;

static void sn_fault_add(int kind, uint32_t qpn, uint64_t nth, enum ibv_wc_status status,
                         bool placed)
{
    sn_fault_t *f;

    if (nth == 0)
        return;
    f = calloc(1, sizeof(*f));
    if (!f)
        return;
    f->kind = kind;
    f->qpn = qpn;
    f->nth = nth;
    f->status = status;
    f->placed = placed;
    pthread_mutex_lock(&softnic_g.lock);
    sn_list_add_tail(&softnic_g.faults, &f->link);
    if (kind == SN_FAULT_POLL_CQ)
        atomic_fetch_add(&softnic_g.poll_faults, 1);
    pthread_mutex_unlock(&softnic_g.lock);
}

void softnic_fault_wr_status(uint32_t qpn, uint64_t nth, enum ibv_wc_status status)
{
    if (status != IBV_WC_SUCCESS)
        sn_fault_add(SN_FAULT_STATUS, qpn, nth, status, false);
}

void softnic_fault_lost_ack(uint32_t qpn, uint64_t nth, bool placed)
{
    sn_fault_add(SN_FAULT_LOST_ACK, qpn, nth, IBV_WC_SUCCESS, placed);
}

void softnic_fault_poll_cq(uint32_t dev, uint64_t nth)
{
    if (dev < SN_MAX_DEVICES)
        sn_fault_add(SN_FAULT_POLL_CQ, dev, nth, IBV_WC_SUCCESS, false);
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
    pthread_mutex_unlock(&softnic_g.lock);
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

void sn_fault_match(sn_qp_t *qp, sn_cur_t *cur)
{
    sn_list_t *pos, *tmp;
    bool hit = false;

    sn_list_for_safe(pos, tmp, &softnic_g.faults) {
        sn_fault_t *f = sn_container_of(pos, sn_fault_t, link);

        if (f->kind == SN_FAULT_POLL_CQ || (f->qpn != 0 && f->qpn != qp->qpn))
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
