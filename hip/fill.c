/*
 * hip fill: a GPU producer for tools and tests that have no device compiler
 * of their own (pdx-bench is plain C): word k of a range = base + k * step,
 * written by a kernel on the caller's stream.
 *
 * nvidia: the kernel is PTX text below, JIT-compiled by the driver for
 * whatever GPU is present (cuModuleLoadData), once per device in its primary
 * context, and launched with cuLaunchKernel through the driver entry points
 * (entry.c). The stream must belong to the calling thread's current device. amd: a
 * kernel needs a code object built for each gfx target, which this build
 * does not make: PDX_ERR_UNSUPPORTED, and callers write with copies.
 */
#include "hip_api.h"

#include <pthread.h>

#if defined(PDX_HIP_PLATFORM_NVIDIA)

/* A grid-stride loop: dst[i] = base + i * step for i < n. */
static const char fill_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry pdx_fill64(.param .u64 p_dst, .param .u64 p_n, .param .u64 p_base,\n"
    "                           .param .u64 p_step)\n"
    "{\n"
    "    .reg .pred  done;\n"
    "    .reg .b32   tid, ntid, cta, ncta;\n"
    "    .reg .b64   dst, n, base, step, i, stride, v, addr, t;\n"
    "    ld.param.u64 dst, [p_dst];\n"
    "    ld.param.u64 n, [p_n];\n"
    "    ld.param.u64 base, [p_base];\n"
    "    ld.param.u64 step, [p_step];\n"
    "    cvta.to.global.u64 dst, dst;\n"
    "    mov.u32 tid, %tid.x;\n"
    "    mov.u32 ntid, %ntid.x;\n"
    "    mov.u32 cta, %ctaid.x;\n"
    "    mov.u32 ncta, %nctaid.x;\n"
    "    mul.wide.u32 i, cta, ntid;\n"
    "    cvt.u64.u32 t, tid;\n"
    "    add.u64 i, i, t;\n"
    "    mul.wide.u32 stride, ncta, ntid;\n"
    "LOOP:\n"
    "    setp.ge.u64 done, i, n;\n"
    "    @done bra DONE;\n"
    "    mad.lo.u64 v, i, step, base;\n"
    "    shl.b64 t, i, 3;\n"
    "    add.u64 addr, dst, t;\n"
    "    st.global.u64 [addr], v;\n"
    "    add.u64 i, i, stride;\n"
    "    bra LOOP;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

#define FILL_DEVICES 64

static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction fill_fn[FILL_DEVICES];

/* The kernel of the current device, loaded on first use. */
static pdx_status_t fill_function(const hipx_cu_t *cu, CUfunction *fn_p)
{
    int device = hipx_current_device();
    CUmodule module;
    CUresult r;
    pdx_status_t st = PDX_OK;

    if (device < 0 || device >= FILL_DEVICES) {
        pdx_error("hip: fill64: no current GPU (or ordinal %d past %d)", device, FILL_DEVICES);
        return PDX_ERR_NO_DEVICE;
    }
    pthread_mutex_lock(&fill_lock);
    if (!fill_fn[device]) {
        r = cu->module_load_data(&module, fill_ptx);
        if (r != CUDA_SUCCESS) {
            st = hipx_cu_fail(r, "cuModuleLoadData", "the fill kernel");
        } else {
            r = cu->module_get_function(&fill_fn[device], module, "pdx_fill64");
            if (r != CUDA_SUCCESS) {
                st = hipx_cu_fail(r, "cuModuleGetFunction", "pdx_fill64");
                fill_fn[device] = NULL;
                cu->module_unload(module);
            }
        }
    }
    if (st == PDX_OK)
        *fn_p = fill_fn[device];
    pthread_mutex_unlock(&fill_lock);
    return st;
}

pdx_status_t pdx_hip_fill64_async(void *stream, void *dst, uint64_t nwords, uint64_t base,
                                  uint64_t step)
{
    const hipx_cu_t *cu;
    CUfunction fn;
    CUresult r;
    pdx_status_t st;
    void *params[4] = {&dst, &nwords, &base, &step};
    unsigned blocks;

    if (!dst || nwords == 0) {
        pdx_error("hip: fill64: no destination or nothing to write");
        return PDX_ERR_INVALID;
    }
    st = hipx_cu(&cu);
    if (st == PDX_OK)
        st = fill_function(cu, &fn);
    if (st != PDX_OK)
        return st;
    blocks = (unsigned)((nwords + 255) / 256 < 1024 ? (nwords + 255) / 256 : 1024);
    r = cu->launch_kernel(fn, blocks, 1, 1, 256, 1, 1, 0, (CUstream)stream, params, NULL);
    if (r != CUDA_SUCCESS)
        return hipx_cu_fail(r, "cuLaunchKernel", "the fill kernel");
    return PDX_OK;
}

#else

pdx_status_t pdx_hip_fill64_async(void *stream, void *dst, uint64_t nwords, uint64_t base,
                                  uint64_t step)
{
    (void)stream;
    (void)dst;
    (void)nwords;
    (void)base;
    (void)step;
    pdx_info("hip: fill64: no kernel is built for the amd platform; write with copies");
    return PDX_ERR_UNSUPPORTED;
}

#endif
