/*
 * rdma/topo.c on a fake sysfs tree: two PCIe switches under root ports of
 * socket 0, each with a GPU and a NIC, and a NIC under socket 1. The NIC
 * under a GPU's own switch comes first, then the other NIC of its socket,
 * then the far one; a NUMA node breaks a tie in hops; a NIC whose sysfs
 * path is missing, or a GPU unknown to sysfs, keeps the list order.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdma/topo.h"

static char root[PATH_MAX];

/* snprintf that must not truncate */
#define FMT(buf, ...) cr_assert_lt((size_t)snprintf(buf, sizeof(buf), __VA_ARGS__), sizeof(buf))

static void mkdirs(const char *rel)
{
    char path[PATH_MAX];

    FMT(path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

static void put(const char *rel, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    FMT(path, "%s/%s", root, rel);
    f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void link_to(const char *rel, const char *target_rel)
{
    char path[PATH_MAX], target[PATH_MAX];

    FMT(path, "%s/%s", root, rel);
    FMT(target, "%s/%s", root, target_rel);
    cr_assert_eq(symlink(target, path), 0, "%s", path);
}

/* A PCI function at devices/<path>, NUMA node node, named by bus id. */
static void pci(const char *path, const char *bdf, const char *node)
{
    char rel[PATH_MAX], numa[PATH_MAX];

    FMT(rel, "devices/%s", path);
    mkdirs(rel);
    FMT(numa, "%s/numa_node", rel);
    put(numa, node);
    FMT(numa, "bus/pci/devices/%s", bdf);
    link_to(numa, rel);
}

static void nic(const char *name, const char *path)
{
    char rel[PATH_MAX], dev[PATH_MAX];

    FMT(rel, "class/infiniband/%s", name);
    mkdirs(rel);
    FMT(rel, "class/infiniband/%s/device", name);
    FMT(dev, "devices/%s", path);
    link_to(rel, dev);
}

#define SW_A "pci0000:00/0000:00:01.0/0000:01:00.0"
#define SW_B "pci0000:00/0000:00:03.0/0000:11:00.0"
#define FAR  "pci0000:80/0000:80:01.0"

static void tree(void)
{
    FMT(root, "/tmp/pdx-topo-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    mkdirs("bus/pci/devices");
    mkdirs("class/infiniband");
    pci(SW_A "/0000:02:00.0/0000:03:00.0", "0000:03:00.0", "0\n");  /* GPU a */
    pci(SW_A "/0000:02:01.0/0000:04:00.0", "0000:04:00.0", "0\n");  /* NIC a */
    pci(SW_B "/0000:12:00.0/0000:13:00.0", "0000:13:00.0", "0\n");  /* GPU b */
    pci(SW_B "/0000:12:01.0/0000:14:00.0", "0000:14:00.0", "0\n");  /* NIC b */
    pci(FAR "/0000:81:00.0", "0000:81:00.0", "1\n");                /* NIC far */
    pci(FAR "/0000:82:00.0", "0000:82:00.0", "0\n");                /* NIC far, node 0 */
    nic("nic_a", SW_A "/0000:02:01.0/0000:04:00.0");
    nic("nic_b", SW_B "/0000:12:01.0/0000:14:00.0");
    nic("nic_far", FAR "/0000:81:00.0");
    nic("nic_far0", FAR "/0000:82:00.0");
}

static void untree(void)
{
    char cmd[PATH_MAX + 16];

    FMT(cmd, "rm -rf '%s'", root);
    cr_expect_eq(system(cmd), 0);
}

Test(topo, hops)
{
    cr_expect_eq(rdma_topo_hops("/sys/devices/a/b/c", "/sys/devices/a/b/c"), 0);
    cr_expect_eq(rdma_topo_hops("/sys/devices/a/b/c", "/sys/devices/a/b/d"), 2);
    cr_expect_eq(rdma_topo_hops("/sys/devices/a/b/c", "/sys/devices/a/x/y/z"), 5);
    cr_expect_eq(rdma_topo_hops("/sys/devices/a", "/sys/devices/a/b"), 1);
    cr_expect_eq(rdma_topo_hops("/sys/devices/ab", "/sys/devices/a"), 2, "whole components");
}

Test(topo, nearest_nic_first, .init = tree, .fini = untree)
{
    const char *names[] = {"nic_far", "nic_b", "nic_a", "nic_far0"};
    int order[4];

    rdma_topo_order(root, "0000:03:00.0", names, 4, order);
    cr_expect_str_eq(names[order[0]], "nic_a", "the NIC under GPU a's switch");
    cr_expect_str_eq(names[order[1]], "nic_b", "the other switch of the socket");
    cr_expect_str_eq(names[order[2]], "nic_far0", "a tie in hops: the GPU's NUMA node first");
    cr_expect_str_eq(names[order[3]], "nic_far");

    rdma_topo_order(root, "0000:13:00.0", names, 4, order);
    cr_expect_str_eq(names[order[0]], "nic_b");
    cr_expect_str_eq(names[order[1]], "nic_a");
}

Test(topo, unknown_keeps_list_order, .init = tree, .fini = untree)
{
    const char *names[] = {"nic_gone", "nic_far", "nic_a"};
    int order[3];

    rdma_topo_order(root, "0000:99:00.0", names, 3, order);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(order[i], i, "an unknown GPU: the list order");
    rdma_topo_order(root, NULL, names, 3, order);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(order[i], i, "no GPU: the list order");
    rdma_topo_order(root, "0000:03:00.0", names, 3, order);
    cr_expect_str_eq(names[order[0]], "nic_a");
    cr_expect_str_eq(names[order[1]], "nic_far");
    cr_expect_str_eq(names[order[2]], "nic_gone", "a device without a sysfs path comes last");
}
