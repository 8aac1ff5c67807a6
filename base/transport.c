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
