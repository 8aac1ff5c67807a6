/*
 * tcp's default copier (tcp.h): staging buffers, streams, events and copies
 * of hip/ (hip/pdx_hip.h), on the GPU that owns the staged regions.
 *
 * hip/ acts on the calling thread's current device. The progress thread is
 * pdx's own: its first copy makes the staging GPU its current device for
 * good (a thread that never names one would create a context on GPU 0).
 * Any other thread is the caller's: its current device is switched for the
 * call and put back after it.
 */
#include "tcp.h"
#include "tcp_internal.h"

#include "pdx_hip.h"

#include <stddef.h>

static _Atomic(const pdx_tcp_copier_t *) installed;

_Static_assert(sizeof(pdx_tcp_run_t) == sizeof(pdx_hip_run_t) &&
                   offsetof(pdx_tcp_run_t, src) == offsetof(pdx_hip_run_t, src) &&
                   offsetof(pdx_tcp_run_t, dst) == offsetof(pdx_hip_run_t, dst) &&
                   offsetof(pdx_tcp_run_t, len) == offsetof(pdx_hip_run_t, len),
               "tcp's runs are hip's gather runs");

static _Thread_local int bound_device = -1; /* the progress thread's, once bound */

void pdx_tcp_set_copier(const pdx_tcp_copier_t *copier)
{
    atomic_store(&installed, copier);
}

const pdx_tcp_copier_t *tcp_copier_current(void)
{
    const pdx_tcp_copier_t *c = atomic_load(&installed);

    return c ? c : &tcp_hip_copier;
}

/* Make device current for one call; *old_p is what to put back (-1: none). */
static pdx_status_t enter(int device, int *old_p)
{
    int cur = -1;
    pdx_status_t st;

    *old_p = -1;
    if (bound_device == device)
        return PDX_OK;
    if (pdx_hip_current_device(&cur) == PDX_OK && cur == device)
        return PDX_OK;
    st = pdx_hip_set_device(device);
    if (st == PDX_OK)
        *old_p = cur;
    return st;
}

static void leave(int old)
{
    if (old >= 0)
        pdx_hip_set_device(old);
}

static pdx_status_t hip_device_of(const void *base, size_t len, int *device_p)
{
    pdx_hip_ptr_t p;
    pdx_status_t st = pdx_hip_classify(base, len, &p);

    if (st != PDX_OK)
        return st == PDX_ERR_RANGE ? st : PDX_ERR_UNSUPPORTED;
    if (p.kind != PDX_HIP_MEM_DEVICE) {
        pdx_error("tcp: %p is %s memory to the %s GPU runtime, not GPU memory", base,
                  pdx_hip_mem_name(p.kind), pdx_hip_platform_name());
        return PDX_ERR_UNSUPPORTED;
    }
    *device_p = p.device;
    return PDX_OK;
}

static pdx_status_t hip_host_alloc(int device, size_t len, void **ptr_p)
{
    int old;
    pdx_status_t st = enter(device, &old);

    if (st == PDX_OK)
        st = pdx_hip_host_alloc(len, ptr_p);
    leave(old);
    return st;
}

static void hip_host_free(int device, void *ptr)
{
    int old;

    if (enter(device, &old) == PDX_OK)
        pdx_hip_host_free(ptr);
    leave(old);
}

static pdx_status_t hip_stream_create(int device, void **stream_p)
{
    int old;
    pdx_status_t st = enter(device, &old);

    if (st == PDX_OK)
        st = pdx_hip_stream_create(stream_p);
    leave(old);
    return st;
}

static void hip_stream_destroy(int device, void *stream)
{
    int old;

    if (enter(device, &old) == PDX_OK)
        pdx_hip_stream_destroy(stream);
    leave(old);
}

static pdx_status_t hip_event_create(int device, void **event_p)
{
    int old;
    pdx_status_t st = enter(device, &old);

    if (st == PDX_OK)
        st = pdx_hip_event_create(event_p);
    leave(old);
    return st;
}

static void hip_event_destroy(int device, void *event)
{
    int old;

    if (enter(device, &old) == PDX_OK)
        pdx_hip_event_destroy(event);
    leave(old);
}

/* Progress thread only: binds it to the staging GPU on its first copy. */
static pdx_status_t bind_thread(int device)
{
    if (PDX_UNLIKELY(bound_device != device)) {
        pdx_status_t st = pdx_hip_set_device(device);

        if (st != PDX_OK)
            return st;
        bound_device = device;
    }
    return PDX_OK;
}

static pdx_hip_copy_dir_t hip_dir(pdx_tcp_copy_dir_t dir)
{
    return dir == PDX_TCP_COPY_H2D ? PDX_HIP_H2D : PDX_HIP_D2H;
}

static pdx_status_t hip_copy_async(int device, void *stream, pdx_tcp_copy_dir_t dir, void *dst,
                                   const void *src, size_t len, void *done)
{
    pdx_status_t st = bind_thread(device);

    if (st != PDX_OK)
        return st;
    return pdx_hip_copy_async(stream, hip_dir(dir), dst, src, len, done);
}

/* One gather kernel that reads the list where it is (pinned staging is
 * mapped, runs and ring alike), with a grid for runs of their length; a
 * copy per run in builds without the kernel. */
static pdx_status_t hip_copy_runs_async(int device, void *stream, pdx_tcp_copy_dir_t dir,
                                        const pdx_tcp_run_t *runs, uint32_t nruns, void *done)
{
    pdx_status_t st = bind_thread(device);
    uint64_t longest = 0;

    if (st == PDX_OK && pdx_hip_gather_supported()) {
        for (uint32_t i = 0; i < nruns; i++)
            longest = PDX_MAX(longest, runs[i].len);
        st = pdx_hip_gather_bounded_async(stream, (const pdx_hip_run_t *)runs, nruns, longest);
    } else {
        for (uint32_t i = 0; i < nruns && st == PDX_OK; i++)
            st = pdx_hip_copy_async(stream, hip_dir(dir), (void *)(uintptr_t)runs[i].dst,
                                    (const void *)(uintptr_t)runs[i].src, runs[i].len, NULL);
    }
    if (st == PDX_OK)
        st = pdx_hip_event_record(done, stream);
    return st;
}

static pdx_status_t hip_query(int device, void *done)
{
    pdx_status_t st;
    int old;

    if (PDX_LIKELY(bound_device == device)) /* the progress thread */
        return pdx_hip_event_query(done);
    if (enter(device, &old) != PDX_OK)
        return PDX_ERR_AGAIN; /* the copy's state is unknown, not failed */
    st = pdx_hip_event_query(done);
    leave(old);
    return st;
}

/* Where the staging's streams are made: the kernel loaded before any copy. */
static pdx_status_t hip_runs_prepare(int device)
{
    int old;
    pdx_status_t st;

    if (!pdx_hip_gather_supported())
        return PDX_OK; /* a copy per run: nothing to load */
    st = enter(device, &old);
    if (st == PDX_OK)
        st = pdx_hip_gather_prepare();
    leave(old);
    return st;
}

const pdx_tcp_copier_t tcp_hip_copier = {
    .name           = "hip",
    .device_of      = hip_device_of,
    .host_alloc     = hip_host_alloc,
    .host_free      = hip_host_free,
    .stream_create  = hip_stream_create,
    .stream_destroy = hip_stream_destroy,
    .event_create   = hip_event_create,
    .event_destroy  = hip_event_destroy,
    .copy_async     = hip_copy_async,
    .query          = hip_query,
    .last_error     = pdx_hip_last_error,
    .copy_runs_async = hip_copy_runs_async,
    .runs_prepare   = hip_runs_prepare,
};
