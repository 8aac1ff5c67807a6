/*
 * The reference of test_plan.c: one write per page per matched buffer,
 * expanded into byte-range mappings and brought to a canonical form, and
 * the checks of a plan against it.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_ref.h"
#include "util.h"

/* Groups in mems mem_base + g; buffers back to back with a gap, so no two
 * buffers touch and no run can join across buffers by accident. */
pdx_layout_t *build_layout(uint32_t layer_begin, uint32_t layer_end, const tgroup_t *gs,
                           uint32_t ngroups, uint32_t mem_base)
{
    pdx_group_desc_t gd[PDX_LAYOUT_MAX_GROUPS];
    pdx_buffer_desc_t *bufs[PDX_LAYOUT_MAX_GROUPS];
    pdx_layout_desc_t desc = {
        .field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
        .ngroups = ngroups,
        .layer_begin = layer_begin,
        .layer_end = layer_end,
        .groups = gd,
    };
    pdx_layout_t *layout = NULL;
    char err[256] = "";
    pdx_status_t status;

    cr_assert(ngroups <= PDX_LAYOUT_MAX_GROUPS);
    for (uint32_t g = 0; g < ngroups; g++) {
        int layered = !(gs[g].flags & PDX_GROUP_NO_LAYERS);
        uint32_t n = layered ? (layer_end - layer_begin) * gs[g].parts : gs[g].parts;
        uint64_t offset = 4096 * (g + 1);

        cr_assert(gs[g].parts >= 1 && gs[g].parts <= TMAX_PARTS);
        bufs[g] = calloc(n, sizeof(*bufs[g]));
        cr_assert_not_null(bufs[g]);
        for (uint32_t b = 0; b < n; b++) {
            bufs[g][b].mem = mem_base + g;
            bufs[g][b].offset = offset;
            bufs[g][b].bytes_per_page = gs[g].bpp[b % gs[g].parts];
            offset += gs[g].npages * bufs[g][b].bytes_per_page + 64;
        }
        gd[g] = (pdx_group_desc_t){
            .flags = gs[g].flags,
            .buffers_per_layer = gs[g].parts,
            .nbuffers = n,
            .npages = gs[g].npages,
            .buffers = bufs[g],
        };
    }
    status = pdx_layout_from_desc(&desc, &layout, err, sizeof(err));
    for (uint32_t g = 0; g < ngroups; g++)
        free(bufs[g]);
    cr_assert_eq(status, PDX_OK, "layout: %s", err);
    return layout;
}

void vec_push(vec_t *a, pdx_run_t r)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->v = realloc(a->v, a->cap * sizeof(*a->v));
        cr_assert_not_null(a->v);
    }
    a->v[a->n++] = r;
}

void vec_free(vec_t *a)
{
    free(a->v);
    memset(a, 0, sizeof(*a));
}

/* Greedy merge of write r into the current run cur, cut at max bytes. */
void greedy_add(vec_t *runs, pdx_run_t *cur, pdx_run_t r, uint64_t max)
{
    uint64_t pos = 0;

    while (pos < r.len) {
        uint64_t take;

        if (cur->len && cur->len < max && cur->src_mem == r.src_mem &&
            cur->dst_mem == r.dst_mem && cur->src_offset + cur->len == r.src_offset + pos &&
            cur->dst_offset + cur->len == r.dst_offset + pos) {
            take = r.len - pos < max - cur->len ? r.len - pos : max - cur->len;
            cur->len += take;
        } else {
            if (cur->len)
                vec_push(runs, *cur);
            take = r.len - pos < max ? r.len - pos : max;
            *cur = (pdx_run_t){ r.src_mem, r.dst_mem, r.src_offset + pos, r.dst_offset + pos,
                         take };
        }
        pos += take;
    }
}

/* The semantics of plan.h, spelled out page by page. */
void build_reference(reference_t *ref, const pdx_layout_t *src, const pdx_layout_t *dst,
                     const pdx_pages_t *sp, const pdx_pages_t *dp, uint64_t max,
                     unsigned flags)
{
    uint32_t lb = src->layer_begin > dst->layer_begin ? src->layer_begin : dst->layer_begin;
    uint32_t le = src->layer_end < dst->layer_end ? src->layer_end : dst->layer_end;

    memset(ref, 0, sizeof(*ref));
    for (uint32_t g = 0; g < src->ngroups; g++) {
        const pdx_group_t *sg = &src->groups[g], *dg = &dst->groups[g];
        int layered = !(sg->flags & PDX_GROUP_NO_LAYERS);
        uint32_t nlayers = layered ? le - lb : 1;
        uint32_t bpl = sg->buffers_per_layer;

        if ((sg->flags & PDX_GROUP_STATE) && !(flags & PDX_PLAN_STATE))
            continue;
        for (uint32_t l = 0; l < nlayers; l++) {
            for (uint32_t part = 0; part < bpl; part++) {
                uint32_t sbi = layered ? (lb + l - src->layer_begin) * bpl + part : part;
                uint32_t dbi = layered ? (lb + l - dst->layer_begin) * bpl + part : part;
                const pdx_buffer_t *sb = &sg->buffers[sbi], *db = &dg->buffers[dbi];
                uint64_t bpp = sb->bytes_per_page, seg = 0;
                pdx_run_t cur = { 0 };

                for (uint32_t i = 0; i < sp[g].npages; i++) {
                    pdx_run_t w = { sb->mem, db->mem, sb->offset + sp[g].pages[i] * bpp,
                             db->offset + dp[g].pages[i] * bpp, bpp };

                    vec_push(&ref->naive, w);
                    greedy_add(&ref->greedy, &cur, w, max);
                    if (i > 0 && (sp[g].pages[i] != sp[g].pages[i - 1] + 1 ||
                           dp[g].pages[i] != dp[g].pages[i - 1] + 1)) {
                        ref->minimum += (seg * bpp + max - 1) / max;
                        seg = 0;
                    }
                    seg++;
                }
                if (cur.len)
                    vec_push(&ref->greedy, cur);
                ref->minimum += (seg * bpp + max - 1) / max;
            }
        }
    }
}

void reference_free(reference_t *ref)
{
    vec_free(&ref->naive);
    vec_free(&ref->greedy);
}

int run_cmp(const void *pa, const void *pb)
{
    const pdx_run_t *a = pa, *b = pb;

    if (a->src_mem != b->src_mem)
        return a->src_mem < b->src_mem ? -1 : 1;
    if (a->src_offset != b->src_offset)
        return a->src_offset < b->src_offset ? -1 : 1;
    if (a->dst_mem != b->dst_mem)
        return a->dst_mem < b->dst_mem ? -1 : 1;
    if (a->dst_offset != b->dst_offset)
        return a->dst_offset < b->dst_offset ? -1 : 1;
    return 0;
}

/* Sorted by source, ranges contiguous on both sides merged. */
vec_t canonical(const vec_t *in)
{
    vec_t out = { 0 };
    pdx_run_t *tmp;

    if (in->n == 0)
        return out;
    tmp = malloc(in->n * sizeof(*tmp));
    cr_assert_not_null(tmp);
    memcpy(tmp, in->v, in->n * sizeof(*tmp));
    qsort(tmp, in->n, sizeof(*tmp), run_cmp);
    for (size_t i = 0; i < in->n; i++) {
        pdx_run_t *last = out.n ? &out.v[out.n - 1] : NULL;

        if (last && last->src_mem == tmp[i].src_mem && last->dst_mem == tmp[i].dst_mem &&
            last->src_offset + last->len == tmp[i].src_offset &&
            last->dst_offset + last->len == tmp[i].dst_offset)
            last->len += tmp[i].len;
        else
            vec_push(&out, tmp[i]);
    }
    free(tmp);
    return out;
}

/* The range of canon holding run's first source byte must hold all of it,
 * with the same source-to-destination shift. */
int run_inside(const vec_t *canon, const pdx_run_t *run)
{
    size_t lo = 0, hi = canon->n;

    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        const pdx_run_t *m = &canon->v[mid];

        if (m->src_mem < run->src_mem ||
            (m->src_mem == run->src_mem && m->src_offset <= run->src_offset))
            lo = mid;
        else
            hi = mid;
    }
    if (canon->n == 0)
        return 0;
    const pdx_run_t *c = &canon->v[lo];
    return c->src_mem == run->src_mem && c->dst_mem == run->dst_mem &&
           c->src_offset <= run->src_offset &&
           run->src_offset + run->len <= c->src_offset + c->len &&
           run->dst_offset - c->dst_offset == run->src_offset - c->src_offset;
}

/* Pull every run, `batch` at a time (0: a random batch of 1..9 each call). */
vec_t pull(pdx_plan_t *plan, uint32_t batch, uint64_t *rng)
{
    pdx_run_t buf[64];
    vec_t runs = { 0 };

    for (;;) {
        uint32_t want = batch;
        uint32_t got;

        if (want == 0) {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            want = 1 + (uint32_t)((*rng >> 33) % 9);
        }
        if (want > PDX_ARRAY_SIZE(buf))
            want = PDX_ARRAY_SIZE(buf);
        got = pdx_plan_next(plan, buf, want);
        cr_assert_leq(got, want);
        if (got == 0)
            break;
        for (uint32_t i = 0; i < got; i++)
            vec_push(&runs, buf[i]);
    }
    cr_assert_eq(pdx_plan_next(plan, buf, PDX_ARRAY_SIZE(buf)), 0, "an exhausted plan stays empty");
    return runs;
}

/* Every property against the reference; ctx names the case on failure. */
void check_plan(const pdx_layout_t *src, const pdx_layout_t *dst, const pdx_pages_t *sp,
                       const pdx_pages_t *dp, uint64_t max, unsigned flags, uint32_t batch,
                       uint64_t seed, const char *ctx)
{
    pdx_plan_t plan;
    reference_t ref;
    vec_t runs, canon_naive, canon_runs;
    char err[256] = "";
    uint64_t rng = seed;
    pdx_status_t status;

    status = pdx_plan_init(&plan, src, dst, sp, dp, max, flags, err, sizeof(err));
    cr_assert_eq(status, PDX_OK, "%s: init: %s", ctx, err);
    runs = pull(&plan, batch, &rng);
    build_reference(&ref, src, dst, sp, dp, max, flags);
    canon_naive = canonical(&ref.naive);
    canon_runs = canonical(&runs);

    for (size_t i = 0; i < runs.n; i++) {
        cr_assert(runs.v[i].len > 0 && runs.v[i].len <= max, "%s: run %zu has %llu bytes", ctx,
                  i, (unsigned long long)runs.v[i].len);
        cr_assert(run_inside(&canon_naive, &runs.v[i]),
                  "%s: run %zu is not one contiguous range of the reference", ctx, i);
    }
    cr_assert_eq(canon_runs.n, canon_naive.n, "%s: %zu vs %zu canonical ranges", ctx,
                 canon_runs.n, canon_naive.n);
    for (size_t i = 0; i < canon_runs.n; i++)
        cr_assert_eq(run_cmp(&canon_runs.v[i], &canon_naive.v[i]) == 0 &&
                         canon_runs.v[i].len == canon_naive.v[i].len, 1,
                     "%s: canonical range %zu differs", ctx, i);
    cr_assert_eq(runs.n, ref.minimum, "%s: %zu runs, minimum %llu", ctx, runs.n,
                 (unsigned long long)ref.minimum);
    cr_assert_eq(runs.n, ref.greedy.n, "%s: %zu runs, greedy reference %zu", ctx, runs.n,
                 ref.greedy.n);
    for (size_t i = 0; i < runs.n; i++)
        cr_assert(memcmp(&runs.v[i], &ref.greedy.v[i], sizeof(pdx_run_t)) == 0,
                  "%s: run %zu out of order or different", ctx, i);

    vec_free(&runs);
    vec_free(&canon_naive);
    vec_free(&canon_runs);
    reference_free(&ref);
}

uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t rnd_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(rnd(s) % n);
}

/* k distinct pages out of [0, n) in one of the map shapes. */
void fill_pages(uint64_t *s, int kind, uint32_t n, uint32_t k, uint32_t *out)
{
    uint32_t *pool = malloc((size_t)n * sizeof(*pool));
    uint32_t start = n > k ? rnd_below(s, n - k + 1) : 0;

    cr_assert_not_null(pool);
    switch (kind) {
    case MAP_CONTIGUOUS:
        for (uint32_t i = 0; i < k; i++)
            out[i] = start + i;
        break;
    case MAP_REVERSED:
        for (uint32_t i = 0; i < k; i++)
            out[i] = start + k - 1 - i;
        break;
    case MAP_RANDOM:
        for (uint32_t i = 0; i < n; i++)
            pool[i] = i;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = i + rnd_below(s, n - i), t = pool[i];

            pool[i] = pool[j];
            pool[j] = t;
            out[i] = pool[i];
        }
        break;
    default: {
        /* Allocator-like: blocks of 1..8 pages, shuffled, a few reversed. */
        uint32_t nblocks = 0, *bstart = malloc((size_t)n * sizeof(*bstart)), o = 0;

        cr_assert_not_null(bstart);
        for (uint32_t p = 0; p < n; nblocks++) {
            bstart[nblocks] = p;
            p += 1 + rnd_below(s, 8);
            if (p > n)
                p = n;
            pool[nblocks] = p; /* block end */
        }
        for (uint32_t i = nblocks; i > 1; i--) {
            uint32_t j = rnd_below(s, i), ts = bstart[i - 1], te = pool[i - 1];

            bstart[i - 1] = bstart[j];
            pool[i - 1] = pool[j];
            bstart[j] = ts;
            pool[j] = te;
        }
        for (uint32_t b = 0; b < nblocks && o < k; b++) {
            int rev = rnd_below(s, 4) == 0;

            for (uint32_t p = 0; p < pool[b] - bstart[b] && o < k; p++)
                out[o++] = rev ? pool[b] - 1 - p : bstart[b] + p;
        }
        cr_assert_eq(o, k);
        free(bstart);
        break;
    }
    }
    free(pool);
}
