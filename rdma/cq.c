/*
 * rdma completion queues: one completion channel each, and one ibv CQ, or
 * several where the CQ is deeper than the device's max_cqe.
 *
 * DESIGN
 *
 * Split past max_cqe: a CQ of depth D holds ceil(D / max_cqe) ibv CQs of
 * max_cqe entries (the last one the rest), all on the one completion
 * channel, so cq_fd stays one fd. Their depths are those asked for: a
 * provider that rounds up (mlx5: 2^k - 1) gives at least that many, one
 * that does not (bnxt_re) exactly that many. An ep lives on one of them,
 * the first with room for its sq_depth + rq_depth (its QP's send and
 * receive CQ); ep_create answers PDX_ERR_FULL when none has the room. A
 * CQ of at most max_cqe entries is one ibv CQ.
 *
 * The CQ keeps a table of its eps (slot, generation). Every WR's ibv wr_id
 * names its ep's slot and generation, its queue and its ring index
 * (rdma.h), so a completion finds its ep in O(1), whichever ibv CQ it came
 * from, and a completion of an ep that was destroyed (its slot's generation
 * moved on) is dropped.
 *
 * Consuming a completion frees the ring entries it covers: a send-queue
 * completion at ring index i frees every entry from the ep's sq_done to i
 * (the unsignaled WRs before it succeeded silently, and the entries a
 * gathered WRITE carries before its last), and releases the regions those
 * WRs used, one atomic per run of one region. An ep therefore never has
 * more completions pending than sq_depth + rq_depth, and no ep goes on an
 * ibv CQ whose eps' depths it would push past the CQ's: no ibv CQ overruns.
 *
 * cq_poll reads the stash first (below), then each ibv CQ in turn, starting
 * one further on at each call, so a busy ibv CQ does not starve the others.
 * cq_arm arms every ibv CQ; cq_ack reads every pending event of the channel
 * and acks each ibv CQ's own (ibv_destroy_cq waits for its events' acks).
 *
 * Error completions: ibv_wc_status becomes a pdx_status_t (map_status) and
 * the ep goes to error with a message naming the WR's opcode, the status,
 * the vendor_err and both QPNs. A flushed WR completes with the status the
 * ep failed with (ep_fail's `why`, else PDX_ERR_PEER). A flush CQE says
 * the QP is in error, not why: its record gives way to a cause that comes
 * later (an async event the async thread had not handled yet, a non-flush
 * error CQE). An error completion's opcode field is undefined in verbs; the
 * ring says what the WR was. An error CQE of a gathered WRITE (post.c) says
 * the ibv WR failed, not which of its entries: each of them still
 * outstanding gets a completion of its own, in order, as separate WRs
 * would have (the first with the CQE's status, the others flushed); they
 * are made into the front of the stash (wc_split).
 *
 * A WR posted by a call that was refused (post.c: `hidden`) completes to
 * nobody. A CQE may overtake the post call that took its WR (the NIC was
 * quicker than the provider's return): the poller then waits for the call
 * to publish sq_head, which it does at once, to know whether it was
 * refused.
 *
 * The stash: CQEs read and not handed out yet (those of live eps that
 * ep_destroy read while it drained its ibv CQ, and those wc_split made),
 * handed out before any ibv CQ is read again, so each ep's completions
 * keep their order. Each is one outstanding WR or receive of an ep on the
 * CQ, so depth entries hold them.
 *
 * Where the NIC reports nothing more (rdma.h: software flush), cq_poll
 * completes the eps concerned from their rings (sw_flush.c), and drops their
 * CQEs. A failing ibv_poll_cq, ibv_req_notify_cq or ibv_get_cq_event on any
 * of the ibv CQs puts the whole CQ in error that way (rdma_cq_fail): cq_arm
 * then answers PDX_ERR_IO for good, so the caller's sleeps stay bounded. So
 * does CQ_ERR on any of them (async.c).
 *
 * cq_fd is the completion channel's fd (nonblocking): cq_arm, poll once
 * more, sleep on the fd, cq_ack (reads and acks every pending event).
 */
#include "rdma.h"

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

/* One turn of a short wait for another thread: spin, then yield. */
static inline void spin_wait(unsigned *spins)
{
    if (++*spins < 64)
        pdx_cpu_relax();
    else
        sched_yield();
}

/* A CQE overtook the post call of its WR: sq_head once that call returned. */
static uint64_t __attribute__((noinline)) sq_wait_posted(rdma_ep_t *ep, uint64_t seq)
{
    uint64_t head;
    unsigned spins = 0;

    while ((head = atomic_load_explicit(&ep->sq_head, memory_order_acquire)) <= seq)
        spin_wait(&spins);
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

/*
 * An error CQE of a gathered WRITE whose entries from lo to seq are still
 * outstanding (lo < seq): they become one CQE each, in order, at the front
 * of the stash: lo's with this CQE's status (it covers the entries before
 * lo, which succeeded), the others flushed. `behind` CQEs the caller read
 * after this one go to the stash too. False, and the CQE is handed out as
 * it is (covering them all), only where the stash lacks the room: stale
 * entries of eps destroyed since they were stashed hold it.
 */
static bool __attribute__((cold, noinline))
wc_split(rdma_cq_t *cq, rdma_ep_t *ep, const struct ibv_wc *w, uint64_t lo, uint64_t seq,
         uint32_t behind)
{
    const uint32_t k = (uint32_t)(seq + 1 - lo);

    if (k + behind > cq->depth - cq->stash_n)
        return false;
    cq->stash_head = (cq->stash_head + cq->depth - k) % cq->depth;
    cq->stash_n += k;
    for (uint32_t i = 0; i < k; i++) {
        struct ibv_wc *s = &cq->stash[(cq->stash_head + i) % cq->depth];

        *s = *w;
        s->wr_id = rdma_wr_id(ep, false, lo + i);
        if (i)
            s->status = IBV_WC_WR_FLUSH_ERR;
    }
    pdx_debug("rdma: %s: QP 0x%x: %s for a WRITE of %u gathered writes: a completion each",
              ep->tp->dev.name, ep->qpn, ibv_wc_status_str(w->status), k);
    return true;
}

/*
 * Translate one CQE; false when it goes to nobody (dropped), or became
 * several CQEs at the front of the stash (wc_split: `behind` says how many
 * CQEs the caller read after this one and has not processed).
 */
static bool wc_process(rdma_cq_t *cq, const struct ibv_wc *w, pdx_tp_wc_t *out, uint32_t behind)
{
    uint64_t id = w->wr_id;
    uint32_t slot = (uint32_t)(id >> RDMA_WR_SLOT_SHIFT) & RDMA_WR_SLOT_MASK;
    uint32_t gen = (uint32_t)(id >> RDMA_WR_GEN_SHIFT) & RDMA_WR_GEN_MASK;
    uint64_t idx = id & RDMA_WR_IDX_MASK, done, seq;
    const bool rq = id & RDMA_WR_RQ_BIT;
    const rdma_wqe_t *e;
    pdx_status_t status;
    rdma_ep_t *ep;

    if (slot >= cq->nslots)
        return false;
    ep = atomic_load_explicit(&cq->slots[slot].ep, memory_order_acquire);
    if (!ep || atomic_load_explicit(&cq->slots[slot].gen, memory_order_relaxed) != gen)
        return false;
    if (PDX_UNLIKELY(ep->sw_flush))
        return false; /* its WRs complete from its rings */
    status = map_status(w->status, rq);
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
        if (PDX_UNLIKELY(status != PDX_OK)) {
            /* a gathered WRITE failed: its entries from lo on are outstanding */
            const uint64_t more = id >> RDMA_WR_GATHER_SHIFT & RDMA_WR_GATHER_MASK;
            const uint64_t lo = PDX_MAX(done, seq - more);

            if (lo < seq && wc_split(cq, ep, w, lo, seq, behind))
                return false;
        }
        rdma_mr_unref_range(ep->sq, ep->sq_mask, done, seq + 1);
        out->opcode = (pdx_tp_opcode_t)e->opcode;
        out->byte_len = 0;
    }
    out->wr_id = e->wr_id;
    out->ep = rdma_ep_pub(ep);
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

/* Hand out stashed CQEs, in order, while there is room (cq_poll). */
static int stash_poll(rdma_cq_t *cq, pdx_tp_wc_t *wc, int got, int max)
{
    while (got < max && cq->stash_n) {
        /* a copy: wc_split may put CQEs where it was */
        const struct ibv_wc s = cq->stash[cq->stash_head];

        cq->stash_head = (cq->stash_head + 1) % cq->depth;
        cq->stash_n--;
        got += wc_process(cq, &s, &wc[got], 0);
    }
    return got;
}

/*
 * Read one ibv CQ while there is room (cq_poll, the stash empty); returns
 * got, grown. A failing ibv_poll_cq sets *failed: cq_poll then puts the CQ
 * in error.
 */
static int icq_poll(rdma_cq_t *cq, rdma_icq_t *q, pdx_tp_wc_t *wc, int got, int max,
                    int *failed)
{
    struct ibv_wc w[RDMA_POLL_BATCH];

    while (got < max) {
        int want = PDX_MIN(max - got, RDMA_POLL_BATCH);
        int n = ibv_poll_cq(q->cq, want, w);

        if (n <= 0) {
            if (PDX_UNLIKELY(n < 0))
                *failed = n;
            return got;
        }
        for (int i = 0; i < n; i++) {
            got += wc_process(cq, &w[i], &wc[got], (uint32_t)(n - i - 1));
            if (PDX_UNLIKELY(cq->stash_n)) {
                /* a CQE became several (wc_split): they come first, then
                 * the rest of this batch, in order */
                for (int k = i + 1; k < n; k++)
                    cq->stash[(cq->stash_head + cq->stash_n++) % cq->depth] = w[k];
                got = stash_poll(cq, wc, got, max);
                if (cq->stash_n)
                    return got; /* no room left */
                n = want; /* read on */
                break;
            }
        }
        if (n < want)
            break;
    }
    return got;
}

/*
 * The poller and the excluders (rdma.h: threads). cq_poll announces itself
 * in `polling`, then looks at `excl`; an excluder, holding the CQ's lock,
 * raises `excl`, then waits for `polling` to drop. Both pairs are
 * sequentially consistent, so one of the two always sees the other: either
 * the excluder waits for the poll in progress to end, or the poll waits for
 * the excluder. A poll then costs one store and one load of words nobody
 * else writes in the common case, and never blocks on the lock.
 */
void rdma_cq_exclude(rdma_cq_t *cq)
{
    unsigned spins = 0;

    atomic_store_explicit(&cq->excl, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&cq->polling, memory_order_seq_cst))
        spin_wait(&spins);
}

void rdma_cq_include(rdma_cq_t *cq)
{
    atomic_store_explicit(&cq->excl, 0, memory_order_release);
}

/* An excluder is at work: step back until it is done. */
static void __attribute__((cold, noinline)) poll_wait(rdma_cq_t *cq)
{
    unsigned spins = 0;

    do {
        atomic_store_explicit(&cq->polling, 0, memory_order_release);
        while (atomic_load_explicit(&cq->excl, memory_order_acquire))
            spin_wait(&spins);
        atomic_store_explicit(&cq->polling, 1, memory_order_seq_cst);
    } while (atomic_load_explicit(&cq->excl, memory_order_seq_cst));
}

int rdma_cq_poll(pdx_tp_cq_t *pcq, pdx_tp_wc_t *wc, int max)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    int got = 0, failed = 0;

    if (max <= 0)
        return 0;
    atomic_store_explicit(&cq->polling, 1, memory_order_seq_cst);
    if (PDX_UNLIKELY(atomic_load_explicit(&cq->excl, memory_order_seq_cst)))
        poll_wait(cq);
    if (PDX_UNLIKELY(cq->stash_n))
        got = stash_poll(cq, wc, got, max);
    if (got < max && !atomic_load_explicit(&cq->dead, memory_order_relaxed)) {
        /* one ibv CQ after the other, the first one further on each call */
        const uint32_t first = cq->poll_next;

        cq->poll_next = first + 1 < cq->nicq ? first + 1 : 0;
        for (uint32_t k = 0, i = first; k < cq->nicq && got < max && !failed; k++) {
            /* a CQ in error has no CQE for anyone: its eps are all flushed below */
            if (atomic_load_explicit(&cq->dead, memory_order_relaxed) || cq->stash_n)
                break;
            got = icq_poll(cq, &cq->icqs[i], wc, got, max, &failed);
            i = i + 1 < cq->nicq ? i + 1 : 0;
        }
    }
    if (PDX_UNLIKELY(atomic_load_explicit(&cq->failed_eps, memory_order_relaxed)))
        rdma_flush_backstop(cq);
    if (PDX_UNLIKELY(cq->flush_list) && got < max)
        got += rdma_flush_poll(cq, wc + got, max - got);
    atomic_store_explicit(&cq->polling, 0, memory_order_release);
    if (PDX_UNLIKELY(failed)) {
        /* Excluded now (it changes what the poller reads), then a second
         * pass hands out the software flush's completions. */
        uint32_t neps = rdma_cq_fail(cq, "ibv_poll_cq failed");

        pdx_error("rdma: %s: ibv_poll_cq failed (%d): the CQ is in error; its %u endpoints "
                  "failed, their work requests complete in software", cq->tp->dev.name, failed,
                  neps);
        got += rdma_cq_poll(pcq, wc + got, max - got);
    }
    return got;
}

pdx_status_t rdma_cq_arm(pdx_tp_cq_t *pcq)
{
    rdma_cq_t *cq = rdma_cq(pcq);
    uint32_t neps;
    int rc = 0, err;

    if (PDX_UNLIKELY(atomic_load_explicit(&cq->dead, memory_order_acquire)))
        return PDX_ERR_IO; /* said when it went into error */
    for (uint32_t i = 0; i < cq->nicq && rc == 0; i++)
        rc = ibv_req_notify_cq(cq->icqs[i].cq, 0);
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

/* Read every pending event, then ack each ibv CQ's: 0, or the errno of a
 * failing read. The CQ's owner, or its destroyer. */
static int cq_events_drain(rdma_cq_t *cq)
{
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    int err;

    /* the channel is nonblocking: EAGAIN ends the loop; every CQ on it is
     * one of ours, its context its rdma_icq_t */
    while (ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) == 0)
        ((rdma_icq_t *)ev_ctx)->events++;
    err = errno;
    for (uint32_t i = 0; i < cq->nicq; i++) {
        rdma_icq_t *q = &cq->icqs[i];

        if (q->events) {
            ibv_ack_cq_events(q->cq, q->events);
            q->events = 0;
        }
    }
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

pdx_status_t rdma_cq_reserve(rdma_cq_t *cq, uint32_t entries, uint32_t *slot_p, uint32_t *gen_p,
                             uint32_t *icq_p)
{
    uint32_t slot = UINT32_MAX, icq = UINT32_MAX, most = 0;

    pthread_mutex_lock(&cq->lock);
    if (atomic_load_explicit(&cq->dead, memory_order_relaxed)) {
        pthread_mutex_unlock(&cq->lock);
        pdx_error("rdma: %s: the CQ is in error: no new endpoint on it", cq->tp->dev.name);
        return PDX_ERR_IO;
    }
    for (uint32_t i = 0; i < cq->nicq; i++) {
        const uint32_t left = cq->icqs[i].depth - cq->icqs[i].reserved;

        if (entries <= left) {
            icq = i;
            break;
        }
        most = PDX_MAX(most, left);
    }
    if (icq == UINT32_MAX) {
        pthread_mutex_unlock(&cq->lock);
        if (cq->nicq == 1)
            pdx_error("rdma: %s: CQ of depth %u has %u entries left, an endpoint needs %u",
                      cq->tp->dev.name, cq->depth, most, entries);
        else
            pdx_error("rdma: %s: CQ of depth %u (%u ibv CQs of at most %u entries): the most "
                      "any of them has left is %u entries, an endpoint needs %u",
                      cq->tp->dev.name, cq->depth, cq->nicq, cq->icqs[0].depth, most, entries);
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
    cq->icqs[icq].reserved += entries;
    cq->reserved += entries;
    cq->nep++;
    *slot_p = slot;
    *gen_p = atomic_load_explicit(&cq->slots[slot].gen, memory_order_relaxed);
    *icq_p = icq;
    pthread_mutex_unlock(&cq->lock);
    return PDX_OK;
}

pdx_status_t rdma_cq_attach(rdma_cq_t *cq, rdma_ep_t *ep)
{
    bool dead;

    pthread_mutex_lock(&cq->lock);
    dead = atomic_load_explicit(&cq->dead, memory_order_relaxed);
    if (!dead) /* a poller may look it up from now on */
        atomic_store_explicit(&cq->slots[ep->slot].ep, ep, memory_order_release);
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
    rdma_cq_exclude(cq);
    if (atomic_load_explicit(&s->ep, memory_order_relaxed) == ep) {
        atomic_store_explicit(&s->ep, NULL, memory_order_relaxed);
        atomic_store_explicit(&s->gen, (atomic_load_explicit(&s->gen, memory_order_relaxed) + 1) &
                                           RDMA_WR_GEN_MASK, memory_order_relaxed);
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
    rdma_cq_include(cq);
    pthread_mutex_unlock(&cq->lock);
}

/* Does this CQE belong to a live ep? (the poller excluded) */
static bool wc_live(rdma_cq_t *cq, const struct ibv_wc *w)
{
    uint32_t slot = (uint32_t)(w->wr_id >> RDMA_WR_SLOT_SHIFT) & RDMA_WR_SLOT_MASK;
    uint32_t gen = (uint32_t)(w->wr_id >> RDMA_WR_GEN_SHIFT) & RDMA_WR_GEN_MASK;
    rdma_ep_t *ep;

    if (slot >= cq->nslots)
        return false;
    ep = atomic_load_explicit(&cq->slots[slot].ep, memory_order_relaxed);
    return ep && atomic_load_explicit(&cq->slots[slot].gen, memory_order_relaxed) == gen &&
           !ep->sw_flush;
}

void rdma_cq_release(rdma_cq_t *cq, uint32_t slot, uint32_t icq, uint32_t entries)
{
    rdma_icq_t *q = &cq->icqs[icq];
    struct ibv_wc w[RDMA_POLL_BATCH];
    int n = 0;

    pthread_mutex_lock(&cq->lock);
    rdma_cq_exclude(cq);
    /*
     * The ep's QP is gone, but CQEs it left may still sit in its ibv CQ. Its
     * reservation can be given to a new ep only once they are out: move
     * the CQEs of live eps to the stash (cq_poll hands them out first, in
     * order) and drop the rest. A CQ in error holds none anyone wants.
     */
    while (!atomic_load_explicit(&cq->dead, memory_order_relaxed) && cq->stash_n < cq->depth &&
           (n = ibv_poll_cq(q->cq, (int)PDX_MIN(cq->depth - cq->stash_n, RDMA_POLL_BATCH),
                            w)) > 0) {
        for (int i = 0; i < n; i++) {
            if (!wc_live(cq, &w[i]))
                continue;
            cq->stash[(cq->stash_head + cq->stash_n) % cq->depth] = w[i];
            cq->stash_n++;
        }
    }
    if (PDX_UNLIKELY(n < 0)) {
        /* The CQ cannot be read: everything on it completes in software. */
        uint32_t neps = rdma_cq_fail_excluded(cq, "ibv_poll_cq failed");

        pdx_error("rdma: %s: ibv_poll_cq failed (%d) while an endpoint left: the CQ is in "
                  "error; its %u endpoints failed, their work requests complete in software",
                  cq->tp->dev.name, n, neps);
    }
    rdma_cq_include(cq);
    cq->slots[slot].busy = false;
    q->reserved -= entries;
    cq->reserved -= entries;
    cq->nep--;
    pthread_mutex_unlock(&cq->lock);
}

/* ------------------------------------------------------ create/destroy */

/* The ibv CQs, under tp->async_lock (never between the async thread's read
 * and ack of an event); their events are acked. */
static void icqs_destroy(rdma_cq_t *cq, uint32_t n)
{
    pthread_mutex_lock(&cq->tp->async_lock);
    for (uint32_t i = 0; i < n; i++) {
        int rc = ibv_destroy_cq(cq->icqs[i].cq);

        if (rc)
            pdx_error("rdma: %s: ibv_destroy_cq: %s", cq->tp->dev.name,
                      strerror(rc > 0 ? rc : errno));
    }
    pthread_mutex_unlock(&cq->tp->async_lock);
}

/* How many ibv CQs a CQ of depth gets, and their depth (the last: the rest). */
static uint32_t cq_split(const rdma_tp_t *tp, uint32_t *depth_p, uint32_t *per_p)
{
    const uint32_t max_cqe = tp->dev.max_cqe ? tp->dev.max_cqe : *depth_p;
    uint32_t n = *depth_p / max_cqe + (*depth_p % max_cqe != 0);

    if (n > RDMA_CQ_MAX_ICQS) {
        /* It then holds fewer endpoints; ep_create refuses the one that does
         * not fit (PDX_ERR_FULL), so no ibv CQ overruns. */
        pdx_warn("rdma: %s: a CQ of depth %u asked, the device's max_cqe is %u: it gets %u "
                 "ibv CQs (depth %u), the most pdx puts behind one CQ", tp->dev.name, *depth_p,
                 max_cqe, RDMA_CQ_MAX_ICQS, RDMA_CQ_MAX_ICQS * max_cqe);
        n = RDMA_CQ_MAX_ICQS;
        *depth_p = n * max_cqe;
    } else if (n > 1) {
        pdx_info("rdma: %s: a CQ of depth %u, the device's max_cqe is %u: %u ibv CQs on one "
                 "completion channel", tp->dev.name, *depth_p, max_cqe, n);
    }
    *per_p = max_cqe;
    return n;
}

pdx_status_t rdma_cq_create(pdx_tp_t *ptp, uint32_t depth, pdx_tp_cq_t **cq_p)
{
    rdma_tp_t *tp = rdma_tp(ptp);
    uint32_t nicq, per, made = 0;
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
    nicq = cq_split(tp, &depth, &per);
    cq = calloc(1, sizeof(*cq));
    if (!cq)
        goto err_nomem;
    cq->tp = tp;
    cq->depth = depth;
    cq->nicq = nicq;
    atomic_init(&cq->dead, false);
    atomic_init(&cq->failed_eps, 0);
    cq->nslots = PDX_MIN(depth, RDMA_CQ_MAX_EPS);
    cq->icqs = calloc(nicq, sizeof(*cq->icqs));
    cq->slots = calloc(cq->nslots, sizeof(*cq->slots));
    cq->stash = calloc(depth, sizeof(*cq->stash)); /* pages are touched only when used */
    if (!cq->icqs || !cq->slots || !cq->stash)
        goto err_free_cq;
    for (uint32_t i = 0; i < nicq; i++)
        cq->icqs[i].depth = i + 1 < nicq ? per : depth - per * (nicq - 1);
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
    for (; made < nicq; made++) {
        rdma_icq_t *q = &cq->icqs[made];

        /* the context of its events (cq_ack) */
        q->cq = ibv_create_cq(tp->ctx, (int)q->depth, q, cq->channel, 0);
        if (!q->cq) {
            pdx_error("rdma: %s: ibv_create_cq of depth %u (%u of %u for a CQ of depth %u): %s",
                      tp->dev.name, q->depth, made + 1, nicq, depth, strerror(errno));
            goto err_icqs;
        }
    }
    pthread_mutex_lock(&tp->lock);
    PDX_LIST_PUSH(tp->cqs, cq);
    pthread_mutex_unlock(&tp->lock);
    *cq_p = (pdx_tp_cq_t *)(void *)cq;
    return PDX_OK;

err_icqs:
    icqs_destroy(cq, made);
err_channel:
    ibv_destroy_comp_channel(cq->channel);
err_mutex:
    pthread_mutex_destroy(&cq->lock);
err_free_io:
    free(cq->stash);
    free(cq->slots);
    free(cq->icqs);
    free(cq);
    return PDX_ERR_IO;
err_free_cq:
    free(cq->stash);
    free(cq->slots);
    free(cq->icqs);
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
    icqs_destroy(cq, cq->nicq);
    rc = ibv_destroy_comp_channel(cq->channel);
    if (rc)
        pdx_error("rdma: %s: ibv_destroy_comp_channel: %s", cq->tp->dev.name,
                  strerror(rc > 0 ? rc : errno));
    pthread_mutex_destroy(&cq->lock);
    free(cq->stash);
    free(cq->slots);
    free(cq->icqs);
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
    PDX_LIST_UNLINK(tp->cqs, cq);
    pthread_mutex_unlock(&tp->lock);
    rdma_cq_free(cq);
}
