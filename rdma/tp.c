/*
 * rdma transport: open/close of a tp (one NIC, its PD and async thread) and
 * the ops table.
 *
 * open: pick and open the device (device.c), allocate the PD, start the
 * async-event thread. No RDMA device is PDX_ERR_NO_DEVICE, logged at info
 * when the engine falls back to tcp (params->quiet_no_device), else as an
 * error.
 *
 * close: stop the async thread first (no event handling races the
 * teardown; every event it read was acked), then destroy every ep, CQ and
 * region still open (a warning per kind), deallocate the PD, close the
 * device and free the device list.
 *
 * Bounding WRs: while the device and the CQ work, the NIC bounds every WR.
 * A peer that stops answering (or never connected its QP), or a link that
 * stays down, fails the WR with IBV_WC_RETRY_EXC_ERR after
 * PDX_IB_RETRY_COUNT retries of the ACK timeout (PDX_IB_TIMEOUT; 7 retries
 * of 4.096 us * 2^18 is about 8.6 s), a peer without receives after
 * PDX_IB_RNR_RETRY RNR retries; the QP then flushes everything else. When
 * the NIC can no longer report (DEVICE_FATAL, CQ_ERR, a failing poll, a dead
 * completion channel or async fd) it does not: pdx completes the WRs in
 * software (sw_flush.c). params->progress_timeout_ms is the backstop of that:
 * an ep in error whose WRs are still outstanding that long after it failed
 * is flushed in software too.
 */
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static const char *link_str(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

static pdx_status_t knobs_check(const rdma_knobs_t *k)
{
    if (k->rnr_retry > 6 || k->retry_count > 7 || k->timeout > 31 || k->hop_limit == 0) {
        pdx_error("rdma: PDX_IB_RNR_RETRY=%u (at most 6), PDX_IB_RETRY_COUNT=%u (at most 7), "
                  "PDX_IB_TIMEOUT=%u (at most 31), PDX_IB_HOP_LIMIT=%u (at least 1)",
                  k->rnr_retry, k->retry_count, k->timeout, k->hop_limit);
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

static void log_choice(const rdma_tp_t *tp)
{
    char gid[INET6_ADDRSTRLEN] = "-";

    if (tp->dev.gid_index >= 0)
        inet_ntop(AF_INET6, tp->dev.gid.raw, gid, sizeof(gid));
    pdx_info("rdma: using %s port %u, %s, GID index %d (%s), LID %u, active MTU %s, max message "
             "%llu bytes", tp->dev.name, tp->dev.port, link_str(tp->dev.link_layer),
             tp->dev.gid_index, gid, tp->dev.lid, rdma_mtu_str(tp->dev.active_mtu),
             (unsigned long long)tp->max_msg_size);
}

static pdx_status_t rdma_open(const pdx_tp_params_t *params, pdx_tp_t **tp_p)
{
    pdx_status_t status;
    rdma_tp_t *tp;
    void *mem;
    int rc;

    if (posix_memalign(&mem, PDX_CACHELINE, sizeof(*tp))) {
        pdx_error("rdma: out of memory for a transport");
        return PDX_ERR_NOMEM;
    }
    tp = memset(mem, 0, sizeof(*tp));
    tp->base.ops = &pdx_rdma_ops;
    pdx_tp_log_init(&tp->base, params);
    tp->async_stop_fd = -1;
    atomic_init(&tp->dead, false);
    rdma_knobs_read(params ? params->config : NULL, &tp->knobs);
    if (params && params->nic_order)
        snprintf(tp->knobs.nearest, sizeof(tp->knobs.nearest), "%s", params->nic_order);
    status = knobs_check(&tp->knobs);
    if (status != PDX_OK)
        goto err_free;
    rc = pthread_mutex_init(&tp->lock, NULL);
    if (rc == 0) {
        rc = pthread_mutex_init(&tp->async_lock, NULL);
        if (rc)
            pthread_mutex_destroy(&tp->lock);
    }
    if (rc) {
        pdx_error("rdma: mutex init: %s", strerror(rc));
        status = PDX_ERR_IO;
        goto err_free;
    }
    status = rdma_device_open(&tp->knobs, params ? params->nic : 0,
                              params && params->quiet_no_device, &tp->devices, &tp->ctx, &tp->dev);
    if (status != PDX_OK)
        goto err_mutex; /* it said why */

    tp->max_msg_size = params && params->max_msg_size ? params->max_msg_size
                                                      : RDMA_DEFAULT_MAX_MSG;
    if (tp->dev.port_max_msg)
        tp->max_msg_size = PDX_MIN(tp->max_msg_size, (uint64_t)tp->dev.port_max_msg);
    tp->max_msg_size = PDX_MIN(tp->max_msg_size, (uint64_t)UINT32_MAX);
    tp->progress_timeout_ns = params ? (uint64_t)params->progress_timeout_ms * 1000000u : 0;
    /* the largest power of two the device registers at once */
    tp->base.mr_piece = tp->dev.max_mr_size >> 63 ? 0
                        : tp->dev.max_mr_size ? 1ull << (63 - __builtin_clzll(tp->dev.max_mr_size))
                                              : 0;

    status = PDX_ERR_IO;
    tp->pd = ibv_alloc_pd(tp->ctx);
    if (!tp->pd) {
        pdx_error("rdma: %s: ibv_alloc_pd: %s", tp->dev.name, strerror(errno));
        goto err_device;
    }
    status = rdma_async_start(tp);
    if (status != PDX_OK)
        goto err_pd;
    log_choice(tp);
    *tp_p = &tp->base;
    return PDX_OK;

err_pd:
    ibv_dealloc_pd(tp->pd);
err_device:
    ibv_close_device(tp->ctx);
    ibv_free_device_list(tp->devices);
err_mutex:
    pthread_mutex_destroy(&tp->async_lock);
    pthread_mutex_destroy(&tp->lock);
err_free:
    free(tp);
    return status;
}

static void rdma_close(pdx_tp_t *ptp)
{
    uint32_t neps = 0, ncqs = 0, nmrs = 0;
    rdma_tp_t *tp;
    int rc;

    if (!ptp)
        return;
    tp = rdma_tp(ptp);
    if (!rdma_async_stop(tp))
        return; /* freeing under a running thread would be worse than the leak */

    /* The last call on the tp: no other thread touches its lists now. */
    while (tp->eps) {
        rdma_ep_destroy(rdma_ep_pub(tp->eps));
        neps++;
    }
    while (tp->cqs) {
        rdma_cq_t *cq = tp->cqs;

        tp->cqs = cq->next;
        rdma_cq_free(cq);
        ncqs++;
    }
    while (tp->mrs) {
        rdma_mr_t *mr = tp->mrs;

        tp->mrs = mr->next;
        rdma_mr_free(mr);
        nmrs++;
    }
    if (neps)
        pdx_warn("rdma: %s: closed with %u endpoints open; destroyed them", tp->dev.name, neps);
    if (ncqs)
        pdx_warn("rdma: %s: closed with %u CQs open; destroyed them", tp->dev.name, ncqs);
    if (nmrs)
        pdx_warn("rdma: %s: closed with %u regions registered; deregistered them",
                 tp->dev.name, nmrs);

    rc = ibv_dealloc_pd(tp->pd);
    if (rc)
        pdx_error("rdma: %s: ibv_dealloc_pd: %s", tp->dev.name, strerror(rc > 0 ? rc : errno));
    rc = ibv_close_device(tp->ctx);
    if (rc)
        pdx_error("rdma: %s: ibv_close_device: %s", tp->dev.name,
                  strerror(rc > 0 ? rc : errno));
    ibv_free_device_list(tp->devices);
    pthread_mutex_destroy(&tp->async_lock);
    pthread_mutex_destroy(&tp->lock);
    free(tp);
}

const pdx_transport_ops_t pdx_rdma_ops = {
    .name          = "rdma",
    .caps          = PDX_TP_CAP_FLUSH_READ | PDX_TP_CAP_READ_DEVICE,
    .open          = rdma_open,
    .close         = rdma_close,
    .mr_reg        = rdma_mr_reg,
    .mr_reg_dmabuf = rdma_mr_reg_dmabuf,
    .mr_dereg      = rdma_mr_dereg,
    .mr_remote     = rdma_mr_remote,
    .cq_create     = rdma_cq_create,
    .cq_destroy    = rdma_cq_destroy,
    .cq_poll       = rdma_cq_poll,
    .cq_arm        = rdma_cq_arm,
    .cq_fd         = rdma_cq_fd,
    .cq_ack        = rdma_cq_ack,
    .ep_create     = rdma_ep_create,
    .ep_address    = rdma_ep_address,
    .ep_connect    = rdma_ep_connect,
    .ep_fail       = rdma_ep_fail,
    .ep_destroy    = rdma_ep_destroy,
    .ep_error      = rdma_ep_error,
    .post_write    = rdma_post_write,
    .post_runs     = rdma_post_runs,
    .post_send     = rdma_post_send,
    .post_recv     = rdma_post_recv,
    .post_read     = rdma_post_read,
    .mr_export     = pdx_tp_unsupported_mr_export,
    .rmr_open      = pdx_tp_unsupported_rmr_open,
    .rmr_close     = pdx_tp_unsupported_rmr_close,
    .post_pages    = pdx_tp_unsupported_post_pages,
};
