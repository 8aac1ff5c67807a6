/*
 * pdx-info's placement (runtime/topo.h, on hwloc): for each GPU its NUMA
 * node, package and local CPUs, and every RDMA device nearest first with
 * the reason; without a GPU, the devices with their NUMA nodes. Then the
 * CPUs the shards of an engine would run on under PDX_CPU_AFFINITY and
 * PDX_GPU, and which rule chose them.
 */
#include "info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void numa_text(int node, char *buf, size_t len)
{
    if (node >= 0)
        snprintf(buf, len, "%d", node);
    else
        snprintf(buf, len, "?");
}

static void nic_json(const pdx_topo_nic_t *n, bool ranked)
{
    jw_obj(NULL);
    jw_str("name", n->name);
    jw_str("pci_bus_id", n->pci_bus_id[0] ? n->pci_bus_id : NULL);
    if (n->numa_node >= 0)
        jw_int("numa_node", n->numa_node);
    else
        jw_null("numa_node");
    if (ranked) {
        jw_str("near", pdx_topo_near_name(n->near));
        jw_uint("hops", n->hops);
        jw_str("why", n->why);
    }
    jw_obj_end();
}

static void gpu_json(int ordinal, const pdx_topo_gpu_t *g)
{
    jw_obj(NULL);
    jw_int("ordinal", ordinal);
    jw_str("pci_bus_id", g->pci_bus_id);
    jw_bool("found", g->found);
    if (g->numa_node >= 0)
        jw_int("numa_node", g->numa_node);
    else
        jw_null("numa_node");
    if (g->package >= 0)
        jw_int("package", g->package);
    else
        jw_null("package");
    jw_str("cpus", g->cpulist);
    jw_arr("nics");
    for (uint32_t k = 0; k < g->nnics; k++)
        nic_json(&g->nics[k], true);
    jw_arr_end();
    jw_obj_end();
}

static void gpu_text(int ordinal, const pdx_topo_gpu_t *g)
{
    char numa[16], pkg[16];

    numa_text(g->numa_node, numa, sizeof(numa));
    numa_text(g->package, pkg, sizeof(pkg));
    if (!g->found)
        info_line(0, "GPU %d  %s: not in the topology; the devices in name order", ordinal,
                  g->pci_bus_id);
    else
        info_line(0, "GPU %d  %s: NUMA node %s, package %s, local CPUs %s", ordinal,
                  g->pci_bus_id, numa, pkg, g->cpulist[0] ? g->cpulist : "?");
    if (g->nnics == 0)
        info_line(2, "no RDMA device in the topology");
    for (uint32_t k = 0; k < g->nnics; k++) {
        const pdx_topo_nic_t *n = &g->nics[k];

        const char *near = pdx_topo_near_name(n->near);

        numa_text(n->numa_node, numa, sizeof(numa));
        /* the reason names the class first, as a rule: not twice */
        info_line(2, "%2u. %-10s %-12s NUMA %-2s %s%s%s", k + 1, n->name,
                  n->pci_bus_id[0] ? n->pci_bus_id : "-", numa,
                  strncmp(n->why, near, strlen(near)) == 0 ? "" : near,
                  strncmp(n->why, near, strlen(near)) == 0 ? "" : ": ", n->why);
    }
}

/* No GPU: the devices by name, each with its NUMA node. */
static void nics_alone(info_t *in, const pdx_topo_t *topo)
{
    pdx_topo_nic_t *nics = calloc(PDX_TOPO_NICS_MAX, sizeof(*nics));
    uint32_t n = nics ? pdx_topo_nics(topo, nics, PDX_TOPO_NICS_MAX) : 0;
    char why[320], numa[16];

    snprintf(why, sizeof(why), "no GPU (%s)", in->gpu_why);
    if (in->json) {
        jw_str("reason", why);
        jw_arr("nics");
        for (uint32_t i = 0; i < n; i++)
            nic_json(&nics[i], false);
        jw_arr_end();
    } else if (n == 0) {
        info_line(0, "%s and no RDMA device in the topology: nothing to map", why);
    } else {
        info_line(0, "%s: the RDMA devices by name", why);
        for (uint32_t i = 0; i < n; i++) {
            numa_text(nics[i].numa_node, numa, sizeof(numa));
            info_line(2, "%-10s %-12s NUMA %s", nics[i].name,
                      nics[i].pci_bus_id[0] ? nics[i].pci_bus_id : "-", numa);
        }
    }
    free(nics);
}

void info_show_map(info_t *in)
{
    const pdx_topo_t *topo = info_topo(in);
    pdx_topo_gpu_t *g;

    info_ranked_gpus(in);
    if (in->json) {
        jw_obj("mapping");
        jw_str("topology", in->topo_file ? in->topo_file : "machine");
    } else {
        info_heading(in, INFO_MAP);
    }
    if (!topo) {
        if (in->json) {
            jw_str("error", in->topo_why);
            jw_obj_end();
        } else {
            info_line(0, "%s", in->topo_why);
        }
        return;
    }
    if (in->json) {
        jw_str("gpus_from", in->ranked_from);
        jw_str("ib_devices", in->cfg.ib_devices[0] ? in->cfg.ib_devices : NULL);
    } else {
        if (in->topo_file)
            info_line(0, "topology: %s (in place of this machine's)", in->topo_file);
        if (in->nranked && strcmp(in->ranked_from, "topology") == 0)
            info_line(0, "GPUs from the topology: the GPU runtime has none (%s)", in->gpu_why);
        if (in->cfg.ib_devices[0])
            info_line(0, "PDX_IB_DEVICES=%s overrides this order: the engine tries the devices "
                      "it names, in its order", in->cfg.ib_devices);
    }
    if (in->nranked == 0) {
        nics_alone(in, topo);
        if (in->json)
            jw_obj_end();
        return;
    }
    g = malloc(sizeof(*g));
    if (in->json)
        jw_arr("gpus");
    for (uint32_t i = 0; g && i < in->nranked; i++) {
        int ordinal = strcmp(in->ranked_from, "runtime") == 0 ? in->gpu[i].device : (int)i;

        pdx_topo_gpu(topo, in->ranked[i], g);
        if (in->json)
            gpu_json(ordinal, g);
        else
            gpu_text(ordinal, g);
    }
    if (in->json) {
        jw_arr_end();
        if (!g)
            jw_str("error", "out of memory");
        jw_obj_end();
    } else if (!g) {
        info_line(0, "out of memory");
    }
    free(g);
}

void info_show_cpus(info_t *in)
{
    const pdx_topo_t *topo = info_topo(in);
    char bus[PDX_TOPO_BUS_ID_MAX] = "", gpu_why[320] = "", why[PDX_TOPO_WHY_MAX * 2] = "";
    char list[PDX_TOPO_CPULIST_MAX] = "", all[PDX_TOPO_CPULIST_MAX] = "";
    pdx_topo_gpu_t *g = NULL;
    cpu_set_t cpus, machine;
    bool gpu, bind = false;
    pdx_status_t st;
    int ordinal = -1;

    gpu = info_engine_gpu(in, &ordinal, bus, sizeof(bus), gpu_why, sizeof(gpu_why));
    if (gpu && topo) {
        g = malloc(sizeof(*g));
        if (g)
            pdx_topo_gpu(topo, bus, g);
    }
    CPU_ZERO(&cpus);
    /* as pdx_engine_place(): the topology only for an engine with a GPU */
    st = pdx_topo_affinity(in->cfg.cpu_affinity, gpu ? topo : NULL, gpu ? g : NULL, &cpus,
                           &bind, why, sizeof(why));
    if (st == PDX_OK && bind)
        pdx_cpulist_format(&cpus, list, sizeof(list));
    if (topo) {
        pdx_topo_all_cpus(topo, &machine);
        pdx_cpulist_format(&machine, all, sizeof(all));
    }
    free(g);
    if (in->json) {
        jw_obj("cpus");
        jw_str("setting", in->cfg.cpu_affinity);
        jw_int("pdx_gpu", in->cfg.gpu);
        if (gpu) {
            jw_int("gpu", ordinal);
            jw_str("gpu_pci_bus_id", bus);
        } else {
            jw_null("gpu");
            jw_str("gpu_reason", gpu_why);
        }
        jw_bool("valid", st == PDX_OK);
        jw_bool("bound", st == PDX_OK && bind);
        jw_str("cpus", st == PDX_OK && bind ? list : NULL);
        jw_str("why", why[0] ? why : pdx_status_str(st));
        jw_str("machine_cpus", topo ? all : NULL);
        if (!topo)
            jw_str("topology_error", in->topo_why);
        jw_obj_end();
        return;
    }
    info_heading(in, INFO_CPUS);
    if (gpu)
        info_line(0, "engine's GPU: %d (%s), by PDX_GPU=%d", ordinal, bus, in->cfg.gpu);
    else
        info_line(0, "engine's GPU: none (%s)", gpu_why);
    if (st != PDX_OK)
        info_line(0, "PDX_CPU_AFFINITY=%s is invalid: %s", in->cfg.cpu_affinity,
                  why[0] ? why : "pdx says why above");
    else if (bind)
        info_line(0, "PDX_CPU_AFFINITY=%s: shards run on CPUs %s: %s", in->cfg.cpu_affinity,
                  list, why);
    else
        info_line(0, "PDX_CPU_AFFINITY=%s: shards are not bound (they run where the OS puts "
                  "them): %s", in->cfg.cpu_affinity, why);
    if (topo)
        info_line(0, "CPUs this process may use: %s", all);
    else
        info_line(0, "(%s)", in->topo_why);
}
