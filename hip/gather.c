/*
 * hip gather copies: a list of runs {src, dst, len} copied by one kernel
 * launch (hip/gather.cu), and the same as one async copy per run.
 *
 * The kernel is built at build time and embedded (hipx_gather_image, made
 * by cmake/PdxEmbed.cmake): PTX from nvcc on nvidia, loaded with
 * cuModuleLoadData through the driver entry points (entry.c), which JIT-
 * compiles it for the GPU present; a code-object bundle from hipcc on amd,
 * loaded with hipModuleLoadData. Once per device, on first use, in the
 * device's primary context; the function is kept for the process. A build
 * without the compiler (amd without hipcc, nvidia without nvcc) has no
 * image: the gather answers PDX_ERR_UNSUPPORTED and says so.
 *
 * Grid: a worker is one warp (wave64 on amd). Up to GATHER_WORKERS workers;
 * a list of fewer runs gives each run `slices` workers, so one long run
 * still fills the GPU. Blocks of 256 threads.
 */
#include "hip_api.h"

#include <pthread.h>
#include <stdatomic.h>

_Static_assert(sizeof(pdx_hip_run_t) == 24, "a run is 24 bytes, as the kernel reads it");

#if defined(PDX_HIP_PLATFORM_AMD)
#define GATHER_LANES 64
#define GATHER_COMPILER "hipcc"
#define GATHER_IMAGE "code objects"
#else
#define GATHER_LANES 32
#define GATHER_COMPILER "nvcc"
#define GATHER_IMAGE "PTX"
#endif
#define GATHER_THREADS 256
#define GATHER_WORKERS 32768u
/* What one worker copies in a step: gather.cu's PDX_UNROLL (8) words of 16
 * bytes per lane. */
#define GATHER_CHUNK   (GATHER_LANES * 8u * 16u)
#define GATHER_DEVICES 64

pdx_status_t pdx_hip_event_record(void *event, void *stream)
{
    hipError_t err;

    if (!event) {
        pdx_error("hip: event_record: NULL event");
        return PDX_ERR_INVALID;
    }
    err = hipEventRecord((hipEvent_t)event, (hipStream_t)stream);
    if (err != hipSuccess)
        return hipx_fail(err, "hipEventRecord", NULL);
    return PDX_OK;
}

pdx_status_t pdx_hip_stream_wait_event(void *stream, void *event)
{
    hipError_t err;

    if (!event) {
        pdx_error("hip: stream_wait_event: NULL event");
        return PDX_ERR_INVALID;
    }
    err = hipStreamWaitEvent((hipStream_t)stream, (hipEvent_t)event, 0);
    if (err != hipSuccess)
        return hipx_fail(err, "hipStreamWaitEvent", NULL);
    return PDX_OK;
}

pdx_status_t pdx_hip_runs_upload_async(void *stream, pdx_hip_run_t *runs_dev,
                                       const pdx_hip_run_t *runs_host, uint32_t nruns)
{
    hipError_t err;

    if (!runs_dev || !runs_host || nruns == 0) {
        pdx_error("hip: runs_upload: bad arguments (device list %p, host list %p, %u runs)",
                  (void *)runs_dev, (const void *)runs_host, nruns);
        return PDX_ERR_INVALID;
    }
    err = hipMemcpyAsync(runs_dev, runs_host, (size_t)nruns * sizeof(*runs_host),
                         hipMemcpyHostToDevice, (hipStream_t)stream);
    if (err != hipSuccess)
        return hipx_fail(err, "hipMemcpyAsync", "the run list");
    return PDX_OK;
}

pdx_status_t pdx_hip_copy_runs_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns)
{
    hipError_t err;

    if (!runs || nruns == 0) {
        pdx_error("hip: copy_runs: no runs (%p, %u)", (const void *)runs, nruns);
        return PDX_ERR_INVALID;
    }
    for (uint32_t i = 0; i < nruns; i++) {
        if (runs[i].len == 0)
            continue;
        err = hipMemcpyAsync((void *)(uintptr_t)runs[i].dst, (const void *)(uintptr_t)runs[i].src,
                             runs[i].len, hipMemcpyDeviceToDevice, (hipStream_t)stream);
        if (err != hipSuccess) {
            pdx_error("hip: copy_runs: run %u of %u (%llu bytes %#llx -> %#llx) failed", i,
                      nruns, (unsigned long long)runs[i].len, (unsigned long long)runs[i].src,
                      (unsigned long long)runs[i].dst);
            return hipx_fail(err, "hipMemcpyAsync", "device to device");
        }
    }
    return PDX_OK;
}

#if defined(PDX_HIP_HAVE_GATHER_IMAGE)

extern const unsigned char hipx_gather_image[];
extern const size_t hipx_gather_image_size;

bool pdx_hip_gather_supported(void)
{
    return true;
}

/* Blocks and the kernel's slices and workers for n items (runs, or pages
 * of buffers) of at most longest bytes (0: any length). */
static void gather_grid(uint64_t n, uint64_t longest, uint32_t *blocks_p, uint32_t *slices_p,
                        uint32_t *run_workers_p)
{
    uint32_t slices = n >= GATHER_WORKERS ? 1 : GATHER_WORKERS / (uint32_t)n;

    if (longest)
        slices = (uint32_t)PDX_MAX(1u, PDX_MIN((uint64_t)slices,
                                               (longest + GATHER_CHUNK - 1) / GATHER_CHUNK));
    uint32_t run_workers = (uint32_t)PDX_MIN(n, (uint64_t)(GATHER_WORKERS / slices));
    uint64_t threads = (uint64_t)run_workers * slices * GATHER_LANES;

    *blocks_p = (uint32_t)((threads + GATHER_THREADS - 1) / GATHER_THREADS);
    *slices_p = slices;
    *run_workers_p = run_workers;
}

#if defined(PDX_HIP_PLATFORM_NVIDIA)
typedef CUfunction gather_fn_t;
#else
typedef hipFunction_t gather_fn_t;
#endif

enum { FN_GATHER, FN_PAGES, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"pdx_gather", "pdx_pages"};

static pthread_mutex_t gather_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set once per device under gather_lock; read without it once set. */
static _Atomic(gather_fn_t) gather_fn[GATHER_DEVICES][FN_COUNT];

#if defined(PDX_HIP_PLATFORM_NVIDIA)
static pdx_status_t gather_load(gather_fn_t *fn_p)
{
    const hipx_cu_t *cu;
    CUmodule module;
    CUresult r;
    pdx_status_t st = hipx_cu(&cu);

    if (st != PDX_OK)
        return st;
    r = cu->module_load_data(&module, hipx_gather_image);
    if (r != CUDA_SUCCESS)
        return hipx_cu_fail(r, "cuModuleLoadData", "the gather kernel's PTX");
    for (int i = 0; i < FN_COUNT; i++) { /* into the caller's locals: all or none */
        r = cu->module_get_function(&fn_p[i], module, fn_names[i]);
        if (r != CUDA_SUCCESS) {
            st = hipx_cu_fail(r, "cuModuleGetFunction", fn_names[i]);
            cu->module_unload(module);
            return st;
        }
    }
    return PDX_OK;
}

static pdx_status_t gather_launch(gather_fn_t fn, void *stream, uint32_t blocks, void **params)
{
    const hipx_cu_t *cu;
    CUresult r;
    pdx_status_t st = hipx_cu(&cu);

    if (st != PDX_OK)
        return st;
    r = cu->launch_kernel(fn, blocks, 1, 1, GATHER_THREADS, 1, 1, 0, (CUstream)stream, params,
                          NULL);
    if (r != CUDA_SUCCESS)
        return hipx_cu_fail(r, "cuLaunchKernel", "the gather kernel");
    return PDX_OK;
}
#else
static pdx_status_t gather_load(gather_fn_t *fn_p)
{
    hipModule_t module;
    hipError_t err;
    pdx_status_t st;

    err = hipModuleLoadData(&module, hipx_gather_image);
    if (err != hipSuccess)
        return hipx_fail(err, "hipModuleLoadData",
                         "the gather kernel (built for PDX_HIP_GPU_TARGETS only)");
    for (int i = 0; i < FN_COUNT; i++) {
        err = hipModuleGetFunction(&fn_p[i], module, fn_names[i]);
        if (err != hipSuccess) {
            st = hipx_fail(err, "hipModuleGetFunction", fn_names[i]);
            (void)hipModuleUnload(module);
            return st;
        }
    }
    return PDX_OK;
}

static pdx_status_t gather_launch(gather_fn_t fn, void *stream, uint32_t blocks, void **params)
{
    hipError_t err = hipModuleLaunchKernel(fn, blocks, 1, 1, GATHER_THREADS, 1, 1, 0,
                                           (hipStream_t)stream, params, NULL);

    if (err != hipSuccess)
        return hipx_fail(err, "hipModuleLaunchKernel", "the gather kernel");
    return PDX_OK;
}
#endif

/* Kernel which of the current device, loaded on first use. A launch once
 * it is loaded takes no lock: a load elsewhere (another GPU's first use)
 * holds the lock through the JIT compile. */
static pdx_status_t gather_function(int which, gather_fn_t *fn_p)
{
    pdx_status_t st = PDX_OK;
    int device, ndev;

    st = pdx_hip_device_count(&ndev);
    if (st != PDX_OK) {
        pdx_error("hip: gather: %s", pdx_hip_no_device_reason());
        return st;
    }
    device = hipx_current_device();
    if (device < 0 || device >= GATHER_DEVICES) {
        pdx_error("hip: gather: no current GPU (or ordinal %d past %d)", device, GATHER_DEVICES);
        return PDX_ERR_NO_DEVICE;
    }
    *fn_p = atomic_load_explicit(&gather_fn[device][which], memory_order_acquire);
    if (*fn_p)
        return PDX_OK;
    pthread_mutex_lock(&gather_lock);
    if (!atomic_load_explicit(&gather_fn[device][0], memory_order_relaxed)) {
        gather_fn_t fns[FN_COUNT];

        st = gather_load(fns);
        for (int i = 0; i < FN_COUNT && st == PDX_OK; i++)
            atomic_store_explicit(&gather_fn[device][i], fns[i], memory_order_release);
        if (st == PDX_OK)
            pdx_debug("hip: gather kernel loaded on GPU %d (%zu bytes of " GATHER_IMAGE ")",
                      device, hipx_gather_image_size);
    }
    if (st == PDX_OK)
        *fn_p = atomic_load_explicit(&gather_fn[device][which], memory_order_relaxed);
    pthread_mutex_unlock(&gather_lock);
    return st;
}

pdx_status_t pdx_hip_gather_bounded_async(void *stream, const pdx_hip_run_t *runs,
                                          uint32_t nruns, uint64_t longest)
{
    uint32_t blocks, slices, run_workers;
    void *params[4] = {&runs, &nruns, &slices, &run_workers};
    gather_fn_t fn;
    pdx_status_t st;

    if (!runs || nruns == 0) {
        pdx_error("hip: gather: no runs (%p, %u)", (const void *)runs, nruns);
        return PDX_ERR_INVALID;
    }
    st = gather_function(FN_GATHER, &fn);
    if (st != PDX_OK)
        return st;
    gather_grid(nruns, longest, &blocks, &slices, &run_workers);
    return gather_launch(fn, stream, blocks, params);
}

pdx_status_t pdx_hip_gather_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns)
{
    return pdx_hip_gather_bounded_async(stream, runs, nruns, 0);
}

pdx_status_t pdx_hip_gather_prepare(void)
{
    gather_fn_t fn;

    return gather_function(FN_GATHER, &fn);
}

pdx_status_t pdx_hip_pages_async(void *stream, const pdx_hip_page_buf_t *bufs,
                                 const uint32_t *src, const uint32_t *dst, uint32_t nbufs,
                                 uint32_t npages, uint64_t bytes_per_page,
                                 const volatile uint64_t *skip)
{
    uint32_t blocks, slices, workers;
    void *params[9] = {&bufs,   &src,    &dst,     &nbufs, &npages, &bytes_per_page,
                       &slices, &workers, &skip};
    gather_fn_t fn;
    pdx_status_t st;

    if (!bufs || !src || !dst || nbufs == 0 || npages == 0 || bytes_per_page == 0) {
        pdx_error("hip: pages: nothing to copy (%u buffers, %u pages of %llu bytes)", nbufs,
                  npages, (unsigned long long)bytes_per_page);
        return PDX_ERR_INVALID;
    }
    st = gather_function(FN_PAGES, &fn);
    if (st != PDX_OK)
        return st;
    gather_grid((uint64_t)nbufs * npages, 0, &blocks, &slices, &workers);
    return gather_launch(fn, stream, blocks, params);
}

#else /* no kernel in this build */

bool pdx_hip_gather_supported(void)
{
    return false;
}

pdx_status_t pdx_hip_gather_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns)
{
    (void)stream;
    if (!runs || nruns == 0) {
        pdx_error("hip: gather: no runs (%p, %u)", (const void *)runs, nruns);
        return PDX_ERR_INVALID;
    }
    pdx_error("hip: gather: this build has no gather kernel: " GATHER_COMPILER " was not found "
              "at build time; copy with pdx_hip_copy_runs_async");
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_hip_gather_bounded_async(void *stream, const pdx_hip_run_t *runs,
                                          uint32_t nruns, uint64_t longest)
{
    (void)longest;
    return pdx_hip_gather_async(stream, runs, nruns);
}

pdx_status_t pdx_hip_gather_prepare(void)
{
    pdx_error("hip: gather: this build has no gather kernel: " GATHER_COMPILER " was not found "
              "at build time");
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_hip_pages_async(void *stream, const pdx_hip_page_buf_t *bufs,
                                 const uint32_t *src, const uint32_t *dst, uint32_t nbufs,
                                 uint32_t npages, uint64_t bytes_per_page,
                                 const volatile uint64_t *skip)
{
    (void)stream; (void)bufs; (void)src; (void)dst; (void)nbufs; (void)npages;
    (void)bytes_per_page; (void)skip;
    pdx_error("hip: pages: this build has no gather kernel: " GATHER_COMPILER " was not found "
              "at build time");
    return PDX_ERR_UNSUPPORTED;
}

#endif
