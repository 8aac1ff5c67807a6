/* gate_hist.c: when a shard polls a closed gate without sleeping. */
#include <criterion/criterion.h>

#include "gate_hist.h"

#define US 1000u
#define MAX (1000 * US)

Test(gate_hist, nothing_learned_means_no_window)
{
    pdx_gate_hist_t h = {0};

    cr_expect_eq(pdx_gate_hist_next(&h, 0, 20 * US), UINT64_MAX);
    cr_expect_eq(pdx_gate_hist_next(&h, 5000 * US, 20 * US), UINT64_MAX);
}

Test(gate_hist, a_window_around_each_opening)
{
    pdx_gate_hist_t h = {0};

    pdx_gate_hist_add(&h, 100 * US, 110 * US, MAX);
    cr_expect_eq(pdx_gate_hist_next(&h, 0, 20 * US), 80 * US, "sleep until 20 us before it");
    cr_expect_eq(pdx_gate_hist_next(&h, 79 * US, 20 * US), 1 * US);
    cr_expect_eq(pdx_gate_hist_next(&h, 80 * US, 20 * US), 0, "due from 20 us before it");
    cr_expect_eq(pdx_gate_hist_next(&h, 105 * US, 20 * US), 0);
    cr_expect_eq(pdx_gate_hist_next(&h, 130 * US, 20 * US), 0, "due until 20 us after it");
    cr_expect_eq(pdx_gate_hist_next(&h, 130 * US + 1, 20 * US), UINT64_MAX, "then never again");
    cr_expect_eq(pdx_gate_hist_next(&h, 105 * US, 0), UINT64_MAX, "PDX_GATE_SPIN_US=0");
    /* a window that would start before the gate was first seen starts then */
    cr_expect_eq(pdx_gate_hist_next(&h, 0, 200 * US), 0);
}

Test(gate_hist, the_nearest_window_ahead)
{
    pdx_gate_hist_t h = {0};

    pdx_gate_hist_add(&h, 5000 * US, 5001 * US, MAX);
    pdx_gate_hist_add(&h, 200 * US, 201 * US, MAX);
    pdx_gate_hist_add(&h, 900 * US, 950 * US, MAX);
    cr_expect_eq(pdx_gate_hist_next(&h, 0, 10 * US), 190 * US);
    cr_expect_eq(pdx_gate_hist_next(&h, 300 * US, 10 * US), 590 * US);
    cr_expect_eq(pdx_gate_hist_next(&h, 955 * US, 10 * US), 0);
    cr_expect_eq(pdx_gate_hist_next(&h, 961 * US, 10 * US), 4029 * US);
}

Test(gate_hist, an_opening_known_only_roughly_is_not_kept)
{
    pdx_gate_hist_t h = {0};

    pdx_gate_hist_add(&h, 100 * US, 100 * US + MAX + 1, MAX);
    pdx_gate_hist_add(&h, 300 * US, 200 * US, MAX); /* backwards */
    cr_expect_eq(h.n, 0);
    cr_expect_eq(pdx_gate_hist_next(&h, 150 * US, 20 * US), UINT64_MAX);
    pdx_gate_hist_add(&h, 100 * US, 100 * US + MAX, MAX);
    cr_expect_eq(h.n, 1);
}

Test(gate_hist, the_oldest_opening_is_forgotten)
{
    pdx_gate_hist_t h = {0};

    for (uint32_t i = 0; i <= PDX_GATE_HISTORY; i++)
        pdx_gate_hist_add(&h, (1000 + 100 * i) * US, (1000 + 100 * i) * US, MAX);
    cr_expect_eq(h.n, PDX_GATE_HISTORY);
    cr_expect_neq(pdx_gate_hist_next(&h, 1000 * US, 10 * US), 0, "the first is gone");
    for (uint32_t i = 1; i <= PDX_GATE_HISTORY; i++)
        cr_expect_eq(pdx_gate_hist_next(&h, (1000 + 100 * i) * US, 10 * US), 0, "opening %u", i);
}

Test(gate_hist, gates_closed_long_are_polled_less_often)
{
    cr_expect_eq(pdx_gate_sleep_ns(0, 20 * US), 20 * US, "the backoff");
    cr_expect_eq(pdx_gate_sleep_ns(640 * US, 20 * US), 20 * US);
    cr_expect_eq(pdx_gate_sleep_ns(3200 * US, 20 * US), 100 * US, "a 32nd of its age");
    cr_expect_eq(pdx_gate_sleep_ns(500000 * US, 20 * US), PDX_GATE_SLEEP_MAX_NS, "at most");
    cr_expect_eq(pdx_gate_sleep_ns(500000 * US, 5000 * US), 5000 * US, "a longer backoff");
}
