/*
 * tcp endpoints: the API side and the post path.
 *
 * post_write/post_send/post_recv run on the ep's owner thread (one poster at
 * a time) and never lock, allocate or (unless the progress thread sleeps)
 * make a syscall: they fill preallocated ring entries, publish them with a
 * release store and ring the tp's doorbell. Slots come back when the CQ's
 * owner consumes the completions covering them.
 *
 * ep_create/connect/fail/destroy hand a command to the progress thread,
 * which owns the socket and the ep's protocol state, and wait for it.
 */
#include "tcp_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

static pdx_status_t random_token(uint64_t *token_p)
{
    uint64_t t = 0;

    while (t == 0) {
        ssize_t n = getrandom(&t, sizeof(t), 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof(t)) {
            pdx_error("tcp: getrandom for an endpoint token: %s",
                      n < 0 ? strerror(errno) : "short read");
            return PDX_ERR_IO;
        }
    }
    *token_p = t;
    return PDX_OK;
}

void tcp_ep_free(tcp_ep_t *ep)
{
    if (ep->stage)
        tcp_stage_destroy(ep->tp, ep->stage);
    free(ep->rsp);
    free(ep->rxbuf);
    free(ep->rq);
    free(ep->sq);
    free(ep);
}

pdx_status_t tcp_ep_create(pdx_tp_t *ptp, pdx_tp_cq_t *pcq, const pdx_tp_ep_attr_t *attr,
                           pdx_tp_ep_t **ep_p)
{
    tcp_tp_t *tp = tcp_tp(ptp);
    tcp_cq_t *cq = (tcp_cq_t *)(void *)pcq;
    tcp_cmd_t cmd = {.kind = TCP_CMD_ADD};
    uint32_t sq_size, rq_size;
    pdx_status_t status;
    tcp_ep_t *ep;
    void *mem;

    if (!attr || !cq || cq->tp != tp || attr->sq_depth == 0 || attr->sq_depth > TCP_MAX_DEPTH ||
        attr->rq_depth > TCP_MAX_DEPTH) {
        pdx_error("tcp: endpoint needs a CQ of this tp, sq_depth 1..%u and rq_depth 0..%u",
                  TCP_MAX_DEPTH, TCP_MAX_DEPTH);
        return PDX_ERR_INVALID;
    }
    status = tcp_cq_reserve(cq, attr->sq_depth + attr->rq_depth);
    if (status != PDX_OK)
        return status;

    if (posix_memalign(&mem, PDX_CACHELINE, sizeof(*ep)))
        goto err_nomem;
    ep = memset(mem, 0, sizeof(*ep));
    sq_size = pdx_pow2_ceil(attr->sq_depth);
    rq_size = pdx_pow2_ceil(PDX_MAX(attr->rq_depth, 1u));
    ep->sq = calloc(sq_size, sizeof(*ep->sq));
    ep->rq = calloc(rq_size, sizeof(*ep->rq));
    ep->rxbuf = malloc(TCP_RXBUF);
    if (!ep->sq || !ep->rq || !ep->rxbuf)
        goto err_free_ep;
    ep->tp = tp;
    status = random_token(&ep->token);
    if (status == PDX_OK && atomic_load(&tp->staging))
        status = tcp_stage_create(tp, &ep->stage); /* GPU regions exist: stage here, not later */
    if (status != PDX_OK)
        goto err_free_ep_status;
    ep->poll.kind = TCP_POLL_EP;
    ep->cq = cq;
    ep->sq_depth = attr->sq_depth;
    ep->rq_depth = attr->rq_depth;
    ep->sq_mask = sq_size - 1;
    ep->rq_mask = rq_size - 1;
    ep->fd = -1;
    ep->state = TCP_EP_NEW;
    atomic_init(&ep->sq_pub, 0);
    atomic_init(&ep->rq_pub, 0);
    atomic_init(&ep->sq_freed, 0);
    atomic_init(&ep->rq_freed, 0);
    atomic_init(&ep->err, 0);
    atomic_init(&ep->connect_called, false);

    cmd.ep = ep;
    status = tcp_tp_command(tp, &cmd);
    if (status != PDX_OK)
        goto err_free_ep_status;
    *ep_p = tcp_ep_pub(ep);
    return PDX_OK;

err_free_ep:
    status = PDX_ERR_NOMEM;
    pdx_error("tcp: out of memory for an endpoint (sq %u, rq %u)", attr->sq_depth,
              attr->rq_depth);
err_free_ep_status:
    tcp_ep_free(ep);
    tcp_cq_release(cq, NULL, attr->sq_depth + attr->rq_depth);
    return status;
err_nomem:
    pdx_error("tcp: out of memory for an endpoint");
    tcp_cq_release(cq, NULL, attr->sq_depth + attr->rq_depth);
    return PDX_ERR_NOMEM;
}

void tcp_ep_address(const pdx_tp_ep_t *pep, pdx_tp_addr_t *addr_p)
{
    const tcp_ep_t *ep = (const tcp_ep_t *)(const void *)pep;
    tcp_addr_t a = ep->tp->addr;

    a.token = ep->token;
    tcp_addr_encode(&a, addr_p);
}

pdx_status_t tcp_ep_connect(pdx_tp_ep_t *pep, const pdx_tp_addr_t *remote)
{
    tcp_ep_t *ep = tcp_ep(pep);
    tcp_cmd_t cmd = {.kind = TCP_CMD_CONNECT, .ep = ep};
    tcp_addr_t local = ep->tp->addr, peer;
    pdx_status_t status;
    int order;

    status = tcp_addr_decode(remote, &peer);
    if (status != PDX_OK)
        return status;
    local.token = ep->token;
    /* The families may differ (an engine on [::] and one on 0.0.0.0): the
     * IPv4 side is the lower and dials the other's IPv6 address. */
    order = tcp_addr_cmp(&local, &peer);
    if (order == 0) {
        pdx_error("tcp: cannot connect an endpoint to itself");
        return PDX_ERR_INVALID;
    }
    if (atomic_exchange(&ep->connect_called, true)) {
        pdx_error("tcp: ep_connect called twice on one endpoint");
        return PDX_ERR_STATE;
    }
    ep->remote = peer;
    ep->dialer = order < 0;
    tcp_addr_format(&peer, ep->peer, sizeof(ep->peer));
    return tcp_tp_command(ep->tp, &cmd);
}

void tcp_ep_fail(pdx_tp_ep_t *pep, pdx_status_t why, const char *msg)
{
    tcp_ep_t *ep = tcp_ep(pep);
    tcp_cmd_t cmd = {.kind = TCP_CMD_FAIL, .ep = ep, .why = why < 0 ? why : PDX_ERR_ABORTED,
                     .msg = msg};

    (void)tcp_tp_command(ep->tp, &cmd);
}

void tcp_ep_destroy(pdx_tp_ep_t *pep)
{
    tcp_ep_t *ep = tcp_ep(pep);
    tcp_tp_t *tp = ep->tp;
    tcp_cmd_t cmd = {.kind = TCP_CMD_DESTROY, .ep = ep};

    if (tcp_tp_command(ep->tp, &cmd) != PDX_OK)
        return; /* the progress thread may still know it: leak rather than free */
    tcp_cq_release(ep->cq, ep, ep->sq_depth + ep->rq_depth);
    tcp_ep_free(ep); /* waits (bounded) for its GPU copies */
    tcp_stage_reap(tp, false);
}

const char *tcp_ep_error(const pdx_tp_ep_t *pep)
{
    const tcp_ep_t *ep = (const tcp_ep_t *)(const void *)pep;

    if (atomic_load_explicit(&ep->err, memory_order_acquire) == 0)
        return "";
    return ep->errmsg;
}

pdx_status_t tcp_post_write(pdx_tp_ep_t *pep, const pdx_tp_write_t *wr, uint32_t n)
{
    tcp_ep_t *ep = tcp_ep(pep);
    uint64_t head = ep->sq_head;
    tcp_mr_t *run_mr = NULL;
    uint32_t run = 0;

    if (PDX_UNLIKELY(atomic_load_explicit(&ep->err, memory_order_acquire)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(n == 0 || n > ep->sq_depth)) {
        if (n == 0)
            return PDX_OK;
        pdx_error("tcp: %u chained WRITEs never fit a send queue of %u", n, ep->sq_depth);
        return PDX_ERR_INVALID;
    }
    if (head + n - atomic_load_explicit(&ep->sq_freed, memory_order_acquire) > ep->sq_depth)
        return PDX_ERR_AGAIN;
    for (uint32_t i = 0; i < n; i++) {
        const tcp_mr_t *mr = (const tcp_mr_t *)(const void *)wr[i].mr;

        if (PDX_UNLIKELY(!mr || mr->tp != ep->tp || wr[i].length > ep->tp->max_msg_size ||
                         wr[i].offset > mr->len || wr[i].length > mr->len - wr[i].offset)) {
            pdx_error("tcp: WRITE %u of %u (wr_id %llu): %llu bytes at offset %llu do not fit "
                      "its source region or the %llu-byte message limit", i, n,
                      (unsigned long long)wr[i].wr_id, (unsigned long long)wr[i].length,
                      (unsigned long long)wr[i].offset,
                      (unsigned long long)ep->tp->max_msg_size);
            return PDX_ERR_INVALID;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        tcp_wqe_t *w = &ep->sq[(head + i) & ep->sq_mask];
        tcp_mr_t *mr = (tcp_mr_t *)(void *)wr[i].mr;

        tcp_hdr_encode(&w->hdr, TCP_FR_WRITE, wr[i].rkey, head + i, wr[i].remote_addr,
                       wr[i].length);
        w->wr_id = wr[i].wr_id;
        w->mr = mr;
        w->src = mr->base + wr[i].offset;
        w->len = wr[i].length;
        w->frame_len = TCP_HDR_LEN;
        w->opcode = PDX_TP_OP_WRITE;
        w->signaled = wr[i].flags & PDX_TP_SIGNALED;
        w->dev = mr->kind == TCP_MEM_DEVICE;
        w->placed = false;
        w->status = 0;
        if (mr != run_mr) {
            if (run)
                atomic_fetch_add_explicit(&run_mr->refs, run, memory_order_relaxed);
            run_mr = mr;
            run = 0;
        }
        run++;
    }
    atomic_fetch_add_explicit(&run_mr->refs, run, memory_order_relaxed);
    ep->sq_head = head + n;
    atomic_store_explicit(&ep->sq_pub, head + n, memory_order_release);
    tcp_tp_kick(ep->tp);
    return PDX_OK;
}

pdx_status_t tcp_post_runs(pdx_tp_ep_t *pep, const pdx_tp_runs_t *runs, uint32_t *bad_p)
{
    const tcp_mr_t *mr = (const tcp_mr_t *)(const void *)runs->mr;

    if (PDX_UNLIKELY(!mr))
        return PDX_ERR_INVALID;
    return pdx_tp_post_runs_as_writes(tcp_post_write, pep, runs, tcp_ep(pep)->tp->max_msg_size,
                                      mr->len, bad_p);
}

pdx_status_t tcp_post_send(pdx_tp_ep_t *pep, uint64_t wr_id, const void *data, uint32_t len,
                           unsigned flags)
{
    tcp_ep_t *ep = tcp_ep(pep);
    uint64_t head = ep->sq_head;
    tcp_wqe_t *w;

    if (PDX_UNLIKELY(atomic_load_explicit(&ep->err, memory_order_acquire)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(len > PDX_TP_SEND_MAX || (len && !data))) {
        pdx_error("tcp: SEND of %u bytes (at most %d, inline)", len, PDX_TP_SEND_MAX);
        return PDX_ERR_INVALID;
    }
    if (head + 1 - atomic_load_explicit(&ep->sq_freed, memory_order_acquire) > ep->sq_depth)
        return PDX_ERR_AGAIN;
    w = &ep->sq[head & ep->sq_mask];
    tcp_hdr_encode(&w->hdr, TCP_FR_SEND, 0, head, 0, len);
    if (len)
        memcpy(w->data, data, len);
    w->wr_id = wr_id;
    w->mr = NULL;
    w->src = NULL;
    w->len = len;
    w->frame_len = TCP_HDR_LEN + len;
    w->opcode = PDX_TP_OP_SEND;
    w->signaled = flags & PDX_TP_SIGNALED;
    w->dev = false;
    w->placed = false;
    w->status = 0;
    ep->sq_head = head + 1;
    atomic_store_explicit(&ep->sq_pub, head + 1, memory_order_release);
    tcp_tp_kick(ep->tp);
    return PDX_OK;
}

pdx_status_t tcp_post_recv(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *pmr,
                           uint64_t offset, uint32_t len)
{
    tcp_ep_t *ep = tcp_ep(pep);
    tcp_mr_t *mr = (tcp_mr_t *)(void *)pmr;
    uint64_t head = ep->rq_head;
    tcp_rqe_t *r;

    if (PDX_UNLIKELY(atomic_load_explicit(&ep->err, memory_order_acquire)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(!mr || mr->tp != ep->tp || !(mr->access & PDX_TP_ACCESS_LOCAL_WRITE) ||
                     mr->kind != TCP_MEM_HOST || offset > mr->len || len > mr->len - offset)) {
        pdx_error("tcp: receive buffer of %u bytes at offset %llu is outside its region, or "
                  "the region lacks local write access or is GPU memory", len,
                  (unsigned long long)offset);
        return PDX_ERR_INVALID;
    }
    if (head + 1 - atomic_load_explicit(&ep->rq_freed, memory_order_acquire) > ep->rq_depth)
        return PDX_ERR_AGAIN;
    r = &ep->rq[head & ep->rq_mask];
    r->wr_id = wr_id;
    r->mr = mr;
    r->buf = mr->base + offset;
    r->len = len;
    atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
    ep->rq_head = head + 1;
    atomic_store_explicit(&ep->rq_pub, head + 1, memory_order_release);
    tcp_tp_kick(ep->tp); /* an ep in error flushes it */
    return PDX_OK;
}

/* A READ goes out as a header; the peer answers with its RDATA (rx.c
 * places it at dst) or an ERR; it completes once both its RDATA is in and
 * the peer's ACK covers it. Host memory only: GPU memory on either side is
 * refused (here, or by the peer's ERR). */
pdx_status_t tcp_post_read(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *pmr,
                           uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey)
{
    tcp_ep_t *ep = tcp_ep(pep);
    tcp_mr_t *mr = (tcp_mr_t *)(void *)pmr;
    uint64_t head = ep->sq_head;
    tcp_wqe_t *w;

    if (PDX_UNLIKELY(atomic_load_explicit(&ep->err, memory_order_acquire)))
        return PDX_ERR_PEER;
    if (PDX_UNLIKELY(!mr || mr->tp != ep->tp || !(mr->access & PDX_TP_ACCESS_LOCAL_WRITE) ||
                     len > ep->tp->max_msg_size || offset > mr->len ||
                     len > mr->len - offset)) {
        pdx_error("tcp: READ of %u bytes into offset %llu is outside its region, beyond the "
                  "message limit, or the region lacks local write access", len,
                  (unsigned long long)offset);
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(mr->kind != TCP_MEM_HOST)) {
        pdx_error("tcp: READ into GPU memory is not supported (the transport stages writes "
                  "only)");
        return PDX_ERR_UNSUPPORTED;
    }
    if (head + 1 - atomic_load_explicit(&ep->sq_freed, memory_order_acquire) > ep->sq_depth)
        return PDX_ERR_AGAIN;
    w = &ep->sq[head & ep->sq_mask];
    tcp_hdr_encode(&w->hdr, TCP_FR_READ, rkey, head, remote_addr, len);
    w->wr_id = wr_id;
    w->mr = mr;
    w->src = NULL;
    w->dst = mr->base + offset;
    w->len = len;
    w->frame_len = TCP_HDR_LEN;
    w->opcode = PDX_TP_OP_READ;
    w->signaled = true;
    w->dev = false;
    w->placed = false;
    w->status = 0;
    atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
    ep->sq_head = head + 1;
    atomic_store_explicit(&ep->sq_pub, head + 1, memory_order_release);
    tcp_tp_kick(ep->tp);
    return PDX_OK;
}
