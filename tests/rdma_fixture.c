/* The fixture of the rdma suites; see rdma_fixture.h. */
#include "rdma_fixture.h"

#include <criterion/criterion.h>

#include "log.h"
#include "rdma/rdma.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

softnic_config_t fx_nic(uint32_t devices, softnic_mode_t mode)
{
    softnic_config_t c;

    softnic_config_default(&c);
    c.devices = devices;
    c.mode = mode;
    return c;
}

void fx_nic_delay(softnic_config_t *c, uint32_t delay_us)
{
    c->delay_us = delay_us;
    cr_assert_eq(softnic_configure(c), 0);
}

void fx_nic_env_begin(fx_nic_env_t *env, const softnic_config_t *nic)
{
    cr_assert_eq(softnic_configure(nic), 0);
    softnic_faults_clear();
    fx_env_begin(&env->fx);
    env->objects = softnic_open_objects();
}

void fx_nic_env_end(const fx_nic_env_t *env, bool errors_expected)
{
    cr_assert_eq(softnic_open_objects(), env->objects, "verbs objects left open: %u, not %u",
                 softnic_open_objects(), env->objects);
    fx_env_end(&env->fx, errors_expected);
}

static pdx_status_t tp_open(pdx_tp_t **tp_p, bool quiet, const char *var, va_list ap)
{
    pdx_tp_params_t params = {.progress_timeout_ms = 10000, .max_msg_size = FX_MAXMSG,
                              .quiet_no_device = quiet};
    pdx_config_t cfg;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    for (const char *v = var; v; v = va_arg(ap, const char *))
        cr_assert_eq(pdx_config_set(&cfg, v, va_arg(ap, const char *)), PDX_OK);
    params.config = &cfg;
    return ops->open(&params, tp_p);
}

pdx_status_t fx_tp_try(pdx_tp_t **tp_p, const char *var, ...)
{
    pdx_status_t st;
    va_list ap;

    va_start(ap, var);
    st = tp_open(tp_p, true, var, ap);
    va_end(ap);
    return st;
}

pdx_status_t fx_tp_try_loud(pdx_tp_t **tp_p, const char *var, ...)
{
    pdx_status_t st;
    va_list ap;

    va_start(ap, var);
    st = tp_open(tp_p, false, var, ap);
    va_end(ap);
    return st;
}

struct ibv_qp_attr fx_qp_query(pdx_tp_ep_t *ep)
{
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    cr_assert_eq(ibv_query_qp(rdma_ep(ep)->qp, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV |
                              IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT, &init), 0);
    return attr;
}

int fx_wait(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms)
{
    return fx_wait_wc(ops, cq, wc, want, timeout_ms, 20u);
}

int fx_take(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms, uint64_t *last_p)
{
    int n = fx_wait(cq, wc, 1, timeout_ms);

    n += n ? ops->cq_poll(cq, wc + 1, max - 1) : 0;
    for (int k = 0; k < n; k++) {
        cr_assert_eq(wc[k].status, PDX_OK);
        cr_assert_gt(wc[k].wr_id, *last_p, "completions out of posting order");
        *last_p = wc[k].wr_id;
    }
    return n;
}

uint64_t fx_wrs_posted(void)
{
    softnic_stats_t st;

    softnic_stats(&st);
    return st.wrs_posted;
}

void fx_rig_open(fx_rig_t *r, const softnic_config_t *c, size_t len, uint32_t sq, uint32_t rq)
{
    memset(r, 0, sizeof(*r));
    r->nic = c ? *c : fx_nic(2, SOFTNIC_THREAD);
    fx_nic_env_begin(&r->env, &r->nic);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&r->tp[i], "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL),
                     PDX_OK);
        r->cq[i] = fx_cq_new(ops, r->tp[i], sq + rq);
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], sq, rq);
    }
    fx_connect_eps(ops, r->ep[0], r->ep[1]);
    r->len = len;
    r->src = malloc(len);
    r->dst = calloc(2, len);
    cr_assert(r->src && r->dst);
    fx_fill_random(r->src, len);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, len, 0);
    r->dmr = fx_mr_new(ops, r->tp[1], r->dst, len, FX_RW);
    ops->mr_remote(r->dmr, &r->rk);
}

void fx_rig_close(fx_rig_t *r, bool errors_expected)
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
    free(r->src);
    free(r->dst);
    fx_nic_env_end(&r->env, errors_expected);
}

pdx_tp_write_t fx_wr(const fx_rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                     uint64_t dst_off, bool signaled)
{
    return (pdx_tp_write_t){.wr_id = id, .mr = r->smr, .offset = src_off, .length = len,
                            .remote_addr = r->rk.addr + dst_off, .rkey = r->rk.rkey,
                            .flags = signaled ? PDX_TP_SIGNALED : 0};
}

void fx_log_capture_begin(fx_log_capture_t *c)
{
    c->level = pdx_log_get_level();
    if (c->level < PDX_LOG_WARN)
        pdx_log_set_level(PDX_LOG_WARN);
    fflush(stderr);
    c->file_fd = memfd_create("pdx-test-log", MFD_CLOEXEC);
    cr_assert_geq(c->file_fd, 0);
    c->saved_fd = dup(STDERR_FILENO);
    cr_assert_geq(c->saved_fd, 0);
    cr_assert_eq(dup2(c->file_fd, STDERR_FILENO), STDERR_FILENO);
}

char *fx_log_capture_end(fx_log_capture_t *c)
{
    off_t len;
    char *text;

    fflush(stderr);
    cr_assert_eq(dup2(c->saved_fd, STDERR_FILENO), STDERR_FILENO);
    close(c->saved_fd);
    pdx_log_set_level(c->level);
    len = lseek(c->file_fd, 0, SEEK_END);
    cr_assert_geq(len, 0);
    text = calloc(1, (size_t)len + 1);
    cr_assert_not_null(text);
    cr_assert_eq(pread(c->file_fd, text, (size_t)len, 0), (ssize_t)len);
    close(c->file_fd);
    fputs(text, stderr);
    return text;
}
