/*
 * topo: which RDMA device sits nearest the engine's GPU.
 *
 * GPU-direct transfers cross PCIe between the NIC and the GPU; a NIC under
 * the GPU's own PCIe switch keeps that traffic off the root complex and the
 * socket interconnect (on MI300X and MI355X platforms each GPU shares a
 * switch with one NIC). sysfs gives every PCI function a path from its root
 * port down (/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/...): the
 * fewer hops from one device up to the pair's nearest common bridge and
 * down to the other, the nearer they are. Devices are ranked by that, then
 * by whether they share the GPU's NUMA node, then by their order in the
 * device list. A device whose path cannot be read ranks after every one
 * that can. No hwloc is needed: sysfs links are what hwloc reads too.
 *
 * The sysfs root is a parameter so tests build a fake tree.
 */
#include "topo.h"

#include <stdbool.h>
#include <string.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#define TOPO_PATH_MAX 512

/* realpath of root/dir/name[/leaf] into out; false when it cannot be resolved. */
static bool resolve(char *out, const char *root, const char *dir, const char *name,
                    const char *leaf)
{
    char path[TOPO_PATH_MAX];
    char *real;

    snprintf(path, sizeof(path), "%s/%s/%s%s%s", root, dir, name, leaf ? "/" : "",
             leaf ? leaf : "");
    real = realpath(path, NULL);
    if (!real)
        return false;
    snprintf(out, TOPO_PATH_MAX, "%s", real);
    free(real);
    return true;
}

static int numa_node(const char *dev_path)
{
    char path[TOPO_PATH_MAX + 16];
    FILE *f;
    int node = -1;

    snprintf(path, sizeof(path), "%s/numa_node", dev_path);
    f = fopen(path, "re");
    if (!f)
        return -1;
    if (fscanf(f, "%d", &node) != 1)
        node = -1;
    fclose(f);
    return node;
}

/* Split path into at most max components (in place); their count. */
static int components(char *path, char **out, int max)
{
    char *save = NULL;
    int n = 0;

    for (char *c = strtok_r(path, "/", &save); c && n < max; c = strtok_r(NULL, "/", &save))
        out[n++] = c;
    return n;
}

/* Components of a below the deepest one it shares with b, plus those of b. */
int rdma_topo_hops(const char *a, const char *b)
{
    char pa[TOPO_PATH_MAX], pb[TOPO_PATH_MAX], *ca[64], *cb[64];
    int na, nb, common = 0;

    snprintf(pa, sizeof(pa), "%s", a);
    snprintf(pb, sizeof(pb), "%s", b);
    na = components(pa, ca, 64);
    nb = components(pb, cb, 64);
    while (common < na && common < nb && !strcmp(ca[common], cb[common]))
        common++;
    return (na - common) + (nb - common);
}

void rdma_topo_order(const char *sysfs_root, const char *gpu_bus_id, const char *const *names,
                     int n, int *order)
{
    char gpu[TOPO_PATH_MAX], nic[TOPO_PATH_MAX];
    int *key = calloc((size_t)n, sizeof(*key));
    bool have_gpu;
    int gpu_node;

    for (int i = 0; i < n; i++)
        order[i] = i;
    if (!key || !gpu_bus_id || !gpu_bus_id[0]) {
        free(key);
        return;
    }
    have_gpu = resolve(gpu, sysfs_root, "bus/pci/devices", gpu_bus_id, NULL);
    gpu_node = have_gpu ? numa_node(gpu) : -1;
    for (int i = 0; i < n; i++) {
        key[i] = INT_MAX;
        if (have_gpu && resolve(nic, sysfs_root, "class/infiniband", names[i], "device")) {
            int node = numa_node(nic);

            /* hops first, the NUMA node breaks ties */
            key[i] = rdma_topo_hops(gpu, nic) * 2 + (gpu_node >= 0 && node == gpu_node ? 0 : 1);
        }
    }
    /* insertion sort: stable, and device lists are short */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;

        for (; j > 0 && key[order[j - 1]] > key[v]; j--)
            order[j] = order[j - 1];
        order[j] = v;
    }
    free(key);
}
