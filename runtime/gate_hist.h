/*
 * When a shard polls a closed gate (gate_hist.c). Gates of a forward pass
 * open at times that repeat: a layer group takes about as long as the one
 * of the pass before. The shard remembers how long its last
 * PDX_GATE_HISTORY gates stayed closed, each as the interval its opening
 * fell in (after the last poll that found it closed, by the first that
 * found it open, both counted from the first poll that found it closed),
 * and polls a closed gate without sleeping while its age is within
 * PDX_GATE_SPIN_US of one of them. Elsewhere it sleeps PDX_GATE_BACKOFF_US
 * between polls, or a 32nd of the gate's age once that is longer (at most
 * PDX_GATE_SLEEP_MAX_NS): a gate that opens when none did before is found
 * at most a backoff, or about 3% of the time it was closed, late;
 * one that opens as gates did before is found by the next poll; a gate
 * closed for long costs a wake-up a millisecond.
 */
#ifndef PDX_GATE_HIST_H
#define PDX_GATE_HIST_H

#include <stdint.h>

#define PDX_GATE_HISTORY       16u
#define PDX_GATE_AGE_SHIFT     5u       /* sleep up to age >> 5 ... */
#define PDX_GATE_SLEEP_MAX_NS  1000000u /* ... and at most this */

typedef struct pdx_gate_hist {
    uint64_t lo[PDX_GATE_HISTORY]; /* ns after the first closed poll: */
    uint64_t hi[PDX_GATE_HISTORY]; /* the opening fell in (lo, hi] */
    uint32_t n, next;
} pdx_gate_hist_t;

/* A gate first found closed at age 0 was closed at age lo and open at hi;
 * kept when hi - lo is at most max_ns. */
void pdx_gate_hist_add(pdx_gate_hist_t *h, uint64_t lo, uint64_t hi, uint64_t max_ns);

/* For a closed gate of this age: 0 while it is within spin_ns of a
 * remembered opening (poll without sleeping), else the ns until it next
 * is, UINT64_MAX when it never will be (spin_ns 0: always). */
uint64_t pdx_gate_hist_next(const pdx_gate_hist_t *h, uint64_t age, uint64_t spin_ns);

/* How long to sleep before the next poll of a closed gate of this age. */
static inline uint64_t pdx_gate_sleep_ns(uint64_t age, uint64_t backoff_ns)
{
    uint64_t ns = age >> PDX_GATE_AGE_SHIFT;

    ns = ns < PDX_GATE_SLEEP_MAX_NS ? ns : PDX_GATE_SLEEP_MAX_NS;
    return ns > backoff_ns ? ns : backoff_ns;
}

#endif
