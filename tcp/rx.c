/*
 * tcp receive side, on the progress thread: frames in, placement, acks out.
 *
 * Headers and small frames are read in bulk into rxbuf; a WRITE's payload
 * is read straight into its destination (readv: the rest of the payload,
 * then a little of rxbuf for the next header), so large writes are not
 * copied. A WRITE whose rkey or bounds do not check out is read and
 * discarded, then answered with ERR {seq, PDX_ERR_RANGE} (only then: until
 * the frame is read, the sender may still be writing it); the stream stays
 * usable. A SEND lands in the next posted receive (none posted: the ep
 * fails, as RNR retries would). After each pass over the socket one
 * cumulative ACK covers every frame placed; an ERR always precedes the ACK
 * that covers its frame. Control frames from the peer complete our WRs
 * (tx.c). A header is parsed only with room for the control frames it may
 * cause (its ERR, and an ACK queued while its payload drains).
 *
 * A READ from the peer is answered with an RDATA frame of the bytes it
 * asks for (tx.c sends them from the region, which stays referenced until
 * then), or an ERR when its rkey, access or bounds do not check out or the
 * region is GPU memory; it is placed at once (its ACK may go first). An
 * RDATA answering one of our READs is read into that READ's destination,
 * which then completes once also acknowledged (tx.c).
 *
 * A WRITE into GPU memory is read into staging pieces instead, each copied
 * to the GPU once full (stage.c); it is placed once its last piece's copy
 * finished. Until then the frames after it are recorded (ep->stage->rec)
 * rather than acknowledged: they retire in order as placement catches up,
 * so an ACK or ERR never covers an unplaced frame and a SEND's receive
 * completes only after every WRITE before it is placed; a READ waits
 * unparsed until they are (it must read what they wrote). Without GPU
 * regions rx_placed == rx_seq and nothing is recorded.
 */
#include "tcp_internal.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#define TCP_RX_BUDGET (8u << 20)  /* bytes per ep per loop */
#define TCP_RX_SPILL  (4u << 10)  /* rxbuf bytes read behind a large payload */
#define TCP_RX_LARGE  (16u << 10) /* payloads from this size on are "large" */
#define TCP_RX_PREFETCH (4u << 10) /* destination bytes prefetched per WRITE, at most */

static void rx_proto_error(tcp_ep_t *ep, const tcp_hdr_t *h, const char *what)
{
    tcp_ep_set_error(ep, PDX_ERR_PROTO, true,
                     "malformed frame from peer %s (type %u, seq %llu, len %llu): %s", ep->peer,
                     h->type, (unsigned long long)h->seq, (unsigned long long)h->len, what);
}

/* The frame rx_seq is received but placement is behind: record it. */
static void rx_record(tcp_ep_t *ep, tcp_rec_kind_t kind, bool done)
{
    tcp_rec_t *rec = &ep->stage->rec[ep->rx_seq % TCP_RX_DEFER];

    rec->kind = (uint8_t)kind;
    rec->done = done;
    rec->status = ep->rx_status;
    rec->byte_len = (uint32_t)ep->rx_len;
    ep->rx_seq++;
}

static void rx_send_err(tcp_ep_t *ep, uint64_t seq, int32_t status)
{
    tcp_hdr_t err;

    tcp_hdr_encode(&err, TCP_FR_ERR, (uint32_t)status, seq, 0, 0);
    tcp_ctrl_push(ep, &err);
    ep->ack_queued = seq + 1;
}

static void rx_recv_done(tcp_ep_t *ep, uint32_t byte_len)
{
    const tcp_rqe_t *r = &ep->rq[ep->rq_done & ep->rq_mask];
    tcp_cqe_t e = {
        .wc = {.wr_id = r->wr_id, .ep = tcp_ep_pub(ep), .status = PDX_OK,
               .opcode = PDX_TP_OP_RECV, .byte_len = byte_len},
        .rq_slots = 1,
    };

    tcp_mr_unref(r->mr, 1);
    ep->rq_done++;
    tcp_cq_push(ep->cq, &e, 1);
}

static void rx_ack(tcp_ep_t *ep)
{
    tcp_hdr_t ack;

    if (ep->rx_placed <= ep->ack_queued)
        return;
    tcp_hdr_encode(&ack, TCP_FR_ACK, 0, ep->rx_placed, 0, 0);
    tcp_ctrl_push(ep, &ack);
    ep->ack_queued = ep->rx_placed;
}

bool tcp_rx_retire_ready(const tcp_ep_t *ep)
{
    return ep->rx_placed != ep->rx_seq && ep->stage->rec[ep->rx_placed % TCP_RX_DEFER].done &&
           tcp_ctrl_room(ep);
}

void tcp_rx_retire(tcp_ep_t *ep)
{
    uint64_t from = ep->rx_placed;

    while (ep->rx_placed != ep->rx_seq) {
        const tcp_rec_t *rec = &ep->stage->rec[ep->rx_placed % TCP_RX_DEFER];

        if (!rec->done || !tcp_ctrl_room(ep))
            break;
        if (rec->kind == TCP_REC_ERR)
            rx_send_err(ep, ep->rx_placed, rec->status);
        else if (rec->kind == TCP_REC_RECV)
            rx_recv_done(ep, rec->byte_len);
        ep->rx_placed++;
    }
    if (ep->rx_placed == from)
        return;
    rx_ack(ep);
    tcp_work_add(ep); /* the ACK (and ERRs) go out; rx may read again */
    ep->rx_stalled = false;
}

static void rx_frame_done(tcp_ep_t *ep)
{
    switch (ep->rx_kind) {
    case TCP_RX_WRITE:
        tcp_mr_unref(ep->rx_mr, 1);
        ep->rx_mr = NULL;
        if (PDX_UNLIKELY(ep->rx_placed != ep->rx_seq)) {
            rx_record(ep, TCP_REC_WRITE, true);
            break;
        }
        ep->rx_placed = ++ep->rx_seq;
        break;
    case TCP_RX_WRITE_DEV:
        tcp_mr_unref(ep->rx_mr, 1); /* its pieces hold their own */
        ep->rx_mr = NULL;
        rx_record(ep, TCP_REC_WRITE, false); /* done when its last piece's copy is */
        break;
    case TCP_RX_DISCARD:
        if (PDX_UNLIKELY(ep->rx_placed != ep->rx_seq)) {
            rx_record(ep, TCP_REC_ERR, true);
            break;
        }
        rx_send_err(ep, ep->rx_seq, ep->rx_status);
        ep->rx_placed = ++ep->rx_seq;
        break;
    case TCP_RX_SEND:
        ep->rx_kind = TCP_RX_NONE;
        if (PDX_UNLIKELY(ep->rx_placed != ep->rx_seq)) {
            rx_record(ep, TCP_REC_RECV, true);
            return;
        }
        ep->rx_placed = ++ep->rx_seq;
        rx_recv_done(ep, (uint32_t)ep->rx_len);
        return;
    case TCP_RX_RDATA:
        ep->rx_kind = TCP_RX_NONE;
        ep->sq[ep->rx_rd & ep->sq_mask].placed = true;
        tcp_tx_retire(ep);
        return;
    case TCP_RX_FAIL:
        ep->rx_kind = TCP_RX_NONE;
        ep->fail_msg[ep->rx_len] = '\0';
        tcp_ep_set_error(ep, tcp_status_from_wire((uint32_t)ep->rx_status) == PDX_ERR_VERSION ?
                                 PDX_ERR_VERSION : PDX_ERR_PEER,
                         false, "peer %s failed the connection: %s", ep->peer, ep->fail_msg);
        return;
    case TCP_RX_NONE:
        break;
    }
    ep->rx_kind = TCP_RX_NONE;
}

static void rx_write(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    ep->rx_left = ep->rx_len = h->len;
    if (tcp_mr_lookup(ep->tp, h->arg, h->addr, h->len, PDX_TP_ACCESS_REMOTE_WRITE, &ep->rx_mr,
                      &ep->rx_dst) == PDX_OK) {
        ep->rx_kind = PDX_UNLIKELY(ep->rx_mr->kind == TCP_MEM_DEVICE) && h->len ? TCP_RX_WRITE_DEV
                                                                                : TCP_RX_WRITE;
        return;
    }
    pdx_warn("tcp: %s: WRITE %llu from peer %s of %llu bytes at 0x%llx is outside the region "
             "of rkey 0x%x: skipped", ep->tp->name, (unsigned long long)h->seq, ep->peer,
             (unsigned long long)h->len, (unsigned long long)h->addr, h->arg);
    ep->rx_kind = TCP_RX_DISCARD;
    ep->rx_status = PDX_ERR_RANGE;
    ep->rx_dst = NULL;
}

/* The peer's READ (placement is caught up: tcp_rx_progress waits for it):
 * its RDATA owed, or an ERR. False when the ep failed. */
static bool rx_read_req(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    int32_t status = PDX_ERR_RANGE;
    uint8_t *src = NULL;
    tcp_mr_t *mr = NULL;

    if (tcp_mr_lookup(ep->tp, h->arg, h->addr, h->len, PDX_TP_ACCESS_REMOTE_READ, &mr,
                      &src) == PDX_OK) {
        if (mr->kind == TCP_MEM_HOST) {
            if (tcp_tx_respond(ep, h->seq, mr, src, h->len) != PDX_OK) {
                tcp_mr_unref(mr, 1);
                tcp_ep_set_error(ep, PDX_ERR_NOMEM, true, "out of memory for the READs of "
                                 "peer %s", ep->peer);
                return false;
            }
            ep->rx_placed = ++ep->rx_seq;
            return true;
        }
        tcp_mr_unref(mr, 1);
        status = PDX_ERR_UNSUPPORTED;
    }
    pdx_warn("tcp: %s: READ %llu from peer %s of %llu bytes at 0x%llx: %s of rkey 0x%x: refused",
             ep->tp->name, (unsigned long long)h->seq, ep->peer, (unsigned long long)h->len,
             (unsigned long long)h->addr, status == PDX_ERR_RANGE ? "outside the readable region"
                                                                  : "GPU memory", h->arg);
    rx_send_err(ep, ep->rx_seq, status);
    ep->rx_placed = ++ep->rx_seq;
    return true;
}

/* RDATA for our READ h->seq: it is read into the READ's destination. */
static bool rx_rdata(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    const tcp_wqe_t *w = &ep->sq[h->seq & ep->sq_mask];

    if (h->seq < ep->sq_acked || h->seq >= ep->sq_sent || w->opcode != PDX_TP_OP_READ ||
        w->placed || w->status || h->len != w->len) {
        rx_proto_error(ep, h, "RDATA for no READ of ours in flight");
        return false;
    }
    ep->rx_kind = TCP_RX_RDATA;
    ep->rx_rd = h->seq;
    ep->rx_dst = w->dst;
    ep->rx_left = ep->rx_len = h->len;
    return true;
}

static bool rx_send(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    const tcp_rqe_t *r;

    if (h->len > PDX_TP_SEND_MAX) {
        rx_proto_error(ep, h, "SEND above the inline limit");
        return false;
    }
    if (ep->rq_taken == atomic_load_explicit(&ep->rq_pub, memory_order_acquire)) {
        tcp_ep_set_error(ep, PDX_ERR_PEER, true,
                         "SEND %llu from peer %s found no receive posted (receiver not ready)",
                         (unsigned long long)h->seq, ep->peer);
        return false;
    }
    r = &ep->rq[ep->rq_taken & ep->rq_mask];
    if (h->len > r->len) {
        tcp_ep_set_error(ep, PDX_ERR_RANGE, true,
                         "SEND of %llu bytes from peer %s does not fit the %u-byte receive",
                         (unsigned long long)h->len, ep->peer, r->len);
        return false;
    }
    ep->rq_taken++;
    ep->rx_kind = TCP_RX_SEND;
    ep->rx_dst = r->buf;
    ep->rx_left = ep->rx_len = h->len;
    return true;
}

static bool rx_hello(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    if (h->seq != TCP_HELLO_MAGIC || h->addr != ep->remote.token || h->len != ep->token) {
        rx_proto_error(ep, h, "HELLO from another endpoint");
        return false;
    }
    if (h->arg != TCP_PROTO_VERSION) {
        tcp_ep_set_error(ep, PDX_ERR_VERSION, true, "peer %s speaks tcp protocol %u, this side %u",
                         ep->peer, h->arg, TCP_PROTO_VERSION);
        return false;
    }
    ep->hello_due = false;
    return true;
}

/* One header: false when the ep failed. */
static bool rx_header(tcp_ep_t *ep, const tcp_hdr_t *h)
{
    if (ep->hello_due && h->type != TCP_FR_HELLO && h->type != TCP_FR_FAIL) {
        rx_proto_error(ep, h, "expected HELLO first");
        return false;
    }
    switch (h->type) {
    case TCP_FR_HELLO:
        if (!ep->hello_due) {
            rx_proto_error(ep, h, "second HELLO");
            return false;
        }
        return rx_hello(ep, h);
    case TCP_FR_WRITE:
        if (h->seq != ep->rx_seq) {
            rx_proto_error(ep, h, "out of sequence");
            return false;
        }
        rx_write(ep, h);
        break;
    case TCP_FR_SEND:
        if (h->seq != ep->rx_seq) {
            rx_proto_error(ep, h, "out of sequence");
            return false;
        }
        if (!rx_send(ep, h))
            return false;
        break;
    case TCP_FR_READ:
        if (h->seq != ep->rx_seq) {
            rx_proto_error(ep, h, "out of sequence");
            return false;
        }
        return rx_read_req(ep, h) && ep->state == TCP_EP_UP;
    case TCP_FR_RDATA:
        if (!rx_rdata(ep, h))
            return false;
        break;
    case TCP_FR_ACK:
        if (tcp_tx_complete(ep, h->seq, PDX_OK) != PDX_OK) {
            rx_proto_error(ep, h, "ACK of frames never sent");
            return false;
        }
        return true;
    case TCP_FR_ERR:
        if (h->seq == UINT64_MAX ||
            tcp_tx_complete(ep, h->seq + 1, tcp_status_from_wire(h->arg)) != PDX_OK) {
            rx_proto_error(ep, h, "ERR for a frame never sent");
            return false;
        }
        return true;
    case TCP_FR_FAIL:
        if (h->len > TCP_FAIL_MSG_MAX) {
            rx_proto_error(ep, h, "FAIL reason too long");
            return false;
        }
        ep->rx_kind = TCP_RX_FAIL;
        ep->rx_status = (int32_t)h->arg;
        ep->rx_dst = (uint8_t *)ep->fail_msg;
        ep->rx_left = ep->rx_len = h->len;
        break;
    default:
        rx_proto_error(ep, h, "unknown frame type");
        return false;
    }
    if (ep->rx_left == 0)
        rx_frame_done(ep);
    return ep->state == TCP_EP_UP;
}

/* Take buffered bytes for a payload into GPU memory; false when staging is
 * full or the ep failed. */
static bool rx_take_dev(tcp_ep_t *ep)
{
    tcp_piece_t *p = tcp_stage_rx_open(ep);
    uint32_t take;

    if (!p)
        return false;
    take = (uint32_t)PDX_MIN((uint64_t)(ep->rx_have - ep->rx_off), (uint64_t)(p->len - p->fill));
    memcpy(p->buf + p->fill, ep->rxbuf + ep->rx_off, take);
    ep->rx_off += take;
    tcp_stage_rx_fill(ep, p, take);
    if (ep->state != TCP_EP_UP)
        return false;
    if (ep->rx_left == 0)
        rx_frame_done(ep);
    return true;
}

/* Take buffered bytes for the current payload; false when it cannot now. */
static bool rx_take(tcp_ep_t *ep)
{
    uint32_t take = (uint32_t)PDX_MIN((uint64_t)(ep->rx_have - ep->rx_off), ep->rx_left);

    if (PDX_UNLIKELY(ep->rx_kind == TCP_RX_WRITE_DEV))
        return rx_take_dev(ep);
    if (ep->rx_dst) {
        memcpy(ep->rx_dst, ep->rxbuf + ep->rx_off, take);
        ep->rx_dst += take;
    }
    ep->rx_off += take;
    ep->rx_left -= take;
    if (ep->rx_left == 0)
        rx_frame_done(ep);
    return true;
}

/* One read of a payload into GPU memory into its open staging piece (then
 * a little of rxbuf); the caller made sure there is one. */
static ssize_t rx_read_dev(tcp_ep_t *ep)
{
    tcp_piece_t *p = tcp_stage_rx_open(ep);
    uint32_t room = p->len - p->fill;
    struct iovec iov[2] = {
        {.iov_base = p->buf + p->fill, .iov_len = room},
        {.iov_base = ep->rxbuf, .iov_len = room < ep->rx_left ? TCP_RX_SPILL : TCP_RXBUF},
    };
    ssize_t n = readv(ep->fd, iov, 2);

    if (n <= 0)
        return n;
    ep->rx_off = ep->rx_have = 0;
    if ((uint64_t)n < room) {
        tcp_stage_rx_fill(ep, p, (uint32_t)n);
        return n;
    }
    ep->rx_have = (uint32_t)((uint64_t)n - room);
    tcp_stage_rx_fill(ep, p, room);
    if (ep->state == TCP_EP_UP && ep->rx_left == 0)
        rx_frame_done(ep);
    return n;
}

/* The destinations of the WRITEs whose frames a read brought in whole or in
 * part (a read holds up to a hundred small ones): their lines load together
 * while the first frames are placed, rather than one miss after another.
 * Only prefetched, never touched here: a bad address costs nothing. */
static void rx_prefetch(const tcp_ep_t *ep)
{
    uint64_t off = ep->rx_off;

    if (ep->rx_kind != TCP_RX_NONE) { /* after the payload in progress (any length) */
        if (ep->rx_left >= ep->rx_have - off)
            return;
        off += ep->rx_left;
    }

    while (off + TCP_HDR_LEN <= ep->rx_have) {
        tcp_hdr_t h;
        uint64_t payload;

        tcp_hdr_decode(ep->rxbuf + off, &h);
        off += TCP_HDR_LEN;
        if (h.type == TCP_FR_WRITE)
            for (uint64_t k = 0; k < PDX_MIN(h.len, (uint64_t)TCP_RX_PREFETCH); k += 64)
                __builtin_prefetch((const void *)(uintptr_t)(h.addr + k), 1, 2);
        payload = tcp_hdr_payload(&h);
        if (payload >= ep->rx_have - off)
            break;
        off += payload;
    }
}

/* One read from the socket; its result as read(2) gives it. */
static ssize_t rx_read(tcp_ep_t *ep)
{
    uint32_t avail = ep->rx_have - ep->rx_off;
    ssize_t n;

    if (PDX_UNLIKELY(ep->rx_kind == TCP_RX_WRITE_DEV))
        return rx_read_dev(ep);
    if (ep->rx_kind != TCP_RX_NONE && ep->rx_dst) {
        struct iovec iov[2] = {
            {.iov_base = ep->rx_dst, .iov_len = ep->rx_left},
            {.iov_base = ep->rxbuf,
             .iov_len = ep->rx_left >= TCP_RX_LARGE ? TCP_RX_SPILL : TCP_RXBUF},
        };

        n = readv(ep->fd, iov, 2);
        if (n <= 0)
            return n;
        ep->rx_off = ep->rx_have = 0;
        if ((uint64_t)n < ep->rx_left) {
            ep->rx_dst += n;
            ep->rx_left -= (uint64_t)n;
        } else {
            ep->rx_have = (uint32_t)((uint64_t)n - ep->rx_left);
            ep->rx_dst += ep->rx_left;
            ep->rx_left = 0;
            rx_frame_done(ep);
            rx_prefetch(ep);
        }
        return n;
    }
    if (ep->rx_off) {
        memmove(ep->rxbuf, ep->rxbuf + ep->rx_off, avail);
        ep->rx_off = 0;
        ep->rx_have = avail;
    }
    n = read(ep->fd, ep->rxbuf + avail, TCP_RXBUF - avail);
    if (n > 0) {
        ep->rx_have += (uint32_t)n;
        rx_prefetch(ep);
    }
    return n;
}

/* Read and place what the socket has, within the budget. */
static void rx_pass(tcp_ep_t *ep)
{
    size_t budget = TCP_RX_BUDGET;

    while (ep->state == TCP_EP_UP) {
        uint32_t avail = ep->rx_have - ep->rx_off;
        ssize_t n;

        if (ep->rx_kind != TCP_RX_NONE && avail) {
            if (!rx_take(ep))
                break; /* staging full (resumes when a copy finishes) or failed */
            continue;
        }
        if (ep->rx_kind == TCP_RX_NONE && avail >= TCP_HDR_LEN) {
            tcp_hdr_t h;

            if (!tcp_ctrl_room(ep))
                break; /* resumes once tx drained the control queue */
            if (PDX_UNLIKELY(ep->rx_seq - ep->rx_placed >= TCP_RX_DEFER ||
                             (ep->rx_placed != ep->rx_seq &&
                              ep->rxbuf[ep->rx_off] == TCP_FR_READ))) {
                ep->rx_stalled = true; /* resumes as frames retire */
                break;
            }
            tcp_hdr_decode(ep->rxbuf + ep->rx_off, &h);
            ep->rx_off += TCP_HDR_LEN;
            if (!rx_header(ep, &h))
                return;
            continue;
        }
        if (budget == 0)
            break; /* rx_ready stays set: more next loop */
        if (PDX_UNLIKELY(ep->rx_kind == TCP_RX_WRITE_DEV) && !tcp_stage_rx_open(ep))
            break; /* staging full: resumes when a copy finishes */
        n = rx_read(ep);
        if (n > 0) {
            budget -= PDX_MIN(budget, (size_t)n);
            continue;
        }
        if (n == 0) {
            tcp_ep_set_error(ep, PDX_ERR_PEER, false, "peer %s closed the connection", ep->peer);
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            ep->rx_ready = false;
            break;
        }
        tcp_ep_set_error(ep, PDX_ERR_PEER, false, "receive from peer %s: %s", ep->peer,
                         strerror(errno));
        return;
    }
}

void tcp_rx_progress(tcp_ep_t *ep)
{
    rx_pass(ep);
    if (PDX_UNLIKELY(ep->stage != NULL))
        tcp_stage_rx_flush(ep); /* the pieces the pass filled, as one batch */
    if (ep->state == TCP_EP_UP)
        rx_ack(ep);
}

void tcp_rx_flush(tcp_ep_t *ep, pdx_status_t why, bool complete)
{
    uint64_t end = atomic_load_explicit(&ep->rq_pub, memory_order_acquire);

    if ((ep->rx_kind == TCP_RX_WRITE || ep->rx_kind == TCP_RX_WRITE_DEV) && ep->rx_mr)
        tcp_mr_unref(ep->rx_mr, 1);
    tcp_stage_rx_reset(ep); /* recorded frames go; their receives are flushed below */
    ep->rx_mr = NULL;
    ep->rx_kind = TCP_RX_NONE;
    ep->rx_left = 0;
    for (uint64_t i = ep->rq_done; i < end; i++) {
        const tcp_rqe_t *r = &ep->rq[i & ep->rq_mask];
        tcp_cqe_t e = {
            .wc = {.wr_id = r->wr_id, .ep = tcp_ep_pub(ep), .status = why,
                   .opcode = PDX_TP_OP_RECV},
            .rq_slots = 1,
        };

        tcp_mr_unref(r->mr, 1);
        if (complete)
            tcp_cq_push(ep->cq, &e, 1);
    }
    ep->rq_done = ep->rq_taken = end;
}
