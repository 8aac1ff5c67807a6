/*
 * The shard's completions: its one CQ, drained in batches on the worker.
 *
 * WRITE/SEND: a completion of WR X on an endpoint covers every WR from the
 * endpoint's `completed` to X (unsignaled WRs before a signaled one succeeded
 * without a completion of their own), all of the room X's wr_id names
 * (dep.h): they retire from it at once; the room whose last chunk's
 * notifies are posted becomes SUCCESS as its last WR retires (checked before
 * the decrement, which is the worker's last touch of the room). An error
 * completion fails the room of WR X; if the endpoint is in error (not just
 * that WR refused) it is reset (dep_reset.c), and its later WRs come back
 * flushed, each failing its own room.
 *
 * RECV: a notify record from the peer: decoded, handed to rooms.c (or, a
 * credit record, added to the endpoint's credits), the buffer reposted and,
 * every PDX_CREDIT_BATCH reposts, returned to the sender in a credit record
 * of our own on the same endpoint (retried while it has no credit or slot).
 */
#include "shard_loop.h"
#include "peer.h"
#include "rooms.h"

#include <stdio.h>

#include "log.h"

/*
 * WRs [from, to) of dep completed (or were flushed), all of the room that
 * the completion's wr_id names (dep.h; 0: none, a credit record): they no
 * longer hold it.
 */
static void retire(pdx_engine_t *e, uint32_t room, uint64_t from, uint64_t to)
{
    const uint32_t k = (uint32_t)(to - from);
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    uint32_t inflight;

    if (!room || !k)
        return;
    obj = &e->rooms.objs[room - 1];
    ext = pdx_room_ext(e, obj);
    /* Only this worker changes the count (a load and a store, no locked
     * read-modify-write): k means these are the room's last WRs. SUCCESS
     * comes before the decrement, which lets pdx_release free it. */
    inflight = atomic_load_explicit(&ext->inflight, memory_order_relaxed);
    if (ext->last_sent && inflight == k && pdx_room_state(obj) != PDX_ROOM_FAILED) {
        PDX_MARKER_PUSH_ROOM("pdx room completed",
                             atomic_load_explicit(&obj->id, memory_order_relaxed));
        PDX_MARKER_POP();
        pdx_rooms_succeed(e, obj);
    }
    atomic_store_explicit(&ext->inflight, inflight - k, memory_order_release);
}

static void on_send(pdx_shard_loop_t *L, pdx_dep_t *dep, const pdx_tp_wc_t *wc)
{
    pdx_engine_t *e = L->e;
    const uint32_t room = pdx_wr_room(wc->wr_id);
    uint64_t ahead = ((wc->wr_id & PDX_WR_SEQ_MASK) - dep->completed) & PDX_WR_SEQ_MASK;
    uint64_t end;
    const char *why = "";

    if (PDX_UNLIKELY(ahead >= dep->posted - dep->completed ||
                     room > e->rooms.capacity)) {
        pdx_error("shard %u: completion of WR %llu (room slot %u) on endpoint %u.%u to %s, "
                  "which has none such outstanding there: ignored", L->s->index,
                  (unsigned long long)(wc->wr_id & PDX_WR_SEQ_MASK), room, dep->pair,
                  dep->index, dep->peer->addr);
        return;
    }
    end = dep->completed + ahead;
    if (PDX_LIKELY(wc->status == PDX_OK)) {
        retire(e, room, dep->completed, end + 1);
        dep->completed = end + 1;
        if (PDX_UNLIKELY(atomic_load_explicit(&dep->streak, memory_order_relaxed)))
            atomic_store_explicit(&dep->streak, 0, memory_order_relaxed); /* it works */
        return;
    }
    /* The WRs before it succeeded (they are its room's too); it failed. */
    retire(e, room, dep->completed, end);
    why = e->ops->ep_error(dep->ep);
    if (room)
        pdx_rooms_fail(e, &e->rooms.objs[room - 1], wc->status, "write to %s failed: %s",
                       dep->peer->addr, why[0] ? why : pdx_status_str(wc->status));
    retire(e, room, end, end + 1);
    dep->completed = end + 1;
    /* An endpoint still healthy refused only that WR (tcp: out of range;
     * ipc: a notify behind a copy given up, never delivered: its credit
     * comes back). */
    if (why[0])
        pdx_shard_dep_broken(dep, wc->status, why);
    else if (wc->opcode == PDX_TP_OP_SEND && wc->status == PDX_ERR_ABORTED)
        atomic_fetch_add_explicit(&dep->credits, 1, memory_order_relaxed);
}

/*
 * Return the reposted receives to the sender: a credit record, a SEND on
 * the endpoint itself (it spends one of our credits; the peer returns those
 * the same way). Kept while the endpoint has no credit or send slot: the
 * worker retries, sleeping bounded.
 */
static void credit_return(pdx_shard_loop_t *L, pdx_dep_t *dep)
{
    pdx_engine_t *e = L->e;
    const pdx_wire_notify_t n = {.sender = e->sender_id, .flags = PDX_WIRE_NOTIFY_CREDIT,
                                 .count = dep->reposted};
    uint8_t buf[PDX_TP_SEND_MAX];
    pdx_status_t status;
    size_t len;

    if (atomic_load_explicit(&dep->failed, memory_order_acquire)) {
        dep->reposted = 0; /* its reset or its peer's loss: nothing is owed */
        return;
    }
    if (atomic_load_explicit(&dep->credits, memory_order_acquire) <= 0 ||
        pdx_dep_room(dep, 0) == 0) {
        L->credit_retry = true;
        return;
    }
    status = pdx_wire_notify_encode(&n, buf, sizeof(buf), &len);
    if (status == PDX_OK)
        status = e->ops->post_send(dep->ep, pdx_wr_id_send(dep, 0, dep->posted), buf,
                                   (uint32_t)len, PDX_TP_SIGNALED);
    if (status != PDX_OK) {
        const char *err = e->ops->ep_error(dep->ep);

        pdx_shard_dep_broken(dep, status, err[0] ? err : "a credit record was refused");
        return;
    }
    atomic_fetch_sub_explicit(&dep->credits, 1, memory_order_relaxed);
    dep->posted++;
    dep->reposted = 0;
    L->progress = true;
}

/* A credit record from the peer: it reposted that many receives for us. */
static bool on_credit(pdx_dep_t *dep, const pdx_wire_notify_t *n, char *why, size_t len)
{
    int32_t have = atomic_load_explicit(&dep->credits, memory_order_relaxed);

    if (n->sender != dep->peer->remote_id) {
        snprintf(why, len, "credit record from sender %016llx on an endpoint of %016llx",
                 (unsigned long long)n->sender, (unsigned long long)dep->peer->remote_id);
        return false;
    }
    if ((int64_t)have + n->count > PDX_NOTIFY_RQ) {
        snprintf(why, len, "credit record of %u with %d credits: more than the %u receives "
                 "an endpoint has", n->count, have, PDX_NOTIFY_RQ);
        return false;
    }
    atomic_fetch_add_explicit(&dep->credits, (int32_t)n->count, memory_order_release);
    return true;
}

static void on_recv(pdx_shard_loop_t *L, pdx_dep_t *dep, const pdx_tp_wc_t *wc)
{
    pdx_engine_t *e = L->e;
    uint32_t i = (uint32_t)(wc->wr_id & PDX_WR_BUF_MASK);
    const char *why = NULL;
    pdx_wire_notify_t n;
    pdx_status_t status;

    if (PDX_UNLIKELY(i >= PDX_NOTIFY_RQ)) {
        pdx_error("shard %u: receive completion for buffer %u of endpoint %u.%u: ignored",
                  L->s->index, i, dep->pair, dep->index);
        return;
    }
    atomic_fetch_sub_explicit(&dep->rx_out, 1, memory_order_relaxed);
    if (wc->status != PDX_OK) {
        /* Flushed: the endpoint is in error; it takes no more receives. */
        const char *err = e->ops->ep_error(dep->ep);

        pdx_shard_dep_broken(dep, wc->status, err[0] ? err : pdx_status_str(wc->status));
        return;
    }
    status = pdx_wire_notify_decode(dep->rx_buf + (size_t)i * PDX_TP_SEND_MAX, wc->byte_len,
                                    &n, &why);
    if (status != PDX_OK) {
        char msg[PDX_ERRMSG_MAX];

        snprintf(msg, sizeof(msg), "malformed notify record: %s", why ? why : "?");
        pdx_shard_dep_broken(dep, PDX_ERR_PROTO, msg);
        return;
    }
    if (PDX_UNLIKELY(atomic_load_explicit(&dep->streak, memory_order_relaxed)))
        atomic_store_explicit(&dep->streak, 0, memory_order_relaxed); /* it works */
    if (n.flags & PDX_WIRE_NOTIFY_CREDIT) {
        char msg[PDX_ERRMSG_MAX];

        if (!on_credit(dep, &n, msg, sizeof(msg))) {
            pdx_shard_dep_broken(dep, PDX_ERR_PROTO, msg);
            return;
        }
    } else {
        atomic_fetch_add_explicit(&L->s->stats.notifies_received, 1, memory_order_relaxed);
        pdx_rooms_on_notify(e, dep->peer, &n);
    }

    if (atomic_load_explicit(&dep->failed, memory_order_acquire))
        return;
    status = e->ops->post_recv(dep->ep, wc->wr_id, dep->rx_mr, (uint64_t)i * PDX_TP_SEND_MAX,
                               PDX_TP_SEND_MAX);
    if (status != PDX_OK) {
        const char *err = e->ops->ep_error(dep->ep);

        pdx_shard_dep_broken(dep, status, err[0] ? err : "reposting a notify receive failed");
        return;
    }
    atomic_fetch_add_explicit(&dep->rx_out, 1, memory_order_relaxed);
    if (++dep->reposted >= PDX_CREDIT_BATCH)
        credit_return(L, dep);
}

static void poll_cq(pdx_shard_loop_t *L, pdx_tp_cq_t *cq)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;

    for (int round = 0; round < 4; round++) {
        int n = e->ops->cq_poll(cq, L->wc, PDX_SHARD_WC_BATCH);
        uint32_t ndeps;

        if (n <= 0)
            return;
        L->progress = true;
        ndeps = atomic_load_explicit(&s->ndeps, memory_order_acquire);
        for (int i = 0; i < n; i++) {
            const pdx_tp_wc_t *wc = &L->wc[i];
            uint64_t slot = wc->wr_id >> PDX_WR_SLOT_SHIFT;
            pdx_dep_t *dep = slot < ndeps ? atomic_load_explicit(&s->deps[slot],
                                                                 memory_order_acquire) : NULL;

            if (PDX_UNLIKELY(!dep || dep->ep != wc->ep)) {
                if (e->flush && pdx_flush_on_wc(L, wc))
                    continue; /* the flush read (its pair is no dep) */
                pdx_error("shard %u: completion (wr_id 0x%llx) of an endpoint it does not own: "
                          "ignored", s->index, (unsigned long long)wc->wr_id);
                continue;
            }
            if (wc->wr_id & PDX_WR_RECV)
                on_recv(L, dep, wc);
            else
                on_send(L, dep, wc);
        }
        if (n < PDX_SHARD_WC_BATCH)
            return;
    }
}

void pdx_shard_poll(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;

    /* A few batches of each CQ, then the send path gets its turn. */
    for (uint32_t k = 0; k < atomic_load_explicit(&s->ncq, memory_order_acquire); k++)
        poll_cq(L, s->cq[k]);
}

void pdx_shard_credit_retry(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    uint32_t ndeps = atomic_load_explicit(&s->ndeps, memory_order_acquire);

    L->credit_retry = false;
    for (uint32_t i = 0; i < ndeps; i++) {
        pdx_dep_t *dep = atomic_load_explicit(&s->deps[i], memory_order_acquire);

        if (dep && dep->reposted >= PDX_CREDIT_BATCH &&
            !atomic_load_explicit(&dep->failed, memory_order_acquire))
            credit_return(L, dep);
    }
}
