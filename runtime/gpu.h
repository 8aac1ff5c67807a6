/*
 * gpu: what the engine asks of hip/ (docs/architecture.md §5-§7): the GPU it serves,
 * how a region is registered (host memory, GPU memory through a dmabuf or a
 * peer-memory client, managed memory refused), gates, and whether GPU
 * destinations need a flush before decode reports SUCCESS.
 *
 * Without a GPU (the platform "none", or a runtime that finds no device) the
 * engine serves host memory: every pointer is host memory, event and stream
 * gates are PDX_ERR_UNSUPPORTED with a message, word gates on host flags
 * work as always.
 *
 * Stream-gate words come from a pool of pinned words. A word goes back to
 * the pool when its chunk is done with it: at once when the gate opened (the
 * stream wrote it), else (the room ended first) only after the stream wrote
 * it, which the control thread's sweep checks.
 */
#ifndef PDX_GPU_H
#define PDX_GPU_H

#include "hip/pdx_hip.h"
#include "layout.h"
#include "transport.h"

#include <pthread.h>

#define PDX_GPU_WORDS 4096 /* stream gates armed and not yet done, per engine */

typedef struct pdx_gpu {
    int                 device;      /* -1: no GPU, host memory only */
    bool                flush;       /* GPU destinations need a flush before SUCCESS */
    bool                flush_host;  /* ... by the host call (nvidia), not an RDMA READ */
    pdx_hip_words_t    *words;       /* stream-gate words; NULL without a GPU */
    pthread_mutex_t     lock;        /* orphans */
    volatile uint64_t  *orphans[PDX_GPU_WORDS]; /* words whose chunk ended before they
                                                 * were written, with their values */
    uint64_t            orphan_value[PDX_GPU_WORDS];
    uint32_t            norphans;
    _Atomic uint32_t    armed;       /* words out of the pool */
    /* per pool word: WORD_FREE, WORD_ARMED (the caller holds the gate),
     * WORD_HELD (a chunk or a stream wait holds it); one transition frees it */
    _Atomic uint8_t     word_state[PDX_GPU_WORDS];
    /* per pool word: the value its latest gate waits for; a stale copy of an
     * older gate of the same word is refused */
    _Atomic uint64_t    word_gen[PDX_GPU_WORDS];
} pdx_gpu_t;

/* At engine create, before the transport's regions and the shards. */
pdx_status_t pdx_gpu_open(pdx_engine_t *e);
/* At destroy, after every thread stopped. */
void pdx_gpu_close(pdx_engine_t *e);
/* A thread of the engine that calls into the GPU runtime (shards). */
void pdx_gpu_thread_init(pdx_engine_t *e);

/* Register [base, base + len) on the engine's NIC nic by what it is;
 * *gpu_p says whether it is GPU memory. Logs why on failure. */
pdx_status_t pdx_gpu_mem_reg(pdx_engine_t *e, uint32_t nic, void *base, size_t len,
                             unsigned access, pdx_tp_mr_t **mr_p, bool *gpu_p);

pdx_status_t pdx_gpu_gate_arm(pdx_engine_t *e, void *stream, pdx_gate_t *gate_p);
/* pdx_send: take an armed gate for one chunk (PDX_ERR_INVALID when it was
 * sent or released already); give it back to the caller after AGAIN. */
pdx_status_t pdx_gpu_gate_claim(pdx_engine_t *e, const pdx_gate_t *gate);
void pdx_gpu_gate_unclaim(pdx_engine_t *e, const pdx_gate_t *gate);
/* pdx_gate_release: an armed gate that will not be sent. */
pdx_status_t pdx_gpu_gate_release(pdx_engine_t *e, const pdx_gate_t *gate);
/* pdx_send's check of a gate before it is queued. */
pdx_status_t pdx_gpu_gate_check(const pdx_engine_t *e, const pdx_gate_t *gate);
/* Shard: PDX_OK when the gate is open, PDX_INPROGRESS while closed, else
 * why it never will be (err holds the runtime's message). */
pdx_status_t pdx_gpu_gate_poll(const pdx_gate_t *gate, char *err, size_t len);
/* Whether a page copy may wait for gate on the GPU: an event, or a word of
 * pdx_gate_arm() (a pool word only grows, so a wait for its value never
 * misses it); not a caller's host flag. */
bool pdx_gpu_gate_on_device(pdx_engine_t *e, const pdx_gate_t *gate);
/* The gate's chunk is done with it (opened, or its room ended). */
void pdx_gpu_gate_done(pdx_engine_t *e, const pdx_gate_t *gate);
/* A word of the pool for values base .. base + span, set to base (api
 * names the caller in messages); back with pdx_gpu_word_done(word, a value
 * it reached). */
pdx_status_t pdx_gpu_word_take(pdx_engine_t *e, const char *api, uint64_t span,
                               volatile uint64_t **word_p, uint64_t *base_p);
/* Enqueue on stream a wait until a fresh word reaches base + 1, then a
 * write of base + 2 to it (the stream passed): pdx_room_stream_wait. */
pdx_status_t pdx_gpu_stream_wait(pdx_engine_t *e, void *stream, volatile uint64_t **word_p,
                                 uint64_t *base_p);
/* A pool word nobody will raise any more goes back once it reached value. */
void pdx_gpu_word_done(pdx_engine_t *e, volatile uint64_t *word, uint64_t value);
/* Control thread: return orphaned words the streams have written. */
void pdx_gpu_sweep(pdx_engine_t *e);

/* PDX_FLUSH_* for a decode room whose destinations are in layout. */
uint32_t pdx_gpu_flush_mode(pdx_engine_t *e, const pdx_layout_t *layout);
/* PDX_FLUSH_HOST: make the RDMA writes placed so far visible to kernels. */
pdx_status_t pdx_gpu_flush_host(pdx_engine_t *e);

#endif
