/*
 * PDX_CPU_AFFINITY on a live engine (tcp): a CPU list puts every shard
 * worker and the tcp progress thread on those CPUs, off leaves them on the
 * process's; malformed lists are refused when the variable is parsed, and
 * a list of CPUs the process may not use when the engine is created. The
 * control thread is not bound. (What auto picks on a GPU node is
 * test_topo's, on XML topologies: this machine has no GPU.)
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pdx/pdx.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring.h"
#include "util.h"


/* How many threads of this process carry a name that starts with prefix;
 * *off_p: how many of them are not on exactly the CPUs want. */
static int threads_named(const char *prefix, const cpu_set_t *want, int *off_p)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *t;
    int n = 0;

    cr_assert_not_null(d);
    *off_p = 0;
    while ((t = readdir(d)) != NULL) {
        char path[300], comm[32] = "";
        cpu_set_t cpus;
        FILE *f;
        int tid = atoi(t->d_name);

        snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
        f = tid > 0 ? fopen(path, "re") : NULL;
        if (!f)
            continue; /* not a thread, or gone */
        if (!fgets(comm, sizeof(comm), f) || strncmp(comm, prefix, strlen(prefix)) != 0) {
            fclose(f);
            continue;
        }
        fclose(f);
        cr_assert_eq(sched_getaffinity(tid, sizeof(cpus), &cpus), 0);
        *off_p += !CPU_EQUAL(&cpus, want);
        n++;
    }
    closedir(d);
    return n;
}

/* count threads named prefix, each on exactly want, within 5 s (a thread
 * names itself when it starts, after pdx_engine_create returned). */
static void expect_threads(const char *prefix, const cpu_set_t *want, int count)
{
    struct timespec nap = {0, 1000000};
    int n = 0, off = 0;

    for (int i = 0; i < 5000 && (n = threads_named(prefix, want, &off)) < count; i++)
        nanosleep(&nap, NULL);
    cr_expect_eq(n, count, "threads named %s", prefix);
    cr_expect_eq(off, 0, "%d of the threads named %s are not on the CPUs asked for", off, prefix);
}

static pdx_status_t engine(const char *affinity, pdx_engine_t **e_p)
{
    pdx_config_t cfg;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp"), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0"), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_SHARDS", "3"), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_CPU_AFFINITY", affinity), PDX_OK);
    return pdx_engine_create(&cfg, e_p);
}

Test(affinity, a_cpu_list_binds_the_shards_and_the_tcp_thread)
{
    cpu_set_t mine, one;
    pdx_engine_t *e = NULL;
    char list[16];
    int last = -1;

    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    if (CPU_COUNT(&mine) < 2)
        cr_skip_test("one CPU: a bound thread could not be told from an unbound one");
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            last = c;
    CPU_ZERO(&one);
    CPU_SET(last, &one);
    snprintf(list, sizeof(list), "%d", last);
    cr_assert_eq(engine(list, &e), PDX_OK);
    expect_threads("pdx-shard", &one, 3);
    expect_threads("pdx-tcp", &one, 1);
    if (CPU_COUNT(&mine) > 1)
        expect_threads("pdx-ctrl", &mine, 1); /* not bound */
    pdx_engine_destroy(e);
}

Test(affinity, off_leaves_threads_where_the_process_runs)
{
    pdx_engine_t *e = NULL;
    cpu_set_t mine;

    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    cr_assert_eq(engine("off", &e), PDX_OK);
    expect_threads("pdx-shard", &mine, 3);
    expect_threads("pdx-tcp", &mine, 1);
    pdx_engine_destroy(e);
    /* auto without a GPU binds nothing either */
    cr_assert_eq(engine("auto", &e), PDX_OK);
    expect_threads("pdx-shard", &mine, 3);
    pdx_engine_destroy(e);
}

Test(affinity, bad_lists_are_refused)
{
    static const char *const bad[] = {"", "on", "0-", "2-1", "0,,1", "-1", "0-4096", "0x1"};
    pdx_engine_t *e = NULL;
    pdx_config_t cfg;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(pdx_config_set(&cfg, "PDX_CPU_AFFINITY", bad[i]), PDX_ERR_INVALID,
                     "\"%s\" taken", bad[i]);
    /* well formed, but none of them is the process's */
    cr_expect_eq(engine("1023", &e), PDX_ERR_INVALID);
    cr_expect_null(e);
    /* a program's own struct, which no parser saw: refused, and unterminated too */
    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    strcpy(cfg.cpu_affinity, "0-");
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID);
    memset(cfg.cpu_affinity, '1', sizeof(cfg.cpu_affinity));
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID);
    cr_expect_null(e);
}

/* The NUMA policy of the page at addr: its mode, and whether node is in it. */
static int policy_of(void *addr, int node, bool *has_node)
{
    unsigned long mask[16] = {0};
    int mode = -1;

    cr_assert_eq(syscall(SYS_get_mempolicy, &mode, mask, sizeof(mask) * 8, addr, 2ul /* ADDR */),
                 0, "get_mempolicy");
    *has_node = (mask[node / 64] >> (node % 64)) & 1;
    return mode;
}

/* Rings prefer the node they are given (MPOL_PREFERRED, 1) before any page
 * is touched; -1 leaves the default policy (0). Node 0 exists everywhere. */
Test(affinity, rings_prefer_the_given_node)
{
    pdx_ring_t ring, plain;
    bool has;

    cr_assert_eq(pdx_ring_init(&ring, 64, 4096), PDX_OK);
    cr_assert_eq(pdx_ring_init(&plain, 64, 4096), PDX_OK);
    pdx_ring_prefer_node(&ring, 0);
    pdx_ring_prefer_node(&plain, -1);
    cr_expect_eq(policy_of(ring.cells, 0, &has), 1, "cells: MPOL_PREFERRED");
    cr_expect(has, "cells: node 0");
    cr_expect_eq(policy_of(ring.pages, 0, &has), 1, "pages: MPOL_PREFERRED");
    cr_expect(has, "pages: node 0");
    cr_expect_eq(policy_of(ring.done, 0, &has), 1, "done: MPOL_PREFERRED");
    cr_expect_eq(policy_of(plain.cells, 0, &has), 0, "no node: the default policy");
    pdx_ring_fini(&ring);
    pdx_ring_fini(&plain);
}
