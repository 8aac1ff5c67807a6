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

/* The chain of ibv WRs one post call builds in the templates. */
typedef struct chain {
    struct ibv_send_wr *w;        /* the ibv WR being built */
    uint64_t            w_end;    /* its remote end (none yet: never equal) */
    uint64_t            id_base;
    uint64_t            max_msg;
    uint32_t            max_sge;
    bool                gathered;
} chain_t;

static inline chain_t chain_start(rdma_ep_t *ep, uint64_t first_raddr)
{
    return (chain_t){.w = ep->wrs, .w_end = ~first_raddr, .id_base = rdma_wr_id(ep, false, 0),
                     .max_msg = ep->tp->max_msg_size, .max_sge = ep->max_sge};
}

/*
 * WRITE seq, whose SGE is filled in its template t, into the chain. It
 * joins the ibv WR being built when its remote range starts where that
 * one's ends, under the same rkey, no signaled WRITE ended it, and an SGE
 * and bytes are to spare (a WRITE of no bytes joins none); else it starts
 * one in its template.
 */
static inline void chain_add(chain_t *c, struct ibv_send_wr *t, uint64_t seq, uint64_t raddr,
                             uint32_t rkey, uint64_t len, unsigned send_flags)
{
    struct ibv_send_wr *w = c->w;

    if (PDX_UNLIKELY(raddr == c->w_end) && rkey == w->wr.rdma.rkey && !w->send_flags &&
        (uint64_t)(t - w) < c->max_sge &&
        len - 1 < c->max_msg - (raddr - w->wr.rdma.remote_addr)) {
        /* its bytes follow the WR's at the remote: one more SGE */
        const uint64_t k = (uint64_t)(t - w); /* WRITEs in the WR before it */

        w->next = t + 1;
        w->num_sge = (int)k + 1;
        w->wr_id = c->id_base | (seq & RDMA_WR_IDX_MASK) | k << RDMA_WR_GATHER_SHIFT;
        c->gathered = true;
    } else {
        c->w = w = t;
        w->wr_id = c->id_base | (seq & RDMA_WR_IDX_MASK);
        w->wr.rdma.remote_addr = raddr;
        w->wr.rdma.rkey = rkey;
    }
    w->send_flags = send_flags;
    c->w_end = raddr + len;
}

/*
 * Post the chain of n WRITEs from head (their ring entries and references
 * in place). A refused call hands out no completions. The caller gets
 * PDX_ERR_PEER and keeps no record of any of its n WRs, but a provider may
 * have taken the WRs before *bad_wr (they are on the wire). Those stay in
 * the ring marked `hidden`, holding their regions: when their CQEs come
 * (flushed, as the ep is failed and its QP moved to ERR, or done before
 * that), cq_poll frees their slots and region references and hands their
 * completions to nobody. A completion of one of them that also covers
 * earlier unsignaled WRs of earlier calls is handed out as that of the last
 * of those (cq.c). The ring entries posted are those before *bad_wr, the
 * template of its first WRITE.
 *
 * The post path never clears `hidden` (the ring starts zeroed): only a
 * refused call sets it, that call fails the ep for good before it returns,
 * and an ep in error posts nothing more, so a hidden entry is never reused.
 */
static pdx_status_t chain_post(rdma_ep_t *ep, chain_t *c, uint64_t head, uint32_t n)
{
    struct ibv_send_wr *const wrs = ep->wrs, *w = c->w, *bad = NULL;
    const uint32_t mask = ep->sq_mask;
    uint32_t posted;
    int rc;

    w->next = NULL; /* the chain ends here; the templates are put back below */
    rc = ibv_post_send(ep->qp, wrs, &bad);
    if (PDX_UNLIKELY(c->gathered))
        templates_restore(ep, wrs);
    else
        w->next = w + 1 < wrs + ep->sq_depth ? w + 1 : NULL;
    if (PDX_LIKELY(rc == 0)) {
        atomic_store_explicit(&ep->sq_head, head + n, memory_order_release);
        return PDX_OK;
    }
    /* the ring entries of the ibv WRs before *bad_wr (each a template) */
    posted = bad >= wrs && bad < wrs + n ? (uint32_t)(bad - wrs) : 0;
    rdma_mr_unref_range(ep->sq, mask, head + posted, head + n);
    for (uint32_t i = 0; i < posted; i++)
        ep->sq[(head + i) & mask].hidden = true;
    /* after the marks: a poller that met their CQEs first waits for this */
    atomic_store_explicit(&ep->sq_head, head + posted, memory_order_release);
    return post_refused(ep, "ibv_post_send of WRITEs", rc, posted, n);
}

/* What every WRITE post checks first: the ep, n against the send queue. */
static inline pdx_status_t write_admit(rdma_ep_t *ep, uint64_t head, uint32_t n)
{
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
    return PDX_OK;
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
 * Gather: WRITE i fills sges[i] and ring entry head + i, then joins the ibv
 * WR being built or starts one in its template wrs[i] (chain_add). A WRITE
 * that starts a WR writes what it did before gathering existed (one compare
 * more); joins write the WR's next and num_sge, and the templates are put
 * back after the post.
 */
pdx_status_t rdma_post_write(pdx_tp_ep_t *pep, const pdx_tp_write_t *wr, uint32_t n)
{
    rdma_ep_t *ep = rdma_ep(pep);
    const uint64_t head = sq_head(ep);
    const rdma_tp_t *const tp = ep->tp;
    rdma_wqe_t *const ring = ep->sq;
    const uint32_t mask = ep->sq_mask;
    const pdx_tp_write_t *x = wr, *end;
    struct ibv_send_wr *t = ep->wrs;    /* WRITE i's template, wrs[i] */
    uint64_t seq = head;
    rdma_mr_t *first, *run_mr = NULL;
    uint64_t run_base = 0, run_len = 0;
    uint32_t run_lkey = 0, runs = 0;
    bool run_pieces = false;
    pdx_status_t st;
    chain_t c;

    _Static_assert(PDX_TP_SIGNALED << 1 == IBV_SEND_SIGNALED, "a shift makes the flag");
    _Static_assert(RDMA_MAX_SGE <= RDMA_WR_GATHER_MASK + 1, "the wr_id counts its WRITEs");
    if ((st = write_admit(ep, head, n)) != PDX_OK || n == 0)
        return st;
    end = wr + n;
    first = rdma_mr(wr[0].mr);
    if (PDX_UNLIKELY(!first || first->tp != tp))
        return write_invalid(ep, wr, 0, n);
    c = chain_start(ep, wr[0].remote_addr);
    /*
     * The references, all n on the first WR's region, before the stores
     * below: a locked add waits for the pending stores to drain, and here
     * there are few. Runs of other regions get their share after the loop; a
     * bad WR gives them back.
     */
    atomic_fetch_add_explicit(&first->refs, n, memory_order_relaxed);
    for (; x != end; x++, t++, seq++) {
        rdma_mr_t *mr = rdma_mr(x->mr);
        const uint64_t off = x->offset, len = x->length;
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
        if (PDX_UNLIKELY(len > c.max_msg || off > run_len || len > run_len - off))
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
        chain_add(&c, t, seq, x->remote_addr, x->rkey, len, (x->flags & PDX_TP_SIGNALED) << 1);
    }
    if (PDX_UNLIKELY(runs != 1)) {
        atomic_fetch_sub_explicit(&first->refs, n, memory_order_relaxed);
        ref_runs(ring, mask, head, n);
    }
    return chain_post(ep, &c, head, n);

err_invalid:
    atomic_fetch_sub_explicit(&first->refs, n, memory_order_relaxed);
    return write_invalid(ep, wr, (uint32_t)(x - wr), n);
}

/*
 * The runs of one region pair (base/transport.h): each run is checked once,
 * against the window on the source and the peer's region, and written once,
 * into its ring entry, SGE and template, as rdma_post_write writes a WRITE.
 */
pdx_status_t rdma_post_runs(pdx_tp_ep_t *pep, const pdx_tp_runs_t *runs, uint32_t *bad_p)
{
    rdma_ep_t *ep = rdma_ep(pep);
    const uint64_t head = sq_head(ep);
    const uint32_t n = runs->n, mask = ep->sq_mask, every = runs->signal_every;
    rdma_mr_t *const mr = rdma_mr(runs->mr);
    const pdx_tp_rkey_t *const dst = runs->dst;
    const pdx_tp_run_t *r = runs->runs;
    rdma_wqe_t *const ring = ep->sq;
    struct ibv_send_wr *t = ep->wrs;
    uint64_t seq = head, id = runs->wr_id;
    const uint64_t id_mask = runs->wr_id_mask, id_hi = id & ~id_mask;
    uint64_t base, src_len, dst_addr, dst_len, max_msg;
    uint32_t lkey, rkey, tick = every;
    bool pieces;
    pdx_status_t st;
    chain_t c;

    if ((st = write_admit(ep, head, n)) != PDX_OK || n == 0)
        return st;
    if (PDX_UNLIKELY(n > PDX_TP_RUNS_MAX)) {
        pdx_error("rdma: %u runs in one call, at most %u", n, PDX_TP_RUNS_MAX);
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(!mr || mr->tp != ep->tp || !dst || runs->src_base > mr->len ||
                     runs->src_len > mr->len - runs->src_base)) {
        pdx_error("rdma: runs without a source region of this device or a peer region, or a "
                  "window of %llu bytes at %llu outside the source",
                  (unsigned long long)runs->src_len, (unsigned long long)runs->src_base);
        return PDX_ERR_INVALID;
    }
    /* in locals: the stores below may alias anything the pointers reach */
    base = (uint64_t)(uintptr_t)mr->base + runs->src_base;
    src_len = runs->src_len;
    dst_addr = dst->addr;
    dst_len = dst->len;
    lkey = mr->mr[0]->lkey;
    rkey = dst->rkey;
    pieces = mr->npieces > 1 || dst->npieces > 1;
    c = chain_start(ep, dst_addr + r[0].dst_offset);
    max_msg = c.max_msg;
    atomic_fetch_add_explicit(&mr->refs, n, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++, r++, t++, seq++, id++) {
        const uint64_t so = r->src_offset, d = r->dst_offset, len = r->len;
        rdma_wqe_t *q = &ring[seq & mask];
        struct ibv_sge *sge = t->sg_list;
        unsigned flags = 0;

        if (PDX_UNLIKELY(len > max_msg || so > src_len || len > src_len - so || d > dst_len ||
                         len > dst_len - d))
            goto err_range;
        if (PDX_UNLIKELY(pieces)) {
            if (!pdx_tp_rkey_one_piece(dst, d, len) ||
                (len && !rdma_mr_one_piece(mr, runs->src_base + so, len)))
                goto err_range;
            /* a run of no bytes may sit at a region's end: piece 0's keys */
            lkey = len ? rdma_mr_lkey(mr, runs->src_base + so) : mr->mr[0]->lkey;
            rkey = len ? pdx_tp_rkey_at(dst, d) : dst->rkey;
        }
        if (--tick == 0 || i + 1 == n) {
            flags = IBV_SEND_SIGNALED;
            tick = every;
        }
        q->wr_id = id_hi | (id & id_mask);
        q->mr = mr;
        q->opcode = PDX_TP_OP_WRITE;
        sge->addr = base + so;
        sge->length = (uint32_t)len;
        sge->lkey = lkey;
        chain_add(&c, t, seq, dst_addr + d, rkey, len, flags);
    }
    return chain_post(ep, &c, head, n);

err_range:
    atomic_fetch_sub_explicit(&mr->refs, n, memory_order_relaxed);
    *bad_p = (uint32_t)(r - runs->runs);
    return PDX_ERR_RANGE;
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
