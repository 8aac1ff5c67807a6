/* The fixture of the transport suites; see tp_fixture.h. */
#include "tp_fixture.h"

#include <criterion/criterion.h>

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <poll.h>

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
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
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
