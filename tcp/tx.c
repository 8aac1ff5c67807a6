/*
 * tcp send side, on the progress thread: frames out of the SQ, acks in.
 *
 * The outgoing stream is control frames (HELLO, ACK, ERR), queued in
 * ctrl_q and committed to tx_ctrl only at a data-frame boundary, and data
 * frames taken in order from the SQ: a WRITE is its header then the payload
 * straight from the registered source (one sendmsg gathers many frames); a
 * SEND is its header and inline bytes. A WRITE from GPU memory goes out of
 * its staging pieces (stage.c): its header once the first piece is copied,
 * then each piece once copied; later frames wait behind it. Partial writes
 * resume where they stopped, so a peer that stops reading only leaves its
 * own socket full. The RDATA frames answering the peer's READs go out
 * between data frames, as soon as the frame being written is finished.
 *
 * WRs complete when the peer acknowledges them (ACK: placed; ERR: this one
 * failed), which is after placement, and a READ also not before its RDATA
 * is placed (the ACK may come first): signaled ones and failed ones get a
 * completion, in order; each completion frees the SQ slots of the WRs it
 * covers.
 */
#include "tcp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define TCP_TX_IOV    1024      /* UIO_MAXIOV: frames of small writes, up to 512 a call */
#define TCP_TX_CALL   (2u << 20) /* bytes gathered per sendmsg, at most about */
#define TCP_TX_PREFETCH (4u << 10) /* payloads up to this size are prefetched */
#define TCP_TX_BUDGET (8u << 20) /* bytes per ep per loop, then the others get a turn */
#define TCP_CQE_BATCH 32

typedef struct cqe_batch {
    tcp_cqe_t e[TCP_CQE_BATCH];
    uint32_t  n;
} cqe_batch_t;

static void batch_flush(tcp_cq_t *cq, cqe_batch_t *b)
{
    tcp_cq_push(cq, b->e, b->n);
    b->n = 0;
}

/* Complete SQ entry i with status; it covers every slot not yet covered. */
static void batch_add(tcp_ep_t *ep, cqe_batch_t *b, uint64_t i, pdx_status_t status)
{
    const tcp_wqe_t *w = &ep->sq[i & ep->sq_mask];
    tcp_cqe_t *e = &b->e[b->n++];

    e->wc.wr_id = w->wr_id;
    e->wc.ep = tcp_ep_pub(ep);
    e->wc.status = status;
    e->wc.opcode = (pdx_tp_opcode_t)w->opcode;
    e->wc.byte_len = 0;
    e->sq_slots = (uint32_t)(i + 1 - ep->sq_cqe_upto);
    e->rq_slots = 0;
    ep->sq_cqe_upto = i + 1;
    if (b->n == TCP_CQE_BATCH)
        batch_flush(ep->cq, b);
}

void tcp_ctrl_push(tcp_ep_t *ep, const tcp_hdr_t *hdr)
{
    /* A newer cumulative ACK replaces a queued one. */
    if (hdr->type == TCP_FR_ACK && ep->ctrl_n && ep->ctrl_q[ep->ctrl_n - 1].type == TCP_FR_ACK) {
        ep->ctrl_q[ep->ctrl_n - 1] = *hdr;
        return;
    }
    if (PDX_UNLIKELY(ep->ctrl_n == TCP_CTRL_MAX)) {
        /* rx stops parsing before the queue can fill */
        pdx_error("tcp: control queue of the endpoint to %s overflowed", ep->peer);
        return;
    }
    ep->ctrl_q[ep->ctrl_n++] = *hdr;
}

bool tcp_tx_pending(const tcp_ep_t *ep)
{
    return ep->tx_ctrl_off < ep->tx_ctrl_len || ep->ctrl_n || ep->rsp_n ||
           ep->sq_sent < ep->sq_seen;
}

/* RDATA frames go out now: one is under way, or the SQ's stream is at a
 * frame boundary. */
static bool rsp_now(const tcp_ep_t *ep)
{
    return ep->rsp_n && (ep->rsp_off || ep->tx_off == 0);
}

static uint64_t rsp_bytes(const tcp_rsp_t *r)
{
    return TCP_HDR_LEN + r->len;
}

/* Gather the owed RDATA frames; false when not all of them fit. */
static bool rsp_gather(tcp_ep_t *ep, struct iovec *iov, int *niov_p, size_t *total_p)
{
    uint64_t off = ep->rsp_off;
    int niov = *niov_p;

    for (uint32_t k = 0; k < ep->rsp_n; k++, off = 0) {
        tcp_rsp_t *r = &ep->rsp[(ep->rsp_head + k) % ep->rsp_cap];

        if (niov > TCP_TX_IOV - 2) {
            *niov_p = niov;
            return false;
        }
        if (off < TCP_HDR_LEN) {
            iov[niov].iov_base = (uint8_t *)&r->hdr + off;
            iov[niov++].iov_len = TCP_HDR_LEN - off;
            *total_p += TCP_HDR_LEN - off;
        }
        if (r->len) {
            uint64_t done = off > TCP_HDR_LEN ? off - TCP_HDR_LEN : 0;

            iov[niov].iov_base = (void *)(uintptr_t)(r->src + done);
            iov[niov++].iov_len = r->len - done;
            *total_p += r->len - done;
        }
    }
    *niov_p = niov;
    return true;
}

pdx_status_t tcp_tx_respond(tcp_ep_t *ep, uint64_t seq, tcp_mr_t *mr, const uint8_t *src,
                            uint64_t len)
{
    tcp_rsp_t *r;

    if (ep->rsp_n == ep->rsp_cap) {
        uint32_t cap = ep->rsp_cap ? 2 * ep->rsp_cap : 16;
        tcp_rsp_t *q = cap <= TCP_MAX_DEPTH ? malloc(cap * sizeof(*q)) : NULL;

        if (!q)
            return PDX_ERR_NOMEM;
        for (uint32_t k = 0; k < ep->rsp_n; k++)
            q[k] = ep->rsp[(ep->rsp_head + k) % ep->rsp_cap];
        free(ep->rsp);
        ep->rsp = q;
        ep->rsp_cap = cap;
        ep->rsp_head = 0;
    }
    r = &ep->rsp[(ep->rsp_head + ep->rsp_n++) % ep->rsp_cap];
    tcp_hdr_encode(&r->hdr, TCP_FR_RDATA, 0, seq, 0, len);
    r->src = src;
    r->len = len;
    r->mr = mr;
    tcp_work_add(ep);
    return PDX_OK;
}

static uint64_t frame_bytes(const tcp_wqe_t *w)
{
    return w->frame_len + (w->opcode == PDX_TP_OP_WRITE ? w->len : 0);
}

/*
 * A WRITE from GPU memory (SQ entry i, off bytes of its frame sent): its
 * header once its first piece is copied, then its copied pieces from *pc
 * on. False when the frame cannot be finished from what is copied: the
 * frames after it wait.
 */
static bool tx_gather_dev(tcp_ep_t *ep, const tcp_wqe_t *w, uint64_t i, uint64_t off,
                          struct iovec *iov, int *niov_p, size_t *total_p, uint64_t *pc)
{
    const tcp_ring_t *r = ep->stage ? &ep->stage->tx : NULL;
    uint64_t upto = off > w->frame_len ? off - w->frame_len : 0; /* payload bytes sent */
    int niov = *niov_p;

    if (w->len && (!r || *pc == r->p_done || r->piece[*pc % TCP_STAGE_PIECES].seq != i))
        return false;
    if (off < w->frame_len) {
        iov[niov].iov_base = (uint8_t *)&w->hdr + off;
        iov[niov++].iov_len = w->frame_len - off;
        *total_p += w->frame_len - off;
    }
    for (; r && *pc < r->p_done && niov < TCP_TX_IOV; (*pc)++) {
        const tcp_piece_t *p = &r->piece[*pc % TCP_STAGE_PIECES];
        uint64_t skip = upto - p->off; /* pieces are contiguous: the first may be partly sent */

        if (p->seq != i)
            break;
        iov[niov].iov_base = p->buf + skip;
        iov[niov++].iov_len = p->len - skip;
        *total_p += p->len - skip;
        upto = p->off + p->len;
    }
    *niov_p = niov;
    return upto == w->len;
}

/* Gather the unsent stream into iov; returns the entry count, *total_p bytes. */
static int tx_gather(tcp_ep_t *ep, struct iovec *iov, size_t *total_p)
{
    uint64_t off = ep->tx_off, end = ep->sq_seen;
    uint64_t pc = ep->stage ? ep->stage->tx.p_tail : 0;
    size_t total = 0;
    int niov = 0;

    if (ep->tx_ctrl_off == ep->tx_ctrl_len && ep->ctrl_n && ep->tx_off == 0 &&
        ep->rsp_off == 0) {
        memcpy(ep->tx_ctrl, ep->ctrl_q, ep->ctrl_n * sizeof(tcp_hdr_t));
        ep->tx_ctrl_len = ep->ctrl_n * TCP_HDR_LEN;
        ep->tx_ctrl_off = 0;
        ep->ctrl_n = 0;
    }
    if (ep->tx_ctrl_off < ep->tx_ctrl_len) {
        iov[niov].iov_base = (uint8_t *)ep->tx_ctrl + ep->tx_ctrl_off;
        iov[niov++].iov_len = ep->tx_ctrl_len - ep->tx_ctrl_off;
        total += ep->tx_ctrl_len - ep->tx_ctrl_off;
    }
    if (rsp_now(ep)) {
        if (!rsp_gather(ep, iov, &niov, &total))
            end = ep->sq_sent; /* the rest of them first */
    } else if (ep->rsp_n) {
        end = PDX_MIN(end, ep->sq_sent + 1); /* finish this frame, then theirs */
    }
    for (uint64_t i = ep->sq_sent; i < end && niov <= TCP_TX_IOV - 2 &&
                                   total < TCP_TX_CALL; i++, off = 0) {
        tcp_wqe_t *w = &ep->sq[i & ep->sq_mask];

        if (PDX_UNLIKELY(w->dev)) {
            if (!tx_gather_dev(ep, w, i, off, iov, &niov, &total, &pc))
                break;
            continue;
        }
        if (off < w->frame_len) {
            iov[niov].iov_base = (uint8_t *)&w->hdr + off;
            iov[niov++].iov_len = w->frame_len - off;
            total += w->frame_len - off;
        }
        if (w->opcode == PDX_TP_OP_WRITE && w->len) {
            uint64_t done = off > w->frame_len ? off - w->frame_len : 0;

            /* Small payloads lie anywhere in a pool: their lines load
             * together now rather than one miss after another in the
             * kernel's copy (at most 512 of them a call). */
            if (w->len <= TCP_TX_PREFETCH)
                for (uint64_t k = done; k < w->len; k += 64)
                    __builtin_prefetch((const void *)(uintptr_t)(w->src + k), 0, 2);
            iov[niov].iov_base = (void *)(uintptr_t)(w->src + done);
            iov[niov++].iov_len = w->len - done;
            total += w->len - done;
        }
    }
    *total_p = total;
    return niov;
}

/* Account for n bytes written. */
static void tx_advance(tcp_ep_t *ep, size_t n)
{
    if (ep->tx_ctrl_off < ep->tx_ctrl_len) {
        size_t take = PDX_MIN(n, (size_t)(ep->tx_ctrl_len - ep->tx_ctrl_off));

        ep->tx_ctrl_off += (uint32_t)take;
        n -= take;
    }
    while (n && rsp_now(ep)) { /* as tx_gather put them */
        tcp_rsp_t *r = &ep->rsp[ep->rsp_head];
        uint64_t rest = rsp_bytes(r) - ep->rsp_off;

        if (n < rest) {
            ep->rsp_off += n;
            return;
        }
        n -= rest;
        tcp_mr_unref(r->mr, 1);
        ep->rsp_off = 0;
        ep->rsp_head = (ep->rsp_head + 1) % ep->rsp_cap;
        ep->rsp_n--;
    }
    while (n) {
        const tcp_wqe_t *w = &ep->sq[ep->sq_sent & ep->sq_mask];
        uint64_t rest = frame_bytes(w) - ep->tx_off;

        if (n < rest) {
            ep->tx_off += n;
            return;
        }
        n -= rest;
        ep->tx_off = 0;
        ep->sq_sent++;
    }
}

void tcp_tx_progress(tcp_ep_t *ep)
{
    size_t budget = TCP_TX_BUDGET;

    while (ep->state == TCP_EP_UP && ep->writable) {
        struct iovec iov[TCP_TX_IOV];
        struct msghdr msg = {.msg_iov = iov};
        size_t total;
        ssize_t n;

        if (PDX_UNLIKELY(ep->stage)) {
            tcp_stage_tx(ep); /* into ring space the last sendmsg freed */
            if (ep->state != TCP_EP_UP)
                return;
        }
        msg.msg_iovlen = (size_t)tx_gather(ep, iov, &total);
        if (msg.msg_iovlen == 0)
            return;
        n = sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ep->writable = false; /* EPOLLOUT brings it back */
                return;
            }
            tcp_ep_set_error(ep, PDX_ERR_PEER, false, "send to peer %s: %s", ep->peer,
                             strerror(errno));
            return;
        }
        tx_advance(ep, (size_t)n);
        if (PDX_UNLIKELY(ep->stage))
            tcp_stage_tx_sent(ep);
        if ((size_t)n < total) {
            /* A short write means the socket buffer is full; the kernel then
             * flags it so EPOLLOUT fires once room frees up. */
            ep->writable = false;
            return;
        }
        if ((size_t)n >= budget) {
            tcp_work_add(ep); /* more next loop, after the other eps */
            return;
        }
        budget -= (size_t)n;
    }
}

pdx_status_t tcp_tx_complete(tcp_ep_t *ep, uint64_t end, pdx_status_t last)
{
    if (end < ep->sq_acked || end > ep->sq_sent)
        return PDX_ERR_PROTO;
    if (last != PDX_OK) {
        tcp_wqe_t *w = &ep->sq[(end - 1) & ep->sq_mask];

        if (w->status == 0)
            w->status = last;
    }
    ep->sq_ack_mark = PDX_MAX(ep->sq_ack_mark, end);
    tcp_tx_retire(ep);
    return PDX_OK;
}

void tcp_tx_retire(tcp_ep_t *ep)
{
    uint64_t i = ep->sq_acked;
    cqe_batch_t b;

    b.n = 0;
    for (; i < ep->sq_ack_mark; i++) {
        const tcp_wqe_t *w = &ep->sq[i & ep->sq_mask];

        if (w->opcode == PDX_TP_OP_READ && !w->placed && w->status == 0)
            break; /* its RDATA is still on the way */
        if (w->mr)
            tcp_mr_unref(w->mr, 1); /* before the completion, so mr_dereg can follow it */
        if (w->signaled || w->status)
            batch_add(ep, &b, i, w->status ? w->status : PDX_OK);
    }
    batch_flush(ep->cq, &b);
    if (i != ep->sq_acked) {
        ep->sq_acked = i;
        ep->progress_ns = pdx_now_ns();
    }
}

void tcp_tx_flush(tcp_ep_t *ep, pdx_status_t why, bool complete)
{
    uint64_t end = atomic_load_explicit(&ep->sq_pub, memory_order_acquire);
    cqe_batch_t b;

    b.n = 0;
    for (uint64_t i = ep->sq_acked; i < end; i++) {
        const tcp_wqe_t *w = &ep->sq[i & ep->sq_mask];

        if (w->mr)
            tcp_mr_unref(w->mr, 1);
        if (complete)
            batch_add(ep, &b, i, why);
    }
    batch_flush(ep->cq, &b);
    ep->sq_acked = ep->sq_sent = ep->sq_seen = ep->sq_ack_mark = end;
    ep->tx_off = 0;
    for (; ep->rsp_n; ep->rsp_n--, ep->rsp_head = (ep->rsp_head + 1) % ep->rsp_cap)
        tcp_mr_unref(ep->rsp[ep->rsp_head].mr, 1);
    ep->rsp_off = 0;
    tcp_stage_tx_reset(ep);
}
