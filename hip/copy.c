/*
 * hip staging copies for the tcp transport (docs/architecture.md §8): pinned host
 * buffers, pdx-owned streams and events, and asynchronous copies between
 * them and device memory.
 *
 * A copy never blocks its caller: pdx_hip_copy_async() enqueues the copy and
 * records a caller-provided event after it; the caller polls that event with
 * pdx_hip_event_query(). Streams, events and pinned buffers are made at
 * setup (each is a runtime call that may take locks and make syscalls); the
 * copy path only enqueues.
 *
 * Events: timing disabled, release at system scope (the host or the NIC
 * reads what a device-to-host copy wrote once the event completes; ROCm 5
 * takes that as hipEventReleaseToSystem, ROCm 6 and CUDA do it by default).
 * The same events serve as gates (docs/architecture.md §7).
 *
 * Pinned buffers are mapped and portable (usable from every device), and
 * coherent on amd.
 */
#include "hip_api.h"

/* Calls below need a GPU; say why when there is none. */
static pdx_status_t need_gpu(const char *call)
{
    int ndev;
    pdx_status_t st = pdx_hip_device_count(&ndev);

    if (st != PDX_OK)
        pdx_error("hip: %s: %s", call, pdx_hip_no_device_reason());
    return st;
}

pdx_status_t pdx_hip_host_alloc(size_t len, void **ptr_p)
{
    unsigned flags = hipHostMallocMapped | hipHostMallocPortable;
    void *mem = NULL;
    hipError_t err;
    pdx_status_t st;

    if (len == 0 || !ptr_p) {
        pdx_error("hip: host_alloc: bad length %zu or NULL output", len);
        return PDX_ERR_INVALID;
    }
    st = need_gpu("host_alloc");
    if (st != PDX_OK)
        return st;
#if defined(PDX_HIP_PLATFORM_AMD)
    flags |= hipHostMallocCoherent;
#endif
    err = hipHostMalloc(&mem, len, flags);
    if (err != hipSuccess)
        return hipx_fail(err, "hipHostMalloc", "staging buffer");
    *ptr_p = mem;
    return PDX_OK;
}

void pdx_hip_host_free(void *ptr)
{
    hipError_t err;

    if (!ptr)
        return;
    err = hipHostFree(ptr);
    if (err != hipSuccess)
        hipx_fail(err, "hipHostFree", "staging buffer");
}

pdx_status_t pdx_hip_device_alloc(size_t len, void **ptr_p)
{
    void *mem = NULL;
    hipError_t err;
    pdx_status_t st;

    if (len == 0 || !ptr_p) {
        pdx_error("hip: device_alloc: bad length %zu or NULL output", len);
        return PDX_ERR_INVALID;
    }
    st = need_gpu("device_alloc");
    if (st != PDX_OK)
        return st;
    err = hipMalloc(&mem, len);
    if (err != hipSuccess)
        return hipx_fail(err, "hipMalloc", "device memory");
    *ptr_p = mem;
    return PDX_OK;
}

void pdx_hip_device_free(void *ptr)
{
    hipError_t err;

    if (!ptr)
        return;
    err = hipFree(ptr);
    if (err != hipSuccess)
        hipx_fail(err, "hipFree", "device memory");
}

pdx_status_t pdx_hip_stream_create(void **stream_p)
{
    hipStream_t stream = NULL;
    hipError_t err;
    pdx_status_t st;

    if (!stream_p) {
        pdx_error("hip: stream_create: NULL output");
        return PDX_ERR_INVALID;
    }
    st = need_gpu("stream_create");
    if (st != PDX_OK)
        return st;
    /* Non-blocking: pdx's copies never wait for the legacy default stream. */
    err = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking);
    if (err != hipSuccess)
        return hipx_fail(err, "hipStreamCreateWithFlags", "copy stream");
    *stream_p = stream;
    return PDX_OK;
}

void pdx_hip_stream_destroy(void *stream)
{
    hipError_t err;

    if (!stream)
        return;
    err = hipStreamDestroy((hipStream_t)stream);
    if (err != hipSuccess)
        hipx_fail(err, "hipStreamDestroy", "copy stream");
}

pdx_status_t pdx_hip_event_create(void **event_p)
{
    unsigned flags = hipEventDisableTiming;
    hipEvent_t event = NULL;
    hipError_t err;
    pdx_status_t st;

    if (!event_p) {
        pdx_error("hip: event_create: NULL output");
        return PDX_ERR_INVALID;
    }
    st = need_gpu("event_create");
    if (st != PDX_OK)
        return st;
#if defined(PDX_HIP_PLATFORM_AMD)
    flags |= hipEventReleaseToSystem;
#endif
    err = hipEventCreateWithFlags(&event, flags);
    if (err != hipSuccess)
        return hipx_fail(err, "hipEventCreateWithFlags", NULL);
    *event_p = event;
    return PDX_OK;
}

void pdx_hip_event_destroy(void *event)
{
    hipError_t err;

    if (!event)
        return;
    err = hipEventDestroy((hipEvent_t)event);
    if (err != hipSuccess)
        hipx_fail(err, "hipEventDestroy", NULL);
}

pdx_status_t pdx_hip_copy_async(void *stream, pdx_hip_copy_dir_t dir, void *dst, const void *src,
                                size_t len, void *done)
{
    hipMemcpyKind kind;
    hipError_t err;

    if (!stream || !dst || !src || len == 0) {
        pdx_error("hip: copy_async: bad arguments (stream %p, dst %p, src %p, %zu bytes, "
                  "event %p)", stream, dst, src, len, done);
        return PDX_ERR_INVALID;
    }
    switch (dir) {
    case PDX_HIP_H2D: kind = hipMemcpyHostToDevice; break;
    case PDX_HIP_D2H: kind = hipMemcpyDeviceToHost; break;
    default:
        pdx_error("hip: copy_async: unknown direction %d", (int)dir);
        return PDX_ERR_INVALID;
    }
    err = hipMemcpyAsync(dst, src, len, kind, (hipStream_t)stream);
    if (err != hipSuccess)
        return hipx_fail(err, "hipMemcpyAsync", dir == PDX_HIP_H2D ? "host to device"
                                                                   : "device to host");
    if (!done)
        return PDX_OK;
    err = hipEventRecord((hipEvent_t)done, (hipStream_t)stream);
    if (err != hipSuccess)
        return hipx_fail(err, "hipEventRecord", "after a copy");
    return PDX_OK;
}
