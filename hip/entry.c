/*
 * hip late-bound entry points: calls pdx needs that are not in the runtime
 * library it links, resolved once per process (pthread_once) and kept.
 *
 * nvidia: CUDA driver calls (pointer attributes, dmabuf export, stream
 * memory operations, the GPUDirect RDMA flush), resolved through
 * cudaGetDriverEntryPointByVersion. libcuda is never linked: the runtime
 * finds the driver, and a machine without one fails here with the runtime's
 * reason. Each entry is asked for at the ABI of PDX_CU_ABI_VERSION (the
 * _v2 variants of cuMemGetAddressRange and cuStreamWrite/WaitValue64).
 *
 * amd: HSA calls (dmabuf export and its system capability), resolved with
 * dlsym from libhsa-runtime64.so.1, which libamdhip64 already loaded.
 * hsa_amd_portable_export_dmabuf came in ROCm 5.3; Debian's 5.2 lacks it,
 * which is PDX_ERR_UNSUPPORTED and sends the caller to peer memory.
 */
#include "hip_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(PDX_HIP_PLATFORM_NVIDIA)

#define PDX_CU_ABI_VERSION 12000

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static pdx_status_t cu_status;
static hipx_cu_t cu_table;

static const struct {
    const char *name;
    size_t      offset;
} cu_entries[] = {
#define CU_ENTRY(sym, field) {#sym, offsetof(hipx_cu_t, field)}
    CU_ENTRY(cuGetErrorName, get_error_name),
    CU_ENTRY(cuGetErrorString, get_error_string),
    CU_ENTRY(cuDeviceGet, device_get),
    CU_ENTRY(cuDeviceGetAttribute, device_get_attribute),
    CU_ENTRY(cuPointerGetAttributes, pointer_get_attributes),
    CU_ENTRY(cuMemGetAddressRange, mem_get_address_range),
    CU_ENTRY(cuMemGetHandleForAddressRange, mem_get_handle_for_address_range),
    CU_ENTRY(cuStreamWriteValue64, stream_write_value64),
    CU_ENTRY(cuStreamWaitValue64, stream_wait_value64),
    CU_ENTRY(cuFlushGPUDirectRDMAWrites, flush_gpu_direct_rdma_writes),
    CU_ENTRY(cuModuleLoadData, module_load_data),
    CU_ENTRY(cuModuleGetFunction, module_get_function),
    CU_ENTRY(cuModuleUnload, module_unload),
    CU_ENTRY(cuLaunchKernel, launch_kernel),
#undef CU_ENTRY
};

static void cu_resolve(void)
{
    hipx_cu_t t;

    for (size_t i = 0; i < PDX_ARRAY_SIZE(cu_entries); i++) {
        enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        void *fn = NULL;
        cudaError_t err;

        err = cudaGetDriverEntryPointByVersion(cu_entries[i].name, &fn, PDX_CU_ABI_VERSION,
                                               cudaEnableDefault, &found);
        if (err != cudaSuccess) {
            cu_status = hipx_fail(err, "cudaGetDriverEntryPointByVersion", cu_entries[i].name);
            if (cu_status == PDX_ERR_IO)
                cu_status = PDX_ERR_NO_DEVICE;
            return;
        }
        if (found != cudaDriverEntryPointSuccess || !fn) {
            pdx_error("hip: the CUDA driver has no %s (ABI %d): %s", cu_entries[i].name,
                      PDX_CU_ABI_VERSION,
                      found == cudaDriverEntryPointVersionNotSufficent
                          ? "the driver is older than that version"
                          : "symbol not found");
            cu_status = PDX_ERR_UNSUPPORTED;
            return;
        }
        /* A function pointer stored through its object representation:
         * the only portable way from void * to a function pointer. */
        memcpy((char *)&t + cu_entries[i].offset, &fn, sizeof(fn));
    }
    cu_table = t;
    cu_status = PDX_OK;
}

pdx_status_t hipx_cu(const hipx_cu_t **cu_p)
{
    pthread_once(&cu_once, cu_resolve);
    if (cu_status != PDX_OK)
        return cu_status;
    *cu_p = &cu_table;
    return PDX_OK;
}

static pdx_status_t cu_status_of(CUresult err)
{
    switch (err) {
    case CUDA_SUCCESS:                return PDX_OK;
    case CUDA_ERROR_NOT_READY:        return PDX_INPROGRESS;
    case CUDA_ERROR_INVALID_VALUE:    return PDX_ERR_INVALID;
    case CUDA_ERROR_OUT_OF_MEMORY:    return PDX_ERR_NOMEM;
    case CUDA_ERROR_NO_DEVICE:        return PDX_ERR_NO_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED:    return PDX_ERR_UNSUPPORTED;
    default:                          return PDX_ERR_IO;
    }
}

pdx_status_t hipx_cu_fail(CUresult err, const char *call, const char *what)
{
    const char *name = "CUDA_ERROR_?";
    const char *text = "unknown driver error";

    /* cu_table is complete whenever a driver call could be made at all. */
    if (cu_table.get_error_name)
        cu_table.get_error_name(err, &name);
    if (cu_table.get_error_string)
        cu_table.get_error_string(err, &text);
    pdx_error("hip: %s%s%s: %s (%d): %s", call, what ? ": " : "", what ? what : "", name,
              (int)err, text);
    hipx_last_error_set(name, text);
    return cu_status_of(err);
}

pdx_status_t hipx_cu_attribute(int device, CUdevice_attribute attr, const char *attr_name,
                               int *value_p)
{
    const hipx_cu_t *cu;
    CUdevice dev;
    CUresult err;
    int value = 0;
    pdx_status_t st = hipx_cu(&cu);

    if (st != PDX_OK)
        return st;
    err = cu->device_get(&dev, device);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuDeviceGet", NULL);
    err = cu->device_get_attribute(&value, attr, dev);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuDeviceGetAttribute", attr_name);
    *value_p = value;
    return PDX_OK;
}

#elif defined(PDX_HIP_PLATFORM_AMD)

#define HSA_LIBRARY "libhsa-runtime64.so.1"

static pthread_once_t hsa_once = PTHREAD_ONCE_INIT;
static pdx_status_t hsa_status;
static hipx_hsa_t hsa_table;

/* dlsym into a function pointer (see the note in the nvidia half). */
static bool hsa_sym(void *lib, const char *name, void *fn_p)
{
    void *fn = dlsym(lib, name);

    if (!fn)
        return false;
    memcpy(fn_p, &fn, sizeof(fn));
    return true;
}

void *hipx_dlopen(const char *name)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#ifdef PDX_ROCM_LIBDIR
    char path[512];

    if (!lib && !strchr(name, '/') &&
        snprintf(path, sizeof(path), "%s/%s", PDX_ROCM_LIBDIR, name) < (int)sizeof(path))
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#endif
    return lib;
}

static void hsa_resolve(void)
{
    const char *text = NULL;
    hipx_hsa_t t = {0};
    hipx_hsa_status_t err;
    void *lib;
    bool yes = false;

    lib = hipx_dlopen(HSA_LIBRARY);
    if (!lib) {
        pdx_warn("hip: dmabuf export unsupported: dlopen %s: %s", HSA_LIBRARY, dlerror());
        hsa_status = PDX_ERR_UNSUPPORTED;
        return;
    }
    if (!hsa_sym(lib, "hsa_system_get_info", &t.system_get_info) ||
        !hsa_sym(lib, "hsa_status_string", &t.status_string)) {
        pdx_warn("hip: dmabuf export unsupported: %s lacks hsa_system_get_info", HSA_LIBRARY);
        hsa_status = PDX_ERR_UNSUPPORTED;
        return;
    }
    if (!hsa_sym(lib, "hsa_amd_portable_export_dmabuf", &t.portable_export_dmabuf)) {
        pdx_warn("hip: dmabuf export unsupported: this ROCm's %s has no "
                  "hsa_amd_portable_export_dmabuf (it came in ROCm 5.3); GPU memory needs a "
                  "peer-memory module instead", HSA_LIBRARY);
        hsa_status = PDX_ERR_UNSUPPORTED;
        return;
    }
    err = t.system_get_info(HIPX_HSA_SYSTEM_INFO_DMABUF_SUPPORTED, &yes);
    if (err != HIPX_HSA_STATUS_SUCCESS) {
        t.status_string(err, &text);
        pdx_warn("hip: dmabuf export unsupported: hsa_system_get_info(DMABUF_SUPPORTED): %s "
                  "(0x%x)", text ? text : "?", (unsigned)err);
        hsa_status = PDX_ERR_UNSUPPORTED;
        return;
    }
    if (!yes) {
        pdx_warn("hip: dmabuf export unsupported: the amdgpu kernel driver does not support "
                  "dmabuf (HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED is false)");
        hsa_status = PDX_ERR_UNSUPPORTED;
        return;
    }
    t.dmabuf_supported = true;
    hsa_table = t;
    hsa_status = PDX_OK;
}

pdx_status_t hipx_hsa_dmabuf(const hipx_hsa_t **hsa_p)
{
    pthread_once(&hsa_once, hsa_resolve);
    if (hsa_status != PDX_OK)
        return hsa_status; /* hsa_resolve said why, once */
    *hsa_p = &hsa_table;
    return PDX_OK;
}

#endif
