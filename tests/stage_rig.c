/* The rig of the tcp staging suites; see stage_rig.h. */
#include "stage_rig.h"

#include <criterion/criterion.h>

#include "util.h"

#include <string.h>

pdx_tp_t *tp_open(uint32_t timeout_ms, uint64_t staging)
{
    pdx_config_t cfg = {.field_mask = PDX_CONFIG_FIELD_TCP_STAGING, .tcp_staging_bytes = staging};
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = timeout_ms,
                              .max_msg_size = MAXMSG, .config = &cfg};
    pdx_tp_t *tp = NULL;

    cr_assert_eq(ops->open(&params, &tp), PDX_OK);
    return tp;
}

int wait_wc(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms)
{
    return fx_wait_wc(ops, cq, wc, want, timeout_ms, 20u);
}

int wait_some(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms)
{
    int n = wait_wc(cq, wc, 1, timeout_ms);

    return n ? n + ops->cq_poll(cq, wc + 1, max - 1) : 0;
}

static void rig_regions(rig_t *r)
{
    r->src = fx_gpu_alloc(r->len, &r->src_sh);
    r->dst = fx_gpu_alloc(2 * r->len, &r->dst_sh); /* a registered half and a guard half */
    fx_fill_random(r->src_sh, r->len);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, r->len, DEV);
    r->dmr = fx_mr_new(ops, r->tp[1], r->dst, r->len, RW | DEV);
    ops->mr_remote(r->dmr, &r->rk);
}

void rig_open(rig_t *r, size_t len, const rig_opts_t *o)
{
    memset(r, 0, sizeof(*r));
    fx_env_begin(&r->env);
    r->len = len;
    for (int i = 0; i < 2; i++) {
        uint32_t timeout_ms = i && o->rx_timeout_ms ? o->rx_timeout_ms : o->timeout_ms;

        r->tp[i] = tp_open(timeout_ms ? timeout_ms : LONG_MS, o->staging);
        r->cq[i] = fx_cq_new(ops, r->tp[i], o->sq + o->rq);
    }
    if (o->regions_first)
        rig_regions(r);
    for (int i = 0; i < 2; i++)
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], o->sq, o->rq);
    fx_connect_eps(ops, r->ep[0], r->ep[1]);
    if (!o->regions_first)
        rig_regions(r);
}

void rig_close(rig_t *r, bool errors_expected)
{
    for (int i = 0; i < 2; i++)
        if (r->ep[i])
            ops->ep_destroy(r->ep[i]);
    cr_assert_eq(ops->mr_dereg(r->smr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r->dmr), PDX_OK);
    for (int i = 0; i < 2; i++) {
        ops->cq_destroy(r->cq[i]);
        ops->close(r->tp[i]);
    }
    fx_gpu_free(r->src);
    fx_gpu_free(r->dst);
    fx_env_end(&r->env, errors_expected);
}

pdx_tp_write_t wr_make(const rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                              uint64_t dst_off, bool signaled)
{
    return (pdx_tp_write_t){.wr_id = id, .mr = r->smr, .offset = src_off, .length = len,
                            .remote_addr = r->rk.addr + dst_off, .rkey = r->rk.rkey,
                            .flags = signaled ? PDX_TP_SIGNALED : 0};
}

int post_wait(const rig_t *r, const pdx_tp_write_t *w, wc_cb_t cb, void *arg)
{
    uint64_t deadline = pdx_deadline_ns(WAIT_MS);
    pdx_tp_wc_t wc[64];
    pdx_status_t st;
    int seen = 0;

    while ((st = ops->post_write(r->ep[0], w, 1)) == PDX_ERR_AGAIN) {
        int n = wait_some(r->cq[0], wc, 64, 10);

        for (int i = 0; i < n; i++)
            cb(r, &wc[i], arg);
        seen += n;
        cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
    }
    cr_assert_eq(st, PDX_OK, "%s", pdx_status_str(st));
    return seen;
}

void expect_ok(const rig_t *r, const pdx_tp_wc_t *wc, void *arg)
{
    uint64_t *last = arg;

    (void)r;
    cr_assert_eq(wc->status, PDX_OK, "wr %llu: %s", (unsigned long long)wc->wr_id,
                 pdx_status_str(wc->status));
    cr_assert_gt(wc->wr_id + 1, *last, "completions out of posting order");
    *last = wc->wr_id + 1;
}
