/*
 * ipc endpoints' completions: a direct endpoint's records done as their
 * copies' events complete (or their gated copies are given up) and as the
 * inner endpoint completes its WRs, SENDs handed on when nothing before them
 * is left, completions out in posting order (ipc.h).
 */
#include "ipc.h"

#include "log.h"
#include "util.h"

void ipc_ep_inner_done(ipc_ep_t *ep, const pdx_tp_wc_t *wc)
{
    /* in the inner endpoint's order: what it took before the completed WR
     * is done too (an unsignaled WR completes only with a later one) */
    while (ep->inq_head != ep->inq_tail) {
        ipc_rec_t *rec = ipc_rec_at(ep, ep->inq[ep->inq_head++ % ep->depth]);

        rec->done = true;
        rec->status = wc->status;
        if (rec->wr_id == wc->wr_id)
            return;
    }
    pdx_debug("ipc: a completion of WR 0x%llx the endpoint does not hold",
              (unsigned long long)wc->wr_id);
}

uint64_t ipc_ep_oldest_ns(const ipc_ep_t *ep)
{
    return ep->b_head != ep->b_tail ? ep->batches[ep->b_head % ep->depth].posted_ns : UINT64_MAX;
}

bool ipc_ep_copies_pending(const ipc_ep_t *ep)
{
    return ep->b_head != ep->b_tail || ep->open_n;
}

bool ipc_ep_stream_pending(const ipc_ep_t *ep)
{
    return ep->b_tail - ep->b_head > ep->gated || ep->open_n;
}

/* A gated batch: open (its copy deadline runs from now), still closed, or
 * given up (its deadline passed, its room abandoned, or give_up). */
static void batch_gate(ipc_ep_t *ep, ipc_batch_t *b, uint64_t now, bool give_up)
{
    bool abandoned;

    if (ipc_gate_passed(b->gate, b->seq)) {
        b->waiting = false;
        b->posted_ns = now;
        ep->waiting--;
        return;
    }
    abandoned = b->abandon && atomic_load_explicit(b->abandon, memory_order_acquire) ==
                                  b->abandon_if;
    if (!give_up && !abandoned && now <= b->deadline_ns) {
        ep->expiry = PDX_MIN(ep->expiry, b->deadline_ns);
        return;
    }
    b->waiting = false;
    ep->waiting--;
    b->status = ipc_ep_failed(ep) != PDX_OK ? ipc_ep_failed(ep)
                : abandoned                 ? PDX_ERR_ABORTED
                                            : PDX_ERR_TIMEOUT;
    if (ipc_gate_give_up(ep->cq, b->gate, b->slot, b->seq, b->status)) {
        /* never runs; its event is recorded behind the wait: a new one */
        pdx_hip_event_destroy(b->event);
        b->event = NULL;
        b->failed = true;
    }
    pdx_debug("ipc: a copy of %llu bytes behind a gate given up (%s): %s",
              (unsigned long long)b->bytes, pdx_status_str(b->status),
              b->failed ? "it never runs" : "its wait passed, it ends with its kernel");
}

void ipc_ep_gates(ipc_ep_t *ep, bool give_up)
{
    uint64_t now = pdx_now_ns();

    give_up = give_up || ipc_ep_failed(ep) != PDX_OK;
    if (!ep->waiting)
        return; /* else each: one may be abandoned before any deadline */
    ep->expiry = UINT64_MAX;
    for (uint64_t i = ep->b_head, left = ep->waiting; i != ep->b_tail && left; i++) {
        ipc_batch_t *b = &ep->batches[i % ep->depth];

        if (b->waiting) {
            left--;
            batch_gate(ep, b, now, give_up);
        }
    }
}

uint64_t ipc_ep_expiry(const ipc_ep_t *ep)
{
    return ep->waiting ? ep->expiry : UINT64_MAX;
}

/* A copy of wr_id's group was given up: its SENDs posted so far must not
 * reach the peer (a notify of pages never written). */
static void group_dead(ipc_ep_t *ep, uint64_t wr_id, pdx_status_t why)
{
    const uint64_t mask = ep->cq->tp->group_mask;

    for (uint32_t i = 0; i < ep->ndead;)
        if (ep->dead[i].until <= ep->rec_head) /* past it: forget it */
            ep->dead[i] = ep->dead[--ep->ndead];
        else
            i++;
    if (!mask || ep->ndead == IPC_DEAD_GROUPS) {
        ipc_ep_failure(ep, why, "a GPU copy was given up (%s) and %s", pdx_status_str(why),
                mask ? "too many were at once" : "its SENDs cannot be told apart");
        return;
    }
    ep->dead[ep->ndead++] = (ipc_dead_t){.group = wr_id & mask, .until = ep->rec_tail};
}

/* Whether the SEND record i is of a group whose copy was given up. */
static pdx_status_t send_dead(const ipc_ep_t *ep, uint64_t i)
{
    const uint64_t group = ipc_rec_at(ep, i)->wr_id & ep->cq->tp->group_mask;

    for (uint32_t k = 0; k < ep->ndead; k++)
        if (ep->dead[k].group == group && i < ep->dead[k].until)
            return PDX_ERR_ABORTED;
    return PDX_OK;
}

/* Batches whose event completed, in order; then SENDs no copy holds back. */
void ipc_ep_progress(ipc_ep_t *ep)
{
    ipc_tp_t *tp = ep->cq->tp;

    ipc_ep_gates(ep, false);
    while (ep->b_head != ep->b_tail) {
        ipc_batch_t *b = &ep->batches[ep->b_head % ep->depth];
        pdx_status_t st;

        if (b->waiting) {
            batch_gate(ep, b, pdx_now_ns(), false);
            if (b->waiting)
                break;
        }
        st = b->failed ? PDX_OK : pdx_hip_event_query(b->event);
        /* a given-up copy's tables may still be going up */
        if (st == PDX_OK && b->gate && b->up_event)
            st = pdx_hip_event_query(b->up_event);
        if (st == PDX_INPROGRESS) {
            if (!ep->late && pdx_now_ns() - b->posted_ns > (uint64_t)tp->timeout_ms * 1000000u) {
                ep->late = true;
                ipc_ep_failure(ep, PDX_ERR_TIMEOUT, "GPU copies of %llu bytes not finished after %u ms",
                        (unsigned long long)b->bytes, tp->timeout_ms);
            }
            break;
        }
        if (st != PDX_OK)
            ipc_ep_failure(ep, PDX_ERR_IO, "GPU copy of %llu bytes failed: %s",
                    (unsigned long long)b->bytes, pdx_hip_last_error());
        for (uint32_t i = 0; i < b->nrec; i++) {
            ipc_rec_t *rec = ipc_rec_at(ep, b->rec_first + i);

            rec->done = true;
            rec->status = ipc_ep_failed(ep) != PDX_OK ? ipc_ep_failed(ep) : b->status;
            if (rec->status != PDX_OK && ipc_ep_failed(ep) == PDX_OK)
                group_dead(ep, rec->wr_id, rec->status);
        }
        ep->run_head = b->run_first + b->nruns;
        if (b->gate && !b->failed)
            ipc_gate_done(b->gate, b->epoch); /* given up: counted then */
        ep->gated -= b->gate != NULL;
        ep->b_head++;
        /* the next one's deadline runs from now: it waited behind this one */
        if (ep->b_head != ep->b_tail)
            ep->batches[ep->b_head % ep->depth].posted_ns = pdx_now_ns();
    }
    /* the GPU is done with this ep: what gathered meanwhile goes now */
    if (ep->b_head == ep->b_tail && ep->open_n)
        ipc_ep_flush(ep);
    for (uint64_t i = ep->rec_head; i < ep->rec_tail; i++) {
        ipc_rec_t *rec = ipc_rec_at(ep, i);
        pdx_status_t st;

        if (rec->kind == REC_COPY) {
            if (!rec->done)
                break;
            continue;
        }
        if (rec->kind != REC_SEND || rec->posted || rec->done)
            continue;
        if (ipc_ep_failed(ep) != PDX_OK || (ep->ndead && send_dead(ep, i) != PDX_OK)) {
            rec->done = true;
            rec->status = ipc_ep_failed(ep) != PDX_OK ? ipc_ep_failed(ep) : PDX_ERR_ABORTED;
            continue;
        }
        st = tp->in_ops->post_send(ep->in, rec->wr_id, rec->data, rec->len, PDX_TP_SIGNALED);
        if (st == PDX_ERR_AGAIN)
            break;
        if (st != PDX_OK) {
            rec->done = true;
            rec->status = st;
            ipc_ep_failure(ep, st, "notify SEND refused: %s", pdx_status_str(st));
            continue;
        }
        rec->posted = true;
        ipc_inq_push(ep, i);
    }
}

int ipc_ep_emit(ipc_ep_t *ep, pdx_tp_wc_t *wc, int max)
{
    int out = 0;

    while (out < max && ep->rec_head != ep->rec_tail) {
        const ipc_rec_t *rec = ipc_rec_at(ep, ep->rec_head);

        if (!rec->done)
            break;
        if (rec->signaled || rec->status != PDX_OK)
            wc[out++] = (pdx_tp_wc_t){.wr_id = rec->wr_id, .ep = (pdx_tp_ep_t *)ep,
                                      .status = rec->status,
                                      .opcode = (pdx_tp_opcode_t)rec->opcode};
        ep->rec_head++;
    }
    return out;
}
