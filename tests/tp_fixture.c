/* The fixture of the transport suites; see tp_fixture.h. */
#include "tp_fixture.h"

#include <criterion/criterion.h>

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fx_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    cr_assert_not_null(d);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

void fx_env_begin(fx_env_t *env)
{
    env->fds = fx_count_fds();
    env->errors = pdx_log_error_count();
}

void fx_env_end(const fx_env_t *env, bool errors_expected)
{
    int fds = fx_count_fds();

    cr_assert_eq(fds, env->fds, "file descriptors leaked: %d before, %d after", env->fds, fds);
    if (!errors_expected)
        cr_assert_eq(pdx_log_error_count(), env->errors, "unexpected error messages");
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

uint64_t fx_rng(void)
{
    return pdx_xorshift64(&rng_state);
}

void fx_fill_random(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)fx_rng();
}

pdx_tp_cq_t *fx_cq_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, uint32_t depth)
{
    pdx_tp_cq_t *cq = NULL;

    cr_assert_eq(ops->cq_create(tp, depth, &cq), PDX_OK);
    return cq;
}

pdx_tp_ep_t *fx_ep_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, pdx_tp_cq_t *cq,
                       uint32_t sq, uint32_t rq)
{
    pdx_tp_ep_attr_t attr = {.sq_depth = sq, .rq_depth = rq};
    pdx_tp_ep_t *ep = NULL;

    cr_assert_eq(ops->ep_create(tp, cq, &attr, &ep), PDX_OK);
    return ep;
}

void fx_connect_eps(const pdx_transport_ops_t *ops, pdx_tp_ep_t *a, pdx_tp_ep_t *b)
{
    pdx_tp_addr_t aa, ba;

    ops->ep_address(a, &aa);
    ops->ep_address(b, &ba);
    cr_assert_eq(ops->ep_connect(a, &ba), PDX_OK);
    cr_assert_eq(ops->ep_connect(b, &aa), PDX_OK);
}

pdx_tp_mr_t *fx_mr_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, void *base, size_t len,
                       unsigned access)
{
    pdx_tp_mr_t *mr = NULL;

    cr_assert_eq(ops->mr_reg(tp, base, len, access, &mr), PDX_OK);
    return mr;
}

int fx_wait_wc(const pdx_transport_ops_t *ops, pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want,
               int timeout_ms, unsigned slice_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);
    int got = 0;

    while (got < want) {
        struct pollfd pfd = {.fd = ops->cq_fd(cq), .events = POLLIN};
        uint64_t now = pdx_now_ns();
        int n = ops->cq_poll(cq, wc + got, want - got);

        if (n == 0 && now < deadline && ops->cq_arm(cq) == PDX_OK) /* then poll once more */
            n = ops->cq_poll(cq, wc + got, want - got);
        got += n;
        if (n > 0)
            continue;
        if (now >= deadline)
            break;
        if (poll(&pfd, 1, (int)PDX_MIN((deadline - now) / 1000000u + 1, slice_ms)) > 0)
            ops->cq_ack(cq);
    }
    return got;
}

void fx_expect_wc(const pdx_tp_wc_t *wc, uint64_t wr_id, pdx_status_t status,
                  pdx_tp_opcode_t opcode)
{
    cr_assert_eq(wc->wr_id, wr_id, "wr_id %llu, expected %llu", (unsigned long long)wc->wr_id,
                 (unsigned long long)wr_id);
    cr_assert_eq(wc->status, status, "wr %llu: %s", (unsigned long long)wr_id,
                 pdx_status_str(wc->status));
    cr_assert_eq(wc->opcode, opcode);
}

void fx_check_post_runs(const pdx_transport_ops_t *ops, pdx_tp_ep_t *ep, pdx_tp_cq_t *cq,
                        pdx_tp_mr_t *smr, const uint8_t *src, size_t len,
                        const pdx_tp_rkey_t *rk, const uint8_t *dst, uint64_t max_msg)
{
    const uint64_t base = 4096, window = len - 2 * 4096, mask = 0xff;
    pdx_tp_run_t runs[PDX_TP_RUNS_MAX + 1];
    pdx_tp_runs_t tr = {.wr_id = 0xab00 | 0xfc, .wr_id_mask = mask, .signal_every = 4,
                        .n = 10, .runs = runs, .mr = smr, .src_base = base,
                        .src_len = window, .dst = rk};
    const uint32_t want_signaled[] = {3, 7, 9};
    pdx_tp_wc_t wc[4];
    uint32_t bad = 99;

    cr_assert_geq(len, 64u << 10);
    /* ten runs of 1000 bytes, every other one backwards on both sides */
    for (uint32_t i = 0; i < 10; i++)
        runs[i] = (pdx_tp_run_t){.src_mem = 7, .dst_mem = 9,
                                 .src_offset = (i % 2 ? 9 - i : i) * 4000 + 10,
                                 .dst_offset = (i % 2 ? i : 9 - i) * 5000 + 3, .len = 1000};
    runs[6].len = 0; /* a run of no bytes is a WR too */

    /* refused whole, each with the index of the first bad run */
    struct { uint32_t i; pdx_tp_run_t r; } bads[] = {
        {2, {.src_offset = window - 10, .len = 11}},          /* past the window */
        {5, {.src_offset = window + 1, .len = 0}},            /* starts past it */
        {9, {.dst_offset = rk->len - 999, .len = 1000}},      /* past the peer's region */
        {0, {.dst_offset = rk->len + 1, .len = 0}},
    };
    for (size_t k = 0; k < sizeof(bads) / sizeof(bads[0]); k++) {
        pdx_tp_run_t keep = runs[bads[k].i];

        runs[bads[k].i] = bads[k].r;
        bad = 99;
        cr_assert_eq(ops->post_runs(ep, &tr, &bad), PDX_ERR_RANGE, "bad run %zu", k);
        cr_assert_eq(bad, bads[k].i, "bad run %zu reported as %u", k, bad);
        runs[bads[k].i] = keep;
    }
    if (max_msg < window) {
        pdx_tp_run_t keep = runs[4];

        runs[4] = (pdx_tp_run_t){.len = max_msg + 1};
        cr_assert_eq(ops->post_runs(ep, &tr, &bad), PDX_ERR_RANGE, "above max_msg_size");
        cr_assert_eq(bad, 4u);
        runs[4] = keep;
    }
    tr.src_base = len - window + 1; /* the window leaves the region */
    cr_assert_eq(ops->post_runs(ep, &tr, &bad), PDX_ERR_INVALID);
    tr.src_base = base;
    tr.n = PDX_TP_RUNS_MAX + 1;
    cr_assert_eq(ops->post_runs(ep, &tr, &bad), PDX_ERR_INVALID, "more runs than a call takes");
    tr.n = 10;
    cr_assert_eq(ops->cq_poll(cq, wc, 4), 0, "a refused call posted something");
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(dst[i], 0, "a refused call wrote byte %zu", i);

    cr_assert_eq(ops->post_runs(ep, &tr, &bad), PDX_OK);
    cr_assert_eq(fx_wait_wc(ops, cq, wc, 3, 5000, 50), 3);
    for (int k = 0; k < 3; k++)
        fx_expect_wc(&wc[k], (0xab00 | ((0xfc + want_signaled[k]) & mask)), PDX_OK,
                     PDX_TP_OP_WRITE);
    cr_assert_eq(ops->cq_poll(cq, wc, 4), 0, "an unsignaled run completed");
    fx_expect_runs(runs, 10, src + base, dst);
}

void fx_expect_runs(const pdx_tp_run_t *runs, uint32_t n, const uint8_t *src_base,
                    const uint8_t *dst)
{
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(memcmp(dst + runs[i].dst_offset, src_base + runs[i].src_offset,
                            runs[i].len), 0, "run %u did not land", i);
}
