/*
 * hip markers: named ranges and instant marks for GPU profilers, so a
 * timeline shows what pdx did next to the kernels (docs/architecture.md §7).
 *
 * amd: roctx, dlopen'ed at enable time (libroctx64 from roctracer, or
 *      rocprofiler-sdk-roctx); roctxRangePushA, roctxRangePop, roctxMarkA.
 *      Not installed: markers stay off.
 * nvidia: NVTX3, header only (nvtx3/nvToolsExt.h from the CUDA toolkit);
 *      it does nothing until a profiler injects itself. Built without the
 *      header: markers stay off.
 * none: markers stay off.
 *
 * Cost: callers use the PDX_MARKER_* macros of pdx_hip.h, which test
 * pdx_hip_markers_on (one relaxed load) before calling in here. Ranges are
 * per thread (push and pop on the same thread); turn markers on or off
 * only while no range is open.
 */
#include "hip_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(PDX_HIP_PLATFORM_NVIDIA) && defined(PDX_HIP_HAVE_NVTX3)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wshadow"
#include <nvtx3/nvToolsExt.h>
#pragma GCC diagnostic pop
#endif

_Atomic bool pdx_hip_markers_on;

typedef struct marker_ops {
    const char *backend;
    int  (*push)(const char *name);
    int  (*pop)(void);
    void (*mark)(const char *name);
} marker_ops_t;

static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static marker_ops_t ops;
static char ops_why[256];

#if defined(PDX_HIP_PLATFORM_AMD)

static const char *const roctx_libraries[] = {
    "libroctx64.so.4", "libroctx64.so", "librocprofiler-sdk-roctx.so.1",
    "librocprofiler-sdk-roctx.so",
};

static bool sym(void *lib, const char *name, void *fn_p)
{
    void *fn = dlsym(lib, name);

    if (!fn)
        return false;
    memcpy(fn_p, &fn, sizeof(fn)); /* void * to a function pointer */
    return true;
}

static void ops_resolve(void)
{
    for (size_t i = 0; i < PDX_ARRAY_SIZE(roctx_libraries); i++) {
        void *lib = hipx_dlopen(roctx_libraries[i]);
        marker_ops_t o = {.backend = roctx_libraries[i]};

        if (!lib)
            continue;
        if (sym(lib, "roctxRangePushA", &o.push) && sym(lib, "roctxRangePop", &o.pop) &&
            sym(lib, "roctxMarkA", &o.mark)) {
            ops = o;
            return;
        }
        dlclose(lib);
    }
    snprintf(ops_why, sizeof(ops_why), "no roctx library (libroctx64 or "
             "rocprofiler-sdk-roctx) is installed");
}

#elif defined(PDX_HIP_PLATFORM_NVIDIA) && defined(PDX_HIP_HAVE_NVTX3)

static int nvtx_push(const char *name)
{
    return nvtxRangePushA(name);
}

static int nvtx_pop(void)
{
    return nvtxRangePop();
}

static void nvtx_mark(const char *name)
{
    nvtxMarkA(name);
}

static void ops_resolve(void)
{
    ops = (marker_ops_t){.backend = "nvtx3", .push = nvtx_push, .pop = nvtx_pop,
                         .mark = nvtx_mark};
}

#else

static void ops_resolve(void)
{
    snprintf(ops_why, sizeof(ops_why), "%s",
#if defined(PDX_HIP_PLATFORM_NVIDIA)
             "this build has no NVTX3 header (nvtx3/nvToolsExt.h)"
#else
             "no GPU runtime in this build"
#endif
    );
}

#endif

pdx_status_t pdx_hip_markers_enable(bool on)
{
    if (!on) {
        atomic_store_explicit(&pdx_hip_markers_on, false, memory_order_relaxed);
        return PDX_OK;
    }
    pthread_once(&ops_once, ops_resolve);
    if (!ops.push) {
        pdx_info("hip: markers stay off: %s", ops_why);
        return PDX_ERR_UNSUPPORTED;
    }
    pdx_info("hip: markers on (%s)", ops.backend);
    atomic_store_explicit(&pdx_hip_markers_on, true, memory_order_relaxed);
    return PDX_OK;
}

/* The functions below run only after pdx_hip_markers_enable(true) returned
 * PDX_OK (the macros check). pthread_once orders the read of ops after its
 * resolution (the flag is read relaxed); a direct call without a backend
 * does nothing. */

void pdx_hip_marker_push(const char *name)
{
    pthread_once(&ops_once, ops_resolve);
    if (ops.push)
        ops.push(name);
}

void pdx_hip_marker_push_room(const char *name, uint64_t room)
{
    char text[96];

    pthread_once(&ops_once, ops_resolve);
    if (!ops.push)
        return;
    snprintf(text, sizeof(text), "%s room %016llx", name, (unsigned long long)room);
    ops.push(text);
}

void pdx_hip_marker_pop(void)
{
    pthread_once(&ops_once, ops_resolve);
    if (ops.pop)
        ops.pop();
}

void pdx_hip_marker_mark(const char *name)
{
    pthread_once(&ops_once, ops_resolve);
    if (ops.mark)
        ops.mark(name);
}
