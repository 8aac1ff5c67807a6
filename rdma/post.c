/*
 * rdma post path: WRITE, SEND, RECV and READ on one ep, from its poster
 * thread. No malloc, no lock, no syscall but the provider's post call: the
 * WR array, the rings and the SEND slots are allocated at ep_create.
 *
 * Send-queue accounting: sq_head (poster) minus sq_done (advanced by the CQ
 * owner as it consumes completions) is what the QP holds. post_write of n
 * WRs answers PDX_ERR_AGAIN, posting nothing, when fewer than n slots are
 * free, and PDX_ERR_INVALID when n exceeds sq_depth. Unsignaled WRs keep
 * their slots until a later signaled WR of the ep completes.
 *
 * sq_head and rq_head are published with one release store per call (a
 * plain store on x86): the CQ owner reads them when it flushes an ep in
 * software and when a completion overtakes the call that posted its WR.
 *
 * A call the caller sees refused hands out no completions: see
 * rdma_post_write for the WRs a provider takes before it refuses one.
 *
 * Gather (docs/architecture.md §8: SGE lists up to the device limit): consecutive
 * WRITEs of one post_write call whose remote ranges follow each other under
 * one rkey go out as one ibv WRITE of several SGEs, one per WRITE (each in
 * one piece of its own region, with that piece's lkey; the regions may
 * differ), while the WR stays within max_msg_size and the QP's max_sge
 * (min(device max_sge, RDMA_MAX_SGE)). The ring keeps one entry per WRITE
 * of the caller, with its wr_id and region reference, as unsignaled WRs of
 * their own would have; the ibv WR's wr_id names its last entry, so its
 * completion covers every entry it carries (rdma.h). A signaled WRITE ends
 * its ibv WR: the ibv WR is signaled exactly when its last WRITE is, and
 * every signaled WRITE still completes under its own wr_id, covering the
 * unsignaled ones before it (base/transport.h). An error completion of
 * a gathered WR becomes one completion per entry still outstanding, as
 * separate WRs would have had (cq.c: wc_split).
 * Send-queue accounting counts the caller's WRITEs, so the QP holds at most
 * as many ibv WRs as sq_depth. The check costs one compare for a WRITE
 * whose remote range does not follow the one before it.
 */
#include "rdma.h"

#include <errno.h>

static inline bool ep_failed(const rdma_ep_t *ep)
{
    return atomic_load_explicit(&ep->err, memory_order_acquire) != 0;
}

/* The poster's own head: it alone stores it. */
static inline uint64_t sq_head(const rdma_ep_t *ep)
{
    return atomic_load_explicit(&ep->sq_head, memory_order_relaxed);
}

static inline uint64_t sq_free(const rdma_ep_t *ep, uint64_t head)
{
    return ep->sq_depth - (head - atomic_load_explicit(&ep->sq_done, memory_order_acquire));
}

static pdx_status_t __attribute__((cold, noinline)) not_connected(const rdma_ep_t *ep)
{
    pdx_error("rdma: %s: posting on QP 0x%x before ep_connect", ep->tp->dev.name, ep->qpn);
    return PDX_ERR_STATE;
}

/*
 * The provider refused a post: fail the ep (its QP goes to ERR, so whatever
 * it holds flushes) and tell the caller. rc is the provider's return.
 */
static pdx_status_t __attribute__((cold, noinline))
post_refused(rdma_ep_t *ep, const char *what, int rc, uint32_t posted, uint32_t n)
{
    rdma_ep_kill(ep, PDX_ERR_PEER, RDMA_ERR_FIRST, "%s refused after %u of %u work requests: %s",
                 what, posted, n, strerror(rc > 0 ? rc : errno));
    /* published (by us or whoever was first) before we return: this
     * poster's next call sees the ep failed */
    rdma_ep_errmsg_wait(ep);
    return PDX_ERR_PEER;
}

/*
 * References on the regions of n ring entries from head, one atomic per run
 * of one region: a chain over more than one region. Taken before the post (a
 * completion may be consumed before ibv_post_send returns); those of the WRs
 * a refused post did not take go back with rdma_mr_unref_range().
 */
static void ref_runs(rdma_wqe_t *ring, uint32_t mask, uint64_t head, uint32_t n)
{
    rdma_mr_t *run_mr = NULL;
    uint32_t run = 0;

    for (uint32_t i = 0; i < n; i++) {
        rdma_mr_t *mr = ring[(head + i) & mask].mr;

        if (mr != run_mr) {
            if (run_mr)
                atomic_fetch_add_explicit(&run_mr->refs, run, memory_order_relaxed);
            run_mr = mr;
            run = 0;
        }
        run++;
    }
    if (run_mr)
        atomic_fetch_add_explicit(&run_mr->refs, run, memory_order_relaxed);
}

/*
 * Whether WRITE x, whose remote range starts where the ibv WR w ends, joins
 * it: the same rkey, no signaled WRITE ended it, an SGE and bytes to spare
 * (a WRITE of no bytes joins none). t is x's own template.
 */
static inline bool gathers(const struct ibv_send_wr *w, const struct ibv_send_wr *t,
                           const pdx_tp_write_t *x, uint32_t max_sge, uint64_t max_msg)
{
    return x->rkey == w->wr.rdma.rkey && !w->send_flags && (uint64_t)(t - w) < max_sge &&
           x->length - 1 < max_msg - (x->remote_addr - w->wr.rdma.remote_addr);
}

/* After a post of gathered WRs: put the chain from w (its ibv WRs) back to
 * templates of one SGE, each chained to the one after it. */
static void __attribute__((noinline)) templates_restore(rdma_ep_t *ep, struct ibv_send_wr *w)
{
    struct ibv_send_wr *const end = ep->wrs + ep->sq_depth;

    while (w) {
        struct ibv_send_wr *next = w->next;

        w->next = w + 1 < end ? w + 1 : NULL;
        w->num_sge = 1;
        w = next;
    }
}

void rdma_post_write_init(rdma_ep_t *ep)
{
    for (uint32_t i = 0; i < ep->sq_depth; i++)
        ep->wrs[i] = (struct ibv_send_wr){
            .next = i + 1 < ep->sq_depth ? &ep->wrs[i + 1] : NULL,
            .sg_list = &ep->sges[i],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
        };
}

static pdx_status_t __attribute__((cold, noinline))
write_invalid(const rdma_ep_t *ep, const pdx_tp_write_t *wr, uint32_t i, uint32_t n)
{
    pdx_error("rdma: WRITE %u of %u (wr_id %llu): %llu bytes at offset %llu do not fit "
              "its source region (or one piece of it) or the %llu-byte message limit", i, n,
              (unsigned long long)wr[i].wr_id, (unsigned long long)wr[i].length,
              (unsigned long long)wr[i].offset, (unsigned long long)ep->tp->max_msg_size);
    return PDX_ERR_INVALID;
}

/*
 * One pass checks and fills: a run of WRs on one region looks the region up
 * once, each WR is checked against it. A bad WR returns before anything is
 * posted, its references given back; what was written of the ring and the WR
 * array lies past sq_head, free, and is overwritten by the next post.
 *
 * Gather: WRITE i fills sges[i] and ring entry head + i. It starts an ibv
 * WR in place, the template wrs[i] (whose SGEs begin at sges[i]), unless
 * its remote range starts where the WR being built ends, under the same
 * rkey, within max_sge and max_msg_size, and no signaled WRITE ended that
 * WR: then it joins it as one more SGE, and the WR's next skips its
 * template. A WRITE that starts a WR writes what it did before gathering
 * existed (one compare more); joins write the WR's next and num_sge, and
 * the templates are put back after the post.
 *
 * A refused call hands out no completions. The caller gets PDX_ERR_PEER and
 * keeps no record of any of its n WRs, but a provider may have taken the
 * WRs before *bad_wr (they are on the wire). Those stay in the ring marked
 * `hidden`, holding their regions: when their CQEs come (flushed, as the ep
 * is failed and its QP moved to ERR, or done before that), cq_poll frees
 * their slots and region references and hands their completions to nobody.
 * A completion of one of them that also covers earlier unsignaled WRs of
 * earlier calls is handed out as that of the last of those (cq.c). The
 * ring entries posted are those before *bad_wr, the template of its first
 * WRITE.
 *
 * The post path never clears `hidden` (the ring starts zeroed): only a
 * refused call sets it, that call fails the ep for good before it returns,
 * and an ep in error posts nothing more, so a hidden entry is never reused.
 */
pdx_status_t rdma_post_write(pdx_tp_ep_t *pep, const pdx_tp_write_t *wr, uint32_t n)
{
    rdma_ep_t *ep = rdma_ep(pep);
    const uint64_t head = sq_head(ep);
    const rdma_tp_t *const tp = ep->tp;
    rdma_wqe_t *const ring = ep->sq;
    struct ibv_send_wr *const wrs = ep->wrs;
    const uint32_t mask = ep->sq_mask, max_sge = ep->max_sge;
    const uint64_t max_msg = tp->max_msg_size;
    const uint64_t id_base = rdma_wr_id(ep, false, 0);
    const pdx_tp_write_t *x = wr, *end;
    struct ibv_send_wr *t = wrs;        /* WRITE i's template, wrs[i] */
    struct ibv_send_wr *w = wrs;        /* the ibv WR being built */
    uint64_t seq = head;
    rdma_mr_t *first, *run_mr = NULL;
    uint64_t run_base = 0, run_len = 0;
    uint64_t w_end = ~wr[0].remote_addr; /* the ibv WR's remote end: none yet */
    uint32_t run_lkey = 0, runs = 0;
    bool run_pieces = false, gathered = false;
    struct ibv_send_wr *bad = NULL;
    uint32_t posted;
    int rc;

    _Static_assert(PDX_TP_SIGNALED << 1 == IBV_SEND_SIGNALED, "a shift makes the flag");
    _Static_assert(RDMA_MAX_SGE <= RDMA_WR_GATHER_MASK + 1, "the wr_id counts its WRITEs");
    if (PDX_UNLIKELY(ep_failed(ep)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(n == 0 || n > ep->sq_depth)) {
        if (n == 0)
            return PDX_OK;
        pdx_error("rdma: %u chained WRITEs never fit a send queue of %u", n, ep->sq_depth);
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(!atomic_load_explicit(&ep->connected, memory_order_acquire)))
        return not_connected(ep);
    if (n > sq_free(ep, head))
        return PDX_ERR_AGAIN;
    end = wr + n;
    first = rdma_mr(wr[0].mr);
    if (PDX_UNLIKELY(!first || first->tp != tp))
        return write_invalid(ep, wr, 0, n);
    /*
     * The references, all n on the first WR's region, before the stores
     * below: a locked add waits for the pending stores to drain, and here
     * there are few. Runs of other regions get their share after the loop; a
     * bad WR gives them back.
     */
    atomic_fetch_add_explicit(&first->refs, n, memory_order_relaxed);
    for (; x != end; x++, t++, seq++) {
        rdma_mr_t *mr = rdma_mr(x->mr);
        const uint64_t off = x->offset, len = x->length, raddr = x->remote_addr;
        rdma_wqe_t *q = &ring[seq & mask];
        struct ibv_sge *sge = t->sg_list; /* the template's */

        if (PDX_UNLIKELY(mr != run_mr)) {
            if (PDX_UNLIKELY(!mr || mr->tp != tp))
                goto err_invalid;
            run_mr = mr;
            run_base = (uint64_t)(uintptr_t)mr->base;
            run_len = mr->len;
            run_lkey = mr->mr[0]->lkey;
            run_pieces = mr->npieces > 1;
            runs++;
        }
        if (PDX_UNLIKELY(len > max_msg || off > run_len || len > run_len - off))
            goto err_invalid;
        if (PDX_UNLIKELY(run_pieces)) {
            if (len && !rdma_mr_one_piece(mr, off, len))
                goto err_invalid;
            run_lkey = rdma_mr_lkey(mr, off);
        }
        q->wr_id = x->wr_id;
        q->mr = mr;
        q->opcode = PDX_TP_OP_WRITE;
        sge->addr = run_base + off;
        sge->length = (uint32_t)len;
        sge->lkey = run_lkey;
        if (PDX_UNLIKELY(raddr == w_end) && gathers(w, t, x, max_sge, max_msg)) {
            /* its bytes follow the WR's at the remote: one more SGE */
            const uint64_t k = (uint64_t)(t - w); /* WRITEs in the WR before it */

            w->next = t + 1;
            w->num_sge = (int)k + 1;
            w->wr_id = id_base | (seq & RDMA_WR_IDX_MASK) | k << RDMA_WR_GATHER_SHIFT;
            gathered = true;
        } else {
            w = t;
            w->wr_id = id_base | (seq & RDMA_WR_IDX_MASK);
            w->wr.rdma.remote_addr = raddr;
            w->wr.rdma.rkey = x->rkey;
        }
        w->send_flags = (x->flags & PDX_TP_SIGNALED) << 1;
        w_end = raddr + len;
    }
    if (PDX_UNLIKELY(runs != 1)) {
        atomic_fetch_sub_explicit(&first->refs, n, memory_order_relaxed);
        ref_runs(ring, mask, head, n);
    }
    w->next = NULL; /* the chain ends here; the templates are put back below */
    rc = ibv_post_send(ep->qp, wrs, &bad);
    if (PDX_UNLIKELY(gathered))
        templates_restore(ep, wrs);
    else
        w->next = w + 1 < wrs + ep->sq_depth ? w + 1 : NULL;
    if (PDX_LIKELY(rc == 0)) {
        atomic_store_explicit(&ep->sq_head, head + n, memory_order_release);
        return PDX_OK;
    }
    /* the ring entries of the ibv WRs before *bad_wr (each a template) */
    posted = bad >= wrs && bad < t ? (uint32_t)(bad - wrs) : 0;
    rdma_mr_unref_range(ring, mask, head + posted, head + n);
    for (uint32_t i = 0; i < posted; i++)
        ring[(head + i) & mask].hidden = true;
    /* after the marks: a poller that met their CQEs first waits for this */
    atomic_store_explicit(&ep->sq_head, head + posted, memory_order_release);
    return post_refused(ep, "ibv_post_send of WRITEs", rc, posted, n);

err_invalid:
    atomic_fetch_sub_explicit(&first->refs, n, memory_order_relaxed);
    return write_invalid(ep, wr, (uint32_t)(x - wr), n);
}

pdx_status_t rdma_post_send(pdx_tp_ep_t *pep, uint64_t wr_id, const void *data, uint32_t len,
                            unsigned flags)
{
    rdma_ep_t *ep = rdma_ep(pep);
    uint64_t head = sq_head(ep);
    rdma_wqe_t *q = &ep->sq[head & ep->sq_mask];
    struct ibv_sge sge;
    struct ibv_send_wr w = {0}, *bad = NULL;
    int rc;

    if (PDX_UNLIKELY(ep_failed(ep)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(len > PDX_TP_SEND_MAX || (len && !data))) {
        pdx_error("rdma: SEND of %u bytes (at most %d, inline)", len, PDX_TP_SEND_MAX);
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(!atomic_load_explicit(&ep->connected, memory_order_acquire)))
        return not_connected(ep);
    if (sq_free(ep, head) < 1)
        return PDX_ERR_AGAIN;
    q->wr_id = wr_id;
    q->mr = NULL;
    q->opcode = PDX_TP_OP_SEND;
    w.wr_id = rdma_wr_id(ep, false, head);
    w.opcode = IBV_WR_SEND;
    w.send_flags = flags & PDX_TP_SIGNALED ? IBV_SEND_SIGNALED : 0;
    if (len) {
        if (ep->max_inline) {
            /* the provider copies inline data before ibv_post_send returns */
            sge.addr = (uint64_t)(uintptr_t)data;
            sge.lkey = 0;
            w.send_flags |= IBV_SEND_INLINE;
        } else {
            uint8_t *slot = ep->send_slots + (head & ep->sq_mask) * PDX_TP_SEND_MAX;

            memcpy(slot, data, len);
            sge.addr = (uint64_t)(uintptr_t)slot;
            sge.lkey = ep->send_slots_mr->lkey;
        }
        sge.length = len;
        w.sg_list = &sge;
        w.num_sge = 1;
    }
    /* one WR: refused whole, never in part */
    rc = ibv_post_send(ep->qp, &w, &bad);
    if (PDX_UNLIKELY(rc))
        return post_refused(ep, "ibv_post_send of a SEND", rc, 0, 1);
    atomic_store_explicit(&ep->sq_head, head + 1, memory_order_release);
    return PDX_OK;
}

/* A buffer the NIC writes locally (a READ's target, a receive): inside one
 * piece of a region of this tp with LOCAL_WRITE. */
static bool local_target_ok(const rdma_ep_t *ep, const rdma_mr_t *mr, uint64_t offset,
                            uint32_t len)
{
    return mr && mr->tp == ep->tp && (mr->access & PDX_TP_ACCESS_LOCAL_WRITE) &&
           offset <= mr->len && len <= mr->len - offset &&
           (!len || rdma_mr_one_piece(mr, offset, len));
}

/* Its ring entry (a free slot) and SGE. */
static void local_target_fill(rdma_wqe_t *q, struct ibv_sge *sge, uint64_t wr_id,
                              pdx_tp_opcode_t opcode, rdma_mr_t *mr, uint64_t offset,
                              uint32_t len)
{
    q->wr_id = wr_id;
    q->mr = mr;
    q->opcode = opcode;
    sge->addr = (uint64_t)(uintptr_t)mr->base + offset;
    sge->length = len;
    sge->lkey = rdma_mr_lkey(mr, offset);
}

pdx_status_t rdma_post_read(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *pmr,
                            uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey)
{
    rdma_ep_t *ep = rdma_ep(pep);
    rdma_mr_t *mr = rdma_mr(pmr);
    uint64_t head = sq_head(ep);
    rdma_wqe_t *q = &ep->sq[head & ep->sq_mask];
    struct ibv_sge sge;
    struct ibv_send_wr w = {0}, *bad = NULL;
    int rc;

    if (PDX_UNLIKELY(ep_failed(ep)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(len > ep->tp->max_msg_size || !local_target_ok(ep, mr, offset, len))) {
        pdx_error("rdma: READ of %u bytes into offset %llu is outside its region (or one "
                  "piece of it), beyond the message limit, or the region lacks local write "
                  "access", len, (unsigned long long)offset);
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(!atomic_load_explicit(&ep->connected, memory_order_acquire)))
        return not_connected(ep);
    if (sq_free(ep, head) < 1)
        return PDX_ERR_AGAIN;
    local_target_fill(q, &sge, wr_id, PDX_TP_OP_READ, mr, offset, len);
    w.wr_id = rdma_wr_id(ep, false, head);
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_READ;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = remote_addr;
    w.wr.rdma.rkey = rkey;
    atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
    rc = ibv_post_send(ep->qp, &w, &bad);
    if (PDX_UNLIKELY(rc)) {
        rdma_mr_unref(mr);
        return post_refused(ep, "ibv_post_send of a READ", rc, 0, 1);
    }
    atomic_store_explicit(&ep->sq_head, head + 1, memory_order_release);
    return PDX_OK;
}

pdx_status_t rdma_post_recv(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *pmr,
                            uint64_t offset, uint32_t len)
{
    rdma_ep_t *ep = rdma_ep(pep);
    rdma_mr_t *mr = rdma_mr(pmr);
    uint64_t head = atomic_load_explicit(&ep->rq_head, memory_order_relaxed);
    rdma_wqe_t *q = &ep->rq[head & ep->rq_mask];
    struct ibv_sge sge;
    struct ibv_recv_wr w = {0}, *bad = NULL;
    int rc;

    if (PDX_UNLIKELY(ep_failed(ep)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(!local_target_ok(ep, mr, offset, len))) {
        pdx_error("rdma: receive buffer of %u bytes at offset %llu is outside its region (or "
                  "one piece of it) or the region lacks local write access", len,
                  (unsigned long long)offset);
        return PDX_ERR_INVALID;
    }
    if (head + 1 - atomic_load_explicit(&ep->rq_done, memory_order_acquire) > ep->rq_depth)
        return PDX_ERR_AGAIN;
    local_target_fill(q, &sge, wr_id, PDX_TP_OP_RECV, mr, offset, len);
    w.wr_id = rdma_wr_id(ep, true, head);
    w.sg_list = &sge;
    w.num_sge = 1;
    atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
    /* one WR: refused whole, never in part */
    rc = ibv_post_recv(ep->qp, &w, &bad);
    if (PDX_UNLIKELY(rc)) {
        rdma_mr_unref(mr);
        return post_refused(ep, "ibv_post_recv", rc, 0, 1);
    }
    atomic_store_explicit(&ep->rq_head, head + 1, memory_order_release);
    return PDX_OK;
}
