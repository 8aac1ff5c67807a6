/*
 * hip for a build without a GPU runtime (PDX_HIP_PLATFORM=none): the API of
 * pdx_hip.h with nothing behind it. Every call that needs a GPU answers
 * PDX_ERR_UNSUPPORTED and says "no GPU runtime in this build", so the
 * engine serves host memory. pdx_hip_classify has an honest answer
 * instead: without a GPU runtime all memory is pageable host memory.
 * Markers are in marker.c (always off here).
 */
#include "hip_api.h"

#define NO_RUNTIME "no GPU runtime in this build (PDX_HIP_PLATFORM=none)"

static pdx_status_t unsupported(const char *call)
{
    pdx_error("hip: %s: " NO_RUNTIME, call);
    return PDX_ERR_UNSUPPORTED;
}

const char *pdx_hip_platform_name(void)
{
    return PDX_HIP_PLATFORM;
}

pdx_status_t pdx_hip_device_count(int *count_p)
{
    if (!count_p) {
        pdx_error("hip: device_count: NULL output");
        return PDX_ERR_INVALID;
    }
    pdx_info("hip: " NO_RUNTIME);
    return PDX_ERR_UNSUPPORTED;
}

const char *pdx_hip_no_device_reason(void)
{
    return NO_RUNTIME;
}

pdx_status_t pdx_hip_device_identity(int device, pdx_hip_identity_t *id_p)
{
    (void)device;
    (void)id_p;
    return unsupported("device_identity");
}

pdx_status_t pdx_hip_set_device(int device)
{
    (void)device;
    return unsupported("set_device");
}

const char *pdx_hip_mem_name(pdx_hip_mem_t kind)
{
    return kind == PDX_HIP_MEM_PAGEABLE_HOST ? "pageable host" : "?";
}

pdx_status_t pdx_hip_classify(const void *ptr, size_t len, pdx_hip_ptr_t *info_p)
{
    uintptr_t p = (uintptr_t)ptr;

    if (!ptr || len == 0 || p + len < p || !info_p) {
        pdx_error("hip: classify: bad range %p + %zu", ptr, len);
        return PDX_ERR_INVALID;
    }
    *info_p = (pdx_hip_ptr_t){
        .kind = PDX_HIP_MEM_PAGEABLE_HOST, .device = -1, .base = p, .size = len,
    };
    return PDX_OK;
}

pdx_status_t pdx_hip_export_dmabuf(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    (void)ptr;
    (void)len;
    (void)fd_p;
    (void)offset_p;
    return unsupported("export_dmabuf");
}

static void *_Atomic pdx_hip_fault_event;

void pdx_hip_fault_event_set(void *event)
{
    atomic_store_explicit(&pdx_hip_fault_event, event, memory_order_relaxed);
}

pdx_status_t pdx_hip_event_query(void *event)
{
    if (!event) {
        pdx_error("hip: event_query: NULL event");
        return PDX_ERR_INVALID;
    }
    return unsupported("event_query");
}

pdx_status_t pdx_hip_words_create(uint32_t count, pdx_hip_words_t **pool_p)
{
    (void)count;
    (void)pool_p;
    return unsupported("words_create");
}

void pdx_hip_words_destroy(pdx_hip_words_t *pool)
{
    (void)pool;
}

pdx_status_t pdx_hip_word_alloc(pdx_hip_words_t *pool, volatile uint64_t **word_p)
{
    (void)pool;
    (void)word_p;
    return unsupported("word_alloc");
}

void pdx_hip_word_free(pdx_hip_words_t *pool, volatile uint64_t *word)
{
    (void)pool;
    (void)word;
}

bool pdx_hip_word_owned(const pdx_hip_words_t *pool, const volatile uint64_t *word)
{
    (void)pool;
    (void)word;
    return false;
}

int64_t pdx_hip_word_index(const pdx_hip_words_t *pool, const volatile uint64_t *word)
{
    (void)pool;
    (void)word;
    return -1;
}

pdx_status_t pdx_hip_current_device(int *device_p)
{
    (void)device_p;
    return unsupported("current_device");
}

const char *pdx_hip_last_error(void)
{
    return "no GPU runtime in this build";
}

pdx_status_t pdx_hip_stream_write_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    (void)stream;
    (void)word;
    (void)value;
    return unsupported("stream_write_word");
}

pdx_status_t pdx_hip_stream_wait_word(void *stream, volatile uint64_t *word, uint64_t value)
{
    (void)stream;
    (void)word;
    (void)value;
    return unsupported("stream_wait_word");
}

pdx_status_t pdx_hip_host_alloc(size_t len, void **ptr_p)
{
    (void)len;
    (void)ptr_p;
    return unsupported("host_alloc");
}

void pdx_hip_host_free(void *ptr)
{
    (void)ptr;
}

pdx_status_t pdx_hip_device_alloc(size_t len, void **ptr_p)
{
    (void)len;
    (void)ptr_p;
    return unsupported("device_alloc");
}

void pdx_hip_device_free(void *ptr)
{
    (void)ptr;
}

pdx_status_t pdx_hip_fill64_async(void *stream, void *dst, uint64_t nwords, uint64_t base,
                                  uint64_t step)
{
    (void)stream;
    (void)dst;
    (void)nwords;
    (void)base;
    (void)step;
    return unsupported("fill64_async");
}

pdx_status_t pdx_hip_stream_create(void **stream_p)
{
    (void)stream_p;
    return unsupported("stream_create");
}

void pdx_hip_stream_destroy(void *stream)
{
    (void)stream;
}

pdx_status_t pdx_hip_event_create(void **event_p)
{
    (void)event_p;
    return unsupported("event_create");
}

void pdx_hip_event_destroy(void *event)
{
    (void)event;
}

pdx_status_t pdx_hip_copy_async(void *stream, pdx_hip_copy_dir_t dir, void *dst, const void *src,
                                size_t len, void *done)
{
    (void)stream;
    (void)dir;
    (void)dst;
    (void)src;
    (void)len;
    (void)done;
    return unsupported("copy_async");
}

pdx_status_t pdx_hip_rdma_flush_needed(int device, bool *needed_p)
{
    (void)device;
    (void)needed_p;
    return unsupported("rdma_flush_needed");
}

pdx_status_t pdx_hip_rdma_write_ordering(int device, int *ordering_p)
{
    (void)device;
    (void)ordering_p;
    return unsupported("rdma_write_ordering");
}

pdx_status_t pdx_hip_rdma_host_flush_supported(int device, bool *yes_p)
{
    (void)device;
    (void)yes_p;
    return unsupported("rdma_host_flush_supported");
}

pdx_status_t pdx_hip_flush_rdma_writes(void)
{
    return unsupported("flush_rdma_writes");
}

pdx_status_t pdx_hip_event_record(void *event, void *stream)
{
    (void)event;
    (void)stream;
    return unsupported("event_record");
}

pdx_status_t pdx_hip_stream_wait_event(void *stream, void *event)
{
    (void)stream;
    (void)event;
    return unsupported("stream_wait_event");
}

pdx_status_t pdx_hip_ipc_export(const void *ptr, size_t len, pdx_hip_ipc_handle_t *handle_p)
{
    (void)ptr;
    (void)len;
    (void)handle_p;
    return unsupported("ipc_export");
}

pdx_status_t pdx_hip_ipc_open(const pdx_hip_ipc_handle_t *handle, void **ptr_p)
{
    pdx_status_t st = pdx_hip_ipc_handle_check(handle); /* a bad handle says so everywhere */

    (void)ptr_p;
    return st != PDX_OK ? st : unsupported("ipc_open");
}

void pdx_hip_ipc_close(void *ptr)
{
    if (ptr)
        pdx_error("hip: ipc_close: %p: " NO_RUNTIME ", nothing was opened", ptr);
}

void pdx_hip_ipc_stats(pdx_hip_ipc_stats_t *stats_p)
{
    if (stats_p)
        *stats_p = (pdx_hip_ipc_stats_t){0};
}

bool pdx_hip_gather_supported(void)
{
    return false;
}

pdx_status_t pdx_hip_gather_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns)
{
    (void)stream;
    (void)runs;
    (void)nruns;
    return unsupported("gather");
}

pdx_status_t pdx_hip_gather_bounded_async(void *stream, const pdx_hip_run_t *runs,
                                          uint32_t nruns, uint64_t longest)
{
    (void)stream;
    (void)runs;
    (void)nruns;
    (void)longest;
    return unsupported("gather");
}

pdx_status_t pdx_hip_gather_prepare(void)
{
    return unsupported("gather");
}

pdx_status_t pdx_hip_runs_upload_async(void *stream, pdx_hip_run_t *runs_dev,
                                       const pdx_hip_run_t *runs_host, uint32_t nruns)
{
    (void)stream;
    (void)runs_dev;
    (void)runs_host;
    (void)nruns;
    return unsupported("runs_upload");
}

pdx_status_t pdx_hip_copy_runs_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns)
{
    (void)stream;
    (void)runs;
    (void)nruns;
    return unsupported("copy_runs");
}

pdx_status_t pdx_hip_peer_reachable(int device, const char *bus_id, bool *yes_p, char *why,
                                    size_t len)
{
    (void)device;
    (void)bus_id;
    if (yes_p)
        *yes_p = false;
    if (why && len)
        snprintf(why, len, "this build has no GPU runtime");
    return PDX_OK;
}

pdx_status_t pdx_hip_stream_callback(void *stream, void (*fn)(void *), void *arg)
{
    (void)stream;
    (void)fn;
    (void)arg;
    return unsupported("stream_callback");
}

pdx_status_t pdx_hip_pages_async(void *stream, const pdx_hip_page_buf_t *bufs,
                                 const uint32_t *src, const uint32_t *dst, uint32_t nbufs,
                                 uint32_t npages, uint64_t bytes_per_page,
                                 const volatile uint64_t *skip)
{
    (void)skip;
    (void)stream;
    (void)bufs;
    (void)src;
    (void)dst;
    (void)nbufs;
    (void)npages;
    (void)bytes_per_page;
    return unsupported("pages");
}
