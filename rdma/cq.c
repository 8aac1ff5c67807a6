/*
 * rdma completion queues: one ibv CQ and one completion channel each.
 *
 * The CQ keeps a table of its eps (slot, generation). Every WR's ibv wr_id
 * names its ep's slot and generation, its queue and its ring index
 * (rdma.h), so a completion finds its ep in O(1) and a completion of an ep
 * that was destroyed (its slot's generation moved on) is dropped.
 *
 * Consuming a completion frees the ring entries it covers: a send-queue
 * completion at ring index i frees every entry from the ep's sq_done to i
 * (the unsignaled WRs before it succeeded silently), and releases the
 * regions those WRs used, one atomic per run of one region. An ep
 * therefore never has more completions pending than sq_depth + rq_depth,
 * and ep_create refuses an ep whose depths do not fit what is left of the
 * CQ: the CQ never overruns.
 *
 * Error completions: ibv_wc_status becomes a pdx_status_t (map_status) and
 * the ep goes to error with a message naming the WR's opcode, the status,
 * the vendor_err and both QPNs. A flushed WR completes with the status the
 * ep failed with (ep_fail's `why`, else PDX_ERR_PEER). A flush CQE says
 * the QP is in error, not why: its record gives way to a cause that comes
 * later (an async event the async thread had not handled yet, a non-flush
 * error CQE). An error completion's opcode field is undefined in verbs; the
 * ring says what the WR was.
 *
 * A WR posted by a call that was refused (post.c: `hidden`) completes to
 * nobody. A CQE may overtake the post call that took its WR (the NIC was
 * quicker than the provider's return): the poller then waits for the call
 * to publish sq_head, which it does at once, to know whether it was
 * refused.
 *
 * Where the NIC reports nothing more (rdma.h: software flush), cq_poll
 * completes the eps concerned from their rings (sw_flush.c), and drops their
 * CQEs. A failing ibv_poll_cq, ibv_req_notify_cq or ibv_get_cq_event puts
 * the CQ in error that way (rdma_cq_fail): cq_arm then answers PDX_ERR_IO
 * for good, so the caller's sleeps stay bounded.
 *
 * cq_fd is the completion channel's fd (nonblocking): cq_arm, poll once
 * more, sleep on the fd, cq_ack (reads and acks every pending event).
 */
#include "rdma/rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>

#define RDMA_POLL_BATCH 32

static pdx_status_t map_status(enum ibv_wc_status s, bool recv)
{
    switch (s) {
    case IBV_WC_SUCCESS:
        return PDX_OK;
    case IBV_WC_LOC_LEN_ERR:
        /* a RECV: the peer sent more than the buffer holds */
        return recv ? PDX_ERR_PROTO : PDX_ERR_IO;
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
        return PDX_ERR_IO;
    case IBV_WC_REM_ACCESS_ERR:
        return PDX_ERR_RANGE;
    case IBV_WC_REM_INV_REQ_ERR:
        /* our SEND did not fit the peer's receive, or a request it refused */
        return PDX_ERR_PROTO;
    default:
        /* flushes, retries exceeded, RNR, remote and fatal errors */
        return PDX_ERR_PEER;
    }
}

static const char *op_str(uint32_t opcode)
{
    static const char *const names[] = {
        [PDX_TP_OP_WRITE] = "WRITE",
        [PDX_TP_OP_SEND] = "SEND",
        [PDX_TP_OP_RECV] = "RECV",
        [PDX_TP_OP_READ] = "READ",
    };

    return opcode < PDX_ARRAY_SIZE(names) ? names[opcode] : "?";
}

/* The ep's error from an error CQE; the status the completion gets. */
static pdx_status_t __attribute__((cold, noinline))
wc_error(rdma_ep_t *ep, const struct ibv_wc *w, uint32_t opcode, pdx_status_t status)
{
    bool flush = w->status == IBV_WC_WR_FLUSH_ERR;
    int why;

    rdma_ep_set_error(ep, PDX_ERR_PEER, flush ? RDMA_ERR_FLUSH : RDMA_ERR_CAUSE,
                      "%s: %s (vendor_err 0x%x) on QP 0x%x, remote QP 0x%x", op_str(opcode),
                      ibv_wc_status_str(w->status), w->vendor_err, ep->qpn,
                      atomic_load_explicit(&ep->remote_qpn, memory_order_relaxed));
    /* ep_error says why once this completion is out, whoever recorded it */
    rdma_ep_errmsg_wait(ep);
    if (!flush)
        return status;
    why = atomic_load_explicit(&ep->err, memory_order_acquire);
    return why ? (pdx_status_t)why : PDX_ERR_PEER;
}

/* A CQE overtook the post call of its WR: sq_head once that call returned. */
static uint64_t __attribute__((noinline)) sq_wait_posted(rdma_ep_t *ep, uint64_t seq)
{
    uint64_t head;
    unsigned spins = 0;

    while ((head = atomic_load_explicit(&ep->sq_head, memory_order_acquire)) <= seq) {
        if (++spins < 64)
            pdx_cpu_relax();
        else
            sched_yield();
    }
    return head;
}

/*
 * A CQE of a hidden WR (post.c). It frees the entries from sq_done to it.
 * Hidden entries end the ring (the refused call failed the ep), so any it
 * covers before them are unsignaled WRs of earlier calls that succeeded
 * (had they been flushed, each would have had its CQE, in order, before
 * this one): the last of those completes, with PDX_OK. False when it
 * covers none.
 */
static bool __attribute__((cold, noinline))
wc_hidden(rdma_ep_t *ep, const struct ibv_wc *w, uint64_t done, uint64_t seq, pdx_tp_wc_t *out)
{
    uint64_t last = seq;
    bool shown;

    while (last > done && ep->sq[(last - 1) & ep->sq_mask].hidden)
        last--;
    shown = last > done;
    if (shown) {
        const rdma_wqe_t *e = &ep->sq[(last - 1) & ep->sq_mask];

        *out = (pdx_tp_wc_t){.wr_id = e->wr_id, .ep = rdma_ep_pub(ep), .status = PDX_OK,
                             .opcode = (pdx_tp_opcode_t)e->opcode};
    }
    pdx_debug("rdma: %s: QP 0x%x: %s for a WR of a refused post: dropped", ep->tp->dev.name,
              ep->qpn, ibv_wc_status_str(w->status));
    rdma_mr_unref_range(ep->sq, ep->sq_mask, done, seq + 1);
    atomic_store_explicit(&ep->sq_done, seq + 1, memory_order_release);
    return shown;
}

/* Translate one CQE; false when it goes to nobody (dropped). */
static bool wc_process(rdma_cq_t *cq, const struct ibv_wc *w, pdx_tp_wc_t *out)
{
    uint64_t id = w->wr_id;
    uint32_t slot = (uint32_t)(id >> RDMA_WR_SLOT_SHIFT) & RDMA_WR_SLOT_MASK;
    uint32_t gen = (uint32_t)(id >> RDMA_WR_GEN_SHIFT) & RDMA_WR_GEN_MASK;
    uint64_t idx = id & RDMA_WR_IDX_MASK, done, seq;
    const bool rq = id & RDMA_WR_RQ_BIT;
    const rdma_wqe_t *e;
    pdx_status_t status;
    rdma_ep_t *ep;

    if (slot >= cq->nslots || !cq->slots[slot].ep || cq->slots[slot].gen != gen)
        return false;
    ep = cq->slots[slot].ep;
    if (PDX_UNLIKELY(ep->sw_flush))
        return false; /* its WRs complete from its rings */
    if (rq) {
        done = atomic_load_explicit(&ep->rq_done, memory_order_relaxed);
        seq = done + ((idx - done) & ep->rq_mask);
        rdma_mr_unref_range(ep->rq, ep->rq_mask, done, seq + 1);
        e = &ep->rq[seq & ep->rq_mask];
        out->opcode = PDX_TP_OP_RECV;
        out->byte_len = w->status == IBV_WC_SUCCESS ? w->byte_len : 0;
    } else {
        done = atomic_load_explicit(&ep->sq_done, memory_order_relaxed);
        seq = done + ((idx - done) & ep->sq_mask);
        if (PDX_UNLIKELY(seq >= ep->sq_seen))
            ep->sq_seen = sq_wait_posted(ep, seq);
        e = &ep->sq[seq & ep->sq_mask];
        if (PDX_UNLIKELY(e->hidden))
            return wc_hidden(ep, w, done, seq, out);
        rdma_mr_unref_range(ep->sq, ep->sq_mask, done, seq + 1);
        out->opcode = (pdx_tp_opcode_t)e->opcode;
        out->byte_len = 0;
    }
    out->wr_id = e->wr_id;
    out->ep = rdma_ep_pub(ep);
    status = map_status(w->status, rq);
    if (PDX_UNLIKELY(status != PDX_OK))
        status = wc_error(ep, w, e->opcode, status);
    out->status = status;
    /* the entries are free once their contents were read */
    if (rq)
        atomic_store_explicit(&ep->rq_done, seq + 1, memory_order_release);
    else
        atomic_store_explicit(&ep->sq_done, seq + 1, memory_order_release);
    return true;
}

int rdma_cq_poll(pdx_tp_cq_t *pcq, pdx_tp_wc_t *wc, int max)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    struct ibv_wc w[RDMA_POLL_BATCH];
    int got = 0;

    if (max <= 0)
        return 0;
    pthread_mutex_lock(&cq->lock);
    while (got < max && cq->stash_n) {
        const struct ibv_wc *s = &cq->stash[cq->stash_head];

        cq->stash_head = (cq->stash_head + 1) % cq->depth;
        cq->stash_n--;
        got += wc_process(cq, s, &wc[got]);
    }
    /* a CQ in error has no CQE for anyone: its eps are all flushed below */
    while (got < max && !atomic_load_explicit(&cq->dead, memory_order_relaxed)) {
        int want = PDX_MIN(max - got, RDMA_POLL_BATCH);
        int n = ibv_poll_cq(cq->cq, want, w);

        if (n <= 0) {
            if (PDX_UNLIKELY(n < 0)) {
                uint32_t neps = rdma_cq_fail_locked(cq, "ibv_poll_cq failed");

                pdx_error("rdma: %s: ibv_poll_cq failed (%d): the CQ is in error; its %u "
                          "endpoints failed, their work requests complete in software",
                          cq->tp->dev.name, n, neps);
            }
            break;
        }
        for (int i = 0; i < n; i++)
            got += wc_process(cq, &w[i], &wc[got]);
        if (n < want)
            break;
    }
    if (PDX_UNLIKELY(atomic_load_explicit(&cq->failed_eps, memory_order_relaxed)))
        rdma_flush_backstop(cq);
    if (PDX_UNLIKELY(cq->flush_list) && got < max)
        got += rdma_flush_poll(cq, wc + got, max - got);
    pthread_mutex_unlock(&cq->lock);
    return got;
}

pdx_status_t rdma_cq_arm(pdx_tp_cq_t *pcq)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    uint32_t neps;
    int rc, err;

    if (PDX_UNLIKELY(atomic_load_explicit(&cq->dead, memory_order_acquire)))
        return PDX_ERR_IO; /* said when it went into error */
    rc = ibv_req_notify_cq(cq->cq, 0);
    if (PDX_LIKELY(rc == 0))
        return PDX_OK;
    err = rc > 0 ? rc : errno;
    neps = rdma_cq_fail(cq, "ibv_req_notify_cq failed");
    pdx_error("rdma: %s: ibv_req_notify_cq: %s: the CQ can raise no event; its %u endpoints "
              "failed, their work requests complete in software", cq->tp->dev.name,
              strerror(err), neps);
    return PDX_ERR_IO;
}

int rdma_cq_fd(pdx_tp_cq_t *pcq)
{
    return rdma_cq(pcq)->channel->fd;
}

/* Read and ack every pending event: 0, or the errno of a failing read. */
static int cq_events_drain(rdma_cq_t *cq)
{
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    unsigned n = 0;
    int err;

    /* the channel is nonblocking: EAGAIN ends the loop */
    while (ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) == 0)
        n++;
    err = errno;
    if (n)
        ibv_ack_cq_events(cq->cq, n);
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR ? 0 : err;
}

void rdma_cq_ack(pdx_tp_cq_t *pcq)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    uint32_t neps;
    int err;

    if (PDX_UNLIKELY(atomic_load_explicit(&cq->dead, memory_order_acquire)))
        return;
    err = cq_events_drain(cq);
    if (PDX_LIKELY(err == 0))
        return;
    neps = rdma_cq_fail(cq, "its completion channel failed");
    pdx_error("rdma: %s: ibv_get_cq_event: %s: the completion channel is dead; its CQ's %u "
              "endpoints failed, their work requests complete in software", cq->tp->dev.name,
              strerror(err), neps);
}

/* ------------------------------------------------------- ep attachment */

pdx_status_t rdma_cq_reserve(rdma_cq_t *cq, uint32_t entries, uint32_t *slot_p, uint32_t *gen_p)
{
    uint32_t slot = UINT32_MAX;

    pthread_mutex_lock(&cq->lock);
    if (atomic_load_explicit(&cq->dead, memory_order_relaxed)) {
        pthread_mutex_unlock(&cq->lock);
        pdx_error("rdma: %s: the CQ is in error: no new endpoint on it", cq->tp->dev.name);
        return PDX_ERR_IO;
    }
    if (entries > cq->depth - cq->reserved) {
        pthread_mutex_unlock(&cq->lock);
        pdx_error("rdma: %s: CQ of depth %u has %u entries left, an endpoint needs %u",
                  cq->tp->dev.name, cq->depth, cq->depth - cq->reserved, entries);
        return PDX_ERR_FULL;
    }
    for (uint32_t k = 0; k < cq->nslots; k++) {
        uint32_t i = (cq->slot_hint + k) % cq->nslots;

        if (!cq->slots[i].busy) {
            slot = i;
            break;
        }
    }
    if (slot == UINT32_MAX) {
        pthread_mutex_unlock(&cq->lock);
        pdx_error("rdma: %s: CQ already serves %u endpoints, the most it holds",
                  cq->tp->dev.name, cq->nslots);
        return PDX_ERR_FULL;
    }
    cq->slots[slot].busy = true;
    cq->slot_hint = (slot + 1) % cq->nslots;
    cq->reserved += entries;
    cq->nep++;
    *slot_p = slot;
    *gen_p = cq->slots[slot].gen;
    pthread_mutex_unlock(&cq->lock);
    return PDX_OK;
}

pdx_status_t rdma_cq_attach(rdma_cq_t *cq, rdma_ep_t *ep)
{
    bool dead;

    pthread_mutex_lock(&cq->lock);
    dead = atomic_load_explicit(&cq->dead, memory_order_relaxed);
    if (!dead)
        cq->slots[ep->slot].ep = ep;
    pthread_mutex_unlock(&cq->lock);
    if (dead) {
        pdx_error("rdma: %s: the CQ went into error while endpoint QP 0x%x was created",
                  cq->tp->dev.name, ep->qpn);
        return PDX_ERR_IO;
    }
    return PDX_OK;
}

void rdma_cq_retire(rdma_cq_t *cq, rdma_ep_t *ep)
{
    rdma_cq_slot_t *s = &cq->slots[ep->slot];

    pthread_mutex_lock(&cq->lock);
    if (s->ep == ep) {
        s->ep = NULL;
        s->gen = (s->gen + 1) & RDMA_WR_GEN_MASK;
        /* no record is made after this: only the async thread (which can
         * no longer find the ep), the poller and its caller make them */
        if (atomic_load_explicit(&ep->err_claim, memory_order_acquire))
            atomic_fetch_sub_explicit(&cq->failed_eps, 1, memory_order_relaxed);
    }
    if (ep->sw_flush) {
        rdma_ep_t **pp = &cq->flush_list;

        while (*pp != ep)
            pp = &(*pp)->flush_next;
        *pp = ep->flush_next;
        ep->sw_flush = false;
    }
    pthread_mutex_unlock(&cq->lock);
}

/* Does this CQE belong to a live ep? (under cq->lock) */
static bool wc_live(const rdma_cq_t *cq, const struct ibv_wc *w)
{
    uint32_t slot = (uint32_t)(w->wr_id >> RDMA_WR_SLOT_SHIFT) & RDMA_WR_SLOT_MASK;
    uint32_t gen = (uint32_t)(w->wr_id >> RDMA_WR_GEN_SHIFT) & RDMA_WR_GEN_MASK;

    return slot < cq->nslots && cq->slots[slot].ep && cq->slots[slot].gen == gen &&
           !cq->slots[slot].ep->sw_flush;
}

void rdma_cq_release(rdma_cq_t *cq, uint32_t slot, uint32_t entries)
{
    struct ibv_wc w[RDMA_POLL_BATCH];
    int n;

    pthread_mutex_lock(&cq->lock);
    /*
     * The ep's QP is gone, but CQEs it left may still sit in the CQ. Its
     * reservation can be given to a new ep only once they are out: move
     * the CQEs of live eps to the stash (cq_poll hands them out first, in
     * order) and drop the rest. A CQ in error holds none anyone wants.
     */
    while (!atomic_load_explicit(&cq->dead, memory_order_relaxed) && cq->stash_n < cq->depth &&
           (n = ibv_poll_cq(cq->cq, (int)PDX_MIN(cq->depth - cq->stash_n, RDMA_POLL_BATCH),
                            w)) > 0) {
        for (int i = 0; i < n; i++) {
            if (!wc_live(cq, &w[i]))
                continue;
            cq->stash[(cq->stash_head + cq->stash_n) % cq->depth] = w[i];
            cq->stash_n++;
        }
    }
    cq->slots[slot].busy = false;
    cq->reserved -= entries;
    cq->nep--;
    pthread_mutex_unlock(&cq->lock);
}

/* ------------------------------------------------------ create/destroy */

pdx_status_t rdma_cq_create(pdx_tp_t *ptp, uint32_t depth, pdx_tp_cq_t **cq_p)
{
    rdma_tp_t *tp = rdma_tp(ptp);
    rdma_cq_t *cq;
    int flags, rc;

    if (depth == 0 || depth > INT_MAX) {
        pdx_error("rdma: %s: CQ depth %u outside 1..%d", tp->dev.name, depth, INT_MAX);
        return PDX_ERR_INVALID;
    }
    if (atomic_load_explicit(&tp->dead, memory_order_acquire)) {
        pdx_error("rdma: %s: no new CQ: the device is gone (DEVICE_FATAL)", tp->dev.name);
        return PDX_ERR_IO;
    }
    if (depth > tp->dev.max_cqe) {
        /* Clamped: it then holds fewer endpoints; ep_create refuses the one
         * that does not fit (PDX_ERR_FULL), so the CQ never overruns. */
        pdx_info("rdma: %s: a CQ of depth %u asked, the device's max_cqe is %u: clamped",
                 tp->dev.name, depth, tp->dev.max_cqe);
        depth = tp->dev.max_cqe;
    }
    cq = calloc(1, sizeof(*cq));
    if (!cq)
        goto err_nomem;
    cq->tp = tp;
    cq->depth = depth;
    atomic_init(&cq->dead, false);
    atomic_init(&cq->failed_eps, 0);
    cq->nslots = PDX_MIN(depth, RDMA_CQ_MAX_EPS);
    cq->slots = calloc(cq->nslots, sizeof(*cq->slots));
    cq->stash = calloc(depth, sizeof(*cq->stash)); /* pages are touched only when used */
    if (!cq->slots || !cq->stash)
        goto err_free_cq;
    rc = pthread_mutex_init(&cq->lock, NULL);
    if (rc) {
        pdx_error("rdma: mutex init: %s", strerror(rc));
        goto err_free_io;
    }
    cq->channel = ibv_create_comp_channel(tp->ctx);
    if (!cq->channel) {
        pdx_error("rdma: %s: ibv_create_comp_channel: %s", tp->dev.name, strerror(errno));
        goto err_mutex;
    }
    flags = fcntl(cq->channel->fd, F_GETFL);
    if (flags < 0 || fcntl(cq->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        pdx_error("rdma: %s: making the completion channel nonblocking: %s", tp->dev.name,
                  strerror(errno));
        goto err_channel;
    }
    cq->cq = ibv_create_cq(tp->ctx, (int)depth, cq, cq->channel, 0);
    if (!cq->cq) {
        pdx_error("rdma: %s: ibv_create_cq of depth %u: %s", tp->dev.name, depth,
                  strerror(errno));
        goto err_channel;
    }
    pthread_mutex_lock(&tp->lock);
    cq->next = tp->cqs;
    if (tp->cqs)
        tp->cqs->prev = cq;
    tp->cqs = cq;
    pthread_mutex_unlock(&tp->lock);
    *cq_p = (pdx_tp_cq_t *)(void *)cq;
    return PDX_OK;

err_channel:
    ibv_destroy_comp_channel(cq->channel);
err_mutex:
    pthread_mutex_destroy(&cq->lock);
err_free_io:
    free(cq->stash);
    free(cq->slots);
    free(cq);
    return PDX_ERR_IO;
err_free_cq:
    free(cq->stash);
    free(cq->slots);
    free(cq);
err_nomem:
    pdx_error("rdma: %s: out of memory for a CQ of depth %u", tp->dev.name, depth);
    return PDX_ERR_NOMEM;
}

void rdma_cq_free(rdma_cq_t *cq)
{
    int rc;

    /* every event read is acked before destroy (a dead channel has none) */
    if (!atomic_load_explicit(&cq->dead, memory_order_acquire))
        (void)cq_events_drain(cq);
    pthread_mutex_lock(&cq->tp->async_lock);
    rc = ibv_destroy_cq(cq->cq);
    pthread_mutex_unlock(&cq->tp->async_lock);
    if (rc)
        pdx_error("rdma: %s: ibv_destroy_cq: %s", cq->tp->dev.name,
                  strerror(rc > 0 ? rc : errno));
    rc = ibv_destroy_comp_channel(cq->channel);
    if (rc)
        pdx_error("rdma: %s: ibv_destroy_comp_channel: %s", cq->tp->dev.name,
                  strerror(rc > 0 ? rc : errno));
    pthread_mutex_destroy(&cq->lock);
    free(cq->stash);
    free(cq->slots);
    free(cq);
}

void rdma_cq_destroy(pdx_tp_cq_t *pcq)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    rdma_tp_t *tp = cq->tp;
    uint32_t nep;

    pthread_mutex_lock(&cq->lock);
    nep = cq->nep;
    pthread_mutex_unlock(&cq->lock);
    if (nep) {
        /* Freeing it would leave QPs completing into a destroyed CQ. */
        pdx_error("rdma: %s: CQ destroyed while %u endpoints use it; kept until the tp "
                  "closes", tp->dev.name, nep);
        return;
    }
    pthread_mutex_lock(&tp->lock);
    if (cq->prev)
        cq->prev->next = cq->next;
    else
        tp->cqs = cq->next;
    if (cq->next)
        cq->next->prev = cq->prev;
    pthread_mutex_unlock(&tp->lock);
    rdma_cq_free(cq);
}
