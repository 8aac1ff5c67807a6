/*
 * plan.c against a naive reference: one write per page per matched buffer.
 *
 * Both are expanded into byte-range mappings (src mem/offset -> dst
 * mem/offset) and brought to a canonical form (sorted, adjacent ranges
 * merged): the same bytes must land in the same places. Every run must fit
 * max_msg_size and lie inside one contiguous range of the reference, the run
 * count must be the minimum for the map (sum over segments of
 * ceil(bytes / max_msg_size)), and the run sequence must equal a greedy
 * merge of the reference writes in group -> layer -> part -> page order.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "plan.h"
#include "plan_ref.h"
#include "util.h"

/* ------------------------------------------------------------ random maps */

/*
 * With plan->piece set: the runs are the reference's maximal segments (the
 * greedy merge without a cap), each cut in order where a run reaches max
 * bytes or either side's offset reaches a multiple of piece.
 */
static void check_plan_pieces(const pdx_layout_t *src, const pdx_layout_t *dst,
                              const pdx_pages_t *sp, const pdx_pages_t *dp, uint64_t max,
                              uint64_t piece, unsigned flags, uint64_t seed, const char *ctx)
{
    pdx_plan_t plan;
    reference_t ref;
    vec_t runs, want = {0};
    char err[256] = "";
    uint64_t rng = seed;

    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, max, flags, err, sizeof(err)), PDX_OK,
                 "%s: init: %s", ctx, err);
    plan.piece = piece;
    runs = pull(&plan, 0, &rng);
    build_reference(&ref, src, dst, sp, dp, BIG_MSG, flags);
    for (size_t i = 0; i < ref.greedy.n; i++) {
        pdx_run_t seg = ref.greedy.v[i];

        while (seg.len) {
            pdx_run_t r = seg;

            r.len = PDX_MIN(PDX_MIN(seg.len, max), piece - seg.src_offset % piece);
            r.len = PDX_MIN(r.len, piece - seg.dst_offset % piece);
            vec_push(&want, r);
            seg.src_offset += r.len;
            seg.dst_offset += r.len;
            seg.len -= r.len;
        }
    }
    cr_assert_eq(runs.n, want.n, "%s: %zu runs, %zu expected", ctx, runs.n, want.n);
    for (size_t i = 0; i < runs.n; i++) {
        const pdx_run_t *r = &runs.v[i];

        cr_assert(memcmp(r, &want.v[i], sizeof(*r)) == 0, "%s: run %zu differs", ctx, i);
        cr_assert(r->src_offset / piece == (r->src_offset + r->len - 1) / piece &&
                      r->dst_offset / piece == (r->dst_offset + r->len - 1) / piece,
                  "%s: run %zu crosses a piece", ctx, i);
    }
    vec_free(&runs);
    vec_free(&want);
    reference_free(&ref);
}

static void random_case(uint64_t seed, int iterations)
{
    static const uint64_t bpps[] = { 8, 48, 100, 256, 576, 1000, 2048 };
    static const uint64_t maxes[] = { 48, 100, 512, 1000, 4096, 65536, BIG_MSG };

    for (int it = 0; it < iterations; it++) {
        uint64_t s = seed * 1000003u + (uint64_t)it;
        uint32_t ngroups = 1 + rnd_below(&s, 3);
        uint32_t c0 = rnd_below(&s, 6), c1 = c0 + 1 + rnd_below(&s, 4);
        uint32_t slb = c0 - rnd_below(&s, c0 + 1), sle = c1 + rnd_below(&s, 3);
        uint32_t dlb = c0 - rnd_below(&s, c0 + 1), dle = c1 + rnd_below(&s, 3);
        tgroup_t sgs[3], dgs[3];
        uint32_t *lists[3][2];
        pdx_pages_t sp[3], dp[3];
        pdx_layout_t *src, *dst;
        uint64_t max = maxes[rnd_below(&s, PDX_ARRAY_SIZE(maxes))];
        unsigned flags = rnd_below(&s, 2) ? PDX_PLAN_STATE : 0;
        char ctx[128];

        for (uint32_t g = 0; g < ngroups; g++) {
            uint32_t r = rnd_below(&s, 8);
            uint32_t gflags = (r == 0 ? PDX_GROUP_NO_LAYERS : 0) | (r == 1 ? PDX_GROUP_STATE : 0) |
                              (r == 2 ? PDX_GROUP_NO_LAYERS | PDX_GROUP_STATE : 0);
            uint32_t parts = 1 + rnd_below(&s, 3);
            uint32_t k;

            sgs[g] = (tgroup_t){ .flags = gflags, .parts = parts,
                                 .npages = 1 + rnd_below(&s, 48) };
            for (uint32_t p = 0; p < parts; p++)
                sgs[g].bpp[p] = bpps[rnd_below(&s, PDX_ARRAY_SIZE(bpps))];
            dgs[g] = sgs[g];
            dgs[g].npages = 1 + rnd_below(&s, 48);
            k = rnd_below(&s, 10) == 0 ? 0
                : rnd_below(&s, (uint32_t)PDX_MIN(sgs[g].npages, dgs[g].npages)) + 1;
            lists[g][0] = calloc(k + 1, sizeof(uint32_t));
            lists[g][1] = calloc(k + 1, sizeof(uint32_t));
            cr_assert(lists[g][0] && lists[g][1]);
            fill_pages(&s, (int)rnd_below(&s, MAP_KINDS), (uint32_t)sgs[g].npages, k, lists[g][0]);
            fill_pages(&s, (int)rnd_below(&s, MAP_KINDS), (uint32_t)dgs[g].npages, k, lists[g][1]);
            sp[g] = (pdx_pages_t){ lists[g][0], k };
            dp[g] = (pdx_pages_t){ lists[g][1], k };
        }
        src = build_layout(slb, sle, sgs, ngroups, 0);
        dst = build_layout(dlb, dle, dgs, ngroups, 100);
        snprintf(ctx, sizeof(ctx), "seed %llu iteration %d", (unsigned long long)seed, it);
        check_plan(src, dst, sp, dp, max, flags, 0, s, ctx);
        check_plan(src, dst, sp, dp, max, flags, 64, s, ctx);
        check_plan_pieces(src, dst, sp, dp, max, 64u << rnd_below(&s, 8), flags, s, ctx);

        pdx_layout_free(src);
        pdx_layout_free(dst);
        for (uint32_t g = 0; g < ngroups; g++) {
            free(lists[g][0]);
            free(lists[g][1]);
        }
    }
}

Test(plan_random, seed_1) { random_case(1, 400); }
Test(plan_random, seed_2) { random_case(2, 400); }
Test(plan_random, seed_3) { random_case(3, 400); }
Test(plan_random, seed_4) { random_case(4, 400); }

/* --------------------------------------------------------- fixed shapes */

/* One group, one buffer of bpp bytes per page, 64 pages on each side. */
static void one_buffer(pdx_layout_t **src_p, pdx_layout_t **dst_p, uint64_t bpp)
{
    tgroup_t g = { .flags = 0, .parts = 1, .npages = 64, .bpp = { bpp } };

    *src_p = build_layout(0, 1, &g, 1, 0);
    *dst_p = build_layout(0, 1, &g, 1, 100);
}

static vec_t plan_all(const pdx_layout_t *src, const pdx_layout_t *dst, const uint32_t *s,
                      const uint32_t *d, uint32_t n, uint64_t max)
{
    pdx_pages_t sp = { s, n }, dp = { d, n };
    pdx_plan_t plan;
    char err[256] = "";
    uint64_t rng = 1;

    cr_assert_eq(pdx_plan_init(&plan, src, dst, &sp, &dp, max, 0, err, sizeof(err)), PDX_OK,
                 "%s", err);
    check_plan(src, dst, &sp, &dp, max, 0, 1, 7, "fixed");
    return pull(&plan, 64, &rng);
}

static void expect_run(const pdx_run_t *r, const pdx_layout_t *src, const pdx_layout_t *dst,
                       uint64_t src_byte, uint64_t dst_byte, uint64_t len)
{
    const pdx_buffer_t *sb = &src->groups[0].buffers[0], *db = &dst->groups[0].buffers[0];

    cr_assert_eq(r->src_mem, sb->mem);
    cr_assert_eq(r->dst_mem, db->mem);
    cr_assert_eq(r->src_offset, sb->offset + src_byte, "src offset %llu, want %llu",
                 (unsigned long long)r->src_offset, (unsigned long long)(sb->offset + src_byte));
    cr_assert_eq(r->dst_offset, db->offset + dst_byte, "dst offset %llu, want %llu",
                 (unsigned long long)r->dst_offset, (unsigned long long)(db->offset + dst_byte));
    cr_assert_eq(r->len, len, "len %llu, want %llu", (unsigned long long)r->len,
                 (unsigned long long)len);
}

Test(plan, contiguous_is_one_run)
{
    uint32_t s[10], d[10];
    pdx_layout_t *src, *dst;
    vec_t runs;

    for (uint32_t i = 0; i < 10; i++) {
        s[i] = 5 + i;
        d[i] = 20 + i;
    }
    one_buffer(&src, &dst, 100);
    runs = plan_all(src, dst, s, d, 10, BIG_MSG);
    cr_assert_eq(runs.n, 1);
    expect_run(&runs.v[0], src, dst, 500, 2000, 1000);
    vec_free(&runs);

    runs = plan_all(src, dst, s, d, 10, 300); /* cut at 300 bytes, inside pages */
    cr_assert_eq(runs.n, 4);
    expect_run(&runs.v[0], src, dst, 500, 2000, 300);
    expect_run(&runs.v[1], src, dst, 800, 2300, 300);
    expect_run(&runs.v[2], src, dst, 1100, 2600, 300);
    expect_run(&runs.v[3], src, dst, 1400, 2900, 100);
    vec_free(&runs);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, reversed_is_one_run_per_page)
{
    uint32_t s[10], d[10];
    pdx_layout_t *src, *dst;
    vec_t runs;

    for (uint32_t i = 0; i < 10; i++) {
        s[i] = 9 - i;
        d[i] = i;
    }
    one_buffer(&src, &dst, 100);
    runs = plan_all(src, dst, s, d, 10, BIG_MSG);
    cr_assert_eq(runs.n, 10);
    for (uint32_t i = 0; i < 10; i++)
        expect_run(&runs.v[i], src, dst, (9 - i) * 100, i * 100, 100);
    vec_free(&runs);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, mixed_breaks_where_either_side_jumps)
{
    /* [3 4 5]->[7 8 9], then src jumps (dst does not), then both jump. */
    uint32_t s[] = { 3, 4, 5, 9, 10, 1, 2 };
    uint32_t d[] = { 7, 8, 9, 10, 11, 2, 30 };
    pdx_layout_t *src, *dst;
    vec_t runs;

    one_buffer(&src, &dst, 100);
    runs = plan_all(src, dst, s, d, 7, BIG_MSG);
    cr_assert_eq(runs.n, 4);
    expect_run(&runs.v[0], src, dst, 300, 700, 300);
    expect_run(&runs.v[1], src, dst, 900, 1000, 200);
    expect_run(&runs.v[2], src, dst, 100, 200, 100);
    expect_run(&runs.v[3], src, dst, 200, 3000, 100);
    vec_free(&runs);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, page_larger_than_max_is_split)
{
    uint32_t s[] = { 2, 3, 7 }, d[] = { 4, 5, 1 };
    pdx_layout_t *src, *dst;
    pdx_pages_t sp = { s, 3 }, dp = { d, 3 };
    pdx_plan_t plan;
    pdx_run_t run;
    uint64_t want[][3] = {
        /* src byte, dst byte, len: pages 2-3 -> 4-5 are 2000 contiguous bytes */
        { 2000, 4000, 300 }, { 2300, 4300, 300 }, { 2600, 4600, 300 }, { 2900, 4900, 300 },
        { 3200, 5200, 300 }, { 3500, 5500, 300 }, { 3800, 5800, 200 },
        /* page 7 -> 1 alone */
        { 7000, 1000, 300 }, { 7300, 1300, 300 }, { 7600, 1600, 300 }, { 7900, 1900, 100 },
    };
    char err[256] = "";

    one_buffer(&src, &dst, 1000);
    cr_assert_eq(pdx_plan_init(&plan, src, dst, &sp, &dp, 300, 0, err, sizeof(err)), PDX_OK);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(want); i++) {
        cr_assert_eq(pdx_plan_next(&plan, &run, 1), 1, "run %zu missing", i);
        expect_run(&run, src, dst, want[i][0], want[i][1], want[i][2]);
    }
    cr_assert_eq(pdx_plan_next(&plan, &run, 1), 0);
    check_plan(src, dst, &sp, &dp, 300, 0, 0, 11, "page > max");
    check_plan(src, dst, &sp, &dp, 1000, 0, 0, 11, "page == max");
    check_plan(src, dst, &sp, &dp, 999, 0, 0, 11, "page == max + 1");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, one_at_a_time_equals_all_at_once)
{
    tgroup_t g[2] = {
        { .flags = 0, .parts = 2, .npages = 40, .bpp = { 512, 128 } },
        { .flags = PDX_GROUP_NO_LAYERS, .parts = 3, .npages = 8, .bpp = { 64, 2048, 8 } },
    };
    uint32_t s0[30], d0[30], s1[5], d1[5];
    pdx_pages_t sp[2] = { { s0, 30 }, { s1, 5 } }, dp[2] = { { d0, 30 }, { d1, 5 } };
    pdx_layout_t *src = build_layout(0, 4, g, 2, 0), *dst = build_layout(0, 4, g, 2, 10);
    pdx_plan_t a, b;
    pdx_run_t one, all[4096];
    uint32_t nall, i = 0;
    uint64_t s = 99;
    char err[256] = "";

    fill_pages(&s, MAP_MIXED, 40, 30, s0);
    fill_pages(&s, MAP_MIXED, 40, 30, d0);
    fill_pages(&s, MAP_RANDOM, 8, 5, s1);
    fill_pages(&s, MAP_CONTIGUOUS, 8, 5, d1);
    cr_assert_eq(pdx_plan_init(&a, src, dst, sp, dp, 700, 0, err, sizeof(err)), PDX_OK, "%s", err);
    cr_assert_eq(pdx_plan_init(&b, src, dst, sp, dp, 700, 0, err, sizeof(err)), PDX_OK, "%s", err);
    nall = pdx_plan_next(&a, all, PDX_ARRAY_SIZE(all));
    cr_assert(nall > 0 && nall < PDX_ARRAY_SIZE(all));
    cr_assert_eq(pdx_plan_next(&a, all + nall, 1), 0);
    while (pdx_plan_next(&b, &one, 1) == 1) {
        cr_assert_lt(i, nall, "one at a time yields more runs");
        cr_assert(memcmp(&one, &all[i], sizeof(one)) == 0, "run %u differs", i);
        i++;
    }
    cr_assert_eq(i, nall);
    check_plan(src, dst, sp, dp, 700, 0, 1, 3, "one at a time");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, k_and_v_in_group_layer_part_order)
{
    /* Two groups: K (512) and V (256) per layer, then one MLA buffer. */
    tgroup_t g[2] = {
        { .flags = 0, .parts = 2, .npages = 16, .bpp = { 512, 256 } },
        { .flags = 0, .parts = 1, .npages = 16, .bpp = { 576 } },
    };
    uint32_t s[4] = { 1, 2, 3, 4 }, d[4] = { 8, 9, 10, 11 };
    pdx_pages_t sp[2] = { { s, 4 }, { s, 2 } }, dp[2] = { { d, 4 }, { d, 2 } };
    pdx_layout_t *src = build_layout(0, 3, g, 2, 0), *dst = build_layout(0, 3, g, 2, 10);
    pdx_plan_t plan;
    pdx_run_t runs[16];
    char err[256] = "";

    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK);
    cr_assert_eq(pdx_plan_next(&plan, runs, 16), 9);
    for (uint32_t i = 0; i < 9; i++) {
        uint32_t grp = i < 6 ? 0 : 1, buf = i < 6 ? i : i - 6;
        const pdx_buffer_t *sb = &src->groups[grp].buffers[buf];
        const pdx_buffer_t *db = &dst->groups[grp].buffers[buf];

        cr_assert_eq(runs[i].src_mem, sb->mem, "run %u", i);
        cr_assert_eq(runs[i].dst_mem, db->mem, "run %u", i);
        cr_assert_eq(runs[i].src_offset, sb->offset + 1 * sb->bytes_per_page, "run %u", i);
        cr_assert_eq(runs[i].dst_offset, db->offset + 8 * db->bytes_per_page, "run %u", i);
        cr_assert_eq(runs[i].len, (grp == 0 ? 4 : 2) * sb->bytes_per_page, "run %u", i);
    }
    check_plan(src, dst, sp, dp, BIG_MSG, 0, 1, 5, "K and V");
    check_plan(src, dst, sp, dp, 600, 0, 2, 5, "K and V, 600-byte cap");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, layer_range_maps_common_layers)
{
    /* Prefill holds layers [10, 40) (pipeline stage), decode all 61. */
    tgroup_t g = { .flags = 0, .parts = 2, .npages = 32, .bpp = { 128, 64 } };
    uint32_t s[8], d[8];
    pdx_pages_t sp = { s, 8 }, dp = { d, 8 };
    pdx_layout_t *src = build_layout(10, 40, &g, 1, 0), *dst = build_layout(0, 61, &g, 1, 10);
    pdx_plan_t plan;
    pdx_run_t runs[128];
    char err[256] = "";

    for (uint32_t i = 0; i < 8; i++) {
        s[i] = i;
        d[i] = 16 + i;
    }
    cr_assert_eq(pdx_plan_init(&plan, src, dst, &sp, &dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK,
                 "%s", err);
    cr_assert_eq(pdx_plan_next(&plan, runs, 128), 60);
    for (uint32_t i = 0; i < 60; i++) {
        uint32_t layer = 10 + i / 2, part = i % 2;
        const pdx_buffer_t *sb = &src->groups[0].buffers[(layer - 10) * 2 + part];
        const pdx_buffer_t *db = &dst->groups[0].buffers[layer * 2 + part];

        cr_assert_eq(runs[i].src_offset, sb->offset, "run %u", i);
        cr_assert_eq(runs[i].dst_offset, db->offset + 16 * db->bytes_per_page, "run %u", i);
        cr_assert_eq(runs[i].len, 8 * sb->bytes_per_page, "run %u", i);
    }
    check_plan(src, dst, &sp, &dp, BIG_MSG, 0, 0, 1, "layers [10,40) -> [0,61)");
    check_plan(dst, src, &dp, &sp, 300, 0, 0, 1, "layers [0,61) -> [10,40)");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, layers_narrow_to_a_range)
{
    /* Prefill [10, 40), decode [0, 61): layers [20, 23) of a K/V group,
     * then the same with the NO_LAYERS group (a chunk's last range). */
    tgroup_t g[2] = {
        { .flags = 0, .parts = 2, .npages = 32, .bpp = { 128, 64 } },
        { .flags = PDX_GROUP_NO_LAYERS, .parts = 1, .npages = 8, .bpp = { 256 } },
    };
    uint32_t s[4] = { 0, 1, 2, 3 }, d[4] = { 16, 17, 18, 19 }, d1[2] = { 4, 5 };
    pdx_pages_t sp[2] = { { s, 4 }, { s, 2 } }, dp[2] = { { d, 4 }, { d1, 2 } };
    pdx_layout_t *src = build_layout(10, 40, g, 2, 0), *dst = build_layout(0, 61, g, 2, 10);
    pdx_plan_t plan;
    pdx_run_t runs[128];
    char err[256] = "";

    for (int with = 0; with < 2; with++) {
        uint32_t n;

        cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, 0, err, sizeof(err)),
                     PDX_OK, "%s", err);
        pdx_plan_layers(&plan, 20, 23, with);
        n = pdx_plan_next(&plan, runs, 128);
        cr_assert_eq(n, 6u + (uint32_t)with, "runs of layers 20-22 (and the unlayered group)");
        for (uint32_t i = 0; i < 6; i++) {
            uint32_t layer = 20 + i / 2, part = i % 2;
            const pdx_buffer_t *sb = &src->groups[0].buffers[(layer - 10) * 2 + part];
            const pdx_buffer_t *db = &dst->groups[0].buffers[layer * 2 + part];

            cr_assert_eq(runs[i].src_mem, sb->mem, "run %u", i);
            cr_assert_eq(runs[i].dst_mem, db->mem, "run %u", i);
            cr_assert_eq(runs[i].dst_offset, db->offset + 16 * db->bytes_per_page, "run %u", i);
            cr_assert_eq(runs[i].len, 4 * sb->bytes_per_page, "run %u", i);
        }
        if (with)
            cr_assert_eq(runs[6].src_mem, src->groups[1].buffers[0].mem);
    }
    /* a range outside the layers both hold plans no layered run */
    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK);
    pdx_plan_layers(&plan, 40, 61, true);
    cr_assert_eq(pdx_plan_next(&plan, runs, 128), 1, "the unlayered group only");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, no_layers_group_matches_index_by_index)
{
    /* Disjoint layer ranges: a NO_LAYERS group still plans. */
    tgroup_t g = { .flags = PDX_GROUP_NO_LAYERS, .parts = 3, .npages = 4, .bpp = { 16, 32, 48 } };
    uint32_t s[2] = { 0, 1 }, d[2] = { 2, 3 };
    pdx_pages_t sp = { s, 2 }, dp = { d, 2 };
    pdx_layout_t *src = build_layout(0, 2, &g, 1, 0), *dst = build_layout(5, 9, &g, 1, 10);
    pdx_plan_t plan;
    pdx_run_t runs[8];
    char err[256] = "";

    cr_assert_eq(pdx_plan_init(&plan, src, dst, &sp, &dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK,
                 "%s", err);
    cr_assert_eq(pdx_plan_next(&plan, runs, 8), 3);
    for (uint32_t b = 0; b < 3; b++) {
        const pdx_buffer_t *sb = &src->groups[0].buffers[b], *db = &dst->groups[0].buffers[b];

        cr_assert_eq(runs[b].src_offset, sb->offset);
        cr_assert_eq(runs[b].dst_offset, db->offset + 2 * db->bytes_per_page);
        cr_assert_eq(runs[b].len, 2 * sb->bytes_per_page);
    }
    check_plan(src, dst, &sp, &dp, 20, 0, 0, 2, "no layers");
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, state_group_only_with_plan_state)
{
    tgroup_t g[2] = {
        { .flags = 0, .parts = 1, .npages = 8, .bpp = { 64 } },
        { .flags = PDX_GROUP_STATE | PDX_GROUP_NO_LAYERS, .parts = 2, .npages = 4,
          .bpp = { 1000, 24 } },
    };
    uint32_t s0[2] = { 0, 1 }, d0[2] = { 4, 5 }, s1[1] = { 3 }, d1[1] = { 0 };
    uint32_t bad[1] = { 77 };
    pdx_pages_t sp[2] = { { s0, 2 }, { s1, 1 } }, dp[2] = { { d0, 2 }, { d1, 1 } };
    pdx_pages_t bad_sp[2] = { { s0, 2 }, { bad, 1 } };
    pdx_layout_t *src = build_layout(0, 2, g, 2, 0), *dst = build_layout(0, 2, g, 2, 10);
    pdx_plan_t plan;
    pdx_run_t runs[8];
    char err[256] = "";

    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK);
    cr_assert_eq(pdx_plan_next(&plan, runs, 8), 2, "two layers of group 0, no state");
    for (uint32_t i = 0; i < 2; i++)
        cr_assert_eq(runs[i].src_mem, 0);

    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, PDX_PLAN_STATE, err,
                               sizeof(err)), PDX_OK);
    cr_assert_eq(pdx_plan_next(&plan, runs, 8), 4, "two layers, then two state buffers");
    cr_assert_eq(runs[2].src_mem, 1);
    cr_assert_eq(runs[2].src_offset, src->groups[1].buffers[0].offset + 3000);
    cr_assert_eq(runs[2].dst_offset, dst->groups[1].buffers[0].offset);
    cr_assert_eq(runs[3].len, 24);
    check_plan(src, dst, sp, dp, 100, 0, 0, 4, "state skipped");
    check_plan(src, dst, sp, dp, 100, PDX_PLAN_STATE, 0, 4, "state planned");

    /* The lists of a skipped state group are not read; planned, they are checked. */
    cr_assert_eq(pdx_plan_init(&plan, src, dst, bad_sp, dp, BIG_MSG, 0, err, sizeof(err)),
                 PDX_OK);
    cr_assert_eq(pdx_plan_init(&plan, src, dst, bad_sp, dp, BIG_MSG, PDX_PLAN_STATE, err,
                               sizeof(err)), PDX_ERR_RANGE);
    cr_assert_eq(pdx_plan_next(&plan, runs, 8), 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, empty_lists_yield_nothing)
{
    pdx_layout_t *src, *dst;
    pdx_pages_t sp = { NULL, 0 }, dp = { NULL, 0 };
    pdx_plan_t plan;
    pdx_run_t run;
    char err[256] = "";

    one_buffer(&src, &dst, 64);
    cr_assert_eq(pdx_plan_init(&plan, src, dst, &sp, &dp, 4096, 0, err, sizeof(err)), PDX_OK);
    cr_assert_eq(pdx_plan_next(&plan, &run, 1), 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan, zeroed_plan_yields_nothing)
{
    pdx_plan_t plan;
    pdx_run_t run;

    memset(&plan, 0, sizeof(plan));
    cr_assert_eq(pdx_plan_next(&plan, &run, 1), 0);
}

/* ----------------------------------------------------------- error paths */

/* init fails with `want`, explains itself naming `needle`, and the plan (filled
 * with garbage first) yields nothing. */
static void expect_fail(pdx_status_t want, const char *needle, const pdx_layout_t *src,
                        const pdx_layout_t *dst, const pdx_pages_t *sp, const pdx_pages_t *dp,
                        uint64_t max, unsigned flags)
{
    pdx_plan_t plan;
    pdx_run_t runs[4];
    char err[256] = "";
    pdx_status_t status;

    memset(&plan, 0xa5, sizeof(plan));
    status = pdx_plan_init(&plan, src, dst, sp, dp, max, flags, err, sizeof(err));
    cr_assert_eq(status, want, "status %d, want %d (%s)", status, want, err);
    cr_assert(err[0] != '\0', "no message");
    cr_assert(strstr(err, needle), "message \"%s\" does not name \"%s\"", err, needle);
    cr_assert_eq(pdx_plan_next(&plan, runs, 4), 0, "a failed plan yields runs");
}

Test(plan_errors, src_index_out_of_range)
{
    pdx_layout_t *src, *dst;
    uint32_t s[5] = { 0, 1, 2, 3, 4 }, d[5] = { 10, 11, 12, 13, 14 };
    pdx_pages_t sp = { s, 5 }, dp = { d, 5 };
    uint32_t positions[] = { 0, 2, 4 };
    char needle[64];

    one_buffer(&src, &dst, 64);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(positions); i++) {
        uint32_t keep = s[positions[i]];

        s[positions[i]] = 64; /* npages is 64 */
        snprintf(needle, sizeof(needle), "src page 64 at position %u", positions[i]);
        expect_fail(PDX_ERR_RANGE, needle, src, dst, &sp, &dp, 4096, 0);
        s[positions[i]] = UINT32_MAX;
        snprintf(needle, sizeof(needle), "src page %u at position %u", UINT32_MAX, positions[i]);
        expect_fail(PDX_ERR_RANGE, needle, src, dst, &sp, &dp, 4096, 0);
        s[positions[i]] = keep;
    }
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, dst_index_out_of_range)
{
    pdx_layout_t *src, *dst;
    uint32_t s[5] = { 0, 1, 2, 3, 4 }, d[5] = { 10, 11, 12, 13, 14 };
    pdx_pages_t sp = { s, 5 }, dp = { d, 5 };
    uint32_t positions[] = { 0, 2, 4 };
    char needle[64];

    one_buffer(&src, &dst, 64);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(positions); i++) {
        uint32_t keep = d[positions[i]];

        d[positions[i]] = 1000;
        snprintf(needle, sizeof(needle), "dst page 1000 at position %u", positions[i]);
        expect_fail(PDX_ERR_RANGE, needle, src, dst, &sp, &dp, 4096, 0);
        d[positions[i]] = keep;
    }
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, out_of_range_in_second_group)
{
    tgroup_t g[2] = {
        { .flags = 0, .parts = 1, .npages = 8, .bpp = { 64 } },
        { .flags = 0, .parts = 1, .npages = 4, .bpp = { 32 } },
    };
    uint32_t s[3] = { 0, 1, 2 }, d[3] = { 1, 2, 4 };
    pdx_pages_t sp[2] = { { s, 3 }, { s, 3 } }, dp[2] = { { s, 3 }, { d, 3 } };
    pdx_layout_t *src = build_layout(0, 1, g, 2, 0), *dst = build_layout(0, 1, g, 2, 10);

    expect_fail(PDX_ERR_RANGE, "group 1: dst page 4 at position 2", src, dst, sp, dp, 4096, 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, list_lengths_differ)
{
    pdx_layout_t *src, *dst;
    uint32_t s[3] = { 0, 1, 2 }, d[3] = { 0, 1, 2 };
    pdx_pages_t sp = { s, 3 }, dp = { d, 2 }, none = { NULL, 3 };

    one_buffer(&src, &dst, 64);
    expect_fail(PDX_ERR_INVALID, "3 src pages but 2 dst pages", src, dst, &sp, &dp, 4096, 0);
    expect_fail(PDX_ERR_INVALID, "no src list", src, dst, &none, &sp, 4096, 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, bytes_per_page_differ)
{
    tgroup_t gs = { .flags = 0, .parts = 2, .npages = 8, .bpp = { 512, 256 } };
    tgroup_t gd = { .flags = 0, .parts = 2, .npages = 8, .bpp = { 512, 128 } };
    uint32_t s[1] = { 0 };
    pdx_pages_t sp = { s, 1 };
    pdx_layout_t *src = build_layout(0, 4, &gs, 1, 0), *dst = build_layout(2, 6, &gd, 1, 10);

    /* Common layers [2, 4): src buffer (2-0)*2+1 = 5 meets dst buffer (2-2)*2+1 = 1. */
    expect_fail(PDX_ERR_INVALID, "src buffer 5 has 256 bytes per page, dst buffer 1 has 128",
                src, dst, &sp, &sp, 4096, 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, group_counts_differ)
{
    tgroup_t g[2] = {
        { .flags = 0, .parts = 1, .npages = 8, .bpp = { 64 } },
        { .flags = 0, .parts = 1, .npages = 8, .bpp = { 64 } },
    };
    uint32_t s[1] = { 0 };
    pdx_pages_t sp[2] = { { s, 1 }, { s, 1 } };
    pdx_layout_t *src = build_layout(0, 1, g, 2, 0), *dst = build_layout(0, 1, g, 1, 10);

    expect_fail(PDX_ERR_INVALID, "groups (src 2, dst 1)", src, dst, sp, sp, 4096, 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, group_shapes_differ)
{
    tgroup_t a = { .flags = 0, .parts = 2, .npages = 8, .bpp = { 64, 64 } };
    tgroup_t b = { .flags = 0, .parts = 1, .npages = 8, .bpp = { 64 } };
    tgroup_t c = { .flags = PDX_GROUP_STATE, .parts = 2, .npages = 8, .bpp = { 64, 64 } };
    tgroup_t n2 = { .flags = PDX_GROUP_NO_LAYERS, .parts = 2, .npages = 8, .bpp = { 64, 64 } };
    tgroup_t n3 = { .flags = PDX_GROUP_NO_LAYERS, .parts = 3, .npages = 8, .bpp = { 64, 64, 64 } };
    uint32_t s[1] = { 0 };
    pdx_pages_t sp = { s, 1 };
    pdx_layout_t *la = build_layout(0, 2, &a, 1, 0), *lb = build_layout(0, 2, &b, 1, 10);
    pdx_layout_t *lc = build_layout(0, 2, &c, 1, 10);
    pdx_layout_t *ln2 = build_layout(0, 1, &n2, 1, 0), *ln3 = build_layout(0, 1, &n3, 1, 10);
    pdx_layout_t *far = build_layout(2, 4, &a, 1, 10);

    expect_fail(PDX_ERR_INVALID, "buffers per layer differ (src 2, dst 1)", la, lb, &sp, &sp,
                4096, 0);
    expect_fail(PDX_ERR_INVALID, "flags differ", la, lc, &sp, &sp, 4096, 0);
    expect_fail(PDX_ERR_INVALID, "buffers per layer differ", ln2, ln3, &sp, &sp, 4096, 0);
    expect_fail(PDX_ERR_INVALID, "no common layers", la, far, &sp, &sp, 4096, 0);
    pdx_layout_free(la);
    pdx_layout_free(lb);
    pdx_layout_free(lc);
    pdx_layout_free(ln2);
    pdx_layout_free(ln3);
    pdx_layout_free(far);
}

Test(plan_errors, no_layers_buffer_counts_differ)
{
    /* Same flags and buffers_per_layer as stored, different buffer counts:
     * only a peer's layout can look like this. */
    tgroup_t n2 = { .flags = PDX_GROUP_NO_LAYERS, .parts = 2, .npages = 8, .bpp = { 64, 64 } };
    uint32_t s[1] = { 0 };
    pdx_pages_t sp = { s, 1 };
    pdx_layout_t *src = build_layout(0, 1, &n2, 1, 0), *dst = build_layout(0, 1, &n2, 1, 10);

    dst->groups[0].nbuffers = 1;
    expect_fail(PDX_ERR_INVALID, "2 src buffers but 1 dst buffers", src, dst, &sp, &sp, 4096, 0);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

Test(plan_errors, bad_arguments)
{
    pdx_layout_t *src, *dst;
    uint32_t s[1] = { 0 };
    pdx_pages_t sp = { s, 1 };
    char err[64] = "";

    one_buffer(&src, &dst, 64);
    expect_fail(PDX_ERR_INVALID, "max message size is 0", src, dst, &sp, &sp, 0, 0);
    expect_fail(PDX_ERR_INVALID, "layouts", NULL, dst, &sp, &sp, 4096, 0);
    expect_fail(PDX_ERR_INVALID, "page lists", src, dst, NULL, &sp, 4096, 0);
    cr_assert_eq(pdx_plan_init(NULL, src, dst, &sp, &sp, 4096, 0, err, sizeof(err)),
                 PDX_ERR_INVALID);
    cr_assert(err[0] != '\0');
    /* err may be NULL: the status alone. */
    cr_assert_eq(pdx_plan_init(NULL, src, dst, &sp, &sp, 4096, 0, NULL, 0), PDX_ERR_INVALID);
    pdx_layout_free(src);
    pdx_layout_free(dst);
}

/* pdx_plan_pairs: a group's buffer pairs are those its runs join, in plan
 * order (the ipc transport copies pages of them without runs). */
Test(plan, pairs_are_the_buffers_runs_join)
{
    tgroup_t g[2] = {
        { .flags = 0, .parts = 2, .npages = 32, .bpp = { 128, 64 } },
        { .flags = PDX_GROUP_STATE, .parts = 1, .npages = 4, .bpp = { 32 } },
    };
    uint32_t s[3] = { 5, 9, 2 }, d[3] = { 1, 30, 7 }, one[1] = { 0 };
    pdx_pages_t sp[2] = { { s, 3 }, { one, 1 } }, dp[2] = { { d, 3 }, { one, 1 } };
    pdx_layout_t *src = build_layout(10, 40, g, 2, 0), *dst = build_layout(0, 61, g, 2, 10);
    uint32_t sb[PDX_LAYOUT_MAX_BUFFERS], db[PDX_LAYOUT_MAX_BUFFERS];
    pdx_plan_t plan;
    pdx_run_t runs[256];
    char err[256] = "";
    uint32_t n, pairs;

    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, 0, err, sizeof(err)), PDX_OK,
                 "%s", err);
    pairs = pdx_plan_pairs(&plan, 0, sb, db);
    cr_assert_eq(pairs, 60, "30 common layers x 2 parts: %u", pairs);
    cr_assert_eq(pdx_plan_pairs(&plan, 1, sb + 60, db + 60), 0, "a state group not planned");
    cr_assert_eq(pdx_plan_pairs(&plan, 2, sb + 60, db + 60), 0, "no group 2");
    n = pdx_plan_next(&plan, runs, 256);
    cr_assert_eq(n, 3 * 60, "three scattered pages per pair: %u runs", n);
    for (uint32_t i = 0; i < n; i++) {
        const pdx_buffer_t *b = &src->groups[0].buffers[sb[i / 3]];
        const pdx_buffer_t *c = &dst->groups[0].buffers[db[i / 3]];

        cr_assert_eq(runs[i].src_mem, b->mem, "run %u", i);
        cr_assert_eq(runs[i].dst_mem, c->mem, "run %u", i);
        cr_assert_eq(runs[i].src_offset, b->offset + s[i % 3] * b->bytes_per_page, "run %u", i);
        cr_assert_eq(runs[i].dst_offset, c->offset + d[i % 3] * c->bytes_per_page, "run %u", i);
    }
    /* with the last chunk's flag the state group is planned: a pair per
     * common layer, decode's from its layer 10 on */
    cr_assert_eq(pdx_plan_init(&plan, src, dst, sp, dp, BIG_MSG, PDX_PLAN_STATE, err,
                               sizeof(err)), PDX_OK, "%s", err);
    cr_assert_eq(pdx_plan_pairs(&plan, 1, sb, db), 30);
    for (uint32_t i = 0; i < 30; i++) {
        cr_assert_eq(sb[i], i);
        cr_assert_eq(db[i], 10 + i);
    }
    pdx_layout_free(src);
    pdx_layout_free(dst);
}
