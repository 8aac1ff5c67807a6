/*
 * rdma devices: which NIC, port and GID a tp uses, and the device limits.
 *
 * One NIC per tp: the first device that has an ACTIVE port and a usable
 * GID, in the order of PDX_IB_DEVICES when it is set, else nearest the
 * engine's GPU first (params->nic_order: the engine ranks the devices with
 * hwloc, runtime/topo.c; on MI300X and MI355X platforms each GPU shares a
 * PCIe switch with one NIC), then the order ibv_get_device_list gives. Engines that stripe over several NICs will
 * open one tp per NIC.
 *
 * GID: on Ethernet (RoCE) the RoCEv2 GID that holds an IPv4-mapped address
 * (::ffff:a.b.c.d), else the first RoCEv2 GID that is not link-local (an
 * IPv6 address), else the first RoCEv2 GID (a warning: link-local,
 * fe80::/10, is not routable); PDX_IB_GID_INDEX >= 0 picks one instead.
 * Peers must use GIDs of one family (ep_connect checks). On InfiniBand the
 * LID addresses the port, and a GRH is used only when PDX_IB_GID_INDEX is
 * set (a GID the port has: an empty entry is refused).
 *
 * No device: PDX_ERR_NO_DEVICE, logged once with the reason, at info when
 * the caller falls back to another transport (params->quiet_no_device),
 * else as an error.
 */
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define RDMA_WHY_MAX 512u

void rdma_knobs_read(const pdx_config_t *cfg, rdma_knobs_t *knobs_p)
{
    rdma_knobs_t k = {
        .devices = "",
        .gid_index = -1,
        .traffic_class = 0,
        .hop_limit = 64,
        .timeout = 18,
        .retry_count = 7,
        .rnr_retry = 6,
    };

    if (cfg) {
        uint64_t m = cfg->field_mask;

        if (m & PDX_CONFIG_FIELD_IB_DEVICES)
            snprintf(k.devices, sizeof(k.devices), "%s", cfg->ib_devices);
        if (m & PDX_CONFIG_FIELD_IB_GID_INDEX)
            k.gid_index = cfg->ib_gid_index;
        if (m & PDX_CONFIG_FIELD_IB_TRAFFIC_CLASS)
            k.traffic_class = (uint8_t)cfg->ib_traffic_class;
        if (m & PDX_CONFIG_FIELD_IB_HOP_LIMIT)
            k.hop_limit = (uint8_t)cfg->ib_hop_limit;
        if (m & PDX_CONFIG_FIELD_IB_TIMEOUT)
            k.timeout = (uint8_t)cfg->ib_timeout;
        if (m & PDX_CONFIG_FIELD_IB_RETRY_COUNT)
            k.retry_count = (uint8_t)cfg->ib_retry_count;
        if (m & PDX_CONFIG_FIELD_IB_RNR_RETRY)
            k.rnr_retry = (uint8_t)cfg->ib_rnr_retry;
    }
    *knobs_p = k;
}

const char *rdma_mtu_str(uint8_t mtu)
{
    switch (mtu) {
    case IBV_MTU_256:  return "256";
    case IBV_MTU_512:  return "512";
    case IBV_MTU_1024: return "1024";
    case IBV_MTU_2048: return "2048";
    case IBV_MTU_4096: return "4096";
    default:           return "?";
    }
}

/* Append one reason to the "why" text of PDX_ERR_NO_DEVICE. */
static void why_add(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void why_add(char *why, const char *fmt, ...)
{
    size_t used = strlen(why);
    va_list ap;

    if (used + 3 >= RDMA_WHY_MAX)
        return;
    if (used) {
        memcpy(why + used, "; ", 3);
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(why + used, RDMA_WHY_MAX - used, fmt, ap);
    va_end(ap);
}

/* Ethernet: the GID to use (see the top of the file). */
static bool pick_roce_gid(struct ibv_context *ctx, const struct ibv_port_attr *pa, uint8_t port,
                          int32_t want, rdma_dev_info_t *info, char *why)
{
    char text[INET6_ADDRSTRLEN];
    struct ibv_gid_entry e;
    int first = -1;
    union ibv_gid first_gid;
    int rc;

    if (want >= 0) {
        rc = ibv_query_gid_ex(ctx, port, (uint32_t)want, &e, 0);
        if (rc) {
            why_add(why, "%s port %u: PDX_IB_GID_INDEX=%d: %s", info->name, port, want,
                    strerror(rc > 0 ? rc : errno));
            return false;
        }
        info->gid_index = want;
        info->gid = e.gid;
        return true;
    }
    memset(&first_gid, 0, sizeof(first_gid));
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        rc = ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0);
        if (rc && (rc > 0 ? rc : errno) == ENODATA)
            continue; /* an empty entry */
        if (rc) { /* a table that cannot be read could hide the GID to use */
            why_add(why, "%s port %u: GID index %d: ibv_query_gid_ex: %s", info->name, port, i,
                    strerror(rc > 0 ? rc : errno));
            return false;
        }
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        if (rdma_gid_ipv4_mapped(&e.gid)) {
            info->gid_index = i;
            info->gid = e.gid;
            return true;
        }
        /* the link-local GIDs come first in a NIC's table: a routable one
         * after them wins */
        if (first < 0 || (rdma_gid_link_local(&first_gid) && !rdma_gid_link_local(&e.gid))) {
            first = i;
            first_gid = e.gid;
        }
    }
    if (first < 0) {
        why_add(why, "%s port %u has no RoCEv2 GID (set PDX_IB_GID_INDEX to use another)",
                info->name, port);
        return false;
    }
    info->gid_index = first;
    info->gid = first_gid;
    inet_ntop(AF_INET6, first_gid.raw, text, sizeof(text));
    if (rdma_gid_link_local(&first_gid))
        pdx_warn("rdma: %s port %u has no IPv4-mapped RoCEv2 GID; using GID index %d (%s), "
                 "which is link-local: it is not routable, so only peers on the same L2 "
                 "segment reach it (give the interface an address, or set PDX_IB_GID_INDEX)",
                 info->name, port, first, text);
    else
        pdx_info("rdma: %s port %u has no IPv4-mapped RoCEv2 GID; using GID index %d (%s), "
                 "RoCEv2 over IPv6: peers must use IPv6 GIDs too", info->name, port, first,
                 text);
    return true;
}

/* The first ACTIVE port of ctx, its addressing and the device limits. */
static bool probe(struct ibv_context *ctx, const rdma_knobs_t *knobs, rdma_dev_info_t *info,
                  char *why)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    uint8_t port = 0;
    int rc;

    rc = ibv_query_device(ctx, &da);
    if (rc) {
        why_add(why, "%s: ibv_query_device: %s", info->name, strerror(rc > 0 ? rc : errno));
        return false;
    }
    for (uint8_t p = 1; p <= da.phys_port_cnt && p != 0; p++) {
        rc = ibv_query_port(ctx, p, &pa);
        if (rc)
            why_add(why, "%s port %u: ibv_query_port: %s", info->name, p,
                    strerror(rc > 0 ? rc : errno));
        else if (pa.state == IBV_PORT_ACTIVE) {
            port = p;
            break;
        }
    }
    if (port == 0) {
        why_add(why, "%s has no ACTIVE port", info->name);
        return false;
    }
    info->port = port;
    info->link_layer = pa.link_layer;
    info->active_mtu = (uint8_t)pa.active_mtu;
    info->lid = pa.lid;
    info->port_max_msg = pa.max_msg_sz;
    info->gid_index = -1;
    memset(&info->gid, 0, sizeof(info->gid));
    info->max_mr_size = da.max_mr_size;
    info->max_qp_wr = (uint32_t)PDX_MAX(da.max_qp_wr, 0);
    info->max_sge = (uint32_t)PDX_MAX(da.max_sge, 0);
    info->max_cqe = (uint32_t)PDX_MAX(da.max_cqe, 0);
    info->max_rd_atomic = (uint32_t)PDX_MAX(da.max_qp_init_rd_atom, 0);
    info->max_dest_rd_atomic = (uint32_t)PDX_MAX(da.max_qp_rd_atom, 0);

    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET)
        return pick_roce_gid(ctx, &pa, port, knobs->gid_index, info, why);
    if (knobs->gid_index >= 0) {
        struct ibv_gid_entry e;

        /* _ex: ibv_query_gid answers an empty entry with a zero GID */
        rc = ibv_query_gid_ex(ctx, port, (uint32_t)knobs->gid_index, &e, 0);
        if (rc) {
            why_add(why, "%s port %u: PDX_IB_GID_INDEX=%d: %s", info->name, port,
                    knobs->gid_index, strerror(rc > 0 ? rc : errno));
            return false;
        }
        info->gid_index = knobs->gid_index;
        info->gid = e.gid;
    }
    if (info->lid == 0 && info->gid_index < 0) {
        why_add(why, "%s port %u has no LID yet (no subnet manager?)", info->name, port);
        return false;
    }
    return true;
}

/* Try one device: open it and probe; keep it open on success. */
static bool try_device(struct ibv_device *dev, const rdma_knobs_t *knobs,
                       struct ibv_context **ctx_p, rdma_dev_info_t *info, char *why)
{
    struct ibv_context *ctx;

    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "%s", ibv_get_device_name(dev));
    ctx = ibv_open_device(dev);
    if (!ctx) {
        why_add(why, "%s: ibv_open_device: %s", info->name, strerror(errno));
        return false;
    }
    if (!probe(ctx, knobs, info, why)) {
        ibv_close_device(ctx);
        return false;
    }
    *ctx_p = ctx;
    return true;
}

/* The next name of a comma-separated list into name; false at the end. */
static bool next_name(const char **pos, char *name, size_t len)
{
    const char *p = *pos, *end;
    size_t n;

    while (*p == ',' || *p == ' ')
        p++;
    if (!*p)
        return false;
    end = p;
    while (*end && *end != ',')
        end++;
    n = (size_t)(end - p);
    while (n && p[n - 1] == ' ')
        n--;
    if (n >= len)
        n = len - 1;
    memcpy(name, p, n);
    name[n] = '\0';
    *pos = end;
    return true;
}

/* Whether name is in the list before the entry that ends at end. */
static bool named_before(const char *list, const char *end, const char *name)
{
    const char *pos = list;
    char seen[RDMA_DEVNAME_MAX];

    while (next_name(&pos, seen, sizeof(seen)) && pos < end)
        if (strcmp(seen, name) == 0)
            return true;
    return false;
}

/* order[] = the devices in knobs->nearest first, in its order (the engine
 * ranked them by its GPU: runtime/topo.c), then the others in the list's. */
static void nearest_first(const rdma_knobs_t *knobs, struct ibv_device **list, int n, int *order)
{
    const char *pos = knobs->nearest;
    char name[RDMA_DEVNAME_MAX];
    int placed = 0;

    for (int i = 0; i < n; i++)
        order[i] = -1;
    while (placed < n && next_name(&pos, name, sizeof(name)))
        for (int i = 0; i < n; i++)
            if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
                bool seen = false;

                for (int k = 0; k < placed; k++)
                    seen |= order[k] == i;
                if (!seen)
                    order[placed++] = i;
                break;
            }
    for (int i = 0; i < n; i++) {
        bool seen = false;

        for (int k = 0; k < placed; k++)
            seen |= order[k] == i;
        if (!seen)
            order[placed++] = i;
    }
}

/* Try one device as the next candidate: false to go on (unusable, or one of
 * the first `skip` usable ones, which another tp of the engine serves). */
static bool take_device(struct ibv_device *dev, const rdma_knobs_t *knobs, uint32_t *skip,
                        struct ibv_context **ctx_p, rdma_dev_info_t *info, char *why)
{
    if (!try_device(dev, knobs, ctx_p, info, why))
        return false;
    if (*skip == 0)
        return true;
    (*skip)--;
    ibv_close_device(*ctx_p);
    *ctx_p = NULL;
    return false;
}

pdx_status_t rdma_device_open(const rdma_knobs_t *knobs, uint32_t nic, bool quiet,
                              struct ibv_device ***list_p, struct ibv_context **ctx_p,
                              rdma_dev_info_t *info_p)
{
    uint32_t skip = nic;

    pdx_log_level_t level = quiet ? PDX_LOG_INFO : PDX_LOG_ERROR;
    char why[RDMA_WHY_MAX] = "";
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    rdma_dev_info_t info;
    int ndev = 0;

    list = ibv_get_device_list(&ndev);
    if (!list) {
        pdx_log(level, "no RDMA device: ibv_get_device_list: %s", strerror(errno));
        return PDX_ERR_NO_DEVICE;
    }
    if (ndev <= 0) {
        ibv_free_device_list(list);
        pdx_log(level, "no RDMA device: ibv_get_device_list found none");
        return PDX_ERR_NO_DEVICE;
    }
    if (knobs->devices[0]) {
        const char *pos = knobs->devices;
        char name[RDMA_DEVNAME_MAX];

        while (!ctx && next_name(&pos, name, sizeof(name))) {
            int i;

            if (named_before(knobs->devices, pos, name))
                continue; /* one device is one NIC, however often it is named */
            for (i = 0; i < ndev; i++)
                if (strcmp(ibv_get_device_name(list[i]), name) == 0)
                    break;
            if (i == ndev)
                why_add(why, "PDX_IB_DEVICES names %s, which is not present", name);
            else if (take_device(list[i], knobs, &skip, &ctx, &info, why))
                break;
        }
        if (!ctx && !why[0])
            why_add(why, "PDX_IB_DEVICES=\"%s\" names no device", knobs->devices);
    } else {
        int *order = calloc((size_t)ndev, sizeof(*order));

        if (!order) {
            ibv_free_device_list(list);
            pdx_error("rdma: out of memory ordering %d devices", ndev);
            return PDX_ERR_NOMEM;
        }
        nearest_first(knobs, list, ndev, order);
        for (int i = 0; i < ndev && !ctx; i++)
            if (take_device(list[order[i]], knobs, &skip, &ctx, &info, why))
                break;
        free(order);
    }
    if (!ctx && nic > skip) {
        ibv_free_device_list(list);
        pdx_log(level, "no RDMA device for NIC %u: %u usable device%s before it%s%s", nic,
                nic - skip, nic - skip == 1 ? "" : "s", why[0] ? "; " : "", why);
        return PDX_ERR_NO_DEVICE;
    }
    if (!ctx) {
        ibv_free_device_list(list);
        pdx_log(level, "no RDMA device: %s", why);
        return PDX_ERR_NO_DEVICE;
    }
    /* Devices passed over before it: the user named them, or should know. */
    if (why[0])
        pdx_log(knobs->devices[0] ? PDX_LOG_WARN : PDX_LOG_INFO, "rdma: %s serves; passed over: %s",
                info.name, why);
    *list_p = list;
    *ctx_p = ctx;
    *info_p = info;
    return PDX_OK;
}
