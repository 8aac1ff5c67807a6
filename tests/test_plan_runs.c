/*
 * plan.c over explicit runs (one-sided transfers by descriptor): runs cut at
 * the message size and at pieces, cut one at a time as all at once, and
 * coalesced where they continue on both sides.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Every byte of runs[0, n) is covered by out[0, m), in order, once. */
static void expect_covers(const pdx_run_t *runs, uint32_t n, const pdx_run_t *out, uint32_t m)
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint64_t done = 0;

        while (done < runs[i].len) {
            cr_assert_lt(k, m, "run %u: %llu of %llu bytes yielded", i,
                         (unsigned long long)done, (unsigned long long)runs[i].len);
            cr_assert_eq(out[k].src_mem, runs[i].src_mem);
            cr_assert_eq(out[k].dst_mem, runs[i].dst_mem);
            cr_assert_eq(out[k].src_offset, runs[i].src_offset + done);
            cr_assert_eq(out[k].dst_offset, runs[i].dst_offset + done);
            cr_assert_gt(out[k].len, 0u);
            done += out[k++].len;
        }
        cr_assert_eq(done, runs[i].len, "run %u overrun", i);
    }
    cr_assert_eq(k, m, "runs yielded beyond the plan");
}

Test(plan_runs, cut_at_max_msg_size_and_pieces)
{
    const pdx_run_t runs[] = {
        {.src_mem = 1, .dst_mem = 2, .src_offset = 0, .dst_offset = 4096, .len = 10000},
        {.src_mem = 1, .dst_mem = 3, .src_offset = 60000, .dst_offset = 1000, .len = 0},
        {.src_mem = 4, .dst_mem = 3, .src_offset = 100, .dst_offset = 65000, .len = 1000},
    };
    pdx_run_t out[64];
    pdx_plan_t plan;
    uint32_t m;

    pdx_plan_init_runs(&plan, runs, 3, 4096);
    m = pdx_plan_next(&plan, out, 64);
    expect_covers(runs, 3, out, m);
    cr_assert_eq(m, 3u + 1u, "10000 bytes in pieces of 4096, then 1000");
    cr_assert_eq(pdx_plan_next(&plan, out, 64), 0u, "exhausted");
    /* pieces of 64 KiB on the destination: the last run is cut at 65536 */
    pdx_plan_init_runs(&plan, runs, 3, 1 << 20);
    plan.piece = 65536;
    m = pdx_plan_next(&plan, out, 64);
    expect_covers(runs, 3, out, m);
    cr_assert_eq(m, 3u);
    cr_assert_eq(out[1].len, 536u);
    cr_assert_eq(out[2].dst_offset, 65536u);
}

Test(plan_runs, one_at_a_time_equals_all_at_once)
{
    pdx_run_t runs[40], all[400], one[400];
    pdx_plan_t a, b;
    unsigned seed = 5;
    uint32_t na, nb = 0, k;

    for (uint32_t i = 0; i < 40; i++)
        runs[i] = (pdx_run_t){.src_mem = (uint32_t)rand_r(&seed) % 3,
                              .dst_mem = (uint32_t)rand_r(&seed) % 3,
                              .src_offset = (uint64_t)rand_r(&seed) % 100000,
                              .dst_offset = (uint64_t)rand_r(&seed) % 100000,
                              .len = (uint64_t)rand_r(&seed) % 20000};
    pdx_plan_init_runs(&a, runs, 40, 3000);
    pdx_plan_init_runs(&b, runs, 40, 3000);
    a.piece = b.piece = 8192;
    na = pdx_plan_next(&a, all, 400);
    expect_covers(runs, 40, all, na);
    while ((k = pdx_plan_next(&b, one + nb, 1)) != 0)
        nb += k;
    cr_assert_eq(nb, na);
    cr_assert_eq(memcmp(one, all, na * sizeof(*all)), 0);
    for (uint32_t i = 0; i < na; i++) {
        cr_assert_leq(all[i].len, 3000u);
        cr_assert_eq(all[i].src_offset / 8192, (all[i].src_offset + all[i].len - 1) / 8192);
        cr_assert_eq(all[i].dst_offset / 8192, (all[i].dst_offset + all[i].len - 1) / 8192);
    }
}

Test(plan_runs, coalesce_merges_what_continues_on_both_sides)
{
    pdx_run_t runs[] = {
        {.src_mem = 1, .dst_mem = 2, .src_offset = 0, .dst_offset = 100, .len = 50},
        {.src_mem = 1, .dst_mem = 2, .src_offset = 50, .dst_offset = 150, .len = 50},  /* merges */
        {.src_mem = 1, .dst_mem = 2, .src_offset = 0, .dst_offset = 0, .len = 0},     /* dropped */
        {.src_mem = 1, .dst_mem = 2, .src_offset = 100, .dst_offset = 200, .len = 8},  /* merges */
        {.src_mem = 1, .dst_mem = 2, .src_offset = 108, .dst_offset = 300, .len = 8},  /* dst jumps */
        {.src_mem = 1, .dst_mem = 5, .src_offset = 116, .dst_offset = 308, .len = 8},  /* region */
        {.src_mem = 1, .dst_mem = 5, .src_offset = 200, .dst_offset = 316, .len = 8},  /* src jumps */
    };
    uint32_t n = pdx_plan_coalesce(runs, 7);

    cr_assert_eq(n, 4u);
    cr_assert_eq(runs[0].len, 108u);
    cr_assert_eq(runs[0].dst_offset, 100u);
    cr_assert_eq(runs[1].dst_offset, 300u);
    cr_assert_eq(runs[2].dst_mem, 5u);
    cr_assert_eq(runs[3].src_offset, 200u);
    cr_assert_eq(pdx_plan_coalesce(runs, 0), 0u);
}

Test(plan_runs, no_runs_yield_nothing)
{
    pdx_run_t out[4];
    pdx_plan_t plan;

    pdx_plan_init_runs(&plan, NULL, 5, 4096);
    cr_assert_eq(pdx_plan_next(&plan, out, 4), 0u);
}
