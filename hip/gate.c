/*
 * hip gates: what holds a chunk back until the GPU finished writing its
 * pages (docs/architecture.md §7).
 *
 * - Event gates: pdx_hip_event_query() on a caller's recorded event. HIP
 *   and CUDA report a never-recorded event as complete; that is the
 *   caller's contract (pdx.h), not something a query can detect.
 * - Stream gates: a pool of pdx-owned 64-bit words in pinned, mapped host
 *   memory (coherent on amd, so the host sees the GPU's write without a
 *   cache flush). pdx_gate_arm() takes a word, enqueues a write of it on
 *   the producer's stream (hipStreamWriteValue64 / cuStreamWriteValue64,
 *   both with a system-scope release before the write), and the shard
 *   polls the word with plain loads: no runtime call on the poll path.
 *
 * Word pool: one hipHostMalloc at setup, and a bitmap of _Atomic uint64_t
 * (a set bit is a word in use). Alloc scans from a hint and claims a bit
 * with compare-and-swap (acquire); free clears it (release). No lock, no
 * allocation, no syscall, so both may run on the post path, from any
 * thread. Bits past `count` are set at creation and never cleared.
 */
#include "hip_api.h"

#include <stdlib.h>

#define WORDS_MAX (1u << 20)

struct pdx_hip_words {
    volatile uint64_t *words;
    uint32_t           count;
    uint32_t           nmaps;
    _Atomic uint32_t   hint;   /* map to scan first */
    _Atomic uint64_t   map[];  /* nmaps bitmaps */
};

static void *_Atomic pdx_hip_fault_event;

void pdx_hip_fault_event_set(void *event)
{
    atomic_store_explicit(&pdx_hip_fault_event, event, memory_order_relaxed);
}

pdx_status_t pdx_hip_event_query(void *event)
{
    hipError_t err;

    if (!event) {
        pdx_error("hip: event_query: NULL event");
        return PDX_ERR_INVALID;
    }
    if (PDX_UNLIKELY(event == atomic_load_explicit(&pdx_hip_fault_event, memory_order_relaxed)))
        return hipx_fail(hipErrorInvalidHandle, "hipEventQuery", "an injected fault");
    err = hipEventQuery((hipEvent_t)event);
    if (PDX_LIKELY(err == hipSuccess))
        return PDX_OK;
    if (err == hipErrorNotReady)
        return PDX_INPROGRESS;
    return hipx_fail(err, "hipEventQuery", "gate or copy completion");
}

pdx_status_t pdx_hip_words_create(uint32_t count, pdx_hip_words_t **pool_p)
{
    unsigned flags = hipHostMallocMapped | hipHostMallocPortable;
    pdx_hip_words_t *pool;
    void *mem = NULL;
    uint32_t nmaps;
    hipError_t err;
    pdx_status_t st;
    int ndev;

    if (count == 0 || count > WORDS_MAX || !pool_p) {
        pdx_error("hip: words_create: %u words (1 to %u)", count, WORDS_MAX);
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_device_count(&ndev);
    if (st != PDX_OK) {
        pdx_error("hip: words_create: %s", pdx_hip_no_device_reason());
        return st;
    }
    nmaps = (count + 63) / 64;
    pool = calloc(1, sizeof(*pool) + nmaps * sizeof(pool->map[0]));
    if (!pool) {
        pdx_error("hip: words_create: out of memory for %u words", count);
        return PDX_ERR_NOMEM;
    }
#if defined(PDX_HIP_PLATFORM_AMD)
    flags |= hipHostMallocCoherent;
#endif
    err = hipHostMalloc(&mem, (size_t)count * sizeof(uint64_t), flags);
    if (err != hipSuccess) {
        st = hipx_fail(err, "hipHostMalloc", "gate words");
        goto err_free_pool;
    }
    pool->words = mem;
    pool->count = count;
    pool->nmaps = nmaps;
    for (uint32_t i = 0; i < count; i++)
        pool->words[i] = 0;
    for (uint32_t m = 0; m < nmaps; m++) {
        uint32_t valid = PDX_MIN(64u, count - m * 64);
        uint64_t unused = valid == 64 ? 0 : ~0ull << valid;

        atomic_init(&pool->map[m], unused);
    }
    atomic_init(&pool->hint, 0);
    *pool_p = pool;
    return PDX_OK;

err_free_pool:
    free(pool);
    return st;
}

void pdx_hip_words_destroy(pdx_hip_words_t *pool)
{
    uint32_t busy = 0;
    hipError_t err;

    if (!pool)
        return;
    for (uint32_t m = 0; m < pool->nmaps; m++) {
        uint32_t valid = PDX_MIN(64u, pool->count - m * 64);
        uint64_t used = atomic_load(&pool->map[m]);

        if (valid < 64)
            used &= ~(~0ull << valid);
        busy += (uint32_t)__builtin_popcountll(used);
    }
    if (busy)
        pdx_warn("hip: words_destroy: %u of %u gate words still in use", busy, pool->count);
    err = hipHostFree((void *)pool->words);
    if (err != hipSuccess)
        hipx_fail(err, "hipHostFree", "gate words");
    free(pool);
}

pdx_status_t pdx_hip_word_alloc(pdx_hip_words_t *pool, volatile uint64_t **word_p)
{
    uint32_t start = atomic_load_explicit(&pool->hint, memory_order_relaxed);

    for (uint32_t i = 0; i < pool->nmaps; i++) {
        uint32_t m = (start + i) % pool->nmaps;
        uint64_t v = atomic_load_explicit(&pool->map[m], memory_order_relaxed);

        while (~v) {
            unsigned bit = (unsigned)__builtin_ctzll(~v);

            if (atomic_compare_exchange_weak_explicit(&pool->map[m], &v, v | (1ull << bit),
                                                      memory_order_acquire,
                                                      memory_order_relaxed)) {
                volatile uint64_t *w = &pool->words[m * 64 + bit];

                if (m != start)
                    atomic_store_explicit(&pool->hint, m, memory_order_relaxed);
                *word_p = w;
                return PDX_OK;
            }
        }
    }
    return PDX_ERR_FULL;
}

bool pdx_hip_word_owned(const pdx_hip_words_t *pool, const volatile uint64_t *word)
{
    return pool && word >= pool->words && word < pool->words + pool->count;
}

int64_t pdx_hip_word_index(const pdx_hip_words_t *pool, const volatile uint64_t *word)
{
    return pdx_hip_word_owned(pool, word) ? (int64_t)(word - pool->words) : -1;
}

void pdx_hip_word_free(pdx_hip_words_t *pool, volatile uint64_t *word)
{
    ptrdiff_t idx = word - pool->words;
    uint64_t bit, old;

    if (!word || idx < 0 || (size_t)idx >= pool->count) {
        pdx_error("hip: word_free: %p is not a word of this pool", (const void *)word);
        return;
    }
    bit = 1ull << (idx % 64);
    old = atomic_fetch_and_explicit(&pool->map[idx / 64], ~bit, memory_order_release);
    if (!(old & bit))
        pdx_error("hip: word_free: word %td freed twice", idx);
}

/* The device's address of a pinned host word. */
static pdx_status_t word_device_ptr(volatile uint64_t *word, const char *call, void **dev_p)
{
    void *dev = NULL;
    hipError_t err;

    if (!word) {
        pdx_error("hip: %s: NULL word", call);
        return PDX_ERR_INVALID;
    }
    err = hipHostGetDevicePointer(&dev, (void *)word, 0);
    if (err != hipSuccess)
        return hipx_fail(err, "hipHostGetDevicePointer", "the word must be pinned host memory");
    *dev_p = dev;
    return PDX_OK;
}

#if defined(PDX_HIP_PLATFORM_NVIDIA)

pdx_status_t pdx_hip_stream_write_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    const hipx_cu_t *cu;
    void *dev = NULL;
    CUresult err;
    pdx_status_t st = word_device_ptr(word, "stream_write_word", &dev);

    if (st == PDX_OK)
        st = hipx_cu(&cu);
    if (st != PDX_OK)
        return st;
    err = cu->stream_write_value64((CUstream)stream, (CUdeviceptr)(uintptr_t)dev, value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuStreamWriteValue64", "stream gate");
    return PDX_OK;
}

pdx_status_t pdx_hip_stream_wait_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    const hipx_cu_t *cu;
    void *dev = NULL;
    CUresult err;
    pdx_status_t st = word_device_ptr(word, "stream_wait_word", &dev);

    if (st == PDX_OK)
        st = hipx_cu(&cu);
    if (st != PDX_OK)
        return st;
    err = cu->stream_wait_value64((CUstream)stream, (CUdeviceptr)(uintptr_t)dev, value,
                                  CU_STREAM_WAIT_VALUE_GEQ);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuStreamWaitValue64", "stream wait");
    return PDX_OK;
}

#else /* amd */

pdx_status_t pdx_hip_stream_write_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    void *dev = NULL;
    hipError_t err;
    pdx_status_t st = word_device_ptr(word, "stream_write_word", &dev);

    if (st != PDX_OK)
        return st;
    err = hipStreamWriteValue64((hipStream_t)stream, dev, value, 0);
    if (err != hipSuccess)
        return hipx_fail(err, "hipStreamWriteValue64", "stream gate");
    return PDX_OK;
}

pdx_status_t pdx_hip_stream_wait_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    void *dev = NULL;
    hipError_t err;
    pdx_status_t st = word_device_ptr(word, "stream_wait_word", &dev);

    if (st != PDX_OK)
        return st;
    err = hipStreamWaitValue64((hipStream_t)stream, dev, value, hipStreamWaitValueGte,
                               ~0ull);
    if (err != hipSuccess)
        return hipx_fail(err, "hipStreamWaitValue64", "stream wait");
    return PDX_OK;
}

#endif
