/* The fixture of the softnic tests; see softnic_fixture.h. */
#include "softnic_fixture.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

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

uint64_t fx_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void fx_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void fx_fill(void *p, size_t n, uint64_t seed)
{
    uint8_t *b = p;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)pdx_xorshift64(&x);
}

void fx_opts_default(fx_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    softnic_config_default(&o->cfg);
    o->cfg.devices = 2;
    o->cap.max_send_wr = 64;
    o->cap.max_recv_wr = 64;
    o->cap.max_send_sge = 4;
    o->cap.max_recv_sge = 4;
    o->cap.max_inline_data = 64;
    o->cqe = 256;
    o->timeout = 14;
    o->retry_cnt = 3;
    o->rnr_retry = 3;
    o->min_rnr_timer = 12;
    o->path_mtu = IBV_MTU_1024;
    o->max_dest_rd_atomic = 16;
    o->max_rd_atomic = 16;
    o->access = FX_RW;
    o->buf_len = 1 << 20;
}

int fx_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr attr;

    cr_assert_eq(ibv_query_qp(qp, &attr, IBV_QP_STATE, &ia), 0);
    return (int)attr.qp_state;
}

int fx_connect(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *dgid, const fx_opts_t *o)
{
    struct ibv_qp_attr a;
    int rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = o->access & ~IBV_ACCESS_LOCAL_WRITE;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)o->path_mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0x123;
    a.max_dest_rd_atomic = o->max_dest_rd_atomic;
    a.min_rnr_timer = o->min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *dgid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    rc = ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = o->timeout;
    a.retry_cnt = o->retry_cnt;
    a.rnr_retry = o->rnr_retry;
    a.sq_psn = 0x456;
    a.max_rd_atomic = o->max_rd_atomic;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void fx_side_open(fx_t *f, fx_side_t *s, int dev, struct ibv_context *shared)
{
    const fx_opts_t *o = &f->o;
    struct ibv_qp_init_attr ia;

    s->ctx = shared ? shared : ibv_open_device(f->list[dev]);
    cr_assert_not_null(s->ctx, "ibv_open_device: %s", strerror(errno));
    cr_assert_eq(ibv_query_gid(s->ctx, 1, 1, &s->gid), 0);
    s->pd = ibv_alloc_pd(s->ctx);
    cr_assert_not_null(s->pd);
    if (o->channel) {
        s->ch = ibv_create_comp_channel(s->ctx);
        cr_assert_not_null(s->ch);
    }
    s->cq = ibv_create_cq(s->ctx, o->cqe, s, s->ch, 0);
    cr_assert_not_null(s->cq, "ibv_create_cq: %s", strerror(errno));
    memset(&ia, 0, sizeof(ia));
    ia.qp_context = s;
    ia.send_cq = s->cq;
    ia.recv_cq = s->cq;
    ia.cap = o->cap;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = o->sig_all;
    s->qp = ibv_create_qp(s->pd, &ia);
    cr_assert_not_null(s->qp, "ibv_create_qp: %s", strerror(errno));
    s->buf = aligned_alloc(4096, o->buf_len);
    cr_assert_not_null(s->buf);
    memset(s->buf, 0, o->buf_len);
    s->mr = ibv_reg_mr(s->pd, s->buf, o->buf_len, (int)o->access);
    cr_assert_not_null(s->mr, "ibv_reg_mr: %s", strerror(errno));
}

void fx_open(fx_t *f, const fx_opts_t *o)
{
    memset(f, 0, sizeof(*f));
    f->o = *o;
    cr_assert_eq(softnic_configure(&o->cfg), 0);
    f->fds = fx_count_fds();
    f->objs = softnic_open_objects();
    f->list = ibv_get_device_list(&f->ndev);
    cr_assert_not_null(f->list);
    cr_assert_geq(f->ndev, o->one_device ? 1 : 2);
    fx_side_open(f, &f->a, 0, NULL);
    fx_side_open(f, &f->b, 1, o->one_device ? f->a.ctx : NULL);
    cr_assert_eq(fx_connect(f->a.qp, f->b.qp->qp_num, &f->b.gid, o), 0);
    cr_assert_eq(fx_connect(f->b.qp, f->a.qp->qp_num, &f->a.gid, o), 0);
}

static void fx_side_close(fx_side_t *s, bool close_ctx)
{
    if (s->qp)
        cr_assert_eq(ibv_destroy_qp(s->qp), 0);
    if (s->mr)
        cr_assert_eq(ibv_dereg_mr(s->mr), 0);
    if (s->cq)
        cr_assert_eq(ibv_destroy_cq(s->cq), 0);
    if (s->ch)
        cr_assert_eq(ibv_destroy_comp_channel(s->ch), 0);
    if (s->pd)
        cr_assert_eq(ibv_dealloc_pd(s->pd), 0);
    if (close_ctx && s->ctx)
        cr_assert_eq(ibv_close_device(s->ctx), 0);
    free(s->buf);
}

void fx_close(fx_t *f)
{
    int fds;

    fx_side_close(&f->b, !f->o.one_device);
    fx_side_close(&f->a, true);
    ibv_free_device_list(f->list);
    softnic_faults_clear();
    cr_assert_eq(softnic_open_objects(), f->objs, "softnic objects leaked: %u before, %u after",
                 f->objs, softnic_open_objects());
    fds = fx_count_fds();
    cr_assert_eq(fds, f->fds, "file descriptors leaked: %d before, %d after", f->fds, fds);
}

int fx_post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, void *addr, uint32_t len,
            uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned int flags)
{
    struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
    struct ibv_send_wr wr, *bad = NULL;
    int rc;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = len ? &sge : NULL;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.imm_data = htonl((uint32_t)wr_id);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    rc = ibv_post_send(qp, &wr, &bad);
    if (rc)
        cr_assert_eq(bad, &wr);
    return rc;
}

int fx_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    int rc = ibv_post_recv(qp, &wr, &bad);

    if (rc)
        cr_assert_eq(bad, &wr);
    return rc;
}

int fx_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, unsigned timeout_ms)
{
    uint64_t end = fx_now_us() + (uint64_t)timeout_ms * 1000;
    int got = 0;

    while (got < n) {
        int r = ibv_poll_cq(cq, n - got, wc + got);

        cr_assert_geq(r, 0);
        got += r;
        if (got == n || fx_now_us() > end)
            break;
        if (r == 0) {
            struct timespec ts = {.tv_nsec = 50000};

            nanosleep(&ts, NULL);
        }
    }
    return got;
}

bool fx_wait_executed(uint64_t n, unsigned timeout_ms)
{
    uint64_t end = fx_now_us() + (uint64_t)timeout_ms * 1000;
    softnic_stats_t st;

    for (;;) {
        softnic_stats(&st);
        if (st.wrs_executed >= n)
            return true;
        if (fx_now_us() > end)
            return false;
        fx_sleep_ms(1);
    }
}

bool fx_async(struct ibv_context *ctx, struct ibv_async_event *ev, unsigned timeout_ms)
{
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    int flags = fcntl(ctx->async_fd, F_GETFL);

    cr_assert_geq(flags, 0);
    if (poll(&p, 1, (int)timeout_ms) != 1)
        return false;
    cr_assert_eq(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    cr_assert_eq(ibv_get_async_event(ctx, ev), 0);
    cr_assert_eq(fcntl(ctx->async_fd, F_SETFL, flags), 0);
    return true;
}
