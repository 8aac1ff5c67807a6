/*
 * rdma/info.c on softnic: every device, port and GID that pdx-info shows,
 * read without an engine, with nothing left open; the RoCE version read
 * from sysfs where ibv_query_gid_ex fails; an InfiniBand port; no device;
 * a device that cannot be opened; the engine's own choice (rdma_info_probe).
 * tests/test_pdx_info.sh runs the pdx-info programs themselves.
 */
#include <criterion/criterion.h>

#include "rdma/rdma.h"
#include "softnic.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void configure(uint32_t devices, uint8_t link_layer, softnic_gids_t gids)
{
    softnic_config_t cfg;

    softnic_config_default(&cfg);
    cfg.devices = devices;
    cfg.link_layer = link_layer;
    cfg.gids = gids;
    cr_assert_eq(softnic_configure(&cfg), 0);
}

static rdma_info_t *read_all(const char *sysfs_root)
{
    rdma_info_t *info = NULL;

    cr_assert_eq(rdma_info_read(sysfs_root, &info), PDX_OK);
    cr_assert_not_null(info);
    cr_expect_eq(softnic_open_objects(), 0, "a device was left open");
    return info;
}

static void expect_gid(const rdma_info_gid_t *g, uint32_t index, const char *type,
                       const char *addr, const char *from)
{
    cr_expect_eq(g->index, index);
    cr_expect_str_eq(g->type, type, "GID %u", index);
    cr_expect_str_eq(g->addr, addr, "GID %u", index);
    cr_expect_str_eq(g->type_from, from, "GID %u", index);
}

Test(pdx_info, roce_devices_ports_and_gids)
{
    rdma_info_t *info;

    configure(2, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV4);
    info = read_all("/sys");
    cr_assert_eq(info->ndevs, 2);
    cr_expect_str_eq(info->why, "");
    for (uint32_t i = 0; i < 2; i++) {
        const rdma_info_dev_t *d = &info->devs[i];
        const rdma_info_port_t *p = &d->ports[0];
        char name[16], v4[16], ll[32];

        snprintf(name, sizeof(name), "softnic%u", i);
        snprintf(v4, sizeof(v4), "10.0.0.%u", i + 1);
        snprintf(ll, sizeof(ll), "fe80::ff:fe00:%u", i + 1);
        cr_expect_str_eq(d->name, name);
        cr_expect_str_eq(d->error, "");
        cr_expect_eq(d->node_guid, 0x0200000000000000ull | (i + 1));
        cr_expect_str_eq(d->fw_ver, "softnic");
        cr_assert_eq(d->nports, 1);
        cr_expect_eq(p->num, 1);
        cr_expect_str_eq(p->error, "");
        cr_expect_str_eq(rdma_info_port_state(p->state), "ACTIVE");
        cr_expect_str_eq(rdma_info_link_layer(p->link_layer), "Ethernet");
        cr_expect_str_eq(rdma_mtu_str(p->active_mtu), "4096");
        cr_expect_eq(p->lanes, 4);
        cr_expect_eq(p->lane_gbps, 25.0); /* EDR 4x: 100 Gb/s */
        cr_assert_eq(p->ngids, 2);
        expect_gid(&p->gids[0], 0, "RoCE v1", ll, "verbs");
        expect_gid(&p->gids[1], 1, "RoCE v2", v4, "verbs");
    }
    rdma_info_free(info);
}

/* Link-local entries and IPv6 ones: the IPv6 text, the version of each. */
Test(pdx_info, roce_ipv6_gids)
{
    rdma_info_t *info;
    const rdma_info_port_t *p;

    configure(1, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV6);
    info = read_all("/sys");
    cr_assert_eq(info->ndevs, 1);
    p = &info->devs[0].ports[0];
    cr_assert_eq(p->ngids, 4);
    expect_gid(&p->gids[0], 0, "RoCE v1", "fe80::ff:fe00:1", "verbs");
    expect_gid(&p->gids[1], 1, "RoCE v2", "fe80::ff:fe00:1", "verbs");
    expect_gid(&p->gids[2], 2, "RoCE v1", "2001:db8::1", "verbs");
    expect_gid(&p->gids[3], 3, "RoCE v2", "2001:db8::1", "verbs");
    rdma_info_free(info);
}

/* InfiniBand: a LID, one IB GID, the empty entry left out. */
Test(pdx_info, infiniband_port)
{
    rdma_info_t *info;
    const rdma_info_port_t *p;

    configure(1, IBV_LINK_LAYER_INFINIBAND, SOFTNIC_GIDS_IPV4);
    info = read_all("/sys");
    cr_assert_eq(info->ndevs, 1);
    p = &info->devs[0].ports[0];
    cr_expect_str_eq(rdma_info_link_layer(p->link_layer), "InfiniBand");
    cr_expect_eq(p->lid, 1);
    cr_assert_eq(p->ngids, 1, "the empty entry is left out");
    cr_expect_eq(p->gids[0].index, 0);
    cr_expect_str_eq(p->gids[0].type, "IB");
    cr_expect_str_eq(p->gids[0].addr, "fe80::200:0:0:1");
    rdma_info_free(info);
}

/* A fake sysfs tree: <root>/class/infiniband/softnic0/ports/1/gid_attrs/types/<i>. */
static void put_type(const char *root, uint32_t index, const char *text)
{
    char path[PATH_MAX], cmd[PATH_MAX + 64];
    FILE *f;

    snprintf(path, sizeof(path), "%s/class/infiniband/softnic0/ports/1/gid_attrs/types", root);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
    cr_assert_eq(system(cmd), 0);
    snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%u", index);
    f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fprintf(f, "%s\n", text);
    fclose(f);
}

/* ibv_query_gid_ex failing (an older kernel or provider): the GID from
 * ibv_query_gid, its version from the kernel's gid_attrs; unreadable: "?". */
Test(pdx_info, gid_type_from_sysfs_when_query_gid_ex_fails)
{
    char root[] = "/tmp/pdx_info_sysfs_XXXXXX", cmd[64];
    rdma_info_t *info;
    const rdma_info_port_t *p;

    cr_assert_not_null(mkdtemp(root));
    put_type(root, 0, "IB/RoCE v1");
    put_type(root, 1, "RoCE v2");
    configure(1, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV4);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 1, EOPNOTSUPP);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 2, EOPNOTSUPP);
    info = read_all(root);
    p = &info->devs[0].ports[0];
    cr_assert_eq(p->ngids, 2);
    expect_gid(&p->gids[0], 0, "RoCE v1", "fe80::ff:fe00:1", "sysfs");
    expect_gid(&p->gids[1], 1, "RoCE v2", "10.0.0.1", "sysfs");
    rdma_info_free(info);

    /* no sysfs entry: the address still, its version unknown */
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 1, EOPNOTSUPP);
    info = read_all("/nonexistent");
    p = &info->devs[0].ports[0];
    cr_assert_eq(p->ngids, 2);
    expect_gid(&p->gids[0], 0, "?", "fe80::ff:fe00:1", "sysfs");
    expect_gid(&p->gids[1], 1, "RoCE v2", "10.0.0.1", "verbs");
    rdma_info_free(info);

    cr_expect_str_eq(rdma_info_gid_type_sysfs(root, "softnic0", 1, 0, IBV_LINK_LAYER_INFINIBAND),
                     "IB");
    cr_expect_null(rdma_info_gid_type_sysfs(root, "softnic0", 1, 7, IBV_LINK_LAYER_ETHERNET));
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    cr_expect_eq(system(cmd), 0);
}

/* Neither GID call answering: the port says why, the device is still shown. */
Test(pdx_info, unreadable_gid_is_said)
{
    rdma_info_t *info;
    const rdma_info_port_t *p;

    configure(1, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV4);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 2, EOPNOTSUPP);
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID, 1, EIO);
    info = read_all("/sys");
    p = &info->devs[0].ports[0];
    cr_expect_eq(p->ngids, 1);
    cr_expect(strstr(p->error, "GID index 1: ibv_query_gid: ") != NULL, "%s", p->error);
    rdma_info_free(info);
}

Test(pdx_info, no_device)
{
    softnic_config_t cfg;
    rdma_info_t *info;

    softnic_config_default(&cfg);
    cfg.no_devices = true;
    cr_assert_eq(softnic_configure(&cfg), 0);
    info = read_all("/sys");
    cr_expect_eq(info->ndevs, 0);
    cr_expect_str_eq(info->why, "libibverbs lists none");
    rdma_info_free(info);

    softnic_fault_call(SOFTNIC_CALL_GET_DEVICE_LIST, 1, ENOSYS);
    info = read_all("/nonexistent");
    cr_expect_eq(info->ndevs, 0);
    cr_expect(strstr(info->why, "ibv_get_device_list: ") != NULL, "%s", info->why);
    cr_expect(strstr(info->why, "/nonexistent/class/infiniband_verbs is missing") != NULL, "%s",
              info->why);
    rdma_info_free(info);
}

/* A device that cannot be opened or queried says why; the next is read. */
Test(pdx_info, device_that_cannot_be_read)
{
    rdma_info_t *info;

    configure(3, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV4);
    softnic_fault_call(SOFTNIC_CALL_OPEN_DEVICE, 1, EACCES);
    softnic_fault_call(SOFTNIC_CALL_QUERY_DEVICE, 1, EIO);
    softnic_fault_call(SOFTNIC_CALL_QUERY_PORT, 1, EIO);
    info = read_all("/sys");
    cr_assert_eq(info->ndevs, 3);
    cr_expect(strstr(info->devs[0].error, "ibv_open_device: ") != NULL, "%s", info->devs[0].error);
    cr_expect(strstr(info->devs[1].error, "ibv_query_device: ") != NULL, "%s",
              info->devs[1].error);
    cr_expect_eq(info->devs[1].nports, 0);
    cr_expect_str_eq(info->devs[2].error, "");
    cr_assert_eq(info->devs[2].nports, 1);
    cr_expect(strstr(info->devs[2].ports[0].error, "ibv_query_port: ") != NULL, "%s",
              info->devs[2].ports[0].error);
    cr_expect_eq(info->devs[2].ports[0].ngids, 0);
    rdma_info_free(info);
}

/* The engine's own choice: PDX_IB_DEVICES, else the order it is given. */
Test(pdx_info, probe_is_the_engines_choice)
{
    rdma_knobs_t knobs;
    rdma_dev_info_t dev;

    configure(3, IBV_LINK_LAYER_ETHERNET, SOFTNIC_GIDS_IPV4);
    rdma_knobs_read(NULL, &knobs);
    cr_assert_eq(rdma_info_probe(&knobs, &dev), PDX_OK);
    cr_expect_str_eq(dev.name, "softnic0");
    cr_expect_eq(dev.gid_index, 1, "the IPv4-mapped RoCEv2 GID");
    snprintf(knobs.nearest, sizeof(knobs.nearest), "softnic2,softnic1");
    cr_assert_eq(rdma_info_probe(&knobs, &dev), PDX_OK);
    cr_expect_str_eq(dev.name, "softnic2");
    snprintf(knobs.devices, sizeof(knobs.devices), "softnic1");
    cr_assert_eq(rdma_info_probe(&knobs, &dev), PDX_OK);
    cr_expect_str_eq(dev.name, "softnic1");
    snprintf(knobs.devices, sizeof(knobs.devices), "mlx5_9");
    cr_expect_eq(rdma_info_probe(&knobs, &dev), PDX_ERR_NO_DEVICE);
    cr_expect_eq(softnic_open_objects(), 0);
}
