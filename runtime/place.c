/*
 * Where an engine runs: the host (its kernel's boot id, which peers on the
 * same host share), its GPU's place in the machine (topo.c), the NICs
 * its rdma transport tries first, the CPUs of its shard workers and tcp
 * progress threads (PDX_CPU_AFFINITY), and the NUMA node its rings and
 * tables prefer. Decided once, at pdx_engine_create, before any of those
 * exists; the topology is released again (the engine keeps plain data).
 */
#include "engine.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "hip/pdx_hip.h"

void pdx_host_id(const char *path, uint8_t id[PDX_WIRE_HOST_ID_SIZE])
{
    char text[64];
    FILE *f = fopen(path ? path : "/proc/sys/kernel/random/boot_id", "re");
    uint32_t n = 0;

    memset(id, 0, PDX_WIRE_HOST_ID_SIZE);
    if (!f)
        return;
    if (!fgets(text, sizeof(text), f))
        text[0] = '\0';
    fclose(f);
    /* a UUID: 32 hex digits, dashes between groups */
    for (const char *p = text; *p && *p != '\n' && n < 2 * PDX_WIRE_HOST_ID_SIZE; p++) {
        int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 :
                *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;

        if (*p == '-')
            continue;
        if (v < 0)
            break;
        id[n / 2] = (uint8_t)(id[n / 2] << 4 | v);
        n++;
    }
    if (n != 2 * PDX_WIRE_HOST_ID_SIZE)
        memset(id, 0, PDX_WIRE_HOST_ID_SIZE); /* not a boot id: unknown */
}

bool pdx_host_ids_match(const uint8_t a[PDX_WIRE_HOST_ID_SIZE], const uint8_t b[PDX_WIRE_HOST_ID_SIZE])
{
    static const uint8_t zero[PDX_WIRE_HOST_ID_SIZE];

    return memcmp(a, zero, PDX_WIRE_HOST_ID_SIZE) != 0 &&
           memcmp(a, b, PDX_WIRE_HOST_ID_SIZE) == 0;
}

/* The engine's GPU by PCI bus id, as pdx_gpu_open() will pick it; false
 * without one (the engine serves host memory). */
static bool engine_gpu(const pdx_engine_t *e, pdx_hip_identity_t *id)
{
    int count = 0, gpu = e->cfg.gpu;

    return pdx_hip_device_count(&count) == PDX_OK &&
           (gpu >= 0 || pdx_hip_current_device(&gpu) == PDX_OK) && gpu < count &&
           pdx_hip_device_identity(gpu, id) == PDX_OK;
}

/* "mlx5_2 (same PCIe switch), mlx5_3 (same host bridge), ..." into buf. */
static void nics_text(const pdx_topo_gpu_t *g, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < g->nnics && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s (%s)", i ? ", " : "", g->nics[i].name,
                         pdx_topo_near_name(g->nics[i].near));

        if (n < 0)
            break;
        used += (size_t)n;
    }
}

pdx_status_t pdx_engine_place(pdx_engine_t *e, char *nic_order, size_t len)
{
    pdx_topo_t *topo = NULL;
    pdx_hip_identity_t id;
    bool gpu = engine_gpu(e, &id);
    char why[256], nics[512];
    pdx_status_t st;
    size_t used = 0;

    nic_order[0] = '\0';
    pdx_host_id(NULL, e->host_id);
    e->mem_node = -1;
    e->place.numa_node = e->place.package = -1;
    /* The machine's topology takes milliseconds to read (tens on a large
     * node): only a GPU's engine has anything to place by it. */
    if (gpu && pdx_topo_load(NULL, &topo) != PDX_OK)
        topo = NULL; /* said why; the engine runs where the OS puts it */
    if (gpu && topo)
        pdx_topo_gpu(topo, id.pci_bus_id, &e->place);
    st = pdx_topo_affinity(e->cfg.cpu_affinity, topo, gpu ? &e->place : NULL, &e->cpus,
                           &e->bind, why, sizeof(why));
    if (st != PDX_OK) {
        pdx_topo_free(topo);
        return st; /* named the variable */
    }
    /* Memory follows the threads when they follow the GPU. */
    if (e->bind && e->place.found && strcmp(e->cfg.cpu_affinity, "auto") == 0)
        e->mem_node = e->place.numa_node;
    for (uint32_t i = 0; e->place.found && i < e->place.nnics; i++) {
        int n = snprintf(nic_order + used, len - used, "%s%s", i ? "," : "",
                         e->place.nics[i].name);

        if (n < 0 || (size_t)n >= len - used) {
            nic_order[used] = '\0'; /* whole names only */
            break;
        }
        used += (size_t)n;
    }
    if (e->place.found) {
        nics_text(&e->place, nics, sizeof(nics));
        pdx_info("GPU %d (%s): NUMA node %d, CPUs %s; threads: %s; RDMA devices nearest "
                 "first: %s", id.device, id.pci_bus_id, e->place.numa_node, e->place.cpulist,
                 why, e->place.nnics ? nics : "none");
    } else if (gpu) {
        pdx_info("GPU %d (%s) is not in the machine's topology: NICs in the device list's "
                 "order; threads: %s", id.device, id.pci_bus_id, why);
    } else {
        pdx_debug("no GPU to place the engine by; threads: %s", why);
    }
    pdx_topo_free(topo);
    return PDX_OK;
}
