/*
 * topo: where the engine's GPU sits in the machine (topo.c, on hwloc).
 *
 * An engine that uses a NIC on the far side of the socket interconnect, or
 * runs its workers on the other socket, loses much of its bandwidth. From a
 * hwloc topology with its PCI and OS devices (the machine's, or an XML file
 * in tests) topo finds, for a GPU named by PCI bus id:
 * - its NUMA node and the CPUs local to it (those of its non-I/O ancestor);
 * - every RDMA device, nearest first: under the same PCIe switch, then the
 *   same host bridge, then the same NUMA node, the same package, and last
 *   another socket; fewer PCI hops, then the device's name, break ties.
 *   Each carries the reason in words.
 * hwloc's common-ancestor helper stops at I/O objects, so the ranking walks
 * the parents of both PCI devices itself.
 *
 * A topology is read-only once loaded: any thread may query it.
 */
#ifndef PDX_TOPO_H
#define PDX_TOPO_H

#include "pdx/pdx.h"

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PDX_TOPO_NAME_MAX    64
#define PDX_TOPO_BUS_ID_MAX  32
#define PDX_TOPO_WHY_MAX     160
#define PDX_TOPO_CPULIST_MAX 512
#define PDX_TOPO_NICS_MAX    32

typedef struct pdx_topo pdx_topo_t;

/* How near a device is to the GPU, nearest first. */
typedef enum pdx_topo_near {
    PDX_TOPO_SWITCH      = 0, /* below the same PCIe switch (a shared PCI bridge) */
    PDX_TOPO_HOST_BRIDGE = 1, /* the same host bridge (root complex) */
    PDX_TOPO_NUMA        = 2, /* another host bridge of the same NUMA node */
    PDX_TOPO_PACKAGE     = 3, /* the same package (socket), another NUMA node */
    PDX_TOPO_REMOTE      = 4, /* another socket */
    PDX_TOPO_UNKNOWN     = 5, /* not placed in the topology (a software device) */
} pdx_topo_near_t;

/* "same PCIe switch", ..., "unknown". */
const char *pdx_topo_near_name(pdx_topo_near_t near);

typedef struct pdx_topo_nic {
    char            name[PDX_TOPO_NAME_MAX];       /* the verbs device: "mlx5_0" */
    char            pci_bus_id[PDX_TOPO_BUS_ID_MAX]; /* "" when not a PCI function */
    int             numa_node;                     /* -1: unknown */
    pdx_topo_near_t near;
    uint32_t        hops;                          /* PCI objects between them */
    char            why[PDX_TOPO_WHY_MAX];         /* the reason, in words */
} pdx_topo_nic_t;

typedef struct pdx_topo_gpu {
    char           pci_bus_id[PDX_TOPO_BUS_ID_MAX];
    bool           found;                          /* the bus id is in the topology */
    int            numa_node;                      /* -1: unknown, or several */
    int            package;                        /* -1: unknown */
    cpu_set_t      cpus;                           /* CPUs local to the GPU */
    char           cpulist[PDX_TOPO_CPULIST_MAX];  /* the same as "0-47,96-143" */
    uint32_t       nnics;
    pdx_topo_nic_t nics[PDX_TOPO_NICS_MAX];        /* every RDMA device, nearest first */
} pdx_topo_gpu_t;

/*
 * Load a topology with its I/O devices: the machine's (xml_path NULL) or a
 * hwloc XML file. PDX_ERR_IO (logged with hwloc's cause) when it cannot be
 * read. Binding is a no-op on a topology loaded from XML.
 */
pdx_status_t pdx_topo_load(const char *xml_path, pdx_topo_t **topo_p);
void pdx_topo_free(pdx_topo_t *topo);

/* Where the GPU with PCI bus id `bus_id` ("0000:c1:00.0", any case) sits:
 * a GPU the topology lacks has found false, the machine's CPUs, and the
 * RDMA devices in name order with near UNKNOWN. */
void pdx_topo_gpu(const pdx_topo_t *topo, const char *bus_id, pdx_topo_gpu_t *gpu_p);

/* The RDMA devices without a GPU to rank them by: in name order, each with
 * its NUMA node; near UNKNOWN. Returns their count (at most max). */
uint32_t pdx_topo_nics(const pdx_topo_t *topo, pdx_topo_nic_t *nics, uint32_t max);

/* PCI bus ids of the GPUs (display, 3D and processing-accelerator PCI
 * functions) in bus order; their count (at most max). */
uint32_t pdx_topo_gpus(const pdx_topo_t *topo, char (*bus_ids)[PDX_TOPO_BUS_ID_MAX],
                       uint32_t max);

/* Every CPU of the machine the process may run on. */
void pdx_topo_all_cpus(const pdx_topo_t *topo, cpu_set_t *cpus_p);

/*
 * The CPUs PDX_CPU_AFFINITY (`setting`) gives an engine's threads: "auto",
 * the GPU's local CPUs (gpu NULL or not found: none bound); "off", none
 * bound; a CPU list, those, less the CPUs the process may not use (none
 * left is PDX_ERR_INVALID). *bind_p says whether threads are bound at all;
 * why says which rule chose the set, in words. topo may be NULL (no
 * topology: auto binds nothing, and the CPUs the process may use are
 * those of its affinity mask).
 */
pdx_status_t pdx_topo_affinity(const char *setting, const pdx_topo_t *topo,
                               const pdx_topo_gpu_t *gpu, cpu_set_t *cpus_p, bool *bind_p,
                               char *why, size_t whylen);

/* ------------------------------------------------------------- CPU lists */

/* Parse "0-15,32-47" (a Linux CPU list) into cpus: PDX_ERR_INVALID with
 * the reason in err for anything else (empty, reversed range, a CPU at or
 * past CPU_SETSIZE). */
pdx_status_t pdx_cpulist_parse(const char *text, cpu_set_t *cpus_p, char *err, size_t errlen);

/* cpus as a CPU list ("" when empty); truncated with "..." past len. */
void pdx_cpulist_format(const cpu_set_t *cpus, char *buf, size_t len);

#endif
