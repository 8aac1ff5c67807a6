#include "transport.h"

pdx_status_t pdx_tp_unsupported_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                                          uint64_t offset, uint32_t len)
{
    (void)ep; (void)wr_id; (void)mr; (void)offset; (void)len;
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_tp_unsupported_mr_reg_dmabuf(pdx_tp_t *tp, void *base, size_t len, int fd,
                                              uint64_t offset, unsigned access,
                                              pdx_tp_mr_t **mr_p)
{
    (void)tp; (void)base; (void)len; (void)fd; (void)offset; (void)access; (void)mr_p;
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_tp_unsupported_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                                          uint64_t offset, uint32_t len, uint64_t remote_addr,
                                          uint32_t rkey)
{
    (void)ep; (void)wr_id; (void)mr; (void)offset; (void)len; (void)remote_addr; (void)rkey;
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_tp_unsupported_mr_export(const pdx_tp_mr_t *mr, void *buf, size_t cap,
                                          size_t *len_p)
{
    (void)mr; (void)buf; (void)cap;
    if (len_p)
        *len_p = 0;
    return PDX_OK;
}

pdx_status_t pdx_tp_unsupported_rmr_open(pdx_tp_t *tp, const void *bytes, size_t len,
                                         const pdx_tp_rkey_t *remote, pdx_tp_rmr_t **rmr_p)
{
    (void)tp; (void)bytes; (void)len; (void)remote; (void)rmr_p;
    return PDX_ERR_UNSUPPORTED;
}

void pdx_tp_unsupported_rmr_close(pdx_tp_rmr_t *rmr)
{
    (void)rmr;
}

pdx_status_t pdx_tp_unsupported_post_pages(pdx_tp_ep_t *ep, const pdx_tp_pages_t *pages)
{
    (void)ep; (void)pages;
    return PDX_ERR_UNSUPPORTED;
}
