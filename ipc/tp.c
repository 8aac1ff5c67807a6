/*
 * ipc transport: the device context, regions and the ops tables (ipc.h).
 */
#include "ipc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static ipc_tp_t *tp_of(pdx_tp_t *tp)
{
    return (ipc_tp_t *)tp;
}

pdx_status_t pdx_ipc_wrap(const pdx_transport_ops_t *inner, pdx_tp_t *inner_tp,
                          const pdx_tp_params_t *params, pdx_tp_t **tp_p)
{
    ipc_tp_t *tp;

    if (!inner || !inner_tp || !params || !tp_p)
        return PDX_ERR_INVALID;
    if (!pdx_hip_gather_supported()) {
        pdx_error("ipc: this build has no gather kernel: the ipc transport is unavailable");
        return PDX_ERR_UNSUPPORTED;
    }
    tp = calloc(1, sizeof(*tp));
    if (!tp)
        return PDX_ERR_NOMEM;
    tp->hdr = *inner_tp; /* its log tag and piece size */
    tp->hdr.ops = pdx_ipc_ops(inner);
    tp->in_ops = inner;
    tp->in = inner_tp;
    tp->gpu = params->gpu;
    tp->timeout_ms = params->progress_timeout_ms ? params->progress_timeout_ms : 10000;
    tp->group_mask = params->wr_group_mask;
    tp->gate_poll_ns = (uint64_t)(params->config ? params->config->gate_backoff_us : 20) * 1000u;
    *tp_p = &tp->hdr;
    return PDX_OK;
}

static pdx_status_t ipc_open(const pdx_tp_params_t *params, pdx_tp_t **tp_p)
{
    pdx_tp_t *in = NULL;
    pdx_status_t st;

    if (!params || !params->inner) {
        pdx_error("ipc: opened without an inner transport");
        return PDX_ERR_INVALID;
    }
    st = params->inner->open(params, &in);
    if (st != PDX_OK)
        return st;
    st = pdx_ipc_wrap(params->inner, in, params, tp_p);
    if (st != PDX_OK)
        params->inner->close(in);
    return st;
}

static void ipc_close(pdx_tp_t *ptp)
{
    ipc_tp_t *tp = tp_of(ptp);

    if (!tp)
        return;
    tp->in_ops->close(tp->in);
    free(tp);
}

/* ------------------------------------------------------------- regions */

static pdx_status_t wrap_mr(ipc_tp_t *tp, pdx_tp_mr_t *in, void *base, size_t len,
                            unsigned access, pdx_tp_mr_t **mr_p)
{
    ipc_mr_t *mr = calloc(1, sizeof(*mr));

    if (!mr) {
        tp->in_ops->mr_dereg(in);
        return PDX_ERR_NOMEM;
    }
    mr->tp = tp;
    mr->in = in;
    mr->base = base;
    mr->len = len;
    /* GPU memory, however the engine registered it (staged for tcp,
     * dmabuf or a peer-memory client for rdma) */
    {
        pdx_hip_ptr_t p;

        mr->device = pdx_hip_classify(base, len, &p) == PDX_OK && p.kind == PDX_HIP_MEM_DEVICE;
    }
    /* a region a peer may write or read: its handle, for peers of this host */
    if (mr->device && (access & (PDX_TP_ACCESS_REMOTE_WRITE | PDX_TP_ACCESS_REMOTE_READ))) {
        pdx_status_t st = pdx_hip_ipc_export(base, len, &mr->handle);

        mr->exported = st == PDX_OK;
        if (!mr->exported)
            pdx_info("ipc: GPU region %p (%zu bytes) cannot be exported (%s): peers of this "
                     "host write it over %s", base, len, pdx_status_str(st), tp->hdr.ops->name);
    }
    *mr_p = (pdx_tp_mr_t *)mr;
    return PDX_OK;
}

static pdx_status_t ipc_mr_reg(pdx_tp_t *ptp, void *base, size_t len, unsigned access,
                               pdx_tp_mr_t **mr_p)
{
    ipc_tp_t *tp = tp_of(ptp);
    pdx_tp_mr_t *in = NULL;
    pdx_status_t st = tp->in_ops->mr_reg(tp->in, base, len, access, &in);

    return st == PDX_OK ? wrap_mr(tp, in, base, len, access, mr_p) : st;
}

static pdx_status_t ipc_mr_reg_dmabuf(pdx_tp_t *ptp, void *base, size_t len, int fd,
                                      uint64_t offset, unsigned access, pdx_tp_mr_t **mr_p)
{
    ipc_tp_t *tp = tp_of(ptp);
    pdx_tp_mr_t *in = NULL;
    pdx_status_t st = tp->in_ops->mr_reg_dmabuf(tp->in, base, len, fd, offset, access, &in);

    return st == PDX_OK ? wrap_mr(tp, in, base, len, access | PDX_TP_ACCESS_DEVICE, mr_p) : st;
}

static pdx_status_t ipc_mr_dereg(pdx_tp_mr_t *pmr)
{
    ipc_mr_t *mr = (ipc_mr_t *)pmr;
    pdx_status_t st;

    if (!mr)
        return PDX_OK;
    st = mr->tp->in_ops->mr_dereg(mr->in);
    if (st == PDX_OK)
        free(mr);
    return st;
}

static void ipc_mr_remote(const pdx_tp_mr_t *pmr, pdx_tp_rkey_t *rkey_p)
{
    const ipc_mr_t *mr = (const ipc_mr_t *)pmr;

    mr->tp->in_ops->mr_remote(mr->in, rkey_p);
}

static pdx_status_t ipc_mr_export(const pdx_tp_mr_t *pmr, void *buf, size_t cap, size_t *len_p)
{
    const ipc_mr_t *mr = (const ipc_mr_t *)pmr;

    if (!mr || !len_p)
        return PDX_ERR_INVALID;
    *len_p = 0;
    if (!mr->exported)
        return PDX_OK;
    if (cap < sizeof(mr->handle))
        return PDX_ERR_INVALID;
    memcpy(buf, &mr->handle, sizeof(mr->handle));
    *len_p = sizeof(mr->handle);
    return PDX_OK;
}

static pdx_status_t ipc_rmr_open(pdx_tp_t *ptp, const void *bytes, size_t len,
                                 const pdx_tp_rkey_t *remote, pdx_tp_rmr_t **rmr_p)
{
    ipc_tp_t *tp = tp_of(ptp);
    pdx_hip_ipc_handle_t h;
    ipc_rmr_t *rmr;
    void *ptr = NULL;
    pdx_status_t st;

    if (!bytes || !remote || !rmr_p)
        return PDX_ERR_INVALID;
    if (len != sizeof(h)) {
        pdx_error("ipc: a region's export has %zu bytes, not %zu", len, sizeof(h));
        return PDX_ERR_PROTO;
    }
    memcpy(&h, bytes, sizeof(h));
    st = pdx_hip_ipc_handle_check(&h);
    if (st != PDX_OK)
        return st;
    /* The export covers the registration the region lies in: both are
     * the exporter's addresses. */
    if (remote->addr < h.base + h.offset || remote->len > h.len ||
        remote->addr - (h.base + h.offset) > h.len - remote->len) {
        pdx_error("ipc: a region of %llu bytes at 0x%llx outside its export (%llu bytes at "
                  "0x%llx)", (unsigned long long)remote->len, (unsigned long long)remote->addr,
                  (unsigned long long)h.len, (unsigned long long)(h.base + h.offset));
        return PDX_ERR_PROTO;
    }
    rmr = calloc(1, sizeof(*rmr));
    if (!rmr)
        return PDX_ERR_NOMEM;
    st = pdx_hip_set_device(tp->gpu);
    if (st == PDX_OK)
        st = pdx_hip_ipc_open(&h, &ptr);
    if (st != PDX_OK) {
        free(rmr);
        return st;
    }
    *rmr = (ipc_rmr_t){.ptr = ptr, .addr = h.base + h.offset, .len = h.len};
    *rmr_p = (pdx_tp_rmr_t *)rmr;
    return PDX_OK;
}

static void ipc_rmr_close(pdx_tp_rmr_t *prmr)
{
    ipc_rmr_t *rmr = (ipc_rmr_t *)prmr;

    if (!rmr)
        return;
    pdx_hip_ipc_close(rmr->ptr);
    free(rmr);
}

/* ---------------------------------------------------------------- tables */

static const pdx_transport_ops_t ipc_template = {
    .open          = ipc_open,
    .close         = ipc_close,
    .mr_reg        = ipc_mr_reg,
    .mr_reg_dmabuf = ipc_mr_reg_dmabuf,
    .mr_dereg      = ipc_mr_dereg,
    .mr_remote     = ipc_mr_remote,
    .cq_create     = ipc_cq_create,
    .cq_destroy    = ipc_cq_destroy,
    .cq_poll       = ipc_cq_poll,
    .cq_arm        = ipc_cq_arm,
    .cq_fd         = ipc_cq_fd,
    .cq_ack        = ipc_cq_ack,
    .ep_create     = ipc_ep_create,
    .ep_address    = ipc_ep_address,
    .ep_connect    = ipc_ep_connect,
    .ep_fail       = ipc_ep_fail,
    .ep_destroy    = ipc_ep_destroy,
    .ep_error      = ipc_ep_error,
    .post_write    = ipc_post_write,
    .post_runs     = ipc_post_runs,
    .post_send     = ipc_post_send,
    .post_recv     = ipc_post_recv,
    .post_read     = ipc_post_read,
    .mr_export     = ipc_mr_export,
    .rmr_open      = ipc_rmr_open,
    .rmr_close     = ipc_rmr_close,
    .post_pages    = ipc_post_pages,
};

#define IPC_TABLES 2 /* tcp, rdma */
static pdx_transport_ops_t tables[IPC_TABLES];
static const pdx_transport_ops_t *table_inner[IPC_TABLES];
static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;

/* The table over inner: ipc's ops under the inner transport's name (what
 * HELLO names and peers compare: an engine without a GPU speaks with one
 * that has), with its caps and PDX_TP_CAP_DIRECT. */
const pdx_transport_ops_t *pdx_ipc_ops(const pdx_transport_ops_t *inner)
{
    const pdx_transport_ops_t *found = NULL;

    pthread_mutex_lock(&tables_lock);
    for (int i = 0; i < IPC_TABLES && !found; i++) {
        if (table_inner[i] == inner) {
            found = &tables[i];
        } else if (!table_inner[i]) {
            tables[i] = ipc_template;
            tables[i].name = inner->name;
            tables[i].caps = inner->caps | PDX_TP_CAP_DIRECT;
            if (inner->post_read == pdx_tp_unsupported_post_read)
                tables[i].post_read = pdx_tp_unsupported_post_read;
            if (inner->post_recv == pdx_tp_unsupported_post_recv)
                tables[i].post_recv = pdx_tp_unsupported_post_recv;
            table_inner[i] = inner;
            found = &tables[i];
        }
    }
    pthread_mutex_unlock(&tables_lock);
    return found;
}
