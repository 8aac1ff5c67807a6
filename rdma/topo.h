/*
 * topo: which RDMA device sits nearest a GPU, by the sysfs PCI tree
 * (topo.c). No verbs calls: usable wherever device names are known.
 */
#ifndef PDX_RDMA_TOPO_H
#define PDX_RDMA_TOPO_H

/* order[0, n) = indices of names (RDMA devices), nearest the GPU with PCI
 * bus id gpu_bus_id first, by the sysfs tree under sysfs_root ("/sys"); the
 * list order where nothing is known. */
void rdma_topo_order(const char *sysfs_root, const char *gpu_bus_id, const char *const *names,
                     int n, int *order);

/* PCI hops between two sysfs device paths: the components below their
 * deepest common one, on both sides. */
int rdma_topo_hops(const char *a, const char *b);

#endif
