/*
 * softnic devices: configuration (softnic_configure or the SOFTNIC_*
 * environment), the device list, contexts (a real verbs_context each, so the
 * inline dispatchers of <infiniband/verbs.h> reach softnic), and the device,
 * port and GID queries.
 *
 * Device i is "softnic<i>", one port, max and active MTU the configured
 * active_mtu_dev[i] (0: active_mtu), node and port GUID 02:00:00:00:00:00:00:<i+1>.
 * Ethernet (RoCE, the default): the GID table `gids` says, built as a NIC
 * builds it from the netdev's addresses, a RoCEv1 entry then a RoCEv2 entry
 * per address: the link-local fe80::<EUI-64 of the MAC 02:00:00:00:00:<i+1>>
 * first, then ::ffff:10.0.0.<i+1> (SOFTNIC_GIDS_IPV4, without the RoCEv2
 * link-local pair: the table softnic always had) or 2001:db8::<i+1>
 * (SOFTNIC_GIDS_IPV6); SOFTNIC_GIDS_LINK_LOCAL has the link-local pair only.
 * ndev_ifindex is 1 (the loopback interface: softnic's fabric is this
 * process). InfiniBand: LID lid_dev[i], GID index 0 fe80::<port GUID> of type
 * IBV_GID_TYPE_IB, index 1 empty, as an IB port's table of a single GID.
 * An empty entry: _ibv_query_gid_ex says ENODATA, ibv_query_gid gives a
 * zero GID and 0 (as rdma-core).
 *
 * A dead context (DEVICE_FATAL, async.c) answers ibv_query_device and
 * ibv_query_port with EIO, as the kernel does once the device is
 * disassociated; the GID queries still answer (rdma-core reads sysfs).
 *
 * ibv_close_device always succeeds, as in rdma-core. Objects still open on
 * the context (PDs, MRs, CQs, QPs, channels) are detached from the fabric
 * and freed with it, and stay counted in softnic_open_objects() so that a
 * test sees the leak.
 */
#include "softnic_internal.h"

#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

sn_global_t softnic_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .contexts = {&softnic_g.contexts, &softnic_g.contexts},
    .faults = {&softnic_g.faults, &softnic_g.faults},
    .next_qpn = 0x000111,
};

void sn_trace(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "softnic: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

uint64_t sn_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sn_obj_opened(void)
{
    atomic_fetch_add(&softnic_g.open_objects, 1);
}

void sn_obj_closed(void)
{
    atomic_fetch_sub(&softnic_g.open_objects, 1);
}

uint32_t softnic_open_objects(void)
{
    return atomic_load(&softnic_g.open_objects);
}

/* ---- configuration ---- */

void softnic_config_default(softnic_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->devices = 1;
    cfg->mode = SOFTNIC_THREAD;
    cfg->move_data = true;
    cfg->timeout_scale = 1000;
    cfg->active_mtu = IBV_MTU_4096;
    cfg->max_mr_size = 1ull << 40;
    cfg->max_qp_wr = 32768;
    cfg->max_sge = 30;
    cfg->max_inline = 220;
    cfg->max_cqe = 4194303;
    cfg->max_rd_atom = SN_MAX_RD_ATOMIC;
    cfg->max_init_rd_atom = SN_MAX_RD_ATOMIC;
    cfg->link_layer = IBV_LINK_LAYER_ETHERNET;
    cfg->gids = SOFTNIC_GIDS_IPV4;
    for (uint16_t i = 0; i < SN_MAX_DEVICES; i++)
        cfg->lid_dev[i] = (uint16_t)(i + 1);
}

_Static_assert(sizeof(((softnic_config_t *)0)->active_mtu_dev) == SN_MAX_DEVICES * sizeof(uint32_t),
               "one active_mtu_dev entry per device");
_Static_assert(sizeof(((softnic_config_t *)0)->lid_dev) == SN_MAX_DEVICES * sizeof(uint16_t),
               "one lid_dev entry per device");

uint32_t sn_dev_mtu(const sn_device_t *dev)
{
    uint32_t mtu = softnic_g.cfg.active_mtu_dev[dev->index];

    return mtu ? mtu : softnic_g.cfg.active_mtu;
}

static void sn_devices_init(void)
{
    for (uint32_t i = 0; i < SN_MAX_DEVICES; i++) {
        sn_device_t *d = &softnic_g.dev[i];

        if (d->ibdev.name[0])
            continue;
        d->index = i;
        d->ibdev.node_type = IBV_NODE_CA;
        d->ibdev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->ibdev.name, sizeof(d->ibdev.name), "softnic%u", i);
        snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%u", i);
        snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path), "/sys/class/infiniband_verbs/uverbs%u", i);
        snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "/sys/class/infiniband/softnic%u", i);
        atomic_store(&d->port_state, IBV_PORT_ACTIVE);
    }
}

static void sn_gid_set(sn_device_t *d, uint32_t index, const uint8_t raw[16], uint32_t type)
{
    memcpy(d->gid[index].gid.raw, raw, 16);
    d->gid[index].type = type;
    d->gid[index].valid = true;
}

/* Link layer, LID and GID table of every device (no context open). */
static void sn_devices_addr(const softnic_config_t *cfg)
{
    for (uint32_t i = 0; i < SN_MAX_DEVICES; i++) {
        sn_device_t *d = &softnic_g.dev[i];
        const uint8_t id = (uint8_t)(i + 1);
        /* fe80::<EUI-64 of 02:00:00:00:00:i+1> (the U/L bit of 02 flipped) */
        const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, id};
        /* fe80::<port GUID 02:00:00:00:00:00:00:i+1> */
        const uint8_t ib[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, id};
        const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, id};
        const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, id};

        memset(d->gid, 0, sizeof(d->gid));
        d->link_layer = cfg->link_layer;
        d->lid = cfg->link_layer == IBV_LINK_LAYER_INFINIBAND ? cfg->lid_dev[i] : 0;
        d->ngids = 2;
        if (cfg->link_layer == IBV_LINK_LAYER_INFINIBAND) {
            sn_gid_set(d, 0, ib, IBV_GID_TYPE_IB);
            continue;
        }
        sn_gid_set(d, 0, ll, IBV_GID_TYPE_ROCE_V1);
        switch (cfg->gids) {
        case SOFTNIC_GIDS_IPV4:
            sn_gid_set(d, 1, v4, IBV_GID_TYPE_ROCE_V2);
            break;
        case SOFTNIC_GIDS_LINK_LOCAL:
            sn_gid_set(d, 1, ll, IBV_GID_TYPE_ROCE_V2);
            break;
        case SOFTNIC_GIDS_IPV6:
            sn_gid_set(d, 1, ll, IBV_GID_TYPE_ROCE_V2);
            sn_gid_set(d, 2, v6, IBV_GID_TYPE_ROCE_V1);
            sn_gid_set(d, 3, v6, IBV_GID_TYPE_ROCE_V2);
            d->ngids = 4;
            break;
        }
    }
}

static void sn_apply(const softnic_config_t *cfg)
{
    softnic_g.cfg = *cfg;
    if (softnic_g.cfg.timeout_scale == 0)
        softnic_g.cfg.timeout_scale = 1;
    atomic_store(&softnic_g.mode, (int)cfg->mode);
    atomic_store(&softnic_g.delay_us, cfg->delay_us);
    atomic_store(&softnic_g.nic_bw, cfg->nic_bw);
    atomic_store(&softnic_g.qp_bw, cfg->qp_bw);
    atomic_store(&softnic_g.move_data, cfg->move_data);
    atomic_store(&softnic_g.timeout_scale, softnic_g.cfg.timeout_scale);
    if (!softnic_g.cfg_ready) {
        softnic_g.debug = getenv("SOFTNIC_DEBUG") != NULL;
        sn_devices_init();
    }
    /* open contexts read the addressing without the lock: it changes only
     * while none is open (sn_limits_differ) */
    if (softnic_g.open_contexts == 0)
        sn_devices_addr(cfg);
    softnic_g.cfg_ready = true;
}

static void sn_config_env(softnic_config_t *cfg)
{
    const char *v;
    char *end;

    v = getenv("SOFTNIC_DEVICES");
    if (v && *v) {
        unsigned long n = strtoul(v, &end, 10);

        if (*end == '\0' && n >= 1 && n <= SN_MAX_DEVICES)
            cfg->devices = (uint32_t)n;
    }
    v = getenv("SOFTNIC_MODE");
    if (v && strcmp(v, "thread") == 0)
        cfg->mode = SOFTNIC_THREAD;
    else if (v && strcmp(v, "poll") == 0)
        cfg->mode = SOFTNIC_ON_POLL;
    else if (v && strcmp(v, "null") == 0)
        cfg->mode = SOFTNIC_NULL;
    v = getenv("SOFTNIC_DELAY_US");
    if (v && *v) {
        unsigned long us = strtoul(v, &end, 10);

        if (*end == '\0' && us <= UINT32_MAX)
            cfg->delay_us = (uint32_t)us;
    }
}

void sn_config_ready(void)
{
    softnic_config_t cfg;

    if (softnic_g.cfg_ready)
        return;
    softnic_config_default(&cfg);
    sn_config_env(&cfg);
    sn_apply(&cfg);
    SN_TRACE("%u device(s), mode %d, delay %u us", cfg.devices, (int)cfg.mode, cfg.delay_us);
}

static bool sn_limits_differ(const softnic_config_t *a, const softnic_config_t *b)
{
    return a->devices != b->devices || a->no_devices != b->no_devices ||
           a->active_mtu != b->active_mtu ||
           memcmp(a->active_mtu_dev, b->active_mtu_dev, sizeof(a->active_mtu_dev)) != 0 ||
           a->max_mr_size != b->max_mr_size || a->max_qp_wr != b->max_qp_wr ||
           a->max_sge != b->max_sge || a->max_inline != b->max_inline ||
           a->max_cqe != b->max_cqe || a->exact_cq_depth != b->exact_cq_depth ||
           a->max_rd_atom != b->max_rd_atom || a->max_init_rd_atom != b->max_init_rd_atom ||
           a->link_layer != b->link_layer || a->gids != b->gids ||
           memcmp(a->lid_dev, b->lid_dev, sizeof(a->lid_dev)) != 0;
}

static bool sn_mtu_ok(uint32_t mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096;
}

static bool sn_config_ok(const softnic_config_t *cfg)
{
    if (!cfg || cfg->devices > SN_MAX_DEVICES || (unsigned)cfg->mode > SOFTNIC_NULL ||
        !sn_mtu_ok(cfg->active_mtu) || cfg->max_qp_wr == 0 || cfg->max_sge == 0 ||
        cfg->max_cqe == 0 || cfg->max_cqe > INT32_MAX - 1 || cfg->max_qp_wr > INT32_MAX ||
        cfg->max_sge > INT32_MAX || cfg->max_rd_atom == 0 || cfg->max_rd_atom > UINT8_MAX ||
        cfg->max_init_rd_atom == 0 || cfg->max_init_rd_atom > UINT8_MAX ||
        (cfg->link_layer != IBV_LINK_LAYER_ETHERNET &&
         cfg->link_layer != IBV_LINK_LAYER_INFINIBAND) ||
        (unsigned)cfg->gids > SOFTNIC_GIDS_IPV6)
        return false;
    for (uint32_t i = 0; i < SN_MAX_DEVICES; i++)
        if ((cfg->active_mtu_dev[i] != 0 && !sn_mtu_ok(cfg->active_mtu_dev[i])) ||
            cfg->lid_dev[i] >= 0xc000) /* unicast LIDs only */
            return false;
    return true;
}

int softnic_configure(const softnic_config_t *cfg)
{
    sn_list_t *pos;
    int rc = 0;

    if (!sn_config_ok(cfg))
        return -1;
    pthread_mutex_lock(&softnic_g.lock);
    sn_config_ready();
    if (softnic_g.open_contexts > 0 && sn_limits_differ(cfg, &softnic_g.cfg)) {
        rc = -1;
        goto out;
    }
    sn_apply(cfg);
    sn_list_for(pos, &softnic_g.contexts) {
        sn_context_t *ctx = sn_container_of(pos, sn_context_t, link);

        if (cfg->mode == SOFTNIC_THREAD && !ctx->running && sn_nic_start(ctx) != 0) {
            rc = -1;
            goto out;
        }
        pthread_cond_signal(&ctx->cv);
    }
out:
    pthread_mutex_unlock(&softnic_g.lock);
    return rc;
}

/* ---- device list ---- */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    uint32_t n;
    int err = sn_fault_call(SOFTNIC_CALL_GET_DEVICE_LIST, -1);

    if (err) {
        errno = err;
        return NULL;
    }
    pthread_mutex_lock(&softnic_g.lock);
    sn_config_ready();
    n = softnic_g.cfg.no_devices ? 0 : softnic_g.cfg.devices;
    pthread_mutex_unlock(&softnic_g.lock);
    list = calloc(n + 1, sizeof(*list));
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        list[i] = &softnic_g.dev[i].ibdev;
    if (num_devices)
        *num_devices = (int)n;
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

static sn_device_t *sn_device_of(struct ibv_device *ibdev)
{
    for (uint32_t i = 0; i < SN_MAX_DEVICES; i++)
        if (ibdev == &softnic_g.dev[i].ibdev)
            return &softnic_g.dev[i];
    return NULL;
}

/* ---- queries ---- */

static void sn_port_attr(sn_context_t *ctx, struct ibv_port_attr *pa)
{
    memset(pa, 0, sizeof(*pa));
    pa->state = (enum ibv_port_state)atomic_load(&ctx->dev->port_state);
    pa->max_mtu = (enum ibv_mtu)sn_dev_mtu(ctx->dev);
    pa->active_mtu = pa->max_mtu;
    pa->gid_tbl_len = (int)ctx->dev->ngids;
    pa->max_msg_sz = (uint32_t)SN_MAX_MSG;
    pa->pkey_tbl_len = 1;
    pa->max_vl_num = 1;
    pa->active_width = 2;  /* 4x */
    pa->active_speed = 32; /* EDR */
    pa->phys_state = pa->state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp : Disabled */
    pa->link_layer = ctx->dev->link_layer;
    if (ctx->dev->link_layer == IBV_LINK_LAYER_INFINIBAND) {
        pa->port_cap_flags = IBV_PORT_CM_SUP;
        pa->lid = ctx->dev->lid;
        pa->sm_lid = ctx->dev->lid ? 1 : 0;
    } else {
        pa->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
    }
}

static int sn_query_port(struct ibv_context *c, uint8_t port_num, struct ibv_port_attr *attr,
                         size_t attr_len)
{
    struct ibv_port_attr pa;
    int err = sn_fault_call(SOFTNIC_CALL_QUERY_PORT, -1);

    if (err)
        return err;
    if (sn_dead(sn_ctx(c)))
        return EIO;
    if (port_num != SN_PORT)
        return EINVAL;
    pthread_mutex_lock(&softnic_g.lock);
    sn_port_attr(sn_ctx(c), &pa);
    pthread_mutex_unlock(&softnic_g.lock);
    memcpy(attr, &pa, attr_len < sizeof(pa) ? attr_len : sizeof(pa));
    return 0;
}

/* The exported symbol the inline ___ibv_query_port names: it fills the
 * older, shorter port attributes (up to link_layer). */
int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                    struct _compat_ibv_port_attr *port_attr)
{
    return sn_query_port(context, port_num, (struct ibv_port_attr *)(void *)port_attr,
                         offsetof(struct ibv_port_attr, flags));
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
    sn_context_t *ctx = sn_ctx(context);
    softnic_config_t cfg_copy, *cfg = &cfg_copy;
    int err = sn_fault_call(SOFTNIC_CALL_QUERY_DEVICE, -1);

    if (err)
        return err;
    if (sn_dead(ctx))
        return EIO;
    pthread_mutex_lock(&softnic_g.lock);
    cfg_copy = softnic_g.cfg;
    pthread_mutex_unlock(&softnic_g.lock);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "softnic");
    a->node_guid = htobe64(0x0200000000000000ull | (ctx->dev->index + 1));
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = cfg->max_mr_size;
    a->page_size_cap = ~4095ull;
    a->vendor_id = 0;
    a->max_qp = 1 << 17;
    a->max_qp_wr = (int)cfg->max_qp_wr;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = (int)cfg->max_sge;
    a->max_sge_rd = (int)cfg->max_sge;
    a->max_cq = 1 << 17;
    a->max_cqe = (int)cfg->max_cqe;
    a->max_mr = 1 << 20;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = (int)cfg->max_rd_atom;
    a->max_qp_init_rd_atom = (int)cfg->max_init_rd_atom;
    a->max_res_rd_atom = (int)cfg->max_rd_atom << 17;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    return 0;
}

/* 0, EINVAL past the table, ENODATA for an empty entry. */
static int sn_gid_entry(sn_context_t *ctx, uint32_t port_num, uint32_t index,
                        struct ibv_gid_entry *e)
{
    const sn_device_t *d = ctx->dev;

    if (port_num != SN_PORT || index >= d->ngids)
        return EINVAL;
    memset(e, 0, sizeof(*e));
    if (!d->gid[index].valid)
        return ENODATA;
    e->gid = d->gid[index].gid;
    e->gid_index = index;
    e->port_num = port_num;
    e->gid_type = d->gid[index].type;
    e->ndev_ifindex = d->link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
    return 0;
}

/* 0, or an errno value (as rdma-core's ibv_query_gid_ex). */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    struct ibv_gid_entry e;
    int rc = sn_fault_call(SOFTNIC_CALL_QUERY_GID_EX, -1);

    if (rc)
        return rc;
    if (flags != 0 || entry_size < sizeof(e))
        return EINVAL;
    rc = sn_gid_entry(sn_ctx(context), port_num, gid_index, &e);
    if (rc == 0)
        *entry = e;
    return rc;
}

/* 0, or -1 with errno (as rdma-core's ibv_query_gid: an empty entry is a
 * zero GID). */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
    struct ibv_gid_entry e;
    int rc = sn_fault_call(SOFTNIC_CALL_QUERY_GID, -1);

    if (rc) {
        errno = rc;
        return -1;
    }
    if (index < 0) {
        errno = EINVAL;
        return -1;
    }
    rc = sn_gid_entry(sn_ctx(context), port_num, (uint32_t)index, &e);
    if (rc && rc != ENODATA) {
        errno = rc;
        return -1;
    }
    *gid = e.gid;
    return 0;
}

bool sn_gid_ok(const sn_device_t *dev, uint32_t index)
{
    return index < dev->ngids && dev->gid[index].valid;
}

/* ---- contexts ---- */

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    sn_device_t *dev = sn_device_of(device);
    struct ibv_context *c;
    sn_context_t *ctx;
    pthread_condattr_t ca;
    int err = sn_fault_call(SOFTNIC_CALL_OPEN_DEVICE, -1);

    if (err) {
        errno = err;
        return NULL;
    }
    pthread_mutex_lock(&softnic_g.lock);
    sn_config_ready();
    if (!dev || softnic_g.cfg.no_devices || dev->index >= softnic_g.cfg.devices) {
        err = ENODEV;
        goto err_unlock;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        err = ENOMEM;
        goto err_unlock;
    }
    ctx->dev = dev;
    sn_list_init(&ctx->pds);
    sn_list_init(&ctx->mrs);
    sn_list_init(&ctx->cqs);
    sn_list_init(&ctx->qps);
    sn_list_init(&ctx->channels);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    err = pthread_cond_init(&ctx->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (err)
        goto err_free;
    c = &ctx->vctx.context;
    c->device = device;
    c->cmd_fd = -1;
    c->num_comp_vectors = 1;
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    c->ops.post_send = sn_post_send;
    c->ops.post_recv = sn_fault_post_recv;
    c->ops.poll_cq = sn_poll_cq;
    c->ops.req_notify_cq = sn_req_notify_cq;
    ctx->vctx.sz = sizeof(struct verbs_context);
    ctx->vctx.query_port = sn_query_port;
    pthread_mutex_init(&c->mutex, NULL);
    err = sn_evfd_open(&c->async_fd, &ctx->async_peer);
    if (err)
        goto err_cond;
    sn_async_init(ctx);
    if (atomic_load(&softnic_g.mode) == SOFTNIC_THREAD) {
        err = sn_nic_start(ctx);
        if (err)
            goto err_async;
    }
    sn_list_add_tail(&softnic_g.contexts, &ctx->link);
    softnic_g.open_contexts++;
    sn_obj_opened();
    pthread_mutex_unlock(&softnic_g.lock);
    return c;

err_async:
    sn_async_fini(ctx);
    sn_evfd_close(c->async_fd, ctx->async_peer);
err_cond:
    pthread_mutex_destroy(&c->mutex);
    pthread_cond_destroy(&ctx->cv);
err_free:
    free(ctx);
err_unlock:
    pthread_mutex_unlock(&softnic_g.lock);
    SN_TRACE("ibv_open_device: %s", strerror(err));
    errno = err;
    return NULL;
}

/* Free what the context still holds; each stays counted as open. */
static void sn_context_drain(sn_context_t *ctx)
{
    sn_list_t *pos, *tmp;
    uint32_t leaked = 0;

    sn_list_for_safe(pos, tmp, &ctx->qps) {
        sn_qp_free(sn_container_of(pos, sn_qp_t, link));
        leaked++;
    }
    sn_list_for_safe(pos, tmp, &ctx->mrs) {
        sn_mr_free(sn_container_of(pos, sn_mr_t, link));
        leaked++;
    }
    sn_list_for_safe(pos, tmp, &ctx->cqs) {
        sn_cq_free(sn_container_of(pos, sn_cq_t, link));
        leaked++;
    }
    sn_list_for_safe(pos, tmp, &ctx->channels) {
        sn_channel_free(sn_container_of(pos, sn_channel_t, link));
        leaked++;
    }
    sn_list_for_safe(pos, tmp, &ctx->pds) {
        sn_pd_free(sn_container_of(pos, sn_pd_t, link));
        leaked++;
    }
    if (leaked)
        SN_TRACE("ibv_close_device %s: %u object(s) still open, freed", ctx->dev->ibdev.name,
                 leaked);
}

int ibv_close_device(struct ibv_context *context)
{
    sn_context_t *ctx = sn_ctx(context);

    sn_nic_stop(ctx);
    pthread_mutex_lock(&softnic_g.lock);
    sn_context_drain(ctx);
    sn_list_del(&ctx->link);
    softnic_g.open_contexts--;
    pthread_mutex_unlock(&softnic_g.lock);
    sn_async_fini(ctx);
    sn_evfd_close(context->async_fd, ctx->async_peer);
    pthread_mutex_destroy(&context->mutex);
    pthread_cond_destroy(&ctx->cv);
    free(ctx);
    sn_obj_closed();
    return 0;
}
