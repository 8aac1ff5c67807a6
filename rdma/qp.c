/*
 * rdma endpoints: one RC QP each, on a CQ used for both its queues.
 *
 * Life: ep_create makes the QP and moves it to INIT (receives may be posted
 * from then on); ep_connect takes the peer's address blob and moves it
 * through RTR to RTS (WRs may be posted once it returns); ep_fail and fatal
 * events move it to ERR, and the NIC flushes every outstanding WR and
 * receive as error CQEs (where the NIC can report nothing more, cq_poll
 * flushes them in software: rdma.h); ep_destroy frees it and the CQ
 * forgets it.
 *
 * Errors: the first record wins (ep_record), except that a record made
 * from a flush CQE gives way, once, to a cause the NIC reports later. A
 * peer whose GID is of the other family (IPv4-mapped or not) than ours is
 * refused at ep_connect: RoCE over IPv4 and over IPv6 never meet.
 *
 * The address blob (little-endian, RDMA_ADDR_LEN bytes):
 *   0 version  1 link layer  2 active MTU  3 flags (bit 0: GID valid)
 *   4 QPN (u32)  8 PSN (u32)  12 LID (u16)  14 reserved (u16)  16 GID[16]
 *
 * SEND payloads go inline (max_inline_data = PDX_TP_SEND_MAX). A device
 * that refuses that inline size gets a QP without inline data, and SENDs
 * are copied into a registered slot per SQ entry instead. The QP takes
 * min(max_sge, RDMA_MAX_SGE) SGEs per send WR, for gathered WRITEs
 * (post.c); a device that refuses that gets one SGE per WR.
 *
 * The QP's send and receive CQ is the one ibv CQ of its pdx CQ that
 * rdma_cq_reserve found room on (cq.c: split past max_cqe).
 */
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

/* ------------------------------------------------------------ errors */

static int ep_record(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt,
                     va_list ap) __attribute__((format(printf, 4, 0)));

/* 0: not recorded (a record stands), 1: the ep's first record, 2: a cause
 * that replaced a flush record. */
static int ep_record(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt,
                     va_list ap)
{
    uint32_t cur = 0;
    char *msg;

    if (why >= 0)
        why = PDX_ERR_ABORTED;
    if (atomic_compare_exchange_strong_explicit(&ep->err_claim, &cur,
                                                kind == RDMA_ERR_FLUSH ? 1u : 2u,
                                                memory_order_acq_rel, memory_order_acquire)) {
        const char *none = NULL;
        int healthy = 0;

        msg = ep->errmsg[0];
        vsnprintf(msg, RDMA_ERRMSG_MAX, fmt, ap);
        atomic_store_explicit(&ep->err_ns, pdx_now_ns(), memory_order_relaxed);
        atomic_fetch_add_explicit(&ep->cq->failed_eps, 1, memory_order_relaxed);
        /* a cause may have replaced this record already: publish into the
         * healthy state only */
        atomic_compare_exchange_strong_explicit(&ep->err, &healthy, why, memory_order_release,
                                                memory_order_relaxed);
        atomic_compare_exchange_strong_explicit(&ep->errp, &none, msg, memory_order_release,
                                                memory_order_relaxed);
        pdx_log(kind == RDMA_ERR_ASKED ? PDX_LOG_DEBUG : PDX_LOG_WARN,
                "rdma: %s: endpoint QP 0x%x failed (%s): %s", ep->tp->dev.name, ep->qpn,
                pdx_status_str(why), msg);
        return 1;
    }
    if (kind != RDMA_ERR_CAUSE || cur != 1 ||
        !atomic_compare_exchange_strong_explicit(&ep->err_claim, &cur, 3u, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return 0;
    msg = ep->errmsg[1];
    vsnprintf(msg, RDMA_ERRMSG_MAX, fmt, ap);
    atomic_store_explicit(&ep->err, why, memory_order_release);
    atomic_store_explicit(&ep->errp, msg, memory_order_release);
    pdx_warn("rdma: %s: endpoint QP 0x%x, which a flush showed in error, failed because (%s): "
             "%s", ep->tp->dev.name, ep->qpn, pdx_status_str(why), msg);
    return 2;
}

bool rdma_ep_set_error(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt,
                       ...)
{
    va_list ap;
    int rec;

    va_start(ap, fmt);
    rec = ep_record(ep, why, kind, fmt, ap);
    va_end(ap);
    return rec != 0;
}

const char *rdma_ep_errmsg_wait(rdma_ep_t *ep)
{
    const char *msg;

    /* the claimer publishes right after a vsnprintf: never long */
    while (!(msg = atomic_load_explicit(&ep->errp, memory_order_acquire)))
        sched_yield();
    return msg;
}

static void qp_to_err(rdma_ep_t *ep)
{
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    struct ibv_qp_init_attr init;
    int rc, err;

    if (atomic_load_explicit(&ep->tp->dead, memory_order_acquire))
        return; /* the device is gone: nothing to move, the flush is in software */
    rc = ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE);
    err = rc > 0 ? rc : errno;
    if (rc == 0)
        return;
    /* The NIC may have moved it there already (a fatal error). */
    if (ibv_query_qp(ep->qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR)
        return;
    if (err == EIO) {
        /* a device that is gone: its CQs say so (sw_flush.c) */
        pdx_debug("rdma: %s: moving QP 0x%x to ERR: %s", ep->tp->dev.name, ep->qpn,
                  strerror(err));
        return;
    }
    pdx_error("rdma: %s: moving QP 0x%x to ERR: %s", ep->tp->dev.name, ep->qpn, strerror(err));
}

/*
 * Whoever records the error first moves the QP to ERR; a later caller finds
 * it there or on its way (an error CQE means the NIC put it there).
 */
void rdma_ep_kill(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt, ...)
{
    va_list ap;
    int rec;

    va_start(ap, fmt);
    rec = ep_record(ep, why, kind, fmt, ap);
    va_end(ap);
    if (rec == 1)
        qp_to_err(ep);
}

void rdma_ep_fail(pdx_tp_ep_t *pep, pdx_status_t why, const char *msg)
{
    rdma_ep_t *ep = rdma_ep(pep);

    rdma_ep_kill(ep, why < 0 ? why : PDX_ERR_ABORTED, RDMA_ERR_ASKED, "%s",
                 msg && msg[0] ? msg : pdx_status_str(why));
}

const char *rdma_ep_error(const pdx_tp_ep_t *pep)
{
    const rdma_ep_t *ep = rdma_ep(pep);

    const char *msg = atomic_load_explicit(&ep->errp, memory_order_acquire);

    return msg ? msg : "";
}

/* ------------------------------------------------------------ create */

static pdx_status_t random_psn(uint32_t *psn_p)
{
    uint32_t v;
    ssize_t n;

    do {
        n = getrandom(&v, sizeof(v), 0);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(v)) {
        pdx_error("rdma: getrandom for a PSN: %s", n < 0 ? strerror(errno) : "short read");
        return PDX_ERR_IO;
    }
    *psn_p = v & 0xffffffu;
    return PDX_OK;
}

/* Under async_lock: never between the async thread's read and ack of an event. */
static int qp_destroy(rdma_ep_t *ep)
{
    int rc;

    pthread_mutex_lock(&ep->tp->async_lock);
    rc = ibv_destroy_qp(ep->qp);
    pthread_mutex_unlock(&ep->tp->async_lock);
    return rc;
}

static void ep_free(rdma_ep_t *ep)
{
    if (ep->send_slots_mr)
        ibv_dereg_mr(ep->send_slots_mr);
    free(ep->send_slots);
    free(ep->sges);
    free(ep->wrs);
    free(ep->rq);
    free(ep->sq);
    free(ep);
}

/*
 * The QP, with inline SENDs if the device takes PDX_TP_SEND_MAX bytes and
 * gathered WRITEs of up to min(max_sge, RDMA_MAX_SGE) SGEs. A device that
 * refuses the caps (EINVAL) is asked again without inline data, then with
 * one SGE (and inline data), then with neither.
 */
static pdx_status_t qp_create(rdma_ep_t *ep)
{
    rdma_tp_t *tp = ep->tp;
    const uint32_t sge = PDX_MAX(PDX_MIN(tp->dev.max_sge, RDMA_MAX_SGE), 1u);
    const struct ibv_qp_cap tries[] = {
        {.max_send_sge = sge, .max_inline_data = PDX_TP_SEND_MAX},
        {.max_send_sge = sge, .max_inline_data = 0},
        {.max_send_sge = 1, .max_inline_data = PDX_TP_SEND_MAX},
        {.max_send_sge = 1, .max_inline_data = 0},
    };
    struct ibv_qp_init_attr ia;
    uint32_t t = 0;

    do {
        ia = (struct ibv_qp_init_attr){
            .qp_context = ep,
            .send_cq = ep->cq->icqs[ep->icq].cq,
            .recv_cq = ep->cq->icqs[ep->icq].cq,
            .cap = {.max_send_wr = ep->sq_depth, .max_recv_wr = ep->rq_depth,
                    .max_send_sge = tries[t].max_send_sge, .max_recv_sge = 1,
                    .max_inline_data = tries[t].max_inline_data},
            .qp_type = IBV_QPT_RC,
            .sq_sig_all = 0,
        };
        ep->qp = ibv_create_qp(tp->pd, &ia);
    } while (!ep->qp && errno == EINVAL && ++t < (sge > 1 ? PDX_ARRAY_SIZE(tries) : 2));
    if (!ep->qp) {
        pdx_error("rdma: %s: ibv_create_qp (RC, %u send, %u receive WRs): %s", tp->dev.name,
                  ep->sq_depth, ep->rq_depth, strerror(errno));
        return PDX_ERR_IO;
    }
    if (tries[t].max_inline_data == 0)
        pdx_info("rdma: %s refuses %d bytes of inline data; SENDs go from registered slots",
                 tp->dev.name, PDX_TP_SEND_MAX);
    if (tries[t].max_send_sge < sge)
        pdx_info("rdma: %s refuses QPs of %u SGEs: one SGE per WRITE", tp->dev.name, sge);
    ep->qpn = ep->qp->qp_num;
    ep->max_inline = ia.cap.max_inline_data >= PDX_TP_SEND_MAX ? ia.cap.max_inline_data : 0;
    ep->max_sge = tries[t].max_send_sge;
    return PDX_OK;
}

static pdx_status_t send_slots_create(rdma_ep_t *ep)
{
    size_t len = (size_t)(ep->sq_mask + 1) * PDX_TP_SEND_MAX;

    ep->send_slots = calloc(1, len);
    if (!ep->send_slots) {
        pdx_error("rdma: out of memory for %zu bytes of SEND slots", len);
        return PDX_ERR_NOMEM;
    }
    ep->send_slots_mr = (ibv_reg_mr)(ep->tp->pd, ep->send_slots, len, 0);
    if (!ep->send_slots_mr) {
        pdx_error("rdma: %s: ibv_reg_mr of %zu bytes of SEND slots: %s", ep->tp->dev.name, len,
                  strerror(errno));
        return PDX_ERR_IO;
    }
    return PDX_OK;
}

static pdx_status_t qp_init(rdma_ep_t *ep)
{
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = ep->tp->dev.port,
        /* REMOTE_READ: a loopback ep is the target of the flush READ */
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
    };
    int rc = ibv_modify_qp(ep->qp, &attr,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

    if (rc) {
        pdx_error("rdma: %s: QP 0x%x RESET -> INIT: %s", ep->tp->dev.name, ep->qpn,
                  strerror(rc > 0 ? rc : errno));
        return PDX_ERR_IO;
    }
    return PDX_OK;
}

pdx_status_t rdma_ep_create(pdx_tp_t *ptp, pdx_tp_cq_t *pcq, const pdx_tp_ep_attr_t *attr,
                            pdx_tp_ep_t **ep_p)
{
    rdma_tp_t *tp = rdma_tp(ptp);
    rdma_cq_t *cq = rdma_cq(pcq);
    uint32_t entries, sq_size, rq_size, slot, gen, icq;
    pdx_status_t status;
    rdma_ep_t *ep;
    void *mem;
    int rc;

    if (!attr || !cq || cq->tp != tp || attr->sq_depth == 0 || attr->sq_depth > RDMA_MAX_DEPTH ||
        attr->rq_depth > RDMA_MAX_DEPTH) {
        pdx_error("rdma: endpoint needs a CQ of this tp, sq_depth 1..%u and rq_depth 0..%u",
                  RDMA_MAX_DEPTH, RDMA_MAX_DEPTH);
        return PDX_ERR_INVALID;
    }
    if (attr->sq_depth > tp->dev.max_qp_wr || attr->rq_depth > tp->dev.max_qp_wr) {
        pdx_error("rdma: %s: endpoint depths (sq %u, rq %u) exceed the device's max_qp_wr "
                  "of %u", tp->dev.name, attr->sq_depth, attr->rq_depth, tp->dev.max_qp_wr);
        return PDX_ERR_UNSUPPORTED;
    }
    if (atomic_load_explicit(&tp->dead, memory_order_acquire)) {
        pdx_error("rdma: %s: no new endpoint: the device is gone (DEVICE_FATAL)", tp->dev.name);
        return PDX_ERR_IO;
    }
    entries = attr->sq_depth + attr->rq_depth;
    status = rdma_cq_reserve(cq, entries, &slot, &gen, &icq);
    if (status != PDX_OK)
        return status;

    status = PDX_ERR_NOMEM;
    if (posix_memalign(&mem, PDX_CACHELINE, sizeof(*ep))) {
        pdx_error("rdma: out of memory for an endpoint");
        goto err_release;
    }
    ep = memset(mem, 0, sizeof(*ep));
    ep->tp = tp;
    ep->cq = cq;
    ep->slot = slot;
    ep->gen = gen;
    ep->icq = icq;
    ep->sq_depth = attr->sq_depth;
    ep->rq_depth = attr->rq_depth;
    sq_size = pdx_pow2_ceil(attr->sq_depth);
    rq_size = pdx_pow2_ceil(PDX_MAX(attr->rq_depth, 1u));
    ep->sq_mask = sq_size - 1;
    ep->rq_mask = rq_size - 1;
    atomic_init(&ep->sq_done, 0);
    atomic_init(&ep->rq_done, 0);
    atomic_init(&ep->sq_head, 0);
    atomic_init(&ep->rq_head, 0);
    atomic_init(&ep->err, 0);
    atomic_init(&ep->err_claim, 0);
    atomic_init(&ep->errp, NULL);
    atomic_init(&ep->err_ns, 0);
    atomic_init(&ep->connect_called, false);
    atomic_init(&ep->connected, false);
    atomic_init(&ep->remote_qpn, 0);
    ep->sq = calloc(sq_size, sizeof(*ep->sq));
    ep->rq = calloc(rq_size, sizeof(*ep->rq));
    ep->wrs = calloc(attr->sq_depth, sizeof(*ep->wrs));
    ep->sges = calloc(attr->sq_depth, sizeof(*ep->sges));
    if (!ep->sq || !ep->rq || !ep->wrs || !ep->sges) {
        pdx_error("rdma: out of memory for an endpoint (sq %u, rq %u)", attr->sq_depth,
                  attr->rq_depth);
        goto err_free_ep;
    }
    rdma_post_write_init(ep);
    status = random_psn(&ep->psn);
    if (status != PDX_OK)
        goto err_free_ep;
    status = qp_create(ep);
    if (status != PDX_OK)
        goto err_free_ep;
    if (!ep->max_inline) {
        status = send_slots_create(ep);
        if (status != PDX_OK)
            goto err_destroy_qp;
    }
    status = qp_init(ep);
    if (status != PDX_OK)
        goto err_destroy_qp;
    /* the CQ may have gone into error since the reservation: then no ep */
    status = rdma_cq_attach(cq, ep);
    if (status != PDX_OK)
        goto err_destroy_qp;

    pthread_mutex_lock(&tp->lock);
    PDX_LIST_PUSH(tp->eps, ep);
    pthread_mutex_unlock(&tp->lock);
    pdx_debug("rdma: %s: endpoint QP 0x%x (sq %u, rq %u, inline %u)", tp->dev.name,
              ep->qpn, ep->sq_depth, ep->rq_depth, ep->max_inline);
    *ep_p = rdma_ep_pub(ep);
    return PDX_OK;

err_destroy_qp:
    rc = qp_destroy(ep);
    if (rc)
        pdx_error("rdma: %s: ibv_destroy_qp: %s", tp->dev.name, strerror(rc > 0 ? rc : errno));
err_free_ep:
    ep_free(ep);
err_release:
    rdma_cq_release(cq, slot, icq, entries);
    return status;
}

/* ----------------------------------------------------------- address */

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void rdma_ep_address(const pdx_tp_ep_t *pep, pdx_tp_addr_t *addr_p)
{
    const rdma_ep_t *ep = rdma_ep(pep);
    const rdma_dev_info_t *dev = &ep->tp->dev;
    uint8_t *b = addr_p->bytes;

    _Static_assert(RDMA_ADDR_LEN <= PDX_TP_ADDR_MAX, "the address fits pdx_tp_addr_t");
    memset(addr_p, 0, sizeof(*addr_p));
    addr_p->len = RDMA_ADDR_LEN;
    b[0] = RDMA_ADDR_VERSION;
    b[1] = dev->link_layer;
    b[2] = dev->active_mtu;
    b[3] = dev->gid_index >= 0 ? 1 : 0;
    put32(b + 4, ep->qpn);
    put32(b + 8, ep->psn);
    b[12] = (uint8_t)dev->lid;
    b[13] = (uint8_t)(dev->lid >> 8);
    memcpy(b + 16, dev->gid.raw, 16);
}

typedef struct rdma_remote {
    uint8_t       link_layer;
    uint8_t       mtu;
    bool          has_gid;
    uint32_t      qpn;
    uint32_t      psn;
    uint16_t      lid;
    union ibv_gid gid;
} rdma_remote_t;

static pdx_status_t addr_decode(const rdma_ep_t *ep, const pdx_tp_addr_t *a, rdma_remote_t *r)
{
    const uint8_t *b = a->bytes;

    if (a->len != RDMA_ADDR_LEN || b[0] != RDMA_ADDR_VERSION) {
        pdx_error("rdma: %s: endpoint address of %u bytes, version %u: expected %u bytes, "
                  "version %u", ep->tp->dev.name, a->len, a->len ? b[0] : 0, RDMA_ADDR_LEN,
                  RDMA_ADDR_VERSION);
        return PDX_ERR_PROTO;
    }
    r->link_layer = b[1];
    r->mtu = b[2];
    r->has_gid = b[3] & 1;
    r->qpn = get32(b + 4);
    r->psn = get32(b + 8);
    r->lid = (uint16_t)(b[12] | b[13] << 8);
    memcpy(r->gid.raw, b + 16, 16);
    if (r->mtu < IBV_MTU_256 || r->mtu > IBV_MTU_4096 || r->qpn == 0 || r->qpn > 0xffffffu ||
        r->psn > 0xffffffu) {
        pdx_error("rdma: %s: malformed endpoint address (MTU %u, QPN 0x%x, PSN 0x%x)",
                  ep->tp->dev.name, r->mtu, r->qpn, r->psn);
        return PDX_ERR_PROTO;
    }
    if (r->link_layer != ep->tp->dev.link_layer) {
        pdx_error("rdma: %s: the peer's link layer (%u) differs from ours (%u)",
                  ep->tp->dev.name, r->link_layer, ep->tp->dev.link_layer);
        return PDX_ERR_INVALID;
    }
    if (ep->tp->dev.gid_index >= 0 && !r->has_gid) {
        pdx_error("rdma: %s: the peer's address has no GID and ours routes by GID",
                  ep->tp->dev.name);
        return PDX_ERR_INVALID;
    }
    if (ep->tp->dev.gid_index >= 0 &&
        rdma_gid_ipv4_mapped(&r->gid) != rdma_gid_ipv4_mapped(&ep->tp->dev.gid)) {
        char ours[INET6_ADDRSTRLEN], theirs[INET6_ADDRSTRLEN];
        bool v4 = rdma_gid_ipv4_mapped(&ep->tp->dev.gid);

        inet_ntop(AF_INET6, ep->tp->dev.gid.raw, ours, sizeof(ours));
        inet_ntop(AF_INET6, r->gid.raw, theirs, sizeof(theirs));
        pdx_error("rdma: %s: the peer's GID %s is %san IPv4-mapped address and ours (%s, index "
                  "%d) is %s: the two cannot reach each other; set PDX_IB_GID_INDEX on both "
                  "sides to GIDs of one family", ep->tp->dev.name, theirs, v4 ? "not " : "",
                  ours, ep->tp->dev.gid_index, v4 ? "one" : "not");
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

/* ----------------------------------------------------------- connect */

static pdx_status_t qp_rtr(rdma_ep_t *ep, const rdma_remote_t *r)
{
    const rdma_dev_info_t *dev = &ep->tp->dev;
    const rdma_knobs_t *k = &ep->tp->knobs;
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = (enum ibv_mtu)PDX_MIN(dev->active_mtu, r->mtu),
        .dest_qp_num = r->qpn,
        .rq_psn = r->psn,
        .max_dest_rd_atomic = (uint8_t)PDX_MIN(dev->max_dest_rd_atomic, RDMA_RD_ATOMIC_MAX),
        .min_rnr_timer = RDMA_MIN_RNR_TIMER,
        .ah_attr = {.port_num = dev->port, .sl = 0},
    };
    int rc;

    if (dev->gid_index >= 0) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = r->gid;
        attr.ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
        attr.ah_attr.grh.hop_limit = k->hop_limit;
        attr.ah_attr.grh.traffic_class = k->traffic_class;
    }
    if (dev->link_layer != IBV_LINK_LAYER_ETHERNET)
        attr.ah_attr.dlid = r->lid;
    rc = ibv_modify_qp(ep->qp, &attr,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) {
        pdx_error("rdma: %s: QP 0x%x INIT -> RTR (remote QP 0x%x, MTU %s): %s", dev->name,
                  ep->qpn, r->qpn, rdma_mtu_str(attr.path_mtu),
                  strerror(rc > 0 ? rc : errno));
        return PDX_ERR_IO;
    }
    return PDX_OK;
}

static pdx_status_t qp_rts(rdma_ep_t *ep)
{
    const rdma_dev_info_t *dev = &ep->tp->dev;
    const rdma_knobs_t *k = &ep->tp->knobs;
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTS,
        .timeout = k->timeout,
        .retry_cnt = k->retry_count,
        .rnr_retry = k->rnr_retry,
        .sq_psn = ep->psn,
        .max_rd_atomic = (uint8_t)PDX_MIN(dev->max_rd_atomic, RDMA_RD_ATOMIC_MAX),
    };
    int rc = ibv_modify_qp(ep->qp, &attr,
                           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);

    if (rc) {
        pdx_error("rdma: %s: QP 0x%x RTR -> RTS: %s", dev->name, ep->qpn,
                  strerror(rc > 0 ? rc : errno));
        return PDX_ERR_IO;
    }
    return PDX_OK;
}

pdx_status_t rdma_ep_connect(pdx_tp_ep_t *pep, const pdx_tp_addr_t *remote)
{
    rdma_ep_t *ep = rdma_ep(pep);
    pdx_status_t status;
    rdma_remote_t r;

    if (!remote) {
        pdx_error("rdma: %s: ep_connect without an address", ep->tp->dev.name);
        return PDX_ERR_INVALID;
    }
    status = addr_decode(ep, remote, &r);
    if (status != PDX_OK)
        return status;
    if (atomic_load_explicit(&ep->err, memory_order_acquire)) {
        pdx_error("rdma: %s: ep_connect on QP 0x%x, which is in error: %s", ep->tp->dev.name,
                  ep->qpn, rdma_ep_error(pep));
        return PDX_ERR_STATE;
    }
    if (atomic_exchange(&ep->connect_called, true)) {
        pdx_error("rdma: %s: ep_connect called twice on QP 0x%x", ep->tp->dev.name,
                  ep->qpn);
        return PDX_ERR_STATE;
    }
    atomic_store_explicit(&ep->remote_qpn, r.qpn, memory_order_relaxed);
    status = qp_rtr(ep, &r);
    if (status == PDX_OK)
        status = qp_rts(ep);
    if (status != PDX_OK) {
        /* it said why; the ep is failed for good: destroy it */
        rdma_ep_kill(ep, PDX_ERR_PEER, RDMA_ERR_FIRST, "connecting QP 0x%x to QP 0x%x failed "
                     "(%s)", ep->qpn, r.qpn, pdx_status_str(status));
        return status;
    }
    atomic_store_explicit(&ep->connected, true, memory_order_release);
    pdx_debug("rdma: %s: QP 0x%x connected to QP 0x%x", ep->tp->dev.name, ep->qpn,
              r.qpn);
    return PDX_OK;
}

/* ----------------------------------------------------------- destroy */

/*
 * Unlink (the async thread's QP events no longer find it), retire the slot
 * (no poller reaches it, its CQEs are dropped), destroy the QP, then drain
 * the CQ of what the QP left and give the slot and the reservation back.
 */
void rdma_ep_destroy(pdx_tp_ep_t *pep)
{
    rdma_ep_t *ep = rdma_ep(pep);
    rdma_tp_t *tp = ep->tp;
    uint64_t head;
    int rc;

    pthread_mutex_lock(&tp->lock);
    PDX_LIST_UNLINK(tp->eps, ep);
    pthread_mutex_unlock(&tp->lock);
    rdma_cq_retire(ep->cq, ep);

    rc = qp_destroy(ep);
    if (rc) {
        /* The QP may still complete into the CQ: its slot and reservation
         * stay taken (its CQEs are dropped), and the ep is leaked. */
        pdx_error("rdma: %s: ibv_destroy_qp of QP 0x%x: %s; the endpoint is leaked",
                  tp->dev.name, ep->qpn, strerror(rc > 0 ? rc : errno));
        return;
    }
    rdma_cq_release(ep->cq, ep->slot, ep->icq, ep->sq_depth + ep->rq_depth);
    /* WRs dropped without completions release their regions */
    head = atomic_load_explicit(&ep->sq_head, memory_order_relaxed);
    rdma_mr_unref_range(ep->sq, ep->sq_mask, atomic_load_explicit(&ep->sq_done,
                                                                  memory_order_relaxed), head);
    head = atomic_load_explicit(&ep->rq_head, memory_order_relaxed);
    rdma_mr_unref_range(ep->rq, ep->rq_mask, atomic_load_explicit(&ep->rq_done,
                                                                  memory_order_relaxed), head);
    ep_free(ep);
}
