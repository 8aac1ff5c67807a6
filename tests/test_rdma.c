/*
 * The rdma transport alone over softnic (tests/softnic): tps on software
 * NICs of this process, eps connected through their addresses, no engine.
 * Each test sets the NIC up with softnic_configure and checks that it leaves
 * no file descriptor and no verbs object behind and, unless it provokes
 * them, logs no errors. Gathered WRITEs (several SGEs per ibv WR) and CQs
 * split past max_cqe are here; async events, dead devices and CQs (an ibv
 * CQ of a split CQ in error, overrun), refused posts and the error
 * statuses: test_rdma_faults.c.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAXMSG  (1u << 20)
#define WAIT_MS 5000
#define RW      (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE)

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

typedef struct env {
    fx_env_t fx;
    uint32_t objects;
} env_t;

/* Configure the NIC (devices, mode, tweaks), then note what is open. */
static void env_begin(env_t *env, const softnic_config_t *nic)
{
    cr_assert_eq(softnic_configure(nic), 0);
    softnic_faults_clear();
    fx_env_begin(&env->fx);
    env->objects = softnic_open_objects();
}

static void env_end(const env_t *env, bool errors_expected)
{
    cr_assert_eq(softnic_open_objects(), env->objects, "verbs objects left open: %u, not %u",
                 softnic_open_objects(), env->objects);
    fx_env_end(&env->fx, errors_expected);
}

static void fill_random(uint8_t *p, size_t len)
{
    static uint64_t x = 0x9e3779b97f4a7c15ull;

    for (size_t i = 0; i < len; i++, x ^= x << 13, x ^= x >> 7, x ^= x << 17)
        p[i] = (uint8_t)x;
}

/* Open a tp, quiet about no device; PDX_* name, value pairs, NULL-terminated. */
static pdx_status_t tp_try(pdx_tp_t **tp_p, const char *var, ...)
{
    pdx_tp_params_t params = {.progress_timeout_ms = 10000, .max_msg_size = MAXMSG,
                              .quiet_no_device = true};
    pdx_config_t cfg;
    va_list ap;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    va_start(ap, var);
    for (const char *v = var; v; v = va_arg(ap, const char *))
        cr_assert_eq(pdx_config_set(&cfg, v, va_arg(ap, const char *)), PDX_OK);
    va_end(ap);
    params.config = &cfg;
    return ops->open(&params, tp_p);
}

static struct ibv_qp_attr qp_query(pdx_tp_ep_t *ep)
{
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    cr_assert_eq(ibv_query_qp(rdma_ep(ep)->qp, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV |
                              IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT, &init), 0);
    return attr;
}

/* Collect `want` completions within timeout_ms; returns how many came. */
static int wait_wc(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms)
{
    return fx_wait_wc(ops, cq, wc, want, timeout_ms, 20u);
}

/* The usual setup: tp 0 (softnic0) writes from src into dst on tp 1 (softnic1);
 * dst is twice as long as its region, to see that nothing lands past it. */
typedef struct rig {
    env_t            env;
    softnic_config_t nic;
    pdx_tp_t        *tp[2];
    pdx_tp_cq_t     *cq[2];
    pdx_tp_ep_t     *ep[2];
    size_t           len;
    uint8_t         *src, *dst;
    pdx_tp_mr_t     *smr, *dmr;
    pdx_tp_rkey_t    rk;
} rig_t;

/* c: the NIC's configuration, NULL for two devices in THREAD mode. */
static void rig_open(rig_t *r, const softnic_config_t *c, size_t len, uint32_t sq, uint32_t rq)
{
    memset(r, 0, sizeof(*r));
    r->nic = c ? *c : fx_nic(2, SOFTNIC_THREAD);
    env_begin(&r->env, &r->nic);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(tp_try(&r->tp[i], "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL),
                     PDX_OK);
        r->cq[i] = fx_cq_new(ops, r->tp[i], sq + rq);
        r->ep[i] = fx_ep_new(ops, r->tp[i], r->cq[i], sq, rq);
    }
    fx_connect_eps(ops, r->ep[0], r->ep[1]);
    r->len = len;
    r->src = malloc(len);
    r->dst = calloc(2, len);
    cr_assert(r->src && r->dst);
    fill_random(r->src, len);
    r->smr = fx_mr_new(ops, r->tp[0], r->src, len, 0);
    r->dmr = fx_mr_new(ops, r->tp[1], r->dst, len, RW);
    ops->mr_remote(r->dmr, &r->rk);
}

/* Eps first: an ep destroyed drops its WRs and their hold on the regions. */
static void rig_close(rig_t *r, bool errors_expected)
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
    env_end(&r->env, errors_expected);
}

static pdx_tp_write_t wr_make(const rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                              uint64_t dst_off, bool signaled)
{
    pdx_tp_write_t w = {.wr_id = id, .mr = r->smr, .offset = src_off, .length = len,
                        .remote_addr = r->rk.addr + dst_off, .rkey = r->rk.rkey,
                        .flags = signaled ? PDX_TP_SIGNALED : 0};
    return w;
}

/* ------------------------------------------------------------ devices */

Test(rdma, open_close_and_device_choice)
{
    softnic_config_t c = fx_nic(1, SOFTNIC_THREAD);
    pdx_tp_t *tp = NULL, *tp2 = (pdx_tp_t *)0x1;
    uint8_t buf[256];
    pdx_tp_mr_t *mr;
    pdx_tp_ep_t *ep;
    pdx_tp_cq_t *cq;
    env_t env;

    env_begin(&env, &c);
    cr_assert_eq(ops->open(NULL, &tp), PDX_OK, "no params, no config: defaults");
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic0");
    cr_assert_eq(rdma_tp(tp)->max_msg_size, 1u << 20);
    cq = fx_cq_new(ops, tp, 16);
    ep = fx_ep_new(ops, tp, cq, 4, 4);
    mr = fx_mr_new(ops, tp, buf, sizeof(buf), RW);
    (void)fx_mr_new(ops, tp, buf, 64, RW);
    /* an ep not connected yet takes receives, not sends */
    cr_assert_eq(ops->post_recv(ep, 1, mr, 0, 64), PDX_OK);
    cr_assert_eq(ops->post_send(ep, 2, "x", 1, 0), PDX_ERR_STATE);
    ops->cq_destroy(cq); /* refused while an ep uses it */
    ops->close(tp);      /* warns, frees the ep, the CQ and both regions */
    env_end(&env, true);

    c.no_devices = true;
    env_begin(&env, &c);
    cr_assert_eq(tp_try(&tp2, NULL), PDX_ERR_NO_DEVICE, "quiet: info, the engine falls back");
    cr_assert_eq(pdx_log_error_count(), env.fx.errors);
    cr_assert_eq(ops->open(&(pdx_tp_params_t){0}, &tp2), PDX_ERR_NO_DEVICE);
    cr_assert_eq(pdx_log_error_count(), env.fx.errors + 1, "not quiet: one error says why");
    cr_assert_eq(tp2, (pdx_tp_t *)0x1, "output written on failure");
    env_end(&env, true);

    c = fx_nic(2, SOFTNIC_THREAD);
    env_begin(&env, &c);
    cr_assert_eq(tp_try(&tp, NULL), PDX_OK);
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic0", "no filter: the first device");
    cr_assert_eq(tp_try(&tp2, "PDX_IB_DEVICES", "nosuch, softnic1,softnic0", NULL), PDX_OK);
    cr_assert_str_eq(rdma_tp(tp2)->dev.name, "softnic1", "the filter's order");
    ops->close(tp2);
    cr_assert_eq(tp_try(&tp2, "PDX_IB_DEVICES", "nosuch", NULL), PDX_ERR_NO_DEVICE);
    cr_assert_eq(tp_try(&tp2, "PDX_IB_GID_INDEX", "5", NULL), PDX_ERR_NO_DEVICE);
    ops->close(tp);
    env_end(&env, false);
}

/* GID choice, MTU negotiation and the QP knobs, seen through the QP attributes */
Test(rdma, addressing_and_knobs)
{
    static const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    struct ibv_qp_attr q[2];
    pdx_tp_addr_t a[2], ll;
    pdx_tp_t *tp2;
    pdx_tp_cq_t *cq2;
    pdx_tp_ep_t *ep2;
    rig_t r;

    c.active_mtu = IBV_MTU_2048;
    rig_open(&r, &c, 64, 4, 0);
    for (int i = 0; i < 2; i++)
        ops->ep_destroy(r.ep[i]);
    ops->close(r.tp[1]); /* again, with settings */
    cr_assert_eq(tp_try(&r.tp[1], "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "1",
                        "PDX_IB_HOP_LIMIT", "7", "PDX_IB_RNR_RETRY", "3", NULL), PDX_OK);
    r.cq[1] = fx_cq_new(ops, r.tp[1], 4);
    r.dmr = fx_mr_new(ops, r.tp[1], r.dst, r.len, RW);
    for (int i = 0; i < 2; i++) {
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 4, 0);
        ops->ep_address(r.ep[i], &a[i]);
        cr_assert_eq(a[i].len, 32u);
        cr_assert_eq(a[i].bytes[2], IBV_MTU_2048, "the address carries the active MTU");
    }
    cr_assert_arr_eq(a[0].bytes + 16, v4, 16, "the RoCEv2 IPv4-mapped GID (index 1)");
    /* a GID of the other family (link-local RoCEv1, index 0) is refused both ways */
    cr_assert_eq(tp_try(&tp2, "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "0", NULL), PDX_OK);
    cq2 = fx_cq_new(ops, tp2, 4);
    ep2 = fx_ep_new(ops, tp2, cq2, 4, 0);
    ops->ep_address(ep2, &ll);
    cr_assert_eq(ll.bytes[16], 0xfe, "PDX_IB_GID_INDEX=0: the link-local RoCEv1 GID");
    cr_assert_eq(ops->ep_connect(r.ep[0], &ll), PDX_ERR_INVALID, "IPv4-mapped meets link-local");
    cr_assert_eq(ops->ep_connect(ep2, &a[0]), PDX_ERR_INVALID);
    ops->ep_destroy(ep2);
    ops->cq_destroy(cq2);
    ops->close(tp2);
    a[1].bytes[2] = IBV_MTU_1024; /* as a peer with a smaller MTU would say */
    cr_assert_eq(ops->ep_connect(r.ep[0], &a[1]), PDX_OK);
    cr_assert_eq(ops->ep_connect(r.ep[1], &a[0]), PDX_OK);
    for (int i = 0; i < 2; i++) {
        q[i] = qp_query(r.ep[i]);
        cr_assert(q[i].qp_state == IBV_QPS_RTS && q[i].timeout == 18);
    }
    cr_assert_eq(q[0].path_mtu, IBV_MTU_1024, "the smaller of both active MTUs");
    cr_assert_eq(q[1].path_mtu, IBV_MTU_2048);
    cr_assert(q[0].ah_attr.grh.sgid_index == 1 && q[1].ah_attr.grh.sgid_index == 1);
    cr_assert(q[0].ah_attr.grh.hop_limit == 64 && q[1].ah_attr.grh.hop_limit == 7);
    cr_assert(q[0].rnr_retry == 6 && q[1].rnr_retry == 3);
    rig_close(&r, true); /* the refused connects said why */
}

/* -------------------------------------------------------------- data */

Test(rdma, write_both_ways_and_cq_fd)
{
    uint8_t back[4096] = {0};
    struct pollfd pfd;
    pdx_tp_mr_t *bmr;
    pdx_tp_rkey_t brk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, NULL, MAXMSG, 8, 0);
    pfd = (struct pollfd){.fd = ops->cq_fd(r.cq[0]), .events = POLLIN};
    cr_assert_eq(ops->cq_arm(r.cq[0]), PDX_OK);
    cr_assert_eq(ops->cq_poll(r.cq[0], &wc, 1), 0);
    cr_assert_eq(poll(&pfd, 1, 0), 0, "readable before any completion");
    w = wr_make(&r, 100, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(poll(&pfd, 1, WAIT_MS), 1, "the completion did not wake the fd");
    ops->cq_ack(r.cq[0]);
    cr_assert_eq(poll(&pfd, 1, 0), 0, "still readable after cq_ack");
    cr_assert_eq(ops->cq_poll(r.cq[0], &wc, 1), 1);
    fx_expect_wc(&wc, 100, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[0]);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);

    bmr = fx_mr_new(ops, r.tp[0], back, sizeof(back), RW);
    ops->mr_remote(bmr, &brk);
    cr_assert(brk.addr == (uintptr_t)back && brk.len == sizeof(back));
    w = (pdx_tp_write_t){.wr_id = 200, .mr = r.dmr, .offset = 1000, .length = sizeof(back),
                         .remote_addr = brk.addr, .rkey = brk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[1], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 200, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wc.ep, r.ep[1]);
    cr_assert_eq(memcmp(back, r.src + 1000, sizeof(back)), 0);
    cr_assert(!ops->ep_error(r.ep[0])[0] && !ops->ep_error(r.ep[1])[0]);
    cr_assert_eq(ops->mr_dereg(bmr), PDX_OK);
    rig_close(&r, false);
}

Test(rdma, signaled_and_unsignaled_slots)
{
    pdx_tp_write_t w[9];
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, NULL, 8192, 8, 0);
    for (int i = 0; i < 9; i++)
        w[i] = wr_make(&r, (uint64_t)i, (uint64_t)i * 1024, 1024, (uint64_t)i * 1024, i == 7);
    cr_assert_eq(ops->post_write(r.ep[0], w, 9), PDX_ERR_INVALID, "more than the SQ holds");
    /* one signaled WR at the end: one completion, and it frees all 8 slots */
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_AGAIN, "nothing free yet");
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, 50), 0, "an unsignaled WR completed");
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0);
    /* a signaled WR in the middle frees the slots up to it, not after it */
    w[7].flags = 0;
    w[3].flags = PDX_TP_SIGNALED;
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 3, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(ops->post_write(r.ep[0], w, 5), PDX_ERR_AGAIN, "4 free, not 5");
    cr_assert_eq(ops->post_write(r.ep[0], w, 4), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1, "it covers the 4 unsignaled ones too");
    /* unsignaled only: no completion, and the slots stay taken */
    w[3].flags = 0;
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, 100), 0);
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_ERR_AGAIN);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "unsignaled WRs hold their region");
    rig_close(&r, true); /* until their ep is destroyed; INVALID was logged */
}

/* Wait for some completions (at most max): all succeed, in posting order. */
static int take(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms, uint64_t *last_p)
{
    int n = wait_wc(cq, wc, 1, timeout_ms);

    n += n ? ops->cq_poll(cq, wc + 1, max - 1) : 0;
    for (int k = 0; k < n; k++) {
        cr_assert_eq(wc[k].status, PDX_OK);
        cr_assert_gt(wc[k].wr_id, *last_p, "completions out of posting order");
        *last_p = wc[k].wr_id;
    }
    return n;
}

Test(rdma, burst_larger_than_the_send_queue)
{
    const int total = 5000;
    pdx_tp_wc_t wc[32];
    int done = 0, signaled = 0;
    uint64_t last = 0;
    rig_t r;

    rig_open(&r, NULL, 4u << 20, 16, 0);
    for (int i = 1; i <= total; i++) {
        bool sig = i % 4 == 0 || i == total;
        uint64_t off = (uint64_t)(i % 1024) * 4096, deadline = pdx_deadline_ns(WAIT_MS);
        pdx_tp_write_t w = wr_make(&r, (uint64_t)i, off, 4096, off, sig);
        pdx_status_t st;

        while ((st = ops->post_write(r.ep[0], &w, 1)) == PDX_ERR_AGAIN) {
            done += take(r.cq[0], wc, 32, 10, &last);
            cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
        }
        cr_assert_eq(st, PDX_OK);
        signaled += sig;
    }
    while (done < signaled) {
        int n = take(r.cq[0], wc, 32, WAIT_MS, &last);

        cr_assert_gt(n, 0, "only %d of %d signaled writes completed", done, signaled);
        done += n;
    }
    cr_assert_eq(last, (uint64_t)total);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);
    rig_close(&r, false);
}

/* ------------------------------------------------------------ gather */

/* softnic's count of ibv WRs posted so far */
static uint64_t wrs_posted(void)
{
    softnic_stats_t st;

    softnic_stats(&st);
    return st.wrs_posted;
}

/*
 * WRITEs of one call whose remote ranges follow each other go out as one
 * ibv WRITE of several SGEs, while it stays within the QP's SGEs (16 of
 * softnic's 30, or all of a device's 4), the message limit (1 MiB here) and
 * one rkey, and until a signaled WRITE; their local ranges go anywhere, in
 * several regions. Each lands where it should; the completions are those of
 * the signaled WRITEs, and they release every region and slot.
 */
static void gather_run(uint32_t max_sge)
{
    const uint64_t k300 = 300u << 10, k320 = 320u << 10, r2 = 192u << 10;
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_write_t w[40];
    pdx_tp_wc_t wc[4];
    pdx_tp_mr_t *smr2, *dmr2;
    pdx_tp_rkey_t rk2;
    uint64_t before;
    rig_t r;

    if (max_sge)
        c.max_sge = max_sge;
    rig_open(&r, &c, 4u << 20, 64, 0);
    max_sge = max_sge ? max_sge : RDMA_MAX_SGE;
    cr_assert_eq(rdma_ep(r.ep[0])->max_sge, max_sge);

    /* 8 of 1 KiB, local ranges backwards: one WR (two of 4 SGEs) */
    before = wrs_posted();
    for (int i = 0; i < 8; i++)
        w[i] = wr_make(&r, (uint64_t)i, (uint64_t)(7 - i) * 20000 + 100, 1024,
                       5000 + (uint64_t)i * 1024, i == 7);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 7, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wrs_posted() - before, max_sge >= 8 ? 1u : 2u);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(memcmp(r.dst + 5000 + i * 1024, r.src + w[i].offset, 1024), 0, "write %d", i);

    /* 40 of 512 bytes: WRs of max_sge SGEs */
    before = wrs_posted();
    for (int i = 0; i < 40; i++)
        w[i] = wr_make(&r, 100u + (uint64_t)i, (uint64_t)i * 1024, 512,
                       65536 + (uint64_t)i * 512, i == 39);
    cr_assert_eq(ops->post_write(r.ep[0], w, 40), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 139, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wrs_posted() - before, (40 + max_sge - 1) / max_sge, "max_sge %u", max_sge);
    for (int i = 0; i < 40; i++)
        cr_assert_eq(memcmp(r.dst + 65536 + i * 512, r.src + i * 1024, 512), 0, "write %d", i);

    /* 5 of 300 KiB: 3 fit 1 MiB, then a WR of 2 */
    before = wrs_posted();
    for (int i = 0; i < 5; i++)
        w[i] = wr_make(&r, 200u + (uint64_t)i, (uint64_t)(4 - i) * k320, k300,
                       (uint64_t)i * k300, i == 4);
    cr_assert_eq(ops->post_write(r.ep[0], w, 5), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 204, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wrs_posted() - before, 2u);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(memcmp(r.dst + i * k300, r.src + w[i].offset, k300), 0, "write %d", i);

    /* SGEs of two regions; a second rkey over the same bytes ends the WR;
     * a signaled WRITE ends it too, and completes under its own wr_id */
    smr2 = fx_mr_new(ops, r.tp[0], r.src + r2, 65536, 0);
    dmr2 = fx_mr_new(ops, r.tp[1], r.dst, r.len, RW);
    ops->mr_remote(dmr2, &rk2);
    before = wrs_posted();
    for (int i = 0; i < 6; i++) {
        w[i] = wr_make(&r, 300u + (uint64_t)i, (uint64_t)i * 4096, 1000,
                       9000 + (uint64_t)i * 1000, i == 1 || i == 5);
        if (i % 2) {
            w[i].mr = smr2;
            w[i].offset = (uint64_t)i * 3000;
        }
    }
    w[4].rkey = w[5].rkey = rk2.rkey; /* the same bytes, another registration */
    /* WRs: {0, 1} (1 signaled), {2, 3}, {4, 5} (another rkey) */
    cr_assert_eq(ops->post_write(r.ep[0], w, 6), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 2, WAIT_MS), 2);
    fx_expect_wc(&wc[0], 301, PDX_OK, PDX_TP_OP_WRITE);
    fx_expect_wc(&wc[1], 305, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(wrs_posted() - before, 3u);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(memcmp(r.dst + 9000 + i * 1000, (i % 2 ? r.src + r2 : r.src) + w[i].offset,
                            1000), 0, "write %d", i);
    cr_assert_eq(ops->mr_dereg(smr2), PDX_OK, "the completions released both regions");
    cr_assert_eq(ops->mr_dereg(dmr2), PDX_OK);
    /* every slot is free again */
    for (int i = 0; i < 40; i++)
        w[i] = wr_make(&r, 400u + (uint64_t)i, 0, 64, (uint64_t)i * 64, i == 39);
    cr_assert_eq(ops->post_write(r.ep[0], w, 40), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], w, 25), PDX_ERR_AGAIN, "24 slots free");
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc[0], 439, PDX_OK, PDX_TP_OP_WRITE);
    rig_close(&r, false);
}

Test(rdma, gathered_writes)
{
    gather_run(0);
}

Test(rdma, gathered_writes_up_to_max_sge)
{
    gather_run(4);
}

/*
 * A burst much larger than the send queue, of calls of 1 to 16 WRITEs that
 * gather or not (random remote pages, or the page after the last), signaled
 * or not: every signaled WRITE completes, in order, and each page holds what
 * the last WRITE to it carried.
 */
Test(rdma, burst_of_gathered_and_single_writes)
{
    const uint32_t pages = 256, page = 4096, total = 6000;
    uint16_t want[256];
    pdx_tp_write_t w[16];
    pdx_tp_wc_t wc[32];
    uint64_t last = 0, before;
    uint32_t posted = 0, sig = 0, done = 0, dpage = 0;
    rig_t r;

    rig_open(&r, NULL, (size_t)pages * page, 16, 0);
    for (uint32_t p = 0; p < pages; p++)
        want[p] = (uint16_t)p; /* nothing written: compared with itself below */
    memcpy(r.dst, r.src, r.len);
    before = wrs_posted();
    while (posted < total) {
        uint32_t n = PDX_MIN((uint32_t)(fx_rng() % 16) + 1, total - posted), k = 0;
        uint64_t deadline = pdx_deadline_ns(WAIT_MS);
        pdx_status_t st;

        for (uint32_t i = 0; i < n; i++) {
            uint32_t spage = (uint32_t)(fx_rng() % pages);
            bool s = i + 1 == n || fx_rng() % 7 == 0;

            dpage = fx_rng() % 3 ? (dpage + 1) % pages : (uint32_t)(fx_rng() % pages);
            w[i] = wr_make(&r, posted + i + 1, (uint64_t)spage * page, page,
                           (uint64_t)dpage * page, s);
            want[dpage] = (uint16_t)spage;
            k += s;
        }
        while ((st = ops->post_write(r.ep[0], w, n)) == PDX_ERR_AGAIN) {
            done += take(r.cq[0], wc, 32, 10, &last);
            cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
        }
        cr_assert_eq(st, PDX_OK);
        posted += n;
        sig += k;
    }
    while (done < sig) {
        int n = take(r.cq[0], wc, 32, WAIT_MS, &last);

        cr_assert_gt(n, 0, "only %u of %u signaled writes completed", done, sig);
        done += (uint32_t)n;
    }
    cr_assert_eq(last, (uint64_t)total);
    cr_assert_lt(wrs_posted() - before, (uint64_t)total * 3 / 4, "few WRITEs gathered");
    for (uint32_t p = 0; p < pages; p++)
        cr_assert_eq(memcmp(r.dst + (size_t)p * page, r.src + (size_t)want[p] * page, page), 0,
                     "page %u", p);
    rig_close(&r, false);
}

/* ------------------------------------------------- CQs past max_cqe */

#define SPLIT_EPS   8      /* eps per side at most */
#define SPLIT_PAGE  4096u
#define SPLIT_PAGES 16u    /* per ep: its slice of src and dst */
#define SPLIT_SENDS 12u    /* per ep, fewer than its receives: no RNR */
#define SPLIT_WRS   600u   /* WRITEs per ep */

/* Write j of an ep goes to page j % SPLIT_PAGES of its dst slice, from a page
 * of its src slice that depends only on that (not in order: gathered
 * WRITEs of scattered sources). */
static uint32_t split_src_page(uint32_t dst_page)
{
    return (dst_page * 5 + 3) % SPLIT_PAGES;
}

/*
 * A CQ of `depth` on a NIC of max_cqe 64 (exact: ibv_create_cq gives exactly
 * cqe entries, else 2^k - 1, capped at max_cqe): it holds `nicq` ibv CQs, eps
 * of sq 16 + rq 16 fill every one of them (`neps` in all, the next one is
 * PDX_ERR_FULL), the one cq_fd wakes for each ibv CQ, and WRITEs and SENDs on
 * every ep at once, in calls that overrun the send queues, all complete in
 * order, with their bytes and receives, without an overrun.
 */
static void split_run(bool exact, uint32_t depth, uint32_t nicq, uint32_t neps)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    const size_t slice = (size_t)SPLIT_PAGES * SPLIT_PAGE, len = SPLIT_EPS * slice;
    pdx_tp_ep_attr_t attr = {.sq_depth = 16, .rq_depth = 16};
    uint32_t per_icq[SPLIT_EPS] = {0}, posted[SPLIT_EPS] = {0}, sends[SPLIT_EPS] = {0};
    uint32_t recvs[SPLIT_EPS] = {0}, done_eps = 0;
    uint64_t last[SPLIT_EPS], errors, deadline;
    pdx_tp_ep_t *ep[2][SPLIT_EPS], *extra = NULL;
    pdx_tp_cq_t *cq[2];
    pdx_tp_t *tp[2];
    pdx_tp_mr_t *smr, *dmr, *rmr;
    pdx_tp_rkey_t rk;
    uint8_t *src, *dst, rbuf[SPLIT_EPS * 16][PDX_TP_SEND_MAX];
    softnic_stats_t st0, st;
    pdx_tp_wc_t wc[32];
    env_t env;

    c.max_cqe = 64;
    c.exact_cq_depth = exact;
    env_begin(&env, &c);
    softnic_stats(&st0);
    for (int i = 0; i < 2; i++) {
        rdma_cq_t *q;
        uint32_t sum = 0;

        cr_assert_eq(tp_try(&tp[i], "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL), PDX_OK);
        cq[i] = fx_cq_new(ops, tp[i], depth);
        q = rdma_cq(cq[i]);
        cr_assert_eq(q->nicq, nicq, "%u ibv CQs, not %u", q->nicq, nicq);
        for (uint32_t k = 0; k < nicq; k++) {
            cr_assert_leq(q->icqs[k].depth, 64u);
            cr_assert_geq((uint32_t)q->icqs[k].cq->cqe, q->icqs[k].depth);
            if (exact)
                cr_assert_eq((uint32_t)q->icqs[k].cq->cqe, q->icqs[k].depth);
            sum += q->icqs[k].depth;
        }
        cr_assert_eq(sum, depth);
        for (uint32_t k = 0; k < neps; k++) {
            ep[i][k] = fx_ep_new(ops, tp[i], cq[i], attr.sq_depth, attr.rq_depth);
            per_icq[rdma_ep(ep[i][k])->icq] += i == 0;
        }
        errors = pdx_log_error_count();
        cr_assert_eq(ops->ep_create(tp[i], cq[i], &attr, &extra), PDX_ERR_FULL,
                     "an ep past every ibv CQ");
        cr_assert_eq(pdx_log_error_count(), errors + 1, "one error says why");
    }
    for (uint32_t k = 0; k < nicq; k++)
        cr_assert_geq(per_icq[k], 1u, "no ep on ibv CQ %u", k);
    errors = pdx_log_error_count();
    src = malloc(len);
    dst = calloc(1, len);
    cr_assert(src && dst);
    fill_random(src, len);
    smr = fx_mr_new(ops, tp[0], src, len, 0);
    dmr = fx_mr_new(ops, tp[1], dst, len, RW);
    rmr = fx_mr_new(ops, tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    ops->mr_remote(dmr, &rk);
    for (uint32_t k = 0; k < neps; k++) {
        fx_connect_eps(ops, ep[0][k], ep[1][k]);
        for (uint32_t i = 0; i < 16; i++)
            cr_assert_eq(ops->post_recv(ep[1][k], i, rmr, ((uint64_t)k * 16 + i) * PDX_TP_SEND_MAX,
                                        PDX_TP_SEND_MAX), PDX_OK);
        last[k] = UINT64_MAX;
    }

    /* one wakeup of the one fd for each ibv CQ */
    for (uint32_t q = 0; q < nicq; q++) {
        struct pollfd pfd = {.fd = ops->cq_fd(cq[0]), .events = POLLIN};
        uint32_t k = 0;
        pdx_tp_write_t w;

        while (rdma_ep(ep[0][k])->icq != q)
            k++;
        cr_assert_eq(ops->cq_arm(cq[0]), PDX_OK);
        cr_assert_eq(ops->cq_poll(cq[0], wc, 1), 0);
        w = (pdx_tp_write_t){.wr_id = posted[k]++, .mr = smr, .offset = k * slice,
                             .length = 64, .remote_addr = rk.addr + k * slice, .rkey = rk.rkey,
                             .flags = PDX_TP_SIGNALED};
        cr_assert_eq(ops->post_write(ep[0][k], &w, 1), PDX_OK);
        cr_assert_eq(poll(&pfd, 1, WAIT_MS), 1, "ibv CQ %u did not wake the fd", q);
        ops->cq_ack(cq[0]);
        cr_assert_eq(poll(&pfd, 1, 0), 0, "still readable after cq_ack");
        cr_assert_eq(wait_wc(cq[0], wc, 1, WAIT_MS), 1);
        cr_assert(wc[0].ep == ep[0][k] && wc[0].status == PDX_OK);
        last[k] = wc[0].wr_id;
    }

    /* fair: 4 completions wait on ibv CQ 0, one on each other; nicq polls of
     * one completion each reach every ibv CQ */
    softnic_stats(&st);
    for (uint32_t q = 0, n = 0; q < nicq; q++) {
        uint32_t k = 0;

        while (rdma_ep(ep[0][k])->icq != q)
            k++;
        for (uint32_t i = 0; i < (q ? 1u : 4u); i++, n++) {
            pdx_tp_write_t w = {.wr_id = posted[k]++, .mr = smr, .offset = k * slice,
                                .length = 64, .remote_addr = rk.addr + k * slice,
                                .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};

            cr_assert_eq(ops->post_write(ep[0][k], &w, 1), PDX_OK);
        }
        if (q + 1 == nicq)
            for (uint64_t dl = pdx_deadline_ns(WAIT_MS);
                 st.wrs_executed < st0.wrs_executed + nicq + n && pdx_now_ns() < dl;
                 usleep(1000))
                softnic_stats(&st);
    }
    memset(per_icq, 0, sizeof(per_icq));
    for (uint32_t i = 0; i < nicq + 3; i++) {
        uint32_t k = 0;

        cr_assert_eq(ops->cq_poll(cq[0], wc, 1), 1);
        while (ep[0][k] != wc[0].ep)
            k++;
        cr_assert_eq(wc[0].status, PDX_OK);
        last[k] = wc[0].wr_id;
        if (i < nicq)
            cr_assert_eq(per_icq[rdma_ep(ep[0][k])->icq]++, 0u,
                         "poll %u: ibv CQ %u again before the others", i,
                         rdma_ep(ep[0][k])->icq);
    }

    /* every ep at once, calls of up to 12 WRs, a SEND now and then */
    deadline = pdx_deadline_ns(4 * WAIT_MS);
    while (done_eps < neps) {
        for (uint32_t k = 0; k < neps; k++) {
            uint32_t j = posted[k] - sends[k], n = PDX_MIN(1 + (j * 7 + k) % 12, SPLIT_WRS - j);
            pdx_tp_write_t w[12];

            if (j >= SPLIT_WRS)
                continue;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t page = (j + i) % SPLIT_PAGES;

                w[i] = (pdx_tp_write_t){
                    .wr_id = posted[k] + i, .mr = smr,
                    .offset = k * slice + (uint64_t)split_src_page(page) * SPLIT_PAGE,
                    .length = SPLIT_PAGE, .remote_addr = rk.addr + k * slice + page * SPLIT_PAGE,
                    .rkey = rk.rkey, .flags = i + 1 == n ? PDX_TP_SIGNALED : 0};
            }
            if (ops->post_write(ep[0][k], w, n) != PDX_OK)
                continue; /* the send queue is full: PDX_ERR_AGAIN */
            posted[k] += n;
            if (j + n == SPLIT_WRS)
                done_eps++;
            if (sends[k] < SPLIT_SENDS && j % 5 == 0 &&
                ops->post_send(ep[0][k], posted[k], "note", 4, PDX_TP_SIGNALED) == PDX_OK) {
                posted[k]++;
                sends[k]++;
            }
        }
        for (int n; (n = ops->cq_poll(cq[0], wc, 32)) > 0;) {
            for (int i = 0; i < n; i++) {
                uint32_t k = 0;

                while (k < neps && ep[0][k] != wc[i].ep)
                    k++;
                cr_assert_lt(k, neps, "a completion of no ep");
                cr_assert_eq(wc[i].status, PDX_OK, "%s", ops->ep_error(wc[i].ep));
                cr_assert(last[k] == UINT64_MAX || wc[i].wr_id > last[k], "out of order");
                last[k] = wc[i].wr_id;
            }
        }
        cr_assert_lt(pdx_now_ns(), deadline, "the send queues never drained");
    }
    for (uint32_t k = 0; k < neps; k++) {
        while (last[k] + 1 != posted[k]) {
            int n = wait_wc(cq[0], wc, 1, WAIT_MS);

            cr_assert_eq(n, 1, "ep %u (ibv CQ %u): %llu of %u WRs completed", k,
                         rdma_ep(ep[0][k])->icq, (unsigned long long)(last[k] + 1), posted[k]);
            cr_assert_eq(wc[0].status, PDX_OK);
            for (uint32_t e = 0; e < neps; e++) {
                if (ep[0][e] != wc[0].ep)
                    continue;
                cr_assert_gt(wc[0].wr_id, last[e], "out of order");
                last[e] = wc[0].wr_id;
            }
        }
    }
    {
        uint32_t want = 0, got = 0;

        for (uint32_t k = 0; k < neps; k++)
            want += sends[k];
        while (got < want) {
            int n = wait_wc(cq[1], wc, 1, WAIT_MS);

            cr_assert_eq(n, 1, "%u of %u receives completed", got, want);
            fx_expect_wc(&wc[0], wc[0].wr_id, PDX_OK, PDX_TP_OP_RECV);
            for (uint32_t k = 0; k < neps; k++)
                recvs[k] += ep[1][k] == wc[0].ep;
            got++;
        }
    }
    for (uint32_t k = 0; k < neps; k++) {
        cr_assert_eq(recvs[k], sends[k], "ep %u: %u receives, %u SENDs", k, recvs[k], sends[k]);
        cr_assert_gt(sends[k], 0u);
        for (uint32_t p = 0; p < SPLIT_PAGES; p++)
            cr_assert_eq(memcmp(dst + k * slice + p * SPLIT_PAGE,
                                src + k * slice + (size_t)split_src_page(p) * SPLIT_PAGE,
                                SPLIT_PAGE), 0, "ep %u, page %u", k, p);
    }
    softnic_stats(&st);
    cr_assert_eq(st.cq_overruns, st0.cq_overruns, "an ibv CQ overran");
    cr_assert_lt(st.wrs_posted - st0.wrs_posted, (uint64_t)neps * SPLIT_WRS, "nothing gathered");

    for (int i = 0; i < 2; i++)
        for (uint32_t k = 0; k < neps; k++)
            ops->ep_destroy(ep[i][k]);
    cr_assert_eq(ops->mr_dereg(smr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(dmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    for (int i = 0; i < 2; i++) {
        ops->cq_destroy(cq[i]);
        ops->close(tp[i]);
    }
    cr_assert_eq(pdx_log_error_count(), errors, "an error was logged (an ibv CQ not acked?)");
    free(src);
    free(dst);
    env_end(&env, true); /* the refused eps said why */
}

/* 4 x max_cqe: 4 ibv CQs of 64, 2 eps on each (an mlx5-like NIC) */
Test(rdma, cq_past_max_cqe_is_split)
{
    split_run(false, 4 * 64, 4, 8);
}

/* exact depths (a bnxt_re-like NIC), and a last ibv CQ of the rest: 64, 64, 64
 * and 58 hold 2, 2, 2 and 1 eps */
Test(rdma, cq_past_max_cqe_is_split_exact_depths)
{
    split_run(true, 4 * 64 - 6, 4, 7);
}

Test(rdma, send_after_writes_and_rnr)
{
    uint8_t msg[48], rbuf[2][PDX_TP_SEND_MAX] = {{0}};
    pdx_tp_write_t w[16];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc;
    rig_t r;

    rig_open(&r, NULL, 16u * 65536, 32, 4);
    fill_random(msg, sizeof(msg));
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[1], 55, rmr, PDX_TP_SEND_MAX, PDX_TP_SEND_MAX), PDX_OK);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_ERR_STATE, "a posted receive uses it");
    for (uint64_t i = 0; i < 16; i++)
        w[i] = wr_make(&r, i, i * 65536, 65536, i * 65536, false);
    cr_assert_eq(ops->post_write(r.ep[0], w, 16), PDX_OK);
    cr_assert_eq(ops->mr_dereg(r.smr), PDX_ERR_STATE, "posted writes read it");
    cr_assert_eq(ops->post_send(r.ep[0], 99, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
    cr_assert_eq(memcmp(r.src, r.dst, r.len), 0, "the SEND overtook the writes before it");
    fx_expect_wc(&wc, 55, PDX_OK, PDX_TP_OP_RECV);
    cr_assert(wc.byte_len == sizeof(msg) && wc.ep == r.ep[1]);
    cr_assert_eq(memcmp(rbuf[1], msg, sizeof(msg)), 0);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 99, PDX_OK, PDX_TP_OP_SEND);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    /* no receive posted: RNR retries run out; failed WRs complete, unsignaled too */
    cr_assert_eq(ops->post_send(r.ep[0], 1, "x", 1, 0), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_ERR_PEER, PDX_TP_OP_SEND);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "RNR"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(ops->post_send(r.ep[0], 2, "x", 1, 0), PDX_ERR_PEER);
    rig_close(&r, false); /* the SEND's completion released the writes' region */
}

/* A WRITE into a dmabuf region at an offset, then a READ back from it */
Test(rdma, dmabuf_region_and_read)
{
    const size_t page = 4096, len = 2 * 4096;
    uint8_t local[4096] = {0}, *map;
    pdx_tp_mr_t *mr, *lmr;
    pdx_tp_rkey_t rk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;
    int fd;

    rig_open(&r, NULL, len, 4, 0);
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(page + len + page)), 0);
    map = mmap(NULL, page + len + page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    /* the engine sees the region at map + page: bytes [page, page + len) of the fd */
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map + page, len, fd, page,
                                    RW | PDX_TP_ACCESS_REMOTE_READ, &mr), PDX_OK);
    close(fd); /* the caller may close it after return */
    ops->mr_remote(mr, &rk);
    cr_assert_eq(rk.addr, (uint64_t)(uintptr_t)(map + page));
    w = (pdx_tp_write_t){.wr_id = 1, .mr = r.smr, .offset = 0, .length = len - 100,
                         .remote_addr = rk.addr + 100, .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(map + page + 100, r.src, len - 100), 0);
    for (size_t i = 0; i < page + 100; i++)
        cr_assert_eq(map[i], 0, "byte %zu before the region's target was written", i);

    lmr = fx_mr_new(ops, r.tp[0], local, sizeof(local), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_read(r.ep[0], 7, lmr, 100, 3000, rk.addr + 500, rk.rkey), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_OK, PDX_TP_OP_READ);
    cr_assert_eq(memcmp(local + 100, r.src + 400, 3000), 0);
    cr_assert_eq(local[99] | local[3100], 0);
    cr_assert_eq(ops->post_read(r.ep[0], 8, r.smr, 0, 16, rk.addr, rk.rkey), PDX_ERR_INVALID,
                 "the target region lacks local write access");
    /* a region without REMOTE_READ refuses the READ; the QP goes to error */
    cr_assert_eq(ops->post_read(r.ep[0], 9, lmr, 0, 16, r.rk.addr, r.rk.rkey), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 9, PDX_ERR_RANGE, PDX_TP_OP_READ);
    cr_assert_eq(ops->mr_dereg(lmr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map, len, -1, 0, RW, &mr), PDX_ERR_INVALID);
    munmap(map, page + len + page);
    rig_close(&r, true);
}

/*
 * A device with max_mr_size 64 KiB: regions are registered in pieces of it,
 * each with its own keys. Writes inside a piece land with that piece's rkey;
 * a local span across a piece is refused before posting; piece 0's rkey does
 * not reach piece 2 (REM_ACCESS_ERR), so the pieces are separate
 * registrations. A dmabuf region is cut the same way at the fd's offsets.
 */
Test(rdma, regions_in_pieces)
{
    const uint64_t piece = 64u << 10, len = 4 * piece + 100;
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_write_t w[3];
    pdx_tp_wc_t wc;
    pdx_tp_mr_t *mr;
    pdx_tp_rkey_t rk;
    softnic_stats_t st;
    pdx_tp_mr_t *lmr;
    uint8_t *map, *lbuf;
    uint64_t before;
    rig_t r;
    int fd;

    c.max_mr_size = piece + 4095; /* not a power of two: pieces of 64 KiB */
    rig_open(&r, &c, len, 8, 0);
    cr_assert_eq(r.tp[0]->mr_piece, piece);
    cr_assert_eq(r.rk.npieces, 5);
    cr_assert_eq(r.rk.piece, piece);
    cr_assert_eq(r.rk.len, len);
    cr_assert_eq(r.rk.rkeys[0], r.rk.rkey);
    for (uint32_t i = 1; i < 5; i++)
        cr_assert_neq(r.rk.rkeys[i], r.rk.rkeys[i - 1], "piece %u has keys of its own", i);

    /* [100, piece) from piece 0 to piece 0; the rest of piece 1 to piece 3; the
     * short last piece to piece 4 */
    w[0] = wr_make(&r, 1, 100, piece - 100, 100, false);
    w[1] = wr_make(&r, 2, piece, piece, 3 * piece, false);
    w[2] = wr_make(&r, 3, 4 * piece, 100, 4 * piece, true);
    for (int i = 0; i < 3; i++)
        w[i].rkey = pdx_tp_rkey_at(&r.rk, w[i].remote_addr - r.rk.addr);
    cr_assert_eq(ops->post_write(r.ep[0], w, 3), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 3, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst + 100, r.src + 100, piece - 100), 0);
    cr_assert_eq(memcmp(r.dst + 3 * piece, r.src + piece, piece), 0);
    cr_assert_eq(memcmp(r.dst + 4 * piece, r.src + 4 * piece, 100), 0);

    /* gathered: local ranges in pieces 2, 0 and 1, each with its piece's
     * lkey, into one range of remote piece 1: one ibv WR */
    softnic_stats(&st);
    before = st.wrs_posted;
    w[0] = wr_make(&r, 10, 2 * piece + 50, 1000, piece + 7000, false);
    w[1] = wr_make(&r, 11, 500, 2000, piece + 8000, false);
    w[2] = wr_make(&r, 12, piece + 3000, 3000, piece + 10000, true);
    for (int i = 0; i < 3; i++)
        w[i].rkey = pdx_tp_rkey_at(&r.rk, piece);
    cr_assert_eq(ops->post_write(r.ep[0], w, 3), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 12, PDX_OK, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted - before, 1u);
    cr_assert_eq(memcmp(r.dst + piece + 7000, r.src + 2 * piece + 50, 1000), 0);
    cr_assert_eq(memcmp(r.dst + piece + 8000, r.src + 500, 2000), 0);
    cr_assert_eq(memcmp(r.dst + piece + 10000, r.src + piece + 3000, 3000), 0);

    /* a source span across a piece boundary is refused whole */
    w[0] = wr_make(&r, 4, piece - 8, 16, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_INVALID);
    lbuf = calloc(1, 2 * piece);
    cr_assert(lbuf);
    lmr = fx_mr_new(ops, r.tp[0], lbuf, 2 * piece, PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_read(r.ep[0], 5, lmr, piece - 8, 16, r.rk.addr, r.rk.rkey),
                 PDX_ERR_INVALID, "a READ target across a piece");
    cr_assert_eq(ops->mr_dereg(lmr), PDX_OK);
    free(lbuf);

    /* a dmabuf region at offset 4096 of its fd, in the same pieces */
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(4096 + len)), 0);
    map = mmap(NULL, 4096 + len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map + 4096, len, fd, 4096, RW, &mr), PDX_OK);
    close(fd);
    ops->mr_remote(mr, &rk);
    cr_assert_eq(rk.npieces, 5);
    w[0] = (pdx_tp_write_t){.wr_id = 6, .mr = r.smr, .offset = 0, .length = piece,
                            .remote_addr = rk.addr + 2 * piece,
                            .rkey = pdx_tp_rkey_at(&rk, 2 * piece), .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 6, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(map + 4096 + 2 * piece, r.src, piece), 0);

    /* piece 0's rkey does not cover piece 2: the QP goes to error */
    w[0] = wr_make(&r, 7, 0, 64, 2 * piece, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.access_errors, 1, "only the access to piece 2 with piece 0's rkey");
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    munmap(map, 4096 + len);
    rig_close(&r, true);
}

/* ------------------------------------------------------------ errors */

Test(rdma, out_of_range_write_then_everything_flushed)
{
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[8];
    rig_t r;

    rig_open(&r, NULL, 65536, 8, 0);
    for (int i = 0; i < 8; i++)
        w[i] = wr_make(&r, (uint64_t)i, 0, 1024, (uint64_t)i * 1024, i % 2 == 0);
    w[0].flags = 0;                                 /* succeeds silently */
    w[2].remote_addr = r.rk.addr + r.len - 100;     /* runs past the end */
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 6, WAIT_MS), 6, "the failed WR and 5 flushed ones");
    cr_assert_eq(wait_wc(r.cq[0], wc + 6, 1, 50), 0);
    cr_assert_eq(wc[0].wr_id, 2u, "the unsignaled w0 and w1 before it succeeded silently");
    fx_expect_wc(&wc[0], 2, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    for (int i = 1; i < 6; i++) /* flushed, signaled or not */
        fx_expect_wc(&wc[i], (uint64_t)i + 2, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "remote access"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(memcmp(r.dst, r.src, 1024), 0);
    cr_assert_eq(memcmp(r.dst + 1024, r.src, 1024), 0);
    for (size_t i = 2048; i < 2 * r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu written after the failed WR", i);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_PEER);
    rig_close(&r, false); /* flushed WRs released their region */
}

/*
 * A gathered WRITE whose remote range runs past the region fails as a whole
 * (one REM_ACCESS_ERR for the ibv WR, nothing of it placed): each of its
 * WRITEs still completes, the first with PDX_ERR_RANGE (the unsignaled WRs
 * of the call before succeeded silently), the others flushed, as is every
 * WRITE of the gathered WR after it; the regions are released.
 */
Test(rdma, gathered_write_that_fails)
{
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[9];
    rig_t r;

    rig_open(&r, NULL, 65536, 16, 0);
    w[0] = wr_make(&r, 1, 0, 1024, 0, false);
    w[1] = wr_make(&r, 2, 1024, 1024, 4096, false);
    cr_assert_eq(ops->post_write(r.ep[0], w, 2), PDX_OK);
    for (int i = 0; i < 4; i++) /* the last one past the end */
        w[i] = wr_make(&r, 10u + (uint64_t)i, (uint64_t)(3 - i) * 2048, 1024,
                       r.len - 3 * 1024 + (uint64_t)i * 1024, false);
    for (int i = 4; i < 7; i++)
        w[i] = wr_make(&r, 10u + (uint64_t)i, (uint64_t)i * 2048, 1024,
                       8192 + (uint64_t)i * 1024, false);
    w[7] = wr_make(&r, 17, 0, 1024, 20000, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 8, WAIT_MS), 8, "a completion per WRITE");
    cr_assert_eq(wait_wc(r.cq[0], wc + 8, 1, 50), 0, "one too many");
    fx_expect_wc(&wc[0], 10, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    for (int i = 1; i < 8; i++)
        fx_expect_wc(&wc[i], 10u + (uint64_t)i, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "remote access"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(memcmp(r.dst, r.src, 1024), 0);
    cr_assert_eq(memcmp(r.dst + 4096, r.src + 1024, 1024), 0);
    for (size_t i = 8192; i < 2 * r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu written by the failed WR or after it", i);
    cr_assert_eq(atomic_load(&rdma_mr(r.smr)->refs), 0u, "a WRITE holds its region");
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_PEER);
    rig_close(&r, false);
}

/* ep_fail while gathered WRITEs wait: the NIC flushes each ibv WR once, and
 * each WRITE it carries completes, in order, with ep_fail's status. */
Test(rdma, ep_fail_flushes_each_gathered_write)
{
    pdx_tp_write_t w[9];
    pdx_tp_wc_t wc[10];
    uint64_t before;
    rig_t r;

    rig_open(&r, NULL, 4096, 16, 0);
    fx_nic_delay(&r.nic, 2000000); /* nothing executes for 2 s */
    for (int i = 0; i < 9; i++) /* WRs {0..4} and {5..8} */
        w[i] = wr_make(&r, (uint64_t)i, (uint64_t)(8 - i) * 256, 256, (uint64_t)i * 256,
                       i == 4 || i == 8);
    before = wrs_posted();
    cr_assert_eq(ops->post_write(r.ep[0], w, 9), PDX_OK);
    cr_assert_eq(wrs_posted() - before, 2u);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "room aborted by the test");
    cr_assert_eq(wait_wc(r.cq[0], wc, 9, WAIT_MS), 9);
    cr_assert_eq(wait_wc(r.cq[0], wc + 9, 1, 50), 0);
    fx_nic_delay(&r.nic, 0);
    for (int i = 0; i < 9; i++)
        fx_expect_wc(&wc[i], (uint64_t)i, PDX_ERR_ABORTED, PDX_TP_OP_WRITE);
    rig_close(&r, false);
}

Test(rdma, ep_fail_flushes_everything)
{
    pdx_tp_write_t w[6];
    uint8_t rbuf[3 * 64];
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc[16];
    int nwr = 0, nrecv = 0;
    rig_t r;

    rig_open(&r, NULL, 4096, 8, 4);
    rmr = fx_mr_new(ops, r.tp[0], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    fx_nic_delay(&r.nic, 2000000); /* nothing executes for 2 s */
    for (int i = 0; i < 6; i++)
        w[i] = wr_make(&r, (uint64_t)i, 0, r.len, 0, i % 3 == 0);
    cr_assert_eq(ops->post_write(r.ep[0], w, 6), PDX_OK);
    cr_assert_eq(ops->post_send(r.ep[0], 6, "note", 4, 0), PDX_OK);
    for (uint64_t i = 0; i < 3; i++)
        cr_assert_eq(ops->post_recv(r.ep[0], 100 + i, rmr, i * 64, 64), PDX_OK);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "room aborted by the test");
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "room aborted by the test");
    cr_assert_eq(wait_wc(r.cq[0], wc, 10, WAIT_MS), 10);
    cr_assert_eq(wait_wc(r.cq[0], wc + 10, 1, 50), 0);
    fx_nic_delay(&r.nic, 0);
    for (int i = 0; i < 10; i++) { /* each queue in order, with ep_fail's status */
        bool recv = wc[i].opcode == PDX_TP_OP_RECV;

        fx_expect_wc(&wc[i], recv ? 100u + (uint64_t)nrecv : (uint64_t)nwr, PDX_ERR_ABORTED,
                  recv ? PDX_TP_OP_RECV : nwr == 6 ? PDX_TP_OP_SEND : PDX_TP_OP_WRITE);
        *(recv ? &nrecv : &nwr) += 1;
    }
    cr_assert(nwr == 7 && nrecv == 3);
    ops->ep_fail(r.ep[0], PDX_ERR_TIMEOUT, "second");
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "room aborted by the test", "first error wins");
    cr_assert_eq(ops->post_write(r.ep[0], &(pdx_tp_write_t){.mr = r.smr, .length = 1}, 1),
                 PDX_ERR_PEER);
    cr_assert_eq(ops->post_recv(r.ep[0], 1, rmr, 0, 64), PDX_ERR_PEER);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK, "flushed WRs release their regions");
    rig_close(&r, false);
}

Test(rdma, destroyed_ep_never_completes)
{
    pdx_tp_ep_t *b[2];
    pdx_tp_wc_t wc[16];
    pdx_tp_write_t w;
    softnic_stats_t st;
    rig_t r;

    rig_open(&r, NULL, 4096, 8, 0);
    for (int i = 0; i < 2; i++) { /* one CQ of 16 per tp for two pairs */
        ops->ep_destroy(r.ep[i]);
        ops->cq_destroy(r.cq[i]);
        r.cq[i] = fx_cq_new(ops, r.tp[i], 16);
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
        b[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
    }
    fx_connect_eps(ops, r.ep[0], r.ep[1]);
    fx_connect_eps(ops, b[0], b[1]);
    /* completions of both eps wait in the CQ when ep 0 is destroyed */
    softnic_stats(&st);
    for (uint64_t i = 0; i < 16; i++) {
        w = wr_make(&r, i % 2 ? 1000 + i / 2 : i / 2, 0, 512, 0, true);
        cr_assert_eq(ops->post_write(i % 2 ? b[0] : r.ep[0], &w, 1), PDX_OK);
    }
    for (uint64_t n = st.wrs_executed + 16, end = pdx_deadline_ns(WAIT_MS);
         st.wrs_executed < n && pdx_now_ns() < end; usleep(1000))
        softnic_stats(&st);
    for (int i = 0; i < 2; i++) { /* its share of the CQ is free again */
        ops->ep_destroy(r.ep[i]);
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 8, 0);
    }
    fx_connect_eps(ops, r.ep[0], r.ep[1]);
    w = wr_make(&r, 77, 0, 512, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], wc, 9, WAIT_MS), 9);
    for (int i = 0; i < 9; i++) {
        cr_assert(wc[i].status == PDX_OK && wc[i].ep == (i < 8 ? b[0] : r.ep[0]));
        cr_assert_eq(wc[i].wr_id, i < 8 ? 1000u + (uint64_t)i : 77u,
                     "kept completions first, in order; none of the destroyed ep");
    }
    /* WRs in flight when their ep goes are dropped too */
    fx_nic_delay(&r.nic, 100000);
    w = wr_make(&r, 500, 0, 512, 0, true);
    cr_assert_eq(ops->post_write(b[0], &w, 1), PDX_OK);
    ops->ep_destroy(b[0]);
    cr_assert_eq(wait_wc(r.cq[0], wc, 1, 300), 0, "a completion of the destroyed ep came out");
    fx_nic_delay(&r.nic, 0);
    ops->ep_destroy(b[1]);
    rig_close(&r, false);
}

/* ON_POLL: nothing runs unless someone polls; no inline: SENDs go from slots */
Test(rdma, on_poll_mode_and_sends_without_inline)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_ON_POLL);
    uint8_t rbuf[PDX_TP_SEND_MAX] = {0};
    char msg[PDX_TP_SEND_MAX];
    pdx_tp_mr_t *rmr;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    rig_t r;

    c.max_inline = 0;
    rig_open(&r, &c, 65536, 4, 4);
    cr_assert_eq(rdma_ep(r.ep[0])->max_inline, 0u, "the device refused inline data");
    rmr = fx_mr_new(ops, r.tp[1], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    w = wr_make(&r, 1, 0, r.len, 0, false);
    for (uint64_t i = 0; i < 6; i++) { /* more SENDs than SQ slots: slots are reused */
        memset(msg, 'a' + (int)i, sizeof(msg));
        cr_assert_eq(ops->post_recv(r.ep[1], i, rmr, 0, sizeof(rbuf)), PDX_OK);
        cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
        cr_assert_eq(ops->post_send(r.ep[0], i, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
        memset(msg, 0, sizeof(msg)); /* copied before return */
        if (i == 0) {
            usleep(20000);
            for (size_t k = 0; k < r.len; k++)
                cr_assert_eq(r.dst[k], 0, "executed without a poll");
        }
        cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
        fx_expect_wc(&wc, i, PDX_OK, PDX_TP_OP_SEND);
        cr_assert_eq(wait_wc(r.cq[1], &wc, 1, WAIT_MS), 1);
        fx_expect_wc(&wc, i, PDX_OK, PDX_TP_OP_RECV);
        cr_assert(wc.byte_len == sizeof(msg) && rbuf[0] == 'a' + i && rbuf[63] == 'a' + i);
    }
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    rig_close(&r, false);
}

Test(rdma, bad_arguments_are_refused)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_mr_t *mr = (pdx_tp_mr_t *)0x1;
    pdx_tp_ep_t *ep = (pdx_tp_ep_t *)0x1, *ep2 = NULL, *more[3];
    pdx_tp_cq_t *cq = (pdx_tp_cq_t *)0x1;
    pdx_tp_ep_attr_t attr = {.sq_depth = 4, .rq_depth = 1};
    pdx_tp_addr_t junk = {.len = 3, .bytes = {1, 2, 3}}, good;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    char big[PDX_TP_SEND_MAX + 1] = {0};
    rig_t r;

    c.max_mr_size = 1u << 20;
    c.max_cqe = 1024;
    c.max_qp_wr = 512;
    rig_open(&r, &c, 4096, 4, 0);
    cr_assert_eq(ops->mr_reg(r.tp[0], NULL, 10, 0, &mr), PDX_ERR_INVALID);
    cr_assert_eq(ops->mr_reg(r.tp[0], r.src, (size_t)(PDX_TP_PIECES_MAX + 1) << 20, 0, &mr),
                 PDX_ERR_UNSUPPORTED, "more pieces of max_mr_size than a region may have");
    cr_assert_eq(mr, (pdx_tp_mr_t *)0x1, "output written on failure");
    cr_assert_eq(ops->cq_create(r.tp[0], 0, &cq), PDX_ERR_INVALID);
    cr_assert_eq(cq, (pdx_tp_cq_t *)0x1, "output written on failure");
    cr_assert_eq(ops->cq_create(r.tp[0], 4096, &cq), PDX_OK, "above max_cqe: split");
    cr_assert_eq(rdma_cq(cq)->nicq, 4u, "4 ibv CQs of max_cqe");
    attr = (pdx_tp_ep_attr_t){.sq_depth = 500, .rq_depth = 500};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep), PDX_OK);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 16, .rq_depth = 16};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep2), PDX_OK, "no longer FULL");
    cr_assert(rdma_ep(ep)->icq == 0 && rdma_ep(ep2)->icq == 1, "the first ibv CQ with room");
    ops->ep_destroy(ep2);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 512, .rq_depth = 512};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[0]), PDX_OK, "max_cqe entries");
    attr = (pdx_tp_ep_attr_t){.sq_depth = 500, .rq_depth = 500};
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[1]), PDX_OK);
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &more[2]), PDX_OK);
    cr_assert(rdma_ep(more[0])->icq == 1 && rdma_ep(more[2])->icq == 3);
    attr = (pdx_tp_ep_attr_t){.sq_depth = 16, .rq_depth = 16};
    ep2 = NULL;
    cr_assert_eq(ops->ep_create(r.tp[0], cq, &attr, &ep2), PDX_ERR_FULL,
                 "72 entries free, but no ibv CQ has 32 of them");
    cr_assert_null(ep2, "output written on failure");
    for (int i = 0; i < 3; i++)
        ops->ep_destroy(more[i]);
    ops->ep_destroy(ep);
    ops->cq_destroy(cq);
    cq = (pdx_tp_cq_t *)0x1;
    ep = (pdx_tp_ep_t *)0x1;
    attr = (pdx_tp_ep_attr_t){.sq_depth = 4, .rq_depth = 1};
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_FULL, "CQ is full");
    cr_assert_eq(ops->ep_create(r.tp[1], r.cq[0], &attr, &ep), PDX_ERR_INVALID, "other tp");
    attr.sq_depth = 513;
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_UNSUPPORTED);
    cr_assert_eq(ep, (pdx_tp_ep_t *)0x1, "output written on failure");
    w = wr_make(&r, 1, 0, MAXMSG + 1, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_ERR_INVALID, "above max_msg_size");
    w = wr_make(&r, 1, 4000, 200, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_ERR_INVALID, "past the source region");
    cr_assert_eq(ops->post_send(r.ep[0], 1, big, sizeof(big), 0), PDX_ERR_INVALID);
    cr_assert_eq(ops->post_recv(r.ep[1], 1, r.dmr, 0, 64), PDX_ERR_AGAIN, "rq_depth 0");
    cr_assert_eq(ops->post_recv(r.ep[0], 1, r.smr, 0, 64), PDX_ERR_INVALID, "no local write");
    cr_assert_eq(ops->ep_connect(r.ep[0], &junk), PDX_ERR_PROTO);
    ops->ep_address(r.ep[1], &good);
    cr_assert_eq(ops->ep_connect(r.ep[0], &good), PDX_ERR_STATE, "connected already");
    good.bytes[0] = 9;
    cr_assert_eq(ops->ep_connect(r.ep[0], &good), PDX_ERR_PROTO, "another version");
    /* nothing was posted: the ep still works */
    w = wr_make(&r, 2, 0, 100, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(wait_wc(r.cq[0], &wc, 1, WAIT_MS), 1);
    fx_expect_wc(&wc, 2, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_str_eq(ops->ep_error(r.ep[0]), "");
    rig_close(&r, true);
}
