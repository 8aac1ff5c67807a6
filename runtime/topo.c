/*
 * topo: the parts of topo.h that need no topology: the names of the
 * classes, PDX_CPU_AFFINITY's rules and CPU lists. The topology itself is
 * read by topo_hwloc.c; a build without hwloc has none (every load is
 * PDX_ERR_UNSUPPORTED: NICs keep the device list's order, and auto binds
 * nothing).
 */
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

const char *pdx_topo_near_name(pdx_topo_near_t near)
{
    switch (near) {
    case PDX_TOPO_SWITCH:      return "same PCIe switch";
    case PDX_TOPO_HOST_BRIDGE: return "same host bridge";
    case PDX_TOPO_NUMA:        return "same NUMA node";
    case PDX_TOPO_PACKAGE:     return "same package";
    case PDX_TOPO_REMOTE:      return "other socket";
    case PDX_TOPO_UNKNOWN:     break;
    }
    return "unknown";
}

#ifndef PDX_HAVE_HWLOC
pdx_status_t pdx_topo_load(const char *xml_path, pdx_topo_t **topo_p)
{
    (void)topo_p;
    pdx_info("no topology of %s: pdx was built without hwloc", xml_path ? xml_path : "this machine");
    return PDX_ERR_UNSUPPORTED;
}

void pdx_topo_free(pdx_topo_t *topo) { (void)topo; }

/* Never called: no topology is ever loaded. */
void pdx_topo_gpu(const pdx_topo_t *topo, const char *bus_id, pdx_topo_gpu_t *gpu_p)
{
    (void)topo;
    memset(gpu_p, 0, sizeof(*gpu_p));
    snprintf(gpu_p->pci_bus_id, sizeof(gpu_p->pci_bus_id), "%s", bus_id ? bus_id : "");
    gpu_p->numa_node = gpu_p->package = -1;
}

uint32_t pdx_topo_nics(const pdx_topo_t *topo, pdx_topo_nic_t *nics, uint32_t max)
{
    (void)topo, (void)nics, (void)max;
    return 0;
}

uint32_t pdx_topo_gpus(const pdx_topo_t *topo, char (*bus_ids)[PDX_TOPO_BUS_ID_MAX],
                       uint32_t max)
{
    (void)topo, (void)bus_ids, (void)max;
    return 0;
}

void pdx_topo_all_cpus(const pdx_topo_t *topo, cpu_set_t *cpus_p)
{
    (void)topo;
    if (sched_getaffinity(0, sizeof(*cpus_p), cpus_p) != 0)
        CPU_ZERO(cpus_p);
}
#endif

/* ------------------------------------------------------------- affinity */

pdx_status_t pdx_topo_affinity(const char *setting, const pdx_topo_t *topo,
                               const pdx_topo_gpu_t *gpu, cpu_set_t *cpus_p, bool *bind_p,
                               char *why, size_t whylen)
{
    cpu_set_t all, want;
    char list[PDX_TOPO_CPULIST_MAX], err[160];

    CPU_ZERO(cpus_p);
    *bind_p = false;
    if (!setting || !setting[0] || strcmp(setting, "auto") == 0) {
        if (!gpu || !gpu->found || !topo || CPU_COUNT(&gpu->cpus) == 0) {
            snprintf(why, whylen, "auto: %s: threads are not bound",
                     !gpu ? "no GPU" : !topo ? "no topology" : "the GPU is not in the topology");
            return PDX_OK;
        }
        pdx_topo_all_cpus(topo, &all);
        *cpus_p = gpu->cpus;
        if (CPU_EQUAL(&all, &gpu->cpus)) {
            snprintf(why, whylen, "auto: the GPU's local CPUs (%s) are all the process may use: "
                     "threads are not bound", gpu->cpulist);
            return PDX_OK;
        }
        *bind_p = true;
        snprintf(why, whylen, "auto: the CPUs local to GPU %s (NUMA node %d)", gpu->pci_bus_id,
                 gpu->numa_node);
        return PDX_OK;
    }
    if (strcmp(setting, "off") == 0) {
        snprintf(why, whylen, "off: threads are not bound");
        return PDX_OK;
    }
    if (pdx_cpulist_parse(setting, &want, err, sizeof(err)) != PDX_OK) {
        pdx_error("PDX_CPU_AFFINITY=%s: %s", setting, err);
        return PDX_ERR_INVALID;
    }
    if (topo)
        pdx_topo_all_cpus(topo, &all);
    else if (sched_getaffinity(0, sizeof(all), &all) != 0)
        all = want; /* unknown: take the list as it is */
    CPU_AND(cpus_p, &want, &all);
    if (CPU_COUNT(cpus_p) == 0) {
        pdx_cpulist_format(&all, list, sizeof(list));
        pdx_error("PDX_CPU_AFFINITY=%s: none of these CPUs is available to the process (it "
                  "may use %s)", setting, list);
        return PDX_ERR_INVALID;
    }
    *bind_p = true;
    pdx_cpulist_format(cpus_p, list, sizeof(list));
    snprintf(why, whylen, "PDX_CPU_AFFINITY=%s%s%s", setting, CPU_EQUAL(cpus_p, &want) ? "" :
             ": of those, the process may use ", CPU_EQUAL(cpus_p, &want) ? "" : list);
    return PDX_OK;
}

/* ------------------------------------------------------------- CPU lists */

pdx_status_t pdx_cpulist_parse(const char *text, cpu_set_t *cpus_p, char *err, size_t errlen)
{
    const char *p = text;

    CPU_ZERO(cpus_p);
    if (!text || !text[0]) {
        snprintf(err, errlen, "an empty CPU list");
        return PDX_ERR_INVALID;
    }
    for (;;) {
        char *end;
        unsigned long lo, hi;

        if (*p < '0' || *p > '9')
            goto bad;
        lo = hi = strtoul(p, &end, 10);
        p = end;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9')
                goto bad;
            hi = strtoul(p, &end, 10);
            p = end;
        }
        if (hi < lo) {
            snprintf(err, errlen, "the range %lu-%lu runs backwards", lo, hi);
            return PDX_ERR_INVALID;
        }
        if (hi >= CPU_SETSIZE) {
            snprintf(err, errlen, "CPU %lu is past the largest this build knows (%d)", hi,
                     CPU_SETSIZE - 1);
            return PDX_ERR_INVALID;
        }
        for (unsigned long c = lo; c <= hi; c++)
            CPU_SET(c, cpus_p);
        if (*p == '\0')
            return PDX_OK;
        if (*p++ != ',')
            goto bad;
    }
bad:
    snprintf(err, errlen, "not a CPU list such as 0-15,32-47 (at \"%s\")", p);
    return PDX_ERR_INVALID;
}

void pdx_cpulist_format(const cpu_set_t *cpus, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        int hi = c;
        int n;

        if (!CPU_ISSET(c, cpus))
            continue;
        while (hi + 1 < CPU_SETSIZE && CPU_ISSET(hi + 1, cpus))
            hi++;
        n = hi == c ? snprintf(buf + used, len - used, "%s%d", used ? "," : "", c)
                    : snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, hi);
        if (n < 0 || (size_t)n >= len - used) {
            /* cut after the last whole entry that leaves room to say so */
            if (len >= 4) {
                used = PDX_MIN(used, len - 4);
                while (used > 0 && buf[used - 1] != ',')
                    used--;
                snprintf(buf + used, len - used, "...");
            }
            return;
        }
        used += (size_t)n;
        c = hi;
    }
}
