/*
 * info: the RDMA devices as pdx-info shows them, read without an engine.
 *
 * For each device libibverbs lists: its node GUID and firmware, and for each
 * port its state, active MTU, link speed (lanes x Gb/s per lane, as
 * ibv_devinfo reads active_width and active_speed), link layer, LID and GID
 * table. A GID's RoCE version comes from ibv_query_gid_ex where rdma-core
 * has it (PDX_HAVE_IBV_QUERY_GID_EX) and answers; else the GID comes from
 * ibv_query_gid and its version from the kernel's
 * /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>. Empty
 * and all-zero GIDs are left out.
 *
 * Every device is opened and closed again here; what cannot be read is
 * kept as text beside what could, never logged (pdx-info prints it).
 */
#include "rdma.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *rdma_info_port_state(uint8_t state)
{
    switch (state) {
    case IBV_PORT_NOP:          return "NOP";
    case IBV_PORT_DOWN:         return "DOWN";
    case IBV_PORT_INIT:         return "INIT";
    case IBV_PORT_ARMED:        return "ARMED";
    case IBV_PORT_ACTIVE:       return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default:                    return "?";
    }
}

const char *rdma_info_link_layer(uint8_t link_layer)
{
    switch (link_layer) {
    case IBV_LINK_LAYER_ETHERNET:   return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    default:                        return "InfiniBand"; /* unspecified: an IB port */
    }
}

/* active_width: 1x, 4x, 8x, 12x, 2x (ibv_devinfo's table). */
static uint32_t width_lanes(uint8_t width)
{
    switch (width) {
    case 1:  return 1;
    case 2:  return 4;
    case 4:  return 8;
    case 8:  return 12;
    case 16: return 2;
    default: return 0;
    }
}

/* active_speed: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR per lane (XDR is
 * reported only in active_speed_ex, which this does not read: 0, unknown). */
static double speed_gbps(uint8_t speed)
{
    switch (speed) {
    case 1:   return 2.5;
    case 2:   return 5.0;
    case 4:   /* QDR */
    case 8:   return 10.0; /* FDR10 */
    case 16:  return 14.0;
    case 32:  return 25.0;
    case 64:  return 50.0;
    case 128: return 100.0;
    default:  return 0.0;
    }
}

void rdma_info_gid_text(const union ibv_gid *gid, char *buf, size_t len)
{
    if (rdma_gid_ipv4_mapped(gid)) {
        if (inet_ntop(AF_INET, gid->raw + 12, buf, (socklen_t)len))
            return;
    } else if (inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len)) {
        return;
    }
    snprintf(buf, len, "?");
}

static bool gid_zero(const union ibv_gid *gid)
{
    static const uint8_t zero[16];

    return memcmp(gid->raw, zero, sizeof(zero)) == 0;
}

const char *rdma_info_gid_type_sysfs(const char *sysfs_root, const char *dev, uint8_t port,
                                     uint32_t index, uint8_t link_layer)
{
    char path[512], text[32] = "";
    FILE *f;

    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/gid_attrs/types/%u",
             sysfs_root, dev, port, index);
    f = fopen(path, "re");
    if (!f)
        return NULL;
    if (!fgets(text, sizeof(text), f))
        text[0] = '\0';
    fclose(f);
    text[strcspn(text, "\n")] = '\0';
    if (strcmp(text, "RoCE v2") == 0)
        return "RoCE v2";
    if (strcmp(text, "IB/RoCE v1") == 0)
        return link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE v1" : "IB";
    return NULL;
}

/* Append "; text" (or text) to a port's or device's error. */
static void error_add(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void error_add(char *err, const char *fmt, ...)
{
    size_t used = strlen(err);
    va_list ap;

    if (used + 3 >= RDMA_ERRMSG_MAX)
        return;
    if (used) {
        memcpy(err + used, "; ", 3);
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(err + used, RDMA_ERRMSG_MAX - used, fmt, ap);
    va_end(ap);
}

static int verbs_errno(int rc)
{
    return rc > 0 ? rc : errno;
}

/* One GID entry: 1 kept in *g, 0 empty or all zeros, -1 unreadable (said in
 * the port's error). */
static int read_gid(struct ibv_context *ctx, const char *sysfs_root, const char *dev,
                    rdma_info_port_t *p, uint32_t index, rdma_info_gid_t *g)
{
    int rc;

    memset(g, 0, sizeof(*g));
    g->index = index;
#ifdef PDX_HAVE_IBV_QUERY_GID_EX
    {
        struct ibv_gid_entry e;

        rc = ibv_query_gid_ex(ctx, p->num, index, &e, 0);
        if (rc && verbs_errno(rc) == ENODATA)
            return 0;
        if (rc == 0) {
            g->gid = e.gid;
            g->type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
                      : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                      : e.gid_type == IBV_GID_TYPE_IB      ? "IB"
                                                           : "?";
            g->type_from = "verbs";
            if (gid_zero(&g->gid))
                return 0;
            rdma_info_gid_text(&g->gid, g->addr, sizeof(g->addr));
            return 1;
        }
        /* an older kernel or provider: the GID alone, its type from sysfs */
    }
#endif
    rc = ibv_query_gid(ctx, p->num, (int)index, &g->gid);
    if (rc) {
        error_add(p->error, "GID index %u: ibv_query_gid: %s", index, strerror(verbs_errno(rc)));
        return -1;
    }
    if (gid_zero(&g->gid))
        return 0;
    g->type = rdma_info_gid_type_sysfs(sysfs_root, dev, p->num, index, p->link_layer);
    if (!g->type)
        g->type = p->link_layer == IBV_LINK_LAYER_ETHERNET ? "?" : "IB";
    g->type_from = "sysfs";
    rdma_info_gid_text(&g->gid, g->addr, sizeof(g->addr));
    return 1;
}

static pdx_status_t read_port(struct ibv_context *ctx, const char *sysfs_root, const char *dev,
                              rdma_info_port_t *p)
{
    struct ibv_port_attr pa;
    int rc = ibv_query_port(ctx, p->num, &pa);

    if (rc) {
        error_add(p->error, "ibv_query_port: %s", strerror(verbs_errno(rc)));
        return PDX_OK;
    }
    p->state = (uint8_t)pa.state;
    p->link_layer = pa.link_layer;
    p->active_mtu = (uint8_t)pa.active_mtu;
    p->active_width = pa.active_width;
    p->active_speed = pa.active_speed;
    p->lid = pa.lid;
    p->lanes = width_lanes(pa.active_width);
    p->lane_gbps = speed_gbps(pa.active_speed);
    if (pa.gid_tbl_len <= 0)
        return PDX_OK;
    p->gids = calloc((size_t)pa.gid_tbl_len, sizeof(*p->gids));
    if (!p->gids)
        return PDX_ERR_NOMEM;
    for (int i = 0; i < pa.gid_tbl_len; i++)
        if (read_gid(ctx, sysfs_root, dev, p, (uint32_t)i, &p->gids[p->ngids]) == 1)
            p->ngids++;
    return PDX_OK;
}

static pdx_status_t read_device(struct ibv_device *ibdev, const char *sysfs_root,
                                rdma_info_dev_t *d)
{
    struct ibv_device_attr da;
    struct ibv_context *ctx;
    pdx_status_t st = PDX_OK;
    int rc;

    snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(ibdev));
    ctx = ibv_open_device(ibdev);
    if (!ctx) {
        error_add(d->error, "ibv_open_device: %s", strerror(errno));
        return PDX_OK;
    }
    rc = ibv_query_device(ctx, &da);
    if (rc) {
        error_add(d->error, "ibv_query_device: %s", strerror(verbs_errno(rc)));
        goto out;
    }
    d->node_guid = be64toh(da.node_guid);
    snprintf(d->fw_ver, sizeof(d->fw_ver), "%s", da.fw_ver);
    if (da.phys_port_cnt == 0)
        goto out;
    d->ports = calloc(da.phys_port_cnt, sizeof(*d->ports));
    if (!d->ports) {
        st = PDX_ERR_NOMEM;
        goto out;
    }
    for (uint8_t n = 1; n <= da.phys_port_cnt && n != 0 && st == PDX_OK; n++) {
        rdma_info_port_t *p = &d->ports[d->nports++];

        p->num = n;
        st = read_port(ctx, sysfs_root, d->name, p);
    }
out:
    ibv_close_device(ctx);
    return st;
}

void rdma_info_free(rdma_info_t *info)
{
    if (!info)
        return;
    for (uint32_t i = 0; i < info->ndevs; i++) {
        for (uint32_t k = 0; k < info->devs[i].nports; k++)
            free(info->devs[i].ports[k].gids);
        free(info->devs[i].ports);
    }
    free(info->devs);
    free(info);
}

pdx_status_t rdma_info_read(const char *sysfs_root, rdma_info_t **info_p)
{
    rdma_info_t *info = calloc(1, sizeof(*info));
    struct ibv_device **list;
    pdx_status_t st = PDX_OK;
    int n = 0;

    if (!info)
        return PDX_ERR_NOMEM;
    list = ibv_get_device_list(&n);
    if (!list) {
        int err = errno;
        char path[512];

        snprintf(path, sizeof(path), "%s/class/infiniband_verbs", sysfs_root);
        if (access(path, F_OK) != 0)
            snprintf(info->why, sizeof(info->why),
                     "ibv_get_device_list: %s (the kernel has no RDMA devices: %.160s is missing)",
                     strerror(err), path);
        else
            snprintf(info->why, sizeof(info->why), "ibv_get_device_list: %s", strerror(err));
        *info_p = info;
        return PDX_OK;
    }
    if (n <= 0) {
        snprintf(info->why, sizeof(info->why), "libibverbs lists none");
    } else {
        info->devs = calloc((size_t)n, sizeof(*info->devs));
        if (!info->devs)
            st = PDX_ERR_NOMEM;
        for (int i = 0; i < n && st == PDX_OK; i++)
            st = read_device(list[i], sysfs_root, &info->devs[info->ndevs++]);
    }
    ibv_free_device_list(list);
    if (st != PDX_OK) {
        rdma_info_free(info);
        return st;
    }
    *info_p = info;
    return PDX_OK;
}

pdx_status_t rdma_info_probe(const rdma_knobs_t *knobs, rdma_dev_info_t *info_p)
{
    struct ibv_device **list;
    struct ibv_context *ctx;
    rdma_dev_info_t info;
    pdx_status_t st = rdma_device_open(knobs, 0, true, &list, &ctx, &info);

    if (st != PDX_OK)
        return st;
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    *info_p = info;
    return PDX_OK;
}
