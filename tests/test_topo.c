/*
 * runtime/topo.c on hwloc XML topologies of made-up nodes (tests/topo/,
 * written by make_fixtures.py; package 0 has CPUs 0-7 and 16-23, package 1
 * 8-15 and 24-31): the NICs each GPU is given, nearest first, with their
 * reasons; the GPU's NUMA node and local CPUs; PDX_CPU_AFFINITY's rules;
 * CPU lists. Binding is a no-op on a topology loaded from XML.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "topo.h"

#define FIXTURE(name) PDX_SOURCE_DIR "/tests/topo/" name ".xml"

static pdx_topo_t *load(const char *path)
{
    pdx_topo_t *t = NULL;

    cr_assert_eq(pdx_topo_load(path, &t), PDX_OK, "%s", path);
    return t;
}

static void expect_nic(const pdx_topo_gpu_t *g, uint32_t i, const char *name,
                       pdx_topo_near_t near, const char *why)
{
    cr_assert_lt(i, g->nnics, "GPU %s: %u NICs", g->pci_bus_id, g->nnics);
    cr_expect_str_eq(g->nics[i].name, name, "GPU %s, NIC %u", g->pci_bus_id, i);
    cr_expect_eq(g->nics[i].near, near, "GPU %s, %s: %s (%s)", g->pci_bus_id, g->nics[i].name,
                 pdx_topo_near_name(g->nics[i].near), g->nics[i].why);
    cr_expect(strstr(g->nics[i].why, why), "GPU %s, %s: \"%s\" lacks \"%s\"", g->pci_bus_id,
              g->nics[i].name, g->nics[i].why, why);
}

/* 8 GPUs behind 8 switches with a NIC each, 2 host bridges per socket; the
 * NICs' names do not follow the GPUs' order. */
Test(topo, mi300x_each_gpu_gets_the_nic_of_its_switch)
{
    static const char *const own[8] = {"mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1",
                                       "mlx5_6", "mlx5_7", "mlx5_4", "mlx5_5"};
    char ids[16][PDX_TOPO_BUS_ID_MAX];
    pdx_topo_t *t = load(FIXTURE("mi300x"));
    pdx_topo_gpu_t g;

    cr_assert_eq(pdx_topo_gpus(t, ids, 16), 8);
    cr_expect_str_eq(ids[0], "0000:03:00.0");
    cr_expect_str_eq(ids[7], "0000:d3:00.0");
    for (int i = 0; i < 8; i++) {
        pdx_topo_gpu(t, ids[i], &g);
        cr_assert(g.found);
        cr_expect_eq(g.nnics, 8);
        cr_expect_eq(g.numa_node, i / 4, "GPU %d", i);
        cr_expect_eq(g.package, i / 4, "GPU %d", i);
        cr_expect_str_eq(g.cpulist, i < 4 ? "0-7,16-23" : "8-15,24-31", "GPU %d", i);
        expect_nic(&g, 0, own[i], PDX_TOPO_SWITCH, "same PCIe switch");
        /* the other switch of its host bridge, then its socket's other host
         * bridge, then the other socket */
        expect_nic(&g, 1, own[i ^ 1], PDX_TOPO_HOST_BRIDGE, "same host bridge");
        cr_expect_eq(g.nics[2].near, PDX_TOPO_NUMA, "GPU %d: %s", i, g.nics[2].why);
        cr_expect_eq(g.nics[3].near, PDX_TOPO_NUMA, "GPU %d: %s", i, g.nics[3].why);
        for (int k = 4; k < 8; k++) {
            cr_expect_eq(g.nics[k].near, PDX_TOPO_REMOTE, "GPU %d, NIC %d: %s", i, k,
                         g.nics[k].why);
            cr_expect_eq(g.nics[k].numa_node, 1 - i / 4);
        }
        cr_expect(g.nics[0].hops < g.nics[1].hops);
    }
    /* GPU 0's: below its switch's upstream port, then in name order within
     * a class */
    pdx_topo_gpu(t, "0000:03:00.0", &g);
    expect_nic(&g, 0, "mlx5_2", PDX_TOPO_SWITCH, "below bridge 0000:01:00.0");
    expect_nic(&g, 2, "mlx5_0", PDX_TOPO_NUMA, "same NUMA node (0)");
    expect_nic(&g, 3, "mlx5_1", PDX_TOPO_NUMA, "another host bridge");
    expect_nic(&g, 4, "mlx5_4", PDX_TOPO_REMOTE, "other socket: package 1, NUMA node 1");
    cr_expect_str_eq(g.nics[0].pci_bus_id, "0000:04:00.0");
    pdx_topo_free(t);
}

/* NPS2: two NUMA nodes per package, a host bridge each. */
Test(topo, mi355x_ranks_switch_host_bridge_package_socket)
{
    pdx_topo_t *t = load(FIXTURE("mi355x"));
    pdx_topo_gpu_t g;

    pdx_topo_gpu(t, "0000:43:00.0", &g); /* GPU 2: package 0, NUMA node 1 */
    cr_assert(g.found);
    cr_expect_eq(g.numa_node, 1);
    cr_expect_eq(g.package, 0);
    cr_expect_str_eq(g.cpulist, "4-7,20-23");
    expect_nic(&g, 0, "ionic_2", PDX_TOPO_SWITCH, "same PCIe switch");
    expect_nic(&g, 1, "ionic_3", PDX_TOPO_HOST_BRIDGE, "same host bridge");
    expect_nic(&g, 2, "ionic_0", PDX_TOPO_PACKAGE, "same package (0), NUMA node 0");
    expect_nic(&g, 3, "ionic_1", PDX_TOPO_PACKAGE, "the GPU's: 1");
    for (int k = 4; k < 8; k++)
        cr_expect_eq(g.nics[k].near, PDX_TOPO_REMOTE, "NIC %d: %s", k, g.nics[k].why);
    expect_nic(&g, 7, "ionic_7", PDX_TOPO_REMOTE, "NUMA node 3");

    pdx_topo_gpu(t, "0000:d3:00.0", &g); /* GPU 7, upper case in the id too */
    cr_expect_str_eq(g.cpulist, "12-15,28-31");
    expect_nic(&g, 0, "ionic_7", PDX_TOPO_SWITCH, "same PCIe switch");
    pdx_topo_gpu(t, "0000:D3:00.0", &g);
    cr_expect(g.found);
    pdx_topo_free(t);
}

Test(topo, the_only_nic_on_the_other_socket)
{
    pdx_topo_t *t = load(FIXTURE("far-nic"));
    pdx_topo_gpu_t g;

    pdx_topo_gpu(t, "0000:03:00.0", &g);
    cr_assert(g.found);
    cr_expect_str_eq(g.cpulist, "0-7,16-23", "the GPU's socket, not the NIC's");
    cr_assert_eq(g.nnics, 1);
    expect_nic(&g, 0, "mlx5_0", PDX_TOPO_REMOTE, "other socket");
    cr_expect_eq(g.nics[0].numa_node, 1);
    pdx_topo_free(t);
}

Test(topo, a_node_without_nics)
{
    pdx_topo_t *t = load(FIXTURE("no-nic"));
    pdx_topo_nic_t nics[4];
    pdx_topo_gpu_t g;

    pdx_topo_gpu(t, "0000:83:00.0", &g);
    cr_assert(g.found);
    cr_expect_eq(g.nnics, 0);
    cr_expect_eq(g.numa_node, 1);
    cr_expect_str_eq(g.cpulist, "8-15,24-31");
    cr_expect_eq(pdx_topo_nics(t, nics, 4), 0);
    pdx_topo_free(t);
}

Test(topo, two_nics_per_gpu_come_first_in_name_order)
{
    pdx_topo_t *t = load(FIXTURE("two-nics"));
    pdx_topo_gpu_t g;

    pdx_topo_gpu(t, "0000:03:00.0", &g);
    cr_assert_eq(g.nnics, 4);
    expect_nic(&g, 0, "mlx5_1", PDX_TOPO_SWITCH, "same PCIe switch");
    expect_nic(&g, 1, "mlx5_3", PDX_TOPO_SWITCH, "same PCIe switch");
    expect_nic(&g, 2, "mlx5_0", PDX_TOPO_HOST_BRIDGE, "same host bridge");
    expect_nic(&g, 3, "mlx5_2", PDX_TOPO_HOST_BRIDGE, "same host bridge");
    pdx_topo_gpu(t, "0000:13:00.0", &g);
    expect_nic(&g, 0, "mlx5_0", PDX_TOPO_SWITCH, "same PCIe switch");
    expect_nic(&g, 1, "mlx5_2", PDX_TOPO_SWITCH, "same PCIe switch");
    pdx_topo_free(t);
}

/* A GPU the topology lacks: every CPU, the NICs in name order, unranked. */
Test(topo, an_unknown_gpu)
{
    pdx_topo_t *t = load(FIXTURE("mi300x"));
    pdx_topo_gpu_t g;

    pdx_topo_gpu(t, "0000:99:00.0", &g);
    cr_expect_not(g.found);
    cr_expect_eq(g.numa_node, -1);
    cr_expect_str_eq(g.cpulist, "0-31");
    cr_assert_eq(g.nnics, 8);
    for (int k = 0; k < 8; k++) {
        char name[24];

        snprintf(name, sizeof(name), "mlx5_%d", k);
        expect_nic(&g, (uint32_t)k, name, PDX_TOPO_UNKNOWN, "not in the topology");
    }
    pdx_topo_gpu(t, "not a bus id", &g);
    cr_expect_not(g.found);
    pdx_topo_gpu(t, NULL, &g);
    cr_expect_not(g.found);
    pdx_topo_free(t);
}

Test(topo, a_file_that_is_not_a_topology)
{
    pdx_topo_t *t = NULL;

    cr_expect_eq(pdx_topo_load(PDX_SOURCE_DIR "/tests/topo/absent.xml", &t), PDX_ERR_IO);
    cr_expect_eq(pdx_topo_load(PDX_SOURCE_DIR "/tests/topo/make_fixtures.py", &t), PDX_ERR_IO);
    cr_expect_null(t);
}

/* The machine's own. */
Test(topo, this_machine)
{
    pdx_topo_t *t = NULL;
    cpu_set_t all;

    cr_assert_eq(pdx_topo_load(NULL, &t), PDX_OK);
    pdx_topo_all_cpus(t, &all);
    cr_expect_gt(CPU_COUNT(&all), 0);
    pdx_topo_free(t);
}

Test(topo, affinity_rules)
{
    pdx_topo_t *t = load(FIXTURE("mi300x"));
    char why[256], list[64];
    pdx_topo_gpu_t g;
    cpu_set_t cpus;
    bool bind;

    pdx_topo_gpu(t, "0000:83:00.0", &g);
    cr_assert_eq(pdx_topo_affinity("auto", t, &g, &cpus, &bind, why, sizeof(why)), PDX_OK);
    cr_expect(bind);
    pdx_cpulist_format(&cpus, list, sizeof(list));
    cr_expect_str_eq(list, "8-15,24-31");
    cr_expect(strstr(why, "local to GPU 0000:83:00.0 (NUMA node 1)"), "%s", why);

    cr_assert_eq(pdx_topo_affinity("off", t, &g, &cpus, &bind, why, sizeof(why)), PDX_OK);
    cr_expect_not(bind);
    cr_assert_eq(pdx_topo_affinity("2-3,40-70", t, &g, &cpus, &bind, why, sizeof(why)), PDX_OK);
    cr_expect(bind);
    pdx_cpulist_format(&cpus, list, sizeof(list));
    cr_expect_str_eq(list, "2-3", "only the CPUs the machine has");
    cr_expect(strstr(why, "the process may use 2-3"), "%s", why);
    cr_expect_eq(pdx_topo_affinity("40-70", t, &g, &cpus, &bind, why, sizeof(why)),
                 PDX_ERR_INVALID);
    cr_expect_eq(pdx_topo_affinity("3-1", t, &g, &cpus, &bind, why, sizeof(why)),
                 PDX_ERR_INVALID);

    /* no GPU, or one the topology lacks: auto binds nothing */
    cr_assert_eq(pdx_topo_affinity("auto", t, NULL, &cpus, &bind, why, sizeof(why)), PDX_OK);
    cr_expect_not(bind);
    cr_expect(strstr(why, "no GPU"), "%s", why);
    pdx_topo_gpu(t, "0000:99:00.0", &g);
    cr_assert_eq(pdx_topo_affinity("auto", t, &g, &cpus, &bind, why, sizeof(why)), PDX_OK);
    cr_expect_not(bind);
    pdx_topo_free(t);
}

Test(topo, cpu_lists)
{
    static const struct {
        const char *in, *out;
    } ok[] = {
        {"0", "0"}, {"0-3", "0-3"}, {"3,1,2", "1-3"}, {"0-7,16-23", "0-7,16-23"},
        {"5,7,9", "5,7,9"}, {"1023", "1023"}, {"010", "10"},
    };
    static const char *const bad[] = {"", "-1", "1-", "a", "1,,2", "3-1", "0-1024", "1 2",
                                      "0x3", "1,"};
    char err[160], out[PDX_TOPO_CPULIST_MAX], small[8];
    cpu_set_t cpus;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        cr_assert_eq(pdx_cpulist_parse(ok[i].in, &cpus, err, sizeof(err)), PDX_OK, "%s: %s",
                     ok[i].in, err);
        pdx_cpulist_format(&cpus, out, sizeof(out));
        cr_expect_str_eq(out, ok[i].out, "%s", ok[i].in);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(pdx_cpulist_parse(bad[i], &cpus, err, sizeof(err)), PDX_ERR_INVALID,
                     "\"%s\" parsed", bad[i]);
    cr_assert_eq(pdx_cpulist_parse("0,2,4,6,8,10", &cpus, err, sizeof(err)), PDX_OK);
    pdx_cpulist_format(&cpus, small, sizeof(small));
    cr_expect_str_eq(small, "0,2,...", "cut where it does not fit, and says so");
    CPU_ZERO(&cpus);
    pdx_cpulist_format(&cpus, out, sizeof(out));
    cr_expect_str_eq(out, "");
}
