/* The reference planner and checks that test_plan.c compares plan.c with. */
#ifndef PDX_TEST_PLAN_REF_H
#define PDX_TEST_PLAN_REF_H

#include <stdint.h>

#include "layout.h"
#include "plan.h"

#define TMAX_PARTS 8
/* Page-map shapes of fill_pages(). */
enum { MAP_RANDOM, MAP_CONTIGUOUS, MAP_REVERSED, MAP_MIXED, MAP_KINDS };

#define BIG_MSG    (1ull << 40)

typedef struct tgroup {
    uint32_t flags;
    uint32_t parts;               /* layered: buffers per layer; NO_LAYERS: buffers */
    uint64_t npages;
    uint64_t bpp[TMAX_PARTS];     /* bytes per page of each part */
} tgroup_t;

typedef struct vec {
    pdx_run_t *v;
    size_t     n, cap;
} vec_t;

typedef struct reference {
    vec_t    naive;    /* one write per page per matched buffer */
    vec_t    greedy;   /* naive writes merged in order, cut at max */
    uint64_t minimum;  /* sum over segments of ceil(bytes / max) */
} reference_t;

pdx_layout_t *build_layout(uint32_t layer_begin, uint32_t layer_end, const tgroup_t *gs,
        uint32_t ngroups, uint32_t mem_base);
void vec_push(vec_t *a, pdx_run_t r);
void vec_free(vec_t *a);
void greedy_add(vec_t *runs, pdx_run_t *cur, pdx_run_t r, uint64_t max);
void build_reference(reference_t *ref, const pdx_layout_t *src, const pdx_layout_t *dst,
        const pdx_pages_t *sp, const pdx_pages_t *dp, uint64_t max,
        unsigned flags);
void reference_free(reference_t *ref);
int run_cmp(const void *pa, const void *pb);
vec_t canonical(const vec_t *in);
int run_inside(const vec_t *canon, const pdx_run_t *run);
vec_t pull(pdx_plan_t *plan, uint32_t batch, uint64_t *rng);
void check_plan(const pdx_layout_t *src, const pdx_layout_t *dst, const pdx_pages_t *sp,
        const pdx_pages_t *dp, uint64_t max, unsigned flags, uint32_t batch,
        uint64_t seed, const char *ctx);
uint64_t rnd(uint64_t *s);
uint32_t rnd_below(uint64_t *s, uint32_t n);
void fill_pages(uint64_t *s, int kind, uint32_t n, uint32_t k, uint32_t *out);

#endif
