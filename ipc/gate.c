/*
 * ipc gates: page copies that wait on the GPU for the chunk's gate, with
 * no host round trip between the gate opening and the copy (ipc.h).
 *
 * A CQ has IPC_GATES gate streams. A gate stream waits for one gate at a
 * time: the wait (hipStreamWaitEvent on the event's last record, or
 * hipStreamWaitValue64 on the word), then a write of the stream's own
 * pinned word passed = seq, so the host learns the wait passed without
 * asking the producer's event again (the caller may record it anew). The
 * copies behind it (the same gate: a forward pass gating many rooms) each
 * take a skip word of the stream's; their tables go up on the CQ's upload
 * stream, which never waits, and the gate stream waits for that upload's
 * event, copies the skip word to device memory (one DMA read of the host's
 * word once the wait passed), then launches the kernel, which reads the
 * device copy before any table.
 *
 * Giving a copy up (its deadline, its endpoint failed or destroyed): raise
 * its skip word, then read passed. Still below seq: the wait has not
 * passed, so the skip word is copied, if ever, after it was raised and the
 * kernel copies nothing; the copy is done now. Passed: the kernel may be
 * copying; its event says when it is done. A gate stream whose copies were
 * all given up while its wait still holds is set aside: the stream is
 * destroyed (the runtime frees it once its work ran) and its slab of words
 * is kept out of use until an event recorded after that work completed
 * (checked when the CQ is armed), so late work still reads a raised skip
 * word; a wait that never passes keeps its slab for the life of the
 * process. The gate's slot gets a new stream and a free slab on its next
 * use; with none free, gates go back to the shard. The slabs (IPC_SLABS of
 * them) are allocated once with the CQ's streams: the runtime's
 * allocations and frees wait for the whole device, so none is made on the
 * shard's path.
 *
 * Nothing on a gate stream calls the host: a host callback holds up its
 * stream until a runtime thread ran it, and streams share the GPU's
 * hardware queues (8 on nvidia, 4 on amd by default), so one would hold up
 * the producer's kernels and other copies too. The CQ's timer wakes the
 * shard instead while gated copies are in flight (ipc_cq_arm).
 */
#include "ipc.h"

#include <string.h>

#include "log.h"
#include "util.h"

#define WORDS_BYTES ((1 + IPC_GATE_SLOTS) * sizeof(uint64_t))

bool ipc_gate_passed(const ipc_gate_t *g, uint64_t seq)
{
    return __atomic_load_n(&g->words[0], __ATOMIC_ACQUIRE) >= seq;
}

/* Set g's stream and words aside: its wait may not pass soon, or ever. */
static void set_aside(ipc_cq_t *cq, ipc_gate_t *g, const char *why)
{
    void *done = NULL;

    if (pdx_hip_event_create(&done) == PDX_OK &&
        pdx_hip_event_record(done, g->stream) != PDX_OK) {
        pdx_hip_event_destroy(done);
        done = NULL;
    }
    /* room for every slab: set aside, a slab is out of the free mask */
    cq->aside[cq->naside++] = (ipc_aside_t){.slab = g->slab, .done = done};
    pdx_info("ipc: the copies waiting on the GPU for a gate still closed were given up (%s): "
             "its stream is set aside until the gate opens", why);
    pdx_hip_stream_destroy(g->stream);
    g->stream = NULL;
    g->words = NULL;
    g->skips = NULL;
    g->epoch++;
}

/* The CQ's gate words, made once with its streams (the runtime's allocations
 * wait for the whole device: never on the shard's path). */
pdx_status_t ipc_gates_alloc(ipc_cq_t *cq)
{
    const size_t len = (size_t)IPC_SLABS * WORDS_BYTES;
    pdx_status_t st = pdx_hip_host_alloc(len, &cq->slab_words);

    if (st == PDX_OK)
        st = pdx_hip_device_alloc(len, &cq->slab_skips);
    if (st != PDX_OK) {
        pdx_hip_host_free(cq->slab_words);
        cq->slab_words = NULL;
        pdx_error("ipc: no memory for GPU gates: %s", pdx_hip_last_error());
        return st;
    }
    memset(cq->slab_words, 0, len);
    cq->slab_free = (1u << IPC_SLABS) - 1;
    return PDX_OK;
}

/* A new stream and a free slab of words for gate slot g. */
static pdx_status_t gate_make(ipc_cq_t *cq, ipc_gate_t *g)
{
    uint32_t k;
    pdx_status_t st;

    if (!cq->slab_free)
        return PDX_ERR_FULL; /* all set aside: the shard waits for gates itself */
    k = (uint32_t)__builtin_ctz(cq->slab_free);
    st = pdx_hip_stream_create(&g->stream);
    if (st != PDX_OK) {
        pdx_error("ipc: no stream for GPU gates: %s", pdx_hip_last_error());
        return st;
    }
    cq->slab_free &= ~(1u << k);
    g->slab = k;
    g->words = (volatile uint64_t *)((uint8_t *)cq->slab_words + k * WORDS_BYTES);
    g->skips = (uint64_t *)(void *)((uint8_t *)cq->slab_skips + k * WORDS_BYTES);
    g->words[0] = g->seq; /* no wait outstanding */
    return PDX_OK;
}

static bool same_gate(const ipc_gate_t *g, const pdx_tp_gate_t *t)
{
    return g->kind == t->kind &&
           (t->kind == PDX_TP_GATE_EVENT ? g->event == t->event
                                         : g->word == t->word && g->value == t->value);
}

/* Whether t is open now: PDX_OK, PDX_INPROGRESS, or an error (left to the
 * caller's own check of the gate, which names it). */
static pdx_status_t gate_state(const pdx_tp_gate_t *t)
{
    if (t->kind == PDX_TP_GATE_WORD)
        return __atomic_load_n(t->word, __ATOMIC_ACQUIRE) >= t->value ? PDX_OK : PDX_INPROGRESS;
    if (t->kind == PDX_TP_GATE_EVENT && t->event)
        return pdx_hip_event_query(t->event);
    return PDX_ERR_INVALID;
}

pdx_status_t ipc_gate_take(ipc_cq_t *cq, const pdx_tp_gate_t *t, ipc_gate_t **g_p,
                           uint32_t *slot_p)
{
    ipc_gate_t *g = NULL, *idle = NULL;
    pdx_status_t st = gate_state(t);

    *g_p = NULL;
    if (st == PDX_OK)
        return PDX_OK; /* open: nothing to wait for */
    if (st != PDX_INPROGRESS)
        return PDX_ERR_FULL;
    for (uint32_t i = 0; i < IPC_GATES && !g; i++) {
        ipc_gate_t *c = &cq->gates[i];
        bool waits = c->stream && !ipc_gate_passed(c, c->seq);

        if (waits && same_gate(c, t) && c->used < IPC_GATE_SLOTS)
            g = c;
        else if (!waits && !idle)
            idle = c;
    }
    if (!g) {
        if (!idle)
            return PDX_ERR_FULL;
        g = idle;
        if (!g->stream && (st = gate_make(cq, g)) != PDX_OK)
            return st;
        g->kind = t->kind;
        g->event = t->event;
        g->word = t->word;
        g->value = t->value;
        g->used = 0;
        g->live = 0;
    }
    /* a wait of its own even behind the same gate: an event's wait is for
     * its record as of now, and the caller may have recorded it anew */
    st = t->kind == PDX_TP_GATE_EVENT ? pdx_hip_stream_wait_event(g->stream, t->event)
                                      : pdx_hip_stream_wait_word(g->stream, t->word, t->value);
    if (st != PDX_OK)
        return st; /* nothing enqueued */
    st = pdx_hip_stream_write_word(g->stream, &g->words[0], g->seq + 1);
    g->seq++;
    if (st != PDX_OK) {
        /* a wait nothing will report passed: this stream is done */
        if (g->live == 0)
            set_aside(cq, g, "its wait could not be followed");
        return st;
    }
    g->words[1 + g->used] = 0;
    *slot_p = g->used++;
    g->live++;
    *g_p = g;
    return PDX_OK;
}

pdx_status_t ipc_gate_skip(ipc_gate_t *g, uint32_t slot, const uint64_t **dev_p)
{
    *dev_p = g->skips + 1 + slot;
    return pdx_hip_copy_async(g->stream, PDX_HIP_H2D, g->skips + 1 + slot,
                              (const void *)&g->words[1 + slot], sizeof(uint64_t), NULL);
}

bool ipc_gate_give_up(ipc_cq_t *cq, ipc_gate_t *g, uint32_t slot, uint64_t seq,
                      pdx_status_t why)
{
    __atomic_store_n(&g->words[1 + slot], 1, __ATOMIC_SEQ_CST);
    atomic_thread_fence(memory_order_seq_cst);
    if (ipc_gate_passed(g, seq))
        return false; /* the kernel runs: its event says when it is done */
    if (--g->live == 0)
        set_aside(cq, g, why == PDX_ERR_TIMEOUT ? "their deadline passed"
                         : why == PDX_ERR_ABORTED ? "their room failed"
                                                  : "their endpoint failed or closed");
    return true;
}

void ipc_gates_reclaim(ipc_cq_t *cq)
{
    for (uint32_t i = 0; i < cq->naside;) {
        ipc_aside_t *a = &cq->aside[i];

        if (!a->done || pdx_hip_event_query(a->done) == PDX_INPROGRESS) {
            i++;
            continue;
        }
        pdx_hip_event_destroy(a->done);
        cq->slab_free |= 1u << a->slab;
        *a = cq->aside[--cq->naside];
    }
}

void ipc_gate_done(ipc_gate_t *g, uint64_t epoch)
{
    if (g->epoch == epoch && g->live)
        g->live--;
}

void ipc_gates_destroy(ipc_cq_t *cq)
{
    uint32_t kept;

    for (uint32_t i = 0; i < IPC_GATES; i++) {
        ipc_gate_t *g = &cq->gates[i];

        if (!g->stream)
            continue;
        if (!ipc_gate_passed(g, g->seq)) {
            set_aside(cq, g, "the engine is closing");
            continue;
        }
        pdx_hip_stream_destroy(g->stream);
        cq->slab_free |= 1u << g->slab;
    }
    ipc_gates_reclaim(cq);
    kept = cq->naside;
    for (uint32_t i = 0; i < cq->naside; i++)
        pdx_hip_event_destroy(cq->aside[i].done);
    cq->naside = 0;
    if (kept) /* a late kernel still reads them */
        pdx_warn("ipc: %u gate stream(s) still wait for a gate that never opened: the CQ's "
                 "%zu bytes of gate words stay allocated", kept,
                 2 * (size_t)IPC_SLABS * WORDS_BYTES);
    else if (cq->slab_words) {
        pdx_hip_host_free(cq->slab_words);
        pdx_hip_device_free(cq->slab_skips);
    }
    cq->slab_words = cq->slab_skips = NULL;
}
