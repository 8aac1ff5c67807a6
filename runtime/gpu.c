/*
 * gpu: the engine's side of hip/ (gpu.h).
 *
 * Registration (docs/architecture.md §6), by what pdx_hip_classify() says:
 *   - pageable or pinned host memory: the transport's mr_reg;
 *   - device memory of the engine's GPU over rdma: a dmabuf export (unless
 *     PDX_DMABUF=off) and mr_reg_dmabuf at the export's true offset; where
 *     either is unsupported, mr_reg through a peer-memory client; else one
 *     error naming what is missing. Over tcp: mr_reg with
 *     PDX_TP_ACCESS_DEVICE, and tcp stages the bytes through pinned buffers
 *     with asynchronous copies (tcp/stage.c);
 *   - managed memory: refused (its pages migrate under the NIC).
 *
 * Flush (docs/architecture.md §5): PDX_FLUSH=auto flushes rooms with GPU destinations
 * when the device needs it: nvidia devices whose GPUDirect RDMA write
 * ordering is below owner scope by the host call, amd devices by the
 * loopback RDMA READ (flush.c). The tcp transport places every byte before
 * its notify (a host copy), so it never needs one.
 */
#include "gpu.h"

#include "engine.h"
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Why the engine has no GPU, for messages. */
static const char *no_gpu_why(void)
{
    const char *why = pdx_hip_no_device_reason();

    return why[0] ? why : pdx_hip_platform_name();
}

pdx_status_t pdx_gpu_open(pdx_engine_t *e)
{
    pdx_gpu_t *g = &e->gpu;
    bool needed = false, host = false;
    int count = 0, device = e->cfg.gpu;
    pdx_status_t st;

    g->device = -1;
    pthread_mutex_init(&g->lock, NULL);
    if (e->cfg.markers == PDX_MODE_ON)
        pdx_hip_markers_enable(true); /* says so when no marker library is there */
    st = pdx_hip_device_count(&count);
    if (st != PDX_OK) {
        pdx_info("no GPU (%s: %s): the engine serves host memory", pdx_hip_platform_name(),
                 pdx_hip_no_device_reason());
        return PDX_OK;
    }
    if (device < 0 && pdx_hip_current_device(&device) != PDX_OK)
        return PDX_ERR_IO;
    if (device >= count) {
        pdx_error("PDX_GPU=%d: the %s runtime sees %d GPUs", device, pdx_hip_platform_name(),
                  count);
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_set_device(device);
    if (st == PDX_OK)
        st = pdx_hip_words_create(PDX_GPU_WORDS, &g->words);
    if (st == PDX_OK)
        st = pdx_hip_rdma_flush_needed(device, &needed);
    if (st != PDX_OK) {
        if (g->words)
            pdx_hip_words_destroy(g->words);
        g->words = NULL;
        return st;
    }
    g->device = device;
    if (!(e->ops->caps & PDX_TP_CAP_FLUSH_READ) || e->cfg.flush == PDX_MODE_OFF)
        needed = false; /* tcp: bytes are placed by the host before the notify */
    g->flush = needed;
    /* the runtime's flush where the device has it, else the READ */
    if (needed && pdx_hip_rdma_host_flush_supported(device, &host) == PDX_OK)
        g->flush_host = host;
    pdx_info("GPU %d (%s); GPU destinations %s", device, pdx_hip_platform_name(),
             !needed ? "need no flush" : g->flush_host ? "are flushed by the host call"
                                                        : "are flushed by an RDMA READ");
    return PDX_OK;
}

void pdx_gpu_close(pdx_engine_t *e)
{
    pdx_gpu_t *g = &e->gpu;

    if (g->words) {
        uint32_t armed;

        pdx_gpu_sweep(e);
        armed = atomic_load(&g->armed);
        if (armed)
            /* A stream may still write them: the pool stays (leaked) rather
             * than pinned memory being freed under the GPU. */
            pdx_warn("%u stream gates were never reached or never sent; their words are left "
                     "allocated", armed);
        else
            pdx_hip_words_destroy(g->words);
        g->words = NULL;
    }
    if (e->cfg.markers == PDX_MODE_ON)
        pdx_hip_markers_enable(false);
    pthread_mutex_destroy(&g->lock);
}

void pdx_gpu_thread_init(pdx_engine_t *e)
{
    if (e->gpu.device >= 0)
        pdx_hip_set_device(e->gpu.device); /* logged on failure; calls fail with a message */
}

/* ------------------------------------------------------------------ memory */

/* tcp reaches GPU memory through pinned staging and copies on the GPU that
 * owns it (the engine's); the transport never touches the bytes. */
static pdx_status_t reg_staged(pdx_engine_t *e, pdx_tp_t *tp, void *base, size_t len,
                               unsigned access, pdx_tp_mr_t **mr_p)
{
    pdx_status_t st = e->ops->mr_reg(tp, base, len, access | PDX_TP_ACCESS_DEVICE, mr_p);

    if (st == PDX_OK)
        pdx_debug("GPU memory at %p (%zu bytes) registered with %s: staged through pinned "
                  "buffers", base, len, e->ops->name);
    return st;
}

static pdx_status_t reg_device(pdx_engine_t *e, pdx_tp_t *tp, void *base, size_t len,
                               unsigned access, const pdx_hip_ptr_t *p, pdx_tp_mr_t **mr_p)
{
    char dmabuf_why[128] = "PDX_DMABUF=off";
    pdx_status_t st;
    uint64_t offset;
    int fd;

    if (p->device != e->gpu.device) {
        pdx_error("pdx_mem_register: %p is memory of GPU %d; this engine serves GPU %d", base,
                  p->device, e->gpu.device);
        return PDX_ERR_INVALID;
    }
    if (e->base_ops == &pdx_tcp_ops)
        return reg_staged(e, tp, base, len, access, mr_p);
    if (e->cfg.dmabuf != PDX_MODE_OFF) {
        st = pdx_hip_export_dmabuf(base, len, &fd, &offset);
        if (st == PDX_OK) {
            st = e->ops->mr_reg_dmabuf(tp, base, len, fd, offset, access, mr_p);
            close(fd);
            if (st == PDX_OK)
                return PDX_OK;
            snprintf(dmabuf_why, sizeof(dmabuf_why), "the NIC refused the dmabuf (%s)",
                     pdx_status_str(st));
        } else {
            snprintf(dmabuf_why, sizeof(dmabuf_why), "no dmabuf export (%s)",
                     pdx_status_str(st));
        }
    }
    /* A peer-memory client (amdgpu's, nvidia-peermem) lets ibv_reg_mr pin GPU pages. */
    st = e->ops->mr_reg(tp, base, len, access, mr_p);
    if (st == PDX_OK) {
        pdx_info("GPU memory at %p registered through a peer-memory client (%s)", base,
                 dmabuf_why);
        return PDX_OK;
    }
    pdx_error("pdx_mem_register: GPU memory at %p (%zu bytes) cannot be registered: %s, and "
              "ibv_reg_mr found no peer-memory client. Needed: a kernel with "
              "CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA and a runtime that exports "
              "dmabufs, or a peer-memory module (amdgpu peer memory, nvidia-peermem)", base, len,
              dmabuf_why);
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_gpu_mem_reg(pdx_engine_t *e, uint32_t nic, void *base, size_t len,
                             unsigned access, pdx_tp_mr_t **mr_p, bool *gpu_p)
{
    pdx_hip_ptr_t p = {.kind = PDX_HIP_MEM_PAGEABLE_HOST};
    pdx_status_t st;

    if (e->gpu.device >= 0) {
        st = pdx_hip_classify(base, len, &p);
        if (st != PDX_OK)
            return st;
    }
    switch (p.kind) {
    case PDX_HIP_MEM_PAGEABLE_HOST:
    case PDX_HIP_MEM_PINNED_HOST:
        st = e->ops->mr_reg(e->tps[nic], base, len, access, mr_p);
        if (st == PDX_OK)
            *gpu_p = false;
        return st;
    case PDX_HIP_MEM_DEVICE:
        st = reg_device(e, e->tps[nic], base, len, access, &p, mr_p);
        if (st == PDX_OK)
            *gpu_p = true;
        return st;
    case PDX_HIP_MEM_MANAGED:
        break;
    }
    pdx_error("pdx_mem_register: %p is managed memory, which cannot be registered (its pages "
              "migrate under the NIC); use device or pinned host memory", base);
    return PDX_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------------------- gates */

enum { WORD_FREE = 0, WORD_ARMED = 1, WORD_HELD = 2 };

/* The state of word if it is a pool word, else NULL. */
static _Atomic uint8_t *word_state(pdx_engine_t *e, const volatile uint64_t *word)
{
    int64_t i = e->gpu.words ? pdx_hip_word_index(e->gpu.words, word) : -1;

    return i >= 0 && i < PDX_GPU_WORDS ? &e->gpu.word_state[i] : NULL;
}

static bool word_move(_Atomic uint8_t *st, uint8_t from, uint8_t to)
{
    return atomic_compare_exchange_strong(st, &from, to);
}

pdx_status_t pdx_gpu_gate_arm(pdx_engine_t *e, void *stream, pdx_gate_t *gate_p)
{
    volatile uint64_t *word;
    _Atomic uint8_t *state;
    uint64_t gen;
    pdx_status_t st;

    if (e->gpu.device < 0) {
        pdx_error("pdx_gate_arm: no GPU (%s): stream gates need one", no_gpu_why());
        return PDX_ERR_UNSUPPORTED;
    }

    st = pdx_hip_word_alloc(e->gpu.words, &word);
    if (st == PDX_ERR_FULL) {
        pdx_warn("pdx_gate_arm: all %d stream-gate words are armed", PDX_GPU_WORDS);
        return PDX_ERR_AGAIN;
    }
    if (st != PDX_OK)
        return st;
    state = word_state(e, word);
    /* the word holds its last value; this gate opens at the next one */
    gen = atomic_fetch_add(&e->gpu.word_gen[state - e->gpu.word_state], 1) + 1;
    st = pdx_hip_stream_write_word(stream, word, gen);
    if (st != PDX_OK) {
        pdx_hip_word_free(e->gpu.words, word);
        return st;
    }
    atomic_fetch_add_explicit(&e->gpu.armed, 1, memory_order_relaxed);
    atomic_store(state, WORD_ARMED);
    *gate_p = (pdx_gate_t){.kind = PDX_GATE_WORD, .word = word, .value = gen};
    return PDX_OK;
}

pdx_status_t pdx_gpu_gate_claim(pdx_engine_t *e, const pdx_gate_t *gate)
{
    _Atomic uint8_t *st;

    if (!gate || gate->kind != PDX_GATE_WORD || !(st = word_state(e, gate->word)))
        return PDX_OK; /* not a pdx_gate_arm() gate */
    if (gate->value == atomic_load(&e->gpu.word_gen[st - e->gpu.word_state]) &&
        word_move(st, WORD_ARMED, WORD_HELD))
        return PDX_OK;
    pdx_error("pdx_send: this gate of pdx_gate_arm() was sent or released already: arm one "
              "gate per chunk");
    return PDX_ERR_INVALID;
}

void pdx_gpu_gate_unclaim(pdx_engine_t *e, const pdx_gate_t *gate)
{
    _Atomic uint8_t *st;

    if (gate && gate->kind == PDX_GATE_WORD && (st = word_state(e, gate->word)))
        word_move(st, WORD_HELD, WORD_ARMED);
}

pdx_status_t pdx_gpu_gate_release(pdx_engine_t *e, const pdx_gate_t *gate)
{
    pdx_status_t st = pdx_gpu_gate_claim(e, gate);

    if (st == PDX_OK)
        pdx_gpu_gate_done(e, gate);
    return st;
}

pdx_status_t pdx_gpu_gate_check(const pdx_engine_t *e, const pdx_gate_t *gate)
{
    switch (gate->kind) {
    case PDX_GATE_NONE:
        return PDX_OK;
    case PDX_GATE_WORD:
        if (gate->word)
            return PDX_OK;
        pdx_error("pdx_send: a word gate needs a word");
        return PDX_ERR_INVALID;
    case PDX_GATE_EVENT:
        if (!gate->event) {
            pdx_error("pdx_send: an event gate needs an event");
            return PDX_ERR_INVALID;
        }
        if (e->gpu.device >= 0)
            return PDX_OK;
        pdx_error("pdx_send: no GPU (%s): event gates need one", no_gpu_why());
        return PDX_ERR_UNSUPPORTED;
    }
    pdx_error("pdx_send: unknown gate kind %d", (int)gate->kind);
    return PDX_ERR_INVALID;
}

pdx_status_t pdx_gpu_gate_poll(const pdx_gate_t *gate, char *err, size_t len)
{
    pdx_status_t st;

    switch (gate->kind) {
    case PDX_GATE_NONE:
        return PDX_OK;
    case PDX_GATE_WORD:
        /* Acquire: the pages written before the word was raised are visible
         * from here (the load of a volatile word, ordered; sanitizers see it). */
        return __atomic_load_n(gate->word, __ATOMIC_ACQUIRE) >= gate->value ? PDX_OK
                                                                            : PDX_INPROGRESS;
    case PDX_GATE_EVENT:
        st = pdx_hip_event_query(gate->event);
        if (st != PDX_OK && st != PDX_INPROGRESS)
            snprintf(err, len, "event gate: %s", pdx_hip_last_error());
        return st;
    }
    snprintf(err, len, "unknown gate kind %d", (int)gate->kind);
    return PDX_ERR_INVALID;
}

static bool word_reached(volatile uint64_t *word, uint64_t value)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE) >= value;
}

bool pdx_gpu_gate_on_device(pdx_engine_t *e, const pdx_gate_t *gate)
{
    if (e->gpu.device < 0 || e->cfg.gpu_gates == PDX_MODE_OFF)
        return false;
    return (gate->kind == PDX_GATE_EVENT && gate->event) ||
           (gate->kind == PDX_GATE_WORD && word_state(e, gate->word));
}

void pdx_gpu_gate_done(pdx_engine_t *e, const pdx_gate_t *gate)
{
    if (gate->kind == PDX_GATE_WORD)
        pdx_gpu_word_done(e, (volatile uint64_t *)(uintptr_t)gate->word, gate->value);
}

pdx_status_t pdx_gpu_word_take(pdx_engine_t *e, const char *api, uint64_t span,
                               volatile uint64_t **word_p, uint64_t *base_p)
{
    volatile uint64_t *word;
    uint64_t base;
    pdx_status_t st;

    if (e->gpu.device < 0) {
        pdx_error("%s: no GPU (%s): stream waits need one", api, no_gpu_why());
        return PDX_ERR_UNSUPPORTED;
    }
    st = pdx_hip_word_alloc(e->gpu.words, &word);
    if (st == PDX_ERR_FULL) {
        pdx_warn("%s: all %d stream words are in use", api, PDX_GPU_WORDS);
        return PDX_ERR_AGAIN;
    }
    if (st != PDX_OK)
        return st;
    /* the word holds at most its generation: from base, its values only grow */
    base = atomic_fetch_add(&e->gpu.word_gen[word_state(e, word) - e->gpu.word_state], span);
    __atomic_store_n(word, base, __ATOMIC_RELEASE);
    atomic_fetch_add_explicit(&e->gpu.armed, 1, memory_order_relaxed);
    atomic_store(word_state(e, word), WORD_HELD);
    *word_p = word;
    *base_p = base;
    return PDX_OK;
}

pdx_status_t pdx_gpu_stream_wait(pdx_engine_t *e, void *stream, volatile uint64_t **word_p,
                                 uint64_t *base_p)
{
    volatile uint64_t *word;
    uint64_t base;
    pdx_status_t st;

    /* the stream waits for base + 1 (the room ended) and writes base + 2
     * (it passed) */
    st = pdx_gpu_word_take(e, "pdx_room_stream_wait", 2, &word, &base);
    if (st != PDX_OK)
        return st;
    st = pdx_hip_stream_wait_word(stream, word, base + 1);
    if (st != PDX_OK) {
        __atomic_store_n(word, base + 2, __ATOMIC_RELEASE); /* nothing waits for it */
        pdx_gpu_word_done(e, word, base + 2);
        return st;
    }
    st = pdx_hip_stream_write_word(stream, word, base + 2);
    if (st != PDX_OK) {
        /* The wait is queued and nothing will say when the stream passed it:
         * let it pass now; the word stays out of the pool. */
        __atomic_store_n(word, base + 1, __ATOMIC_RELEASE);
        return st;
    }
    *word_p = word;
    *base_p = base;
    return PDX_OK;
}

void pdx_gpu_word_done(pdx_engine_t *e, volatile uint64_t *word, uint64_t value)
{
    pdx_gpu_t *g = &e->gpu;
    _Atomic uint8_t *st = word_state(e, word);

    /* the caller's word; or one done already (a gate copied into two
     * chunks cannot be: pdx_send claims it once) */
    if (!st || !word_move(st, WORD_HELD, WORD_FREE))
        return;
    if (word_reached(word, value)) {
        pdx_hip_word_free(g->words, word);
        atomic_fetch_sub_explicit(&g->armed, 1, memory_order_relaxed);
        return;
    }
    pthread_mutex_lock(&g->lock);
    if (g->norphans < PDX_GPU_WORDS) { /* every word fits: at most that many are armed */
        g->orphans[g->norphans] = word;
        g->orphan_value[g->norphans++] = value;
    }
    pthread_mutex_unlock(&g->lock);
    pdx_ctrl_nudge(e);
}

void pdx_gpu_sweep(pdx_engine_t *e)
{
    pdx_gpu_t *g = &e->gpu;

    if (!g->words)
        return;
    pthread_mutex_lock(&g->lock);
    for (uint32_t i = 0; i < g->norphans;) {
        if (word_reached(g->orphans[i], g->orphan_value[i])) {
            pdx_hip_word_free(g->words, g->orphans[i]);
            atomic_fetch_sub_explicit(&g->armed, 1, memory_order_relaxed);
            g->norphans--;
            g->orphans[i] = g->orphans[g->norphans];
            g->orphan_value[i] = g->orphan_value[g->norphans];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&g->lock);
}

/* ------------------------------------------------------------------- flush */

uint32_t pdx_gpu_flush_mode(pdx_engine_t *e, const pdx_layout_t *layout)
{
    if (e->cfg.flush == PDX_MODE_ON && e->flush)
        return PDX_FLUSH_READ;
    if (e->cfg.flush == PDX_MODE_OFF || !e->gpu.flush)
        return PDX_FLUSH_NONE;
    for (uint32_t g = 0; g < layout->ngroups; g++)
        for (uint32_t b = 0; b < layout->groups[g].nbuffers; b++) {
            uint32_t mem = layout->groups[g].buffers[b].mem;

            if (mem < PDX_MAX_MEMS && e->mems[mem].used && e->mems[mem].reg->gpu)
                return e->gpu.flush_host ? PDX_FLUSH_HOST : PDX_FLUSH_READ;
        }
    return PDX_FLUSH_NONE;
}

pdx_status_t pdx_gpu_flush_host(pdx_engine_t *e)
{
    pdx_status_t st = pdx_hip_set_device(e->gpu.device);

    return st == PDX_OK ? pdx_hip_flush_rdma_writes() : st;
}
