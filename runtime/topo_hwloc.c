/*
 * topo_hwloc: the topology of topo.h read with hwloc (PCI bridges and OS
 * devices kept), and the GPU's place in it.
 *
 * Ranking: the deepest object that is an ancestor of both PCI functions
 * says how near they are. A PCI-to-PCI bridge (a switch port, or a root
 * port, which has one link and so a switch below it when two devices
 * share it) is "the same PCIe switch"; a host bridge is "the same host
 * bridge"; a CPU-side object means the traffic crosses the host: then
 * the devices' NUMA nodes and packages decide. hwloc's
 * hwloc_get_common_ancestor_obj() does not walk I/O parents, hence the
 * walk below.
 */
#include "topo.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

struct pdx_topo {
    hwloc_topology_t h;
};

#define TOPO_DEPTH_MAX 64 /* I/O and CPU-side levels from a device to the root */

pdx_status_t pdx_topo_load(const char *xml_path, pdx_topo_t **topo_p)
{
    pdx_topo_t *t = calloc(1, sizeof(*t));
    const char *what = xml_path ? xml_path : "this machine";

    if (!t)
        return PDX_ERR_NOMEM;
    if (hwloc_topology_init(&t->h) < 0) {
        pdx_error("hwloc: cannot start a topology: %s", strerror(errno));
        free(t);
        return PDX_ERR_IO;
    }
    /* Every PCI function (a GPU of an unusual class too) and the OS devices
     * that name them; bridges as far as they lead to one. */
    hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if ((xml_path && hwloc_topology_set_xml(t->h, xml_path) < 0) ||
        hwloc_topology_load(t->h) < 0) {
        pdx_error("hwloc: cannot load the topology of %s: %s", what, strerror(errno));
        hwloc_topology_destroy(t->h);
        free(t);
        return PDX_ERR_IO;
    }
    *topo_p = t;
    return PDX_OK;
}

void pdx_topo_free(pdx_topo_t *topo)
{
    if (!topo)
        return;
    hwloc_topology_destroy(topo->h);
    free(topo);
}

/* ------------------------------------------------------------- objects */

static void bus_id_of(hwloc_obj_t pci, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static hwloc_obj_t pci_by_bus_id(const pdx_topo_t *topo, const char *bus_id)
{
    unsigned domain, bus, dev, func;

    if (!bus_id || sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4)
        return NULL;
    return hwloc_get_pcidev_by_busid(topo->h, domain, bus, dev, func);
}

/* The NUMA node of a non-I/O object: -1 when it spans several or none. */
static int numa_of(hwloc_obj_t cpu_side)
{
    if (!cpu_side || !cpu_side->nodeset || hwloc_bitmap_weight(cpu_side->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(cpu_side->nodeset);
}

static int package_of(const pdx_topo_t *topo, hwloc_obj_t cpu_side)
{
    hwloc_obj_t pkg;

    if (!cpu_side)
        return -1;
    pkg = cpu_side->type == HWLOC_OBJ_PACKAGE
              ? cpu_side
              : hwloc_get_ancestor_obj_by_type(topo->h, HWLOC_OBJ_PACKAGE, cpu_side);
    return pkg ? (int)pkg->logical_index : -1;
}

static void cpus_from_bitmap(hwloc_const_bitmap_t set, cpu_set_t *cpus)
{
    unsigned id;

    CPU_ZERO(cpus);
    if (!set)
        return;
    hwloc_bitmap_foreach_begin(id, set) {
        if (id < CPU_SETSIZE)
            CPU_SET(id, cpus);
    }
    hwloc_bitmap_foreach_end();
}

void pdx_topo_all_cpus(const pdx_topo_t *topo, cpu_set_t *cpus_p)
{
    cpus_from_bitmap(hwloc_topology_get_allowed_cpuset(topo->h), cpus_p);
}

/* A RDMA device's PCI function: its OS device's parent, when that is one. */
static hwloc_obj_t nic_pci(hwloc_obj_t osdev)
{
    hwloc_obj_t p = osdev->parent;

    return p && p->type == HWLOC_OBJ_PCI_DEVICE ? p : NULL;
}

/* The RDMA devices' OS objects in name order; their count. */
static uint32_t rdma_devices(const pdx_topo_t *topo, hwloc_obj_t *out, uint32_t max)
{
    uint32_t n = 0;

    for (hwloc_obj_t os = NULL; (os = hwloc_get_next_osdev(topo->h, os)) != NULL;) {
        uint32_t j;

        if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || !os->name || n == max)
            continue;
        for (j = n; j > 0 && strcmp(out[j - 1]->name, os->name) > 0; j--)
            out[j] = out[j - 1];
        out[j] = os;
        n++;
    }
    return n;
}

static void nic_basics(const pdx_topo_t *topo, hwloc_obj_t os, pdx_topo_nic_t *nic)
{
    hwloc_obj_t pci = nic_pci(os);

    memset(nic, 0, sizeof(*nic));
    snprintf(nic->name, sizeof(nic->name), "%s", os->name);
    if (pci)
        bus_id_of(pci, nic->pci_bus_id, sizeof(nic->pci_bus_id));
    nic->numa_node = numa_of(hwloc_get_non_io_ancestor_obj(topo->h, os));
    nic->near = PDX_TOPO_UNKNOWN;
}

uint32_t pdx_topo_nics(const pdx_topo_t *topo, pdx_topo_nic_t *nics, uint32_t max)
{
    hwloc_obj_t os[PDX_TOPO_NICS_MAX];
    uint32_t n = rdma_devices(topo, os, PDX_MIN(max, (uint32_t)PDX_TOPO_NICS_MAX));

    for (uint32_t i = 0; i < n; i++) {
        nic_basics(topo, os[i], &nics[i]);
        snprintf(nics[i].why, sizeof(nics[i].why), "no GPU to rank it by");
    }
    return n;
}

static bool is_gpu(hwloc_obj_t pci)
{
    unsigned cls = pci->attr->pcidev.class_id >> 8, vendor = pci->attr->pcidev.vendor_id;

    /* display controllers and processing accelerators (MI300X is 0x1200)
     * of the vendors whose runtimes hip/ drives */
    return (cls == 0x03 || cls == 0x12) && (vendor == 0x1002 || vendor == 0x10de);
}

uint32_t pdx_topo_gpus(const pdx_topo_t *topo, char (*bus_ids)[PDX_TOPO_BUS_ID_MAX],
                       uint32_t max)
{
    uint32_t n = 0;

    /* hwloc lists PCI functions in bus order */
    for (hwloc_obj_t pci = NULL; (pci = hwloc_get_next_pcidev(topo->h, pci)) != NULL && n < max;)
        if (is_gpu(pci))
            bus_id_of(pci, bus_ids[n++], PDX_TOPO_BUS_ID_MAX);
    return n;
}

/* --------------------------------------------------------------- ranking */

/* How near the device at nic_os is to the GPU's PCI function `gpu`. */
static void rank(const pdx_topo_t *topo, hwloc_obj_t gpu, hwloc_obj_t nic_os,
                 pdx_topo_nic_t *nic)
{
    hwloc_obj_t up[TOPO_DEPTH_MAX], pci = nic_pci(nic_os), common = NULL;
    hwloc_obj_t gpu_cpu = hwloc_get_non_io_ancestor_obj(topo->h, gpu);
    hwloc_obj_t nic_cpu = hwloc_get_non_io_ancestor_obj(topo->h, nic_os);
    uint32_t nup = 0, down = 0;
    char id[PDX_TOPO_BUS_ID_MAX];
    int gpkg, npkg;

    nic_basics(topo, nic_os, nic);
    if (!pci) {
        snprintf(nic->why, sizeof(nic->why), "not a PCI function (a software device)");
        return;
    }
    for (hwloc_obj_t o = gpu->parent; o && nup < TOPO_DEPTH_MAX; o = o->parent)
        up[nup++] = o;
    for (hwloc_obj_t o = pci->parent; o && !common; o = o->parent, down++)
        for (uint32_t i = 0; i < nup; i++)
            if (up[i] == o) {
                common = o;
                nic->hops = i + 1 + down + 1; /* bridges on both sides, the two ends */
                break;
            }
    if (common && common->type == HWLOC_OBJ_BRIDGE) {
        bool host = common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;

        nic->near = host ? PDX_TOPO_HOST_BRIDGE : PDX_TOPO_SWITCH;
        if (host)
            snprintf(nic->why, sizeof(nic->why), "same host bridge (PCI %04x:[%02x-%02x]), %u hops",
                     common->attr->bridge.downstream.pci.domain,
                     common->attr->bridge.downstream.pci.secondary_bus,
                     common->attr->bridge.downstream.pci.subordinate_bus, nic->hops);
        else {
            const struct hwloc_pcidev_attr_s *port = &common->attr->bridge.upstream.pci;

            snprintf(id, sizeof(id), "%04x:%02x:%02x.%x", port->domain, port->bus, port->dev,
                     port->func);
            snprintf(nic->why, sizeof(nic->why), "same PCIe switch (below bridge %s), %u hops",
                     id, nic->hops);
        }
        return;
    }
    /* The path crosses the host. */
    if (gpu_cpu && nic_cpu && gpu_cpu->nodeset && nic_cpu->nodeset &&
        hwloc_bitmap_intersects(gpu_cpu->nodeset, nic_cpu->nodeset)) {
        nic->near = PDX_TOPO_NUMA;
        if (nic->numa_node >= 0)
            snprintf(nic->why, sizeof(nic->why), "same NUMA node (%d), another host bridge",
                     nic->numa_node);
        else
            snprintf(nic->why, sizeof(nic->why), "same NUMA nodes, another host bridge");
        return;
    }
    gpkg = package_of(topo, gpu_cpu);
    npkg = package_of(topo, nic_cpu);
    if (gpkg >= 0 && gpkg == npkg) {
        nic->near = PDX_TOPO_PACKAGE;
        snprintf(nic->why, sizeof(nic->why), "same package (%d), NUMA node %d (the GPU's: %d)",
                 gpkg, nic->numa_node, numa_of(gpu_cpu));
        return;
    }
    nic->near = PDX_TOPO_REMOTE;
    if (gpkg >= 0 && npkg >= 0)
        snprintf(nic->why, sizeof(nic->why), "other socket: package %d, NUMA node %d (the "
                 "GPU's: package %d, node %d)", npkg, nic->numa_node, gpkg, numa_of(gpu_cpu));
    else
        snprintf(nic->why, sizeof(nic->why), "other NUMA node (%d; the GPU's: %d)",
                 nic->numa_node, numa_of(gpu_cpu));
}

static int nic_cmp(const void *a, const void *b)
{
    const pdx_topo_nic_t *x = a, *y = b;

    if (x->near != y->near)
        return x->near < y->near ? -1 : 1;
    if (x->hops != y->hops)
        return x->hops < y->hops ? -1 : 1;
    return strcmp(x->name, y->name);
}

void pdx_topo_gpu(const pdx_topo_t *topo, const char *bus_id, pdx_topo_gpu_t *gpu_p)
{
    hwloc_obj_t os[PDX_TOPO_NICS_MAX], gpu = pci_by_bus_id(topo, bus_id), cpu_side;
    uint32_t n;

    memset(gpu_p, 0, sizeof(*gpu_p));
    snprintf(gpu_p->pci_bus_id, sizeof(gpu_p->pci_bus_id), "%s", bus_id ? bus_id : "");
    gpu_p->numa_node = gpu_p->package = -1;
    if (!gpu) {
        pdx_topo_all_cpus(topo, &gpu_p->cpus);
        pdx_cpulist_format(&gpu_p->cpus, gpu_p->cpulist, sizeof(gpu_p->cpulist));
        gpu_p->nnics = pdx_topo_nics(topo, gpu_p->nics, PDX_TOPO_NICS_MAX);
        for (uint32_t i = 0; i < gpu_p->nnics; i++)
            snprintf(gpu_p->nics[i].why, sizeof(gpu_p->nics[i].why),
                     "the GPU is not in the topology");
        return;
    }
    gpu_p->found = true;
    bus_id_of(gpu, gpu_p->pci_bus_id, sizeof(gpu_p->pci_bus_id));
    cpu_side = hwloc_get_non_io_ancestor_obj(topo->h, gpu);
    gpu_p->numa_node = numa_of(cpu_side);
    gpu_p->package = package_of(topo, cpu_side);
    {
        hwloc_bitmap_t local = hwloc_bitmap_dup(cpu_side->cpuset);

        if (local) {
            hwloc_bitmap_and(local, local, hwloc_topology_get_allowed_cpuset(topo->h));
            cpus_from_bitmap(local, &gpu_p->cpus);
            hwloc_bitmap_free(local);
        }
    }
    pdx_cpulist_format(&gpu_p->cpus, gpu_p->cpulist, sizeof(gpu_p->cpulist));
    n = rdma_devices(topo, os, PDX_TOPO_NICS_MAX);
    for (uint32_t i = 0; i < n; i++)
        rank(topo, gpu, os[i], &gpu_p->nics[i]);
    qsort(gpu_p->nics, n, sizeof(gpu_p->nics[0]), nic_cmp);
    gpu_p->nnics = n;
}

