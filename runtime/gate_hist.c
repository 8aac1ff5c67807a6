/* When a shard polls a closed gate: gate_hist.h. */
#include "gate_hist.h"

void pdx_gate_hist_add(pdx_gate_hist_t *h, uint64_t lo, uint64_t hi, uint64_t max_ns)
{
    if (hi < lo || hi - lo > max_ns)
        return; /* the shard slept or worked through it: too vague to spin on */
    h->lo[h->next] = lo;
    h->hi[h->next] = hi;
    h->next = (h->next + 1) % PDX_GATE_HISTORY;
    if (h->n < PDX_GATE_HISTORY)
        h->n++;
}

uint64_t pdx_gate_hist_next(const pdx_gate_hist_t *h, uint64_t age, uint64_t spin_ns)
{
    uint64_t next = UINT64_MAX;

    if (spin_ns == 0)
        return UINT64_MAX;
    for (uint32_t i = 0; i < h->n; i++) {
        const uint64_t from = h->lo[i] > spin_ns ? h->lo[i] - spin_ns : 0;
        const uint64_t to = h->hi[i] + spin_ns;

        if (age >= from && age <= to)
            return 0;
        if (from > age && from - age < next)
            next = from - age;
    }
    return next;
}
