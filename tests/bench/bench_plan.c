/*
 * bench_plan: writes saved by coalescing, and the cost of planning, for the
 * DeepSeek-R1 KV geometry: 61 layers, one MLA buffer per layer, 576 bytes
 * per token per layer (fp8), page sizes of 1 and 64 tokens, a pool of about
 * 1 GiB per side. One request's pages are planned from prefill to decode
 * with three page maps:
 *   contiguous  both sides one block of pages
 *   mostly      allocator-like: blocks of 1..32 pages from a shuffled pool
 *   random      distinct pages drawn at random from the pool, on each side
 *
 * naive WRs are one write per page per layer (and per max_msg_size piece of
 * a page); coalesced WRs are what pdx_plan_next() yields. Plan time covers
 * pdx_plan_init() (which checks every index) and pulling every run, -b at a
 * time as a shard does with send-queue credits.
 *
 * usage: bench_plan [-t tokens] [-s max_msg_size] [-n iterations] [-b batch]
 *                   [-S seed] [--json]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "plan.h"
#include "util.h"

#define LAYERS          61
#define BYTES_PER_TOKEN 576ull
#define POOL_BYTES      (1ull << 30)
#define MAX_BATCH       4096

enum { MAP_CONTIGUOUS, MAP_MOSTLY, MAP_RANDOM, MAP_KINDS };
static const char *const map_names[MAP_KINDS] = { "contiguous", "mostly", "random" };

typedef struct options {
    uint32_t tokens;
    uint64_t max_msg;     /* 0: 1 MiB and 64 KiB */
    uint32_t iterations;  /* 0: as many as fit in about 0.2 s */
    uint32_t batch;
    uint64_t seed;
    int      json;
} options_t;

typedef struct result {
    uint32_t    page_tokens;
    const char *map;
    uint64_t    max_msg;
    uint32_t    pages;
    uint64_t    naive;
    uint64_t    coalesced;
    uint32_t    iterations;
    double      chunk_us;
    double      ns_per_page;
    double      ns_per_wr;
} result_t;

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* k distinct pages out of [0, n). */
static void fill_pages(uint64_t *s, int kind, uint32_t n, uint32_t k, uint32_t *out, uint32_t *tmp)
{
    uint32_t o = 0;

    switch (kind) {
    case MAP_CONTIGUOUS: {
        uint32_t start = (uint32_t)(rnd(s) % (n - k + 1));

        for (uint32_t i = 0; i < k; i++)
            out[i] = start + i;
        return;
    }
    case MAP_RANDOM:
        for (uint32_t i = 0; i < n; i++)
            tmp[i] = i;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = i + (uint32_t)(rnd(s) % (n - i)), t = tmp[i];

            tmp[i] = tmp[j];
            tmp[j] = t;
            out[i] = tmp[i];
        }
        return;
    default: {
        /* Blocks of 1..32 pages in shuffled order: tmp holds block starts,
         * tmp + n the block ends. */
        uint32_t *ends = tmp + n, nblocks = 0;

        for (uint32_t p = 0; p < n; nblocks++) {
            tmp[nblocks] = p;
            p = (uint32_t)PDX_MIN((uint64_t)n, p + 1 + rnd(s) % 32);
            ends[nblocks] = p;
        }
        for (uint32_t i = nblocks; i > 1; i--) {
            uint32_t j = (uint32_t)(rnd(s) % i), ts = tmp[i - 1], te = ends[i - 1];

            tmp[i - 1] = tmp[j];
            ends[i - 1] = ends[j];
            tmp[j] = ts;
            ends[j] = te;
        }
        for (uint32_t b = 0; b < nblocks && o < k; b++)
            for (uint32_t p = tmp[b]; p < ends[b] && o < k; p++)
                out[o++] = p;
        return;
    }
    }
}

static pdx_layout_t *make_layout(uint32_t mem, uint64_t bpp, uint64_t npages)
{
    pdx_buffer_desc_t bufs[LAYERS];
    pdx_group_desc_t group = {
        .flags = 0, .buffers_per_layer = 1, .nbuffers = LAYERS, .npages = npages, .buffers = bufs,
    };
    pdx_layout_desc_t desc = {
        .field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
        .ngroups = 1, .layer_begin = 0, .layer_end = LAYERS, .groups = &group,
    };
    pdx_layout_t *layout = NULL;
    char err[256];

    for (uint32_t l = 0; l < LAYERS; l++)
        bufs[l] = (pdx_buffer_desc_t){ .mem = mem, .offset = l * npages * bpp,
                                       .bytes_per_page = bpp };
    if (pdx_layout_from_desc(&desc, &layout, err, sizeof(err)) != PDX_OK) {
        fprintf(stderr, "bench_plan: layout: %s\n", err);
        exit(1);
    }
    return layout;
}

/* One plan of the chunk: its run count and bytes. */
static uint64_t plan_once(const pdx_layout_t *src, const pdx_layout_t *dst, const pdx_pages_t *sp,
                          const pdx_pages_t *dp, uint64_t max_msg, uint32_t batch,
                          pdx_run_t *runs, uint64_t *bytes_p)
{
    pdx_plan_t plan;
    uint64_t nruns = 0, bytes = 0;
    uint32_t got;
    char err[256];

    if (pdx_plan_init(&plan, src, dst, sp, dp, max_msg, 0, err, sizeof(err)) != PDX_OK) {
        fprintf(stderr, "bench_plan: plan: %s\n", err);
        exit(1);
    }
    while ((got = pdx_plan_next(&plan, runs, batch)) > 0) {
        nruns += got;
        for (uint32_t i = 0; i < got; i++)
            bytes += runs[i].len;
    }
    *bytes_p = bytes;
    return nruns;
}

static result_t bench_one(const options_t *opt, uint32_t page_tokens, int map, uint64_t max_msg)
{
    const uint64_t bpp = BYTES_PER_TOKEN * page_tokens;
    const uint64_t npages = POOL_BYTES / (LAYERS * bpp);
    const uint32_t pages = (opt->tokens + page_tokens - 1) / page_tokens;
    uint32_t *src_list = malloc(pages * sizeof(uint32_t));
    uint32_t *dst_list = malloc(pages * sizeof(uint32_t));
    uint32_t *tmp = malloc(2 * npages * sizeof(uint32_t));
    pdx_run_t *runs = malloc(MAX_BATCH * sizeof(pdx_run_t));
    pdx_layout_t *src = make_layout(0, bpp, npages), *dst = make_layout(1, bpp, npages);
    pdx_pages_t sp = { src_list, pages }, dp = { dst_list, pages };
    uint64_t s = opt->seed * 131 + (uint64_t)page_tokens * 7 + (uint64_t)map;
    uint64_t bytes, want = (uint64_t)pages * LAYERS * bpp, t0, elapsed;
    result_t r = { .page_tokens = page_tokens, .map = map_names[map], .max_msg = max_msg,
                   .pages = pages };

    if (!src_list || !dst_list || !tmp || !runs) {
        fprintf(stderr, "bench_plan: out of memory\n");
        exit(1);
    }
    if (pages > npages) {
        fprintf(stderr, "bench_plan: %u pages do not fit a pool of %llu\n", pages,
                (unsigned long long)npages);
        exit(1);
    }
    fill_pages(&s, map, (uint32_t)npages, pages, src_list, tmp);
    fill_pages(&s, map, (uint32_t)npages, pages, dst_list, tmp);

    r.naive = (uint64_t)pages * LAYERS * ((bpp + max_msg - 1) / max_msg);
    r.coalesced = plan_once(src, dst, &sp, &dp, max_msg, opt->batch, runs, &bytes);
    if (bytes != want) {
        fprintf(stderr, "bench_plan: planned %llu bytes, want %llu\n",
                (unsigned long long)bytes, (unsigned long long)want);
        exit(1);
    }

    r.iterations = 0;
    t0 = pdx_now_ns();
    do {
        uint32_t n = opt->iterations ? opt->iterations : 16;

        for (uint32_t i = 0; i < n; i++)
            plan_once(src, dst, &sp, &dp, max_msg, opt->batch, runs, &bytes);
        r.iterations += n;
        elapsed = pdx_now_ns() - t0;
    } while (!opt->iterations && elapsed < 200000000ull);

    r.chunk_us = (double)elapsed / r.iterations / 1e3;
    r.ns_per_page = (double)elapsed / r.iterations / pages;
    r.ns_per_wr = (double)elapsed / r.iterations / (double)r.coalesced;

    pdx_layout_free(src);
    pdx_layout_free(dst);
    free(runs);
    free(tmp);
    free(dst_list);
    free(src_list);
    return r;
}

static void print_rule(void)
{
    for (int i = 0; i < 93; i++)
        putchar('-');
    putchar('\n');
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_plan [-t tokens] [-s max_msg_size] [-n iterations] [-b batch]\n"
            "                  [-S seed] [--json]\n"
            "  -t  tokens per request (4096)\n"
            "  -s  max message size in bytes (default: 1048576 and 65536)\n"
            "  -n  plans per row (default: as many as fit in 0.2 s)\n"
            "  -b  runs pulled per pdx_plan_next() call, 1..%d (64)\n"
            "  -S  seed of the page maps (1)\n",
            MAX_BATCH);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static const uint32_t page_sizes[] = { 1, 64 };
    options_t opt = { .tokens = 4096, .batch = 64, .seed = 1 };
    uint64_t maxes[2] = { 1ull << 20, 64ull << 10 };
    uint32_t nmaxes = 2, nrows = 0;
    result_t rows[PDX_ARRAY_SIZE(page_sizes) * 2 * MAP_KINDS];
    int c;

    while ((c = getopt_long(argc, argv, "t:s:n:b:S:h", longopts, NULL)) != -1) {
        switch (c) {
        case 't': opt.tokens = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 's': opt.max_msg = strtoull(optarg, NULL, 0); break;
        case 'n': opt.iterations = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'b': opt.batch = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'S': opt.seed = strtoull(optarg, NULL, 0); break;
        case 'j': opt.json = 1; break;
        default: usage(); return c == 'h' ? 0 : 2;
        }
    }
    if (opt.tokens == 0 || opt.batch == 0 || opt.batch > MAX_BATCH) {
        usage();
        return 2;
    }
    if (opt.max_msg) {
        maxes[0] = opt.max_msg;
        nmaxes = 1;
    }

    for (size_t p = 0; p < PDX_ARRAY_SIZE(page_sizes); p++)
        for (uint32_t m = 0; m < nmaxes; m++)
            for (int map = 0; map < MAP_KINDS; map++)
                rows[nrows++] = bench_one(&opt, page_sizes[p], map, maxes[m]);

    if (opt.json) {
        printf("[\n");
        for (uint32_t i = 0; i < nrows; i++) {
            const result_t *r = &rows[i];

            printf("  {\"page_tokens\": %u, \"map\": \"%s\", \"max_msg_size\": %llu, "
                   "\"pages\": %u, \"layers\": %d, \"naive_wrs\": %llu, \"coalesced_wrs\": %llu, "
                   "\"saved\": %.6f, \"iterations\": %u, \"plan_us_per_chunk\": %.3f, "
                   "\"plan_ns_per_page\": %.3f, \"plan_ns_per_wr\": %.3f}%s\n",
                   r->page_tokens, r->map, (unsigned long long)r->max_msg, r->pages, LAYERS,
                   (unsigned long long)r->naive, (unsigned long long)r->coalesced,
                   1.0 - (double)r->coalesced / (double)r->naive, r->iterations, r->chunk_us,
                   r->ns_per_page, r->ns_per_wr, i + 1 < nrows ? "," : "");
        }
        printf("]\n");
        return 0;
    }

    print_rule();
    printf(" pdx plan: DeepSeek-R1 MLA KV, %d layers x 1 buffer, %llu B/token/layer (fp8)\n",
           LAYERS, (unsigned long long)BYTES_PER_TOKEN);
    printf(" request %u tokens, pool %llu MiB per side, runs pulled %u at a time\n", opt.tokens,
           (unsigned long long)(POOL_BYTES >> 20), opt.batch);
    print_rule();
    printf(" %9s %-10s %8s %6s %10s %10s %7s %10s %8s %8s\n", "tok/page", "map", "max_msg",
           "pages", "naive_WRs", "coal_WRs", "saved", "us/chunk", "ns/page", "ns/WR");
    for (uint32_t i = 0; i < nrows; i++) {
        const result_t *r = &rows[i];

        printf(" %9u %-10s %8llu %6u %10llu %10llu %6.2f%% %10.2f %8.2f %8.2f\n",
               r->page_tokens, r->map, (unsigned long long)r->max_msg, r->pages,
               (unsigned long long)r->naive, (unsigned long long)r->coalesced,
               100.0 * (1.0 - (double)r->coalesced / (double)r->naive), r->chunk_us,
               r->ns_per_page, r->ns_per_wr);
    }
    print_rule();
    return 0;
}
