/* Shared helpers of the benchmarks: percentiles of sample arrays. */
#ifndef PDX_BENCH_STATS_H
#define PDX_BENCH_STATS_H

#include <stdint.h>
#include <stdlib.h>

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Sorts v in place and returns its p-th percentile (0 <= p <= 100). */
static inline double bench_percentile(uint64_t *v, size_t n, double p)
{
    size_t i;

    qsort(v, n, sizeof(*v), bench_cmp_u64);
    i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return (double)v[i < n ? i : n - 1];
}

#endif
