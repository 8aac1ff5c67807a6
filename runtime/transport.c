#include "transport.h"

pdx_status_t pdx_tp_unsupported_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                                          uint64_t offset, uint32_t len)
{
    (void)ep; (void)wr_id; (void)mr; (void)offset; (void)len;
    return PDX_ERR_UNSUPPORTED;
}
