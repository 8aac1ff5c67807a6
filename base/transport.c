#include "transport.h"

#include "log.h"

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

pdx_status_t pdx_tp_post_runs_as_writes(pdx_status_t (*post_write)(pdx_tp_ep_t *,
                                                                   const pdx_tp_write_t *,
                                                                   uint32_t),
                                        pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs,
                                        uint64_t max_msg, uint64_t src_mr_len, uint32_t *bad_p)
{
    pdx_tp_write_t wr[PDX_TP_RUNS_MAX];
    const pdx_tp_rkey_t *d = runs->dst;
    const uint32_t every = runs->signal_every;

    if (runs->n == 0)
        return PDX_OK;
    if (runs->n > PDX_TP_RUNS_MAX || !d || runs->src_base > src_mr_len ||
        runs->src_len > src_mr_len - runs->src_base) {
        pdx_error("%u runs (at most %u): no peer region, or a window of %llu bytes at %llu "
                  "outside the source region", runs->n, PDX_TP_RUNS_MAX,
                  (unsigned long long)runs->src_len, (unsigned long long)runs->src_base);
        return PDX_ERR_INVALID;
    }
    for (uint32_t i = 0; i < runs->n; i++) {
        const pdx_tp_run_t *r = &runs->runs[i];

        if (!pdx_tp_run_fits(runs, r, max_msg)) {
            *bad_p = i;
            return PDX_ERR_RANGE;
        }
        wr[i] = (pdx_tp_write_t){
            .wr_id = pdx_tp_runs_wr_id(runs, i), .mr = runs->mr,
            .offset = runs->src_base + r->src_offset, .length = r->len,
            .remote_addr = d->addr + r->dst_offset,
            .rkey = r->len ? pdx_tp_rkey_at(d, r->dst_offset) : d->rkey, /* none past the end */
            .flags = (every && (i + 1) % every == 0) || i + 1 == runs->n ? PDX_TP_SIGNALED : 0,
            .rmr = runs->rmr,
        };
    }
    return post_write(ep, wr, runs->n);
}
