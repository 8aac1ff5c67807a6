/*
 * softnic execution: the NIC threads (THREAD mode) and the progress run by
 * ibv_poll_cq / ibv_get_cq_event (ON_POLL mode).
 *
 * DESIGN
 *
 * What the NIC thread does: one thread per open context (ibv_open_device
 * starts it, ibv_close_device stops and joins it; softnic_configure starts
 * the missing ones when the mode becomes THREAD). It executes the SQs of the
 * context's QPs in rounds: a round gives each QP at most one step of its
 * head WR, in creation order, so QPs share the NIC fairly. A QP's WRs
 * execute strictly in order, one at a time: a WR's bytes are placed, and its
 * receive completion written, before the next WR of the QP starts.
 *
 * What feeds it: posters publish WRs in a QP's SQ ring (post.c) and, when
 * the thread sleeps (ctx->sleeping), signal ctx->cv. The thread sleeps only
 * after a round that did nothing and a recheck of every SQ tail, with a
 * timed wait until the earliest timer of its QPs (delay, pacing, RNR wait,
 * ACK timeout) and at most SN_IDLE_NS: no CPU while idle, every wait
 * bounded. ctx->stop ends it.
 *
 * Locks: a step runs under the fabric lock (softnic_g.lock, which is also
 * the mutex of ctx->cv), and takes CQ locks (and channel and async locks)
 * inside it to write completions. After SN_THREAD_BUDGET steps (or when
 * nothing moves) the thread drops the fabric lock and yields, so verbs calls
 * get in.
 *
 * Invariant: only a holder of the fabric lock executes, flushes or frees
 * anything, so a QP, MR or CQ freed under it is never touched again, and a
 * WR's bytes are in place before any CQE that follows it is visible.
 *
 * A step of the head WR (sn_step): wait for not_before (delay_us after the
 * post, or a retry timer) and for the token buckets (nic_bw per device,
 * qp_bw per QP: virtual time, up to SN_BURST_NS of credit); apply a fault
 * (fault.c); then xfer.c performs it. A remote that cannot be reached (no
 * such QPN, a GID that is not the remote device's, a remote not in RTR/RTS
 * or not connected back to this QP, either port DOWN, a dead remote
 * context, a packet above the receiving port's MTU) gets no ACK: the WR is
 * retried every ACK timeout (4.096 us * 2^timeout / timeout_scale; timeout
 * 0 waits forever, as the spec says) retry_cnt times, then completes with
 * IBV_WC_RETRY_EXC_ERR. An RNR NAK waits the responder's min_rnr_timer
 * (scaled) rnr_retry times (7: forever), then IBV_WC_RNR_RETRY_EXC_ERR.
 * A lost ACK (softnic_fault_lost_ack) is retried like a missing one, never
 * placed twice. The QPs of a dead context (DEVICE_FATAL) take no step at
 * all: their WRs are neither executed nor flushed.
 *
 * ON_POLL: no thread; sn_progress runs rounds over every context of the
 * process until nothing moves or SN_POLL_BUDGET steps ran, on the caller's
 * thread, deterministically for a given sequence of verbs calls (timers
 * still follow the clock).
 */
#include "softnic_internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define SN_BURST_NS      1000000ull
#define SN_THREAD_BUDGET 256 /* steps between two releases of the fabric lock */

/* RNR timer encodings of the IB spec, in units of 10 us (0 is the longest). */
static const uint32_t sn_rnr_10us[32] = {
    65536, 1,   2,   3,   4,    6,    8,    12,   16,   24,    32,    48,    64,    96,    128,   192,
    256,   384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
};

static uint64_t sn_scale(void)
{
    uint32_t s = atomic_load_explicit(&softnic_g.timeout_scale, memory_order_relaxed);

    return s ? s : 1;
}

/* ACK timeout of the QP; UINT64_MAX for timeout 0 (infinite). */
static uint64_t sn_ack_timeout_ns(const sn_qp_t *qp)
{
    if (qp->attr.timeout == 0)
        return UINT64_MAX;
    return ((4096ull << qp->attr.timeout) / sn_scale()) + 1;
}

static uint64_t sn_after(uint64_t now, uint64_t ns)
{
    return ns == UINT64_MAX ? UINT64_MAX : now + ns;
}

/* ---- pacing ---- */

static bool sn_pace_wait(uint64_t vt, uint64_t bw, uint64_t now, uint64_t *deadline)
{
    if (!bw || vt <= now)
        return false;
    if (vt < *deadline)
        *deadline = vt;
    return true;
}

static void sn_pace_charge(uint64_t *vt, uint64_t bw, uint64_t bytes, uint64_t now)
{
    uint64_t start = *vt;

    if (!bw)
        return;
    if (start + SN_BURST_NS < now)
        start = now - SN_BURST_NS;
    *vt = start + bytes * 1000000000ull / bw;
}

/* ---- one step of a QP ---- */

static void sn_cur_start(sn_qp_t *qp, const sn_swqe_t *w)
{
    sn_cur_t *cur = &qp->cur;

    memset(cur, 0, sizeof(*cur));
    cur->started = true;
    cur->phase = SN_PH_TRY;
    cur->not_before = w->not_before;
    cur->retries = qp->attr.retry_cnt;
    cur->rnr = qp->attr.rnr_retry;
}

/* An ACK timer expired: retry, or give up. */
static void sn_step_timeout(sn_qp_t *qp, uint64_t now)
{
    sn_cur_t *cur = &qp->cur;

    if (cur->retries == 0) {
        sn_sq_complete(qp, IBV_WC_RETRY_EXC_ERR, 0);
        return;
    }
    cur->retries--;
    SN_STAT_ADD(retries, 1);
    if (cur->phase == SN_PH_LOST_ACK)
        cur->not_before = sn_after(now, sn_ack_timeout_ns(qp)); /* lost again */
    else
        cur->phase = SN_PH_TRY;
}

/* Run the head WR of the QP once. true if something changed; otherwise
 * *deadline is lowered to when it may. */
static bool sn_step(sn_qp_t *qp, uint64_t now, uint64_t *deadline)
{
    int state = sn_qp_state(qp);
    uint64_t head = atomic_load(&qp->sq_head), tail = atomic_load(&qp->sq_tail);
    uint64_t nic_bw, qp_bw, len, rnr_ns = 0;
    sn_device_t *dev = qp->ctx->dev;
    sn_cur_t *cur = &qp->cur;
    sn_swqe_t *w;
    int r;

    qp->seen_tail = tail;
    if (sn_dead(qp->ctx))
        return false;
    if (state == IBV_QPS_ERR) {
        if (head == tail && atomic_load(&qp->rq_head) == atomic_load(&qp->rq_tail))
            return false;
        sn_qp_flush(qp);
        return true;
    }
    if (head == tail || state != IBV_QPS_RTS)
        return false;
    w = sn_swqe(qp, head);
    if (!cur->started)
        sn_cur_start(qp, w);
    if (now < cur->not_before) {
        if (cur->not_before < *deadline)
            *deadline = cur->not_before;
        return false;
    }
    if (cur->phase != SN_PH_TRY) {
        sn_step_timeout(qp, now);
        return true;
    }
    nic_bw = atomic_load_explicit(&softnic_g.nic_bw, memory_order_relaxed);
    qp_bw = atomic_load_explicit(&softnic_g.qp_bw, memory_order_relaxed);
    if (sn_pace_wait(dev->pace_ns, nic_bw, now, deadline) ||
        sn_pace_wait(qp->pace_ns, qp_bw, now, deadline))
        return false;
    if (!cur->matched) {
        cur->matched = true; /* counted once per WR */
        sn_fault_match(qp, cur, w);
    }
    if (cur->status != IBV_WC_SUCCESS) {
        sn_sq_complete(qp, cur->status, 0);
        return true;
    }
    if (cur->lost_ack && !cur->placed) {
        /* the request itself is lost, every time */
        cur->phase = SN_PH_LOST_ACK;
        cur->not_before = sn_after(now, sn_ack_timeout_ns(qp));
        return true;
    }
    len = w->len; /* the slot may be reused once the WR completed */
    r = sn_xfer(qp, w, cur->lost_ack, &rnr_ns);
    switch (r) {
    case SN_X_UNREACHABLE:
        cur->phase = SN_PH_NO_ACK;
        cur->not_before = sn_after(now, sn_ack_timeout_ns(qp));
        break;
    case SN_X_RNR:
        SN_STAT_ADD(rnr_naks, 1);
        if (qp->attr.rnr_retry != 7) {
            if (cur->rnr == 0) {
                sn_sq_complete(qp, IBV_WC_RNR_RETRY_EXC_ERR, 0);
                break;
            }
            cur->rnr--;
        }
        cur->not_before = now + rnr_ns;
        break;
    case SN_X_PLACED:
        cur->phase = SN_PH_LOST_ACK;
        cur->not_before = sn_after(now, sn_ack_timeout_ns(qp));
        __attribute__((fallthrough)); /* the bytes went on the wire */
    default:
        sn_pace_charge(&dev->pace_ns, nic_bw, len, now);
        sn_pace_charge(&qp->pace_ns, qp_bw, len, now);
        break;
    }
    return true;
}

uint64_t sn_rnr_ns(uint32_t min_rnr_timer)
{
    return (uint64_t)sn_rnr_10us[min_rnr_timer & 31] * 10000ull / sn_scale() + 1;
}

/* One step for each QP of the list; fabric lock held. */
static bool sn_round(sn_list_t *qps, uint64_t now, uint64_t *deadline, uint32_t *budget)
{
    bool moved = false;
    sn_list_t *pos;

    sn_list_for(pos, qps) {
        if (sn_step(sn_container_of(pos, sn_qp_t, link), now, deadline)) {
            moved = true;
            sn_settle();
            if (budget && --*budget == 0)
                break;
        }
    }
    return moved;
}

/* A WR posted since the last round (posters saw sleeping == 0). */
static bool sn_new_work(sn_context_t *ctx)
{
    sn_list_t *pos;

    sn_list_for(pos, &ctx->qps) {
        sn_qp_t *qp = sn_container_of(pos, sn_qp_t, link);

        if (atomic_load(&qp->sq_tail) != qp->seen_tail)
            return true;
    }
    return false;
}

static void sn_cv_wait(sn_context_t *ctx, uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};

    pthread_cond_timedwait(&ctx->cv, &softnic_g.lock, &ts);
}

static void *sn_nic_main(void *arg)
{
    sn_context_t *ctx = arg;

    pthread_mutex_lock(&softnic_g.lock);
    while (!ctx->stop) {
        uint64_t now = sn_now_ns(), deadline = now + SN_IDLE_NS;
        uint32_t budget = SN_THREAD_BUDGET;
        bool moved = false;

        if (atomic_load(&softnic_g.mode) == SOFTNIC_THREAD)
            while (budget && sn_round(&ctx->qps, now, &deadline, &budget)) {
                moved = true;
                now = sn_now_ns();
            }
        if (moved) {
            pthread_mutex_unlock(&softnic_g.lock);
            sched_yield();
            pthread_mutex_lock(&softnic_g.lock);
            continue;
        }
        atomic_store(&ctx->sleeping, 1);
        if (!sn_new_work(ctx) && !ctx->stop)
            sn_cv_wait(ctx, deadline);
        atomic_store(&ctx->sleeping, 0);
    }
    pthread_mutex_unlock(&softnic_g.lock);
    return NULL;
}

int sn_nic_start(sn_context_t *ctx)
{
    int rc;

    ctx->stop = false;
    rc = pthread_create(&ctx->thread, NULL, sn_nic_main, ctx);
    if (rc) {
        SN_TRACE("NIC thread of %s: %s", ctx->dev->ibdev.name, strerror(rc));
        return rc;
    }
    ctx->running = true;
    return 0;
}

void sn_nic_stop(sn_context_t *ctx)
{
    bool running;

    pthread_mutex_lock(&softnic_g.lock);
    running = ctx->running;
    ctx->stop = true;
    pthread_cond_signal(&ctx->cv);
    pthread_mutex_unlock(&softnic_g.lock);
    if (!running)
        return;
    pthread_join(ctx->thread, NULL);
    pthread_mutex_lock(&softnic_g.lock);
    ctx->running = false;
    pthread_mutex_unlock(&softnic_g.lock);
}

void sn_nic_kick(sn_context_t *ctx)
{
    if (!atomic_load(&ctx->sleeping))
        return;
    pthread_mutex_lock(&softnic_g.lock);
    pthread_cond_signal(&ctx->cv);
    pthread_mutex_unlock(&softnic_g.lock);
}

void sn_progress(void)
{
    uint32_t budget = SN_POLL_BUDGET;
    sn_list_t *pos;

    pthread_mutex_lock(&softnic_g.lock);
    while (atomic_load(&softnic_g.mode) == SOFTNIC_ON_POLL && budget) {
        uint64_t now = sn_now_ns(), deadline = UINT64_MAX;
        bool moved = false;

        sn_list_for(pos, &softnic_g.contexts) {
            sn_context_t *ctx = sn_container_of(pos, sn_context_t, link);

            moved |= sn_round(&ctx->qps, now, &deadline, &budget);
            if (!budget)
                break;
        }
        if (!moved)
            break;
    }
    pthread_mutex_unlock(&softnic_g.lock);
}
