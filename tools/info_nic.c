/*
 * pdx-info's RDMA devices (rdma/info.c: every device, port and GID, read
 * without an engine) and the transport PDX_TRANSPORT=auto would choose.
 *
 * The choice is the engine's own: rdma_device_open() with the engine's
 * knobs and its order of devices (PDX_IB_DEVICES, else nearest the GPU),
 * opened and closed again; what it logs on the way is caught and becomes
 * the reason. --transport then opens a real engine and prints what it
 * used, as before.
 */
#include "info.h"

#ifdef PDX_HAVE_RDMA
#include "rdma.h"
#endif
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_RDMA_BUILD "this build has no rdma transport (libibverbs was not found when it was built)"

void info_nics_read(info_t *in)
{
    if (in->nics_read)
        return;
    in->nics_read = true;
#ifdef PDX_HAVE_RDMA
    if (rdma_info_read("/sys", &in->rdma) != PDX_OK) {
        in->rdma = NULL;
        snprintf(in->nic_why, sizeof(in->nic_why), "out of memory reading the RDMA devices");
        return;
    }
    in->nnics = in->rdma->ndevs;
    if (in->nnics == 0)
        snprintf(in->nic_why, sizeof(in->nic_why), "%s", in->rdma->why);
#else
    snprintf(in->nic_why, sizeof(in->nic_why), NO_RDMA_BUILD);
#endif
}

void info_nics_free(info_t *in)
{
#ifdef PDX_HAVE_RDMA
    rdma_info_free(in->rdma);
#endif
    in->rdma = NULL;
}

#ifdef PDX_HAVE_RDMA
static void guid_text(uint64_t guid, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
             (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
             (unsigned)guid & 0xffff);
}

static void port_json(const rdma_info_port_t *p)
{
    jw_obj(NULL);
    jw_int("port", p->num);
    if (p->error[0])
        jw_str("error", p->error);
    jw_str("state", rdma_info_port_state(p->state));
    jw_str("link_layer", rdma_info_link_layer(p->link_layer));
    jw_int("active_mtu", atoi(rdma_mtu_str(p->active_mtu)));
    jw_num("speed_gbps", p->lanes * p->lane_gbps);
    jw_uint("lanes", p->lanes);
    jw_num("lane_gbps", p->lane_gbps);
    jw_uint("lid", p->lid);
    jw_arr("gids");
    for (uint32_t k = 0; k < p->ngids; k++) {
        const rdma_info_gid_t *g = &p->gids[k];

        jw_obj(NULL);
        jw_uint("index", g->index);
        jw_str("type", g->type);
        jw_str("address", g->addr);
        jw_str("type_from", g->type_from);
        jw_obj_end();
    }
    jw_arr_end();
    jw_obj_end();
}

static void port_text(const rdma_info_port_t *p)
{
    char lid[24] = "";

    if (p->link_layer != IBV_LINK_LAYER_ETHERNET)
        snprintf(lid, sizeof(lid), ", LID %u", p->lid);
    if (p->lanes && p->lane_gbps > 0)
        info_line(2, "port %u: %s, %s, active MTU %s, %g Gb/s (%ux %g Gb/s)%s", p->num,
                  rdma_info_port_state(p->state), rdma_info_link_layer(p->link_layer),
                  rdma_mtu_str(p->active_mtu), p->lanes * p->lane_gbps, p->lanes, p->lane_gbps,
                  lid);
    else
        info_line(2, "port %u: %s, %s, active MTU %s, speed unknown (width %u, speed %u)%s",
                  p->num, rdma_info_port_state(p->state), rdma_info_link_layer(p->link_layer),
                  rdma_mtu_str(p->active_mtu), p->active_width, p->active_speed, lid);
    if (p->error[0])
        info_line(4, "(%s)", p->error);
    if (p->ngids == 0)
        info_line(4, "no GID");
    for (uint32_t k = 0; k < p->ngids; k++)
        info_line(4, "GID %-3u %-8s %s%s", p->gids[k].index, p->gids[k].type, p->gids[k].addr,
                  strcmp(p->gids[k].type_from, "sysfs") == 0 ? "  (type from sysfs)" : "");
}
#endif

void info_show_nics(info_t *in)
{
    info_nics_read(in);
    if (in->json) {
        jw_obj("rdma");
        jw_uint("count", in->nnics);
        if (in->nnics == 0)
            jw_strf("reason", "no RDMA device: %s", in->nic_why);
        jw_arr("devices");
#ifdef PDX_HAVE_RDMA
        for (uint32_t i = 0; i < in->nnics; i++) {
            const rdma_info_dev_t *d = &in->rdma->devs[i];
            char guid[24];

            guid_text(d->node_guid, guid, sizeof(guid));
            jw_obj(NULL);
            jw_str("name", d->name);
            if (d->error[0])
                jw_str("error", d->error);
            jw_str("node_guid", guid);
            jw_str("firmware", d->fw_ver);
            jw_arr("ports");
            for (uint32_t k = 0; k < d->nports; k++)
                port_json(&d->ports[k]);
            jw_arr_end();
            jw_obj_end();
        }
#endif
        jw_arr_end();
        jw_obj_end();
        return;
    }
    info_heading(in, INFO_NICS);
    if (in->nnics == 0) {
        info_line(0, "no RDMA device: %s", in->nic_why);
        return;
    }
#ifdef PDX_HAVE_RDMA
    for (uint32_t i = 0; i < in->nnics; i++) {
        const rdma_info_dev_t *d = &in->rdma->devs[i];
        char guid[24];

        if (d->error[0] && !d->fw_ver[0]) {
            info_line(0, "%s: cannot be read: %s", d->name, d->error);
            continue;
        }
        guid_text(d->node_guid, guid, sizeof(guid));
        info_line(0, "%s: node GUID %s, firmware %s, %u port%s", d->name, guid,
                  d->fw_ver[0] ? d->fw_ver : "unknown", d->nports, d->nports == 1 ? "" : "s");
        for (uint32_t k = 0; k < d->nports; k++)
            port_text(&d->ports[k]);
    }
#endif
}

/* ------------------------------------------------------------- transport */

#ifdef PDX_HAVE_RDMA
/* What rdma_device_open logs while pdx-info probes, without "file:line: ". */
typedef struct probe_log {
    char last[512];     /* the last line */
    char no_dev[512];   /* the last "no RDMA device" line */
    char passed[512];   /* "... serves; passed over: ..." */
} probe_log_t;

static void probe_catch(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    probe_log_t *log = arg;
    const char *colon = strstr(msg, ": ");

    (void)level;
    (void)engine;
    if (colon && colon - msg < 64)
        msg = colon + 2;
    snprintf(log->last, sizeof(log->last), "%s", msg);
    if (strncmp(msg, "no RDMA device", 14) == 0)
        snprintf(log->no_dev, sizeof(log->no_dev), "%s", msg);
    if (strstr(msg, "passed over"))
        snprintf(log->passed, sizeof(log->passed), "%s", msg);
}

#endif

/* Whether an engine could use rdma here, and why (why: the device it would
 * use, or why none). */
static bool rdma_usable(info_t *in, char *why, size_t len, char *device, size_t devlen)
{
#ifdef PDX_HAVE_RDMA
    pdx_log_level_t level = pdx_log_get_level();
    probe_log_t log = {0};
    rdma_knobs_t knobs;
    rdma_dev_info_t dev;
    char gid[RDMA_INFO_ADDR_MAX] = "-";
    pdx_status_t st;

    rdma_knobs_read(&in->cfg, &knobs);
    if (!knobs.devices[0])
        info_nic_order(in, knobs.nearest, sizeof(knobs.nearest));
    pdx_log_set_handler(probe_catch, &log);
    pdx_log_set_level(PDX_LOG_INFO);
    st = rdma_info_probe(&knobs, &dev);
    pdx_log_set_level(level);
    pdx_log_set_handler(NULL, NULL);
    if (st != PDX_OK) {
        snprintf(why, len, "%s", log.no_dev[0] ? log.no_dev
                                 : log.last[0] ? log.last
                                               : pdx_status_str(st));
        return false;
    }
    if (dev.gid_index >= 0)
        rdma_info_gid_text(&dev.gid, gid, sizeof(gid));
    snprintf(device, devlen, "%s", dev.name);
    snprintf(why, len, "%s port %u is ACTIVE (%s, GID index %d: %s)%s%s%.256s", dev.name, dev.port,
             rdma_info_link_layer(dev.link_layer), dev.gid_index, gid,
             knobs.devices[0] ? "; PDX_IB_DEVICES names it" : "",
             knobs.nearest[0] && !knobs.devices[0] ? "; devices nearest the GPU first: " : "",
             knobs.nearest[0] && !knobs.devices[0] ? knobs.nearest : "");
    return true;
#else
    (void)in;
    (void)device;
    (void)devlen;
    snprintf(why, len, "no RDMA device: " NO_RDMA_BUILD);
    return false;
#endif
}

/* --transport: open an engine as PDX_* says; INFO_EXIT_FAIL when none opens. */
static int open_engine(info_t *in)
{
    pdx_engine_t *e;
    pdx_status_t st = pdx_engine_create(NULL, &e);
    pdx_stats_t stats;
    bool have_stats;

    if (st != PDX_OK) {
        if (in->json) {
            jw_obj("engine");
            jw_strf("error", "pdx_engine_create: %s", pdx_status_str(st));
            jw_obj_end();
        }
        fprintf(stderr, "pdx-info: no engine: %s\n", pdx_status_str(st));
        return INFO_EXIT_FAIL;
    }
    have_stats = pdx_engine_stats(e, &stats) == PDX_OK;
    if (in->json) {
        jw_obj("engine");
        jw_str("transport", pdx_engine_transport(e));
        if (have_stats)
            jw_uint("nics", stats.nics);
        jw_obj_end();
    } else {
        printf("transport: %s\n", pdx_engine_transport(e));
        if (have_stats)
            printf("nics: %llu\n", (unsigned long long)stats.nics);
    }
    pdx_engine_destroy(e);
    return INFO_EXIT_OK;
}

/*
 * Whether an engine here copies with its GPU to engines of this host (the
 * ipc transport over tcp or rdma): a GPU, the gather kernel, PDX_TRANSPORT
 * auto or ipc. *reach lists, per GPU, the GPUs it reaches (itself and peer
 * access): a peer engine on one of those is direct.
 */
static bool ipc_usable(info_t *in, const char *setting, char *why, size_t len, char *reach,
                       size_t rlen)
{
    size_t at = 0;

    reach[0] = '\0';
    info_gpus_read(in);
    if (strcmp(setting, "auto") != 0 && strcmp(setting, "ipc") != 0) {
        snprintf(why, len, "PDX_TRANSPORT=%s", setting);
        return false;
    }
    if (in->ngpus == 0) {
        snprintf(why, len, "no GPU (%s)", in->gpu_why);
        return false;
    }
    if (!pdx_hip_gather_supported()) {
        snprintf(why, len, "pdx was built without the gather kernel (no %s)",
                 strcmp(pdx_hip_platform_name(), "amd") == 0 ? "hipcc" : "nvcc");
        return false;
    }
    for (int i = 0; i < in->ngpus && at < rlen; i++) {
        at += (size_t)snprintf(reach + at, rlen - at, "%sGPU %d reaches", i ? "; " : "", i);
        for (int j = 0; j < in->ngpus && at < rlen; j++) {
            char w[160];
            bool yes = false;

            if (pdx_hip_peer_reachable(in->gpu[i].device, in->gpu[j].pci_bus_id, &yes, w,
                                       sizeof(w)) == PDX_OK && yes)
                at += (size_t)snprintf(reach + at, rlen - at, " %d", j);
        }
    }
    snprintf(why, len, "peers on this host whose GPU this engine's reaches get GPU copies; "
             "the others go over the transport above");
    return true;
}

int info_show_transport(info_t *in)
{
    const char *setting = in->cfg.transport;
    char why[1024], device[64] = "";
    bool rdma = rdma_usable(in, why, sizeof(why), device, sizeof(device));
    const char *pick = rdma ? "rdma" : "tcp", *chosen;
    int rc = INFO_EXIT_OK;

    char ipc_why[384], reach[1024];
    bool ipc = ipc_usable(in, setting, ipc_why, sizeof(ipc_why), reach, sizeof(reach));

    if (strcmp(setting, "auto") == 0)
        chosen = pick;
    else if (strcmp(setting, "rdma") == 0)
        chosen = rdma ? "rdma" : NULL; /* the engine fails */
    else if (strcmp(setting, "ipc") == 0)
        chosen = ipc ? "tcp" : NULL; /* GPU copies only, their notifies over tcp */
    else
        chosen = "tcp";
    if (in->json) {
        jw_obj("transport");
        jw_str("setting", setting);
        jw_str("auto", pick);
        jw_str("reason", why);
        jw_str("device", rdma ? device : NULL);
        jw_str("chosen", chosen);
        if (in->cfg.ib_devices[0])
            jw_str("ib_devices", in->cfg.ib_devices);
        jw_obj("ipc");
        jw_bool("used", ipc);
        jw_str("reason", ipc_why);
        jw_str("reach", ipc ? reach : NULL);
        jw_obj_end();
        if (in->open_engine)
            rc = open_engine(in);
        jw_obj_end();
        return rc;
    }
    info_heading(in, INFO_TRANSPORT);
    info_line(0, "PDX_TRANSPORT=auto chooses %s here: %s", pick, why);
    if (strcmp(setting, "auto") != 0)
        info_line(0, "PDX_TRANSPORT=%s is set: %s", setting,
                  chosen ? chosen : strcmp(setting, "ipc") == 0
                                        ? "the engine fails (no GPU copies here)"
                                        : "the engine fails (no usable RDMA device)");
    if (ipc) {
        info_line(0, "GPU copies to engines of this host (ipc): yes: %s", ipc_why);
        info_line(1, "%s", reach);
    } else {
        info_line(0, "GPU copies to engines of this host (ipc): no: %s", ipc_why);
    }
    if (in->open_engine)
        rc = open_engine(in);
    return rc;
}
