/*
 * hip pointer classification: what kind of memory a range is, the
 * allocation that holds it, and that allocation's identity.
 *
 * Kind: hipPointerGetAttributes. A pointer the runtime does not know (a
 * malloc'ed or stack address) is pageable host memory: the runtime says so
 * with hipMemoryTypeUnregistered (CUDA, ROCm 6) or with hipErrorInvalidValue
 * (ROCm 5), and without a GPU with whatever error it has; that error is
 * cleared (hipGetLastError) so it does not stick to the caller's thread.
 *
 * Allocation: base and size from hipMemGetAddressRange (amd) or the driver's
 * CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / RANGE_SIZE (nvidia, with
 * cuMemGetAddressRange as the fallback). Identity: the runtime's buffer id
 * (CU_POINTER_ATTRIBUTE_BUFFER_ID; HIP_POINTER_ATTRIBUTE_BUFFER_ID from HIP
 * 5.0), which a range freed and allocated again does not share; where there
 * is none, a hash of base and size, which cannot tell those apart
 * (pdx_hip_ptr_t.id_unique says which). A registration cache keys on it.
 */
#include "hip_api.h"

#include <string.h>

const char *pdx_hip_mem_name(pdx_hip_mem_t kind)
{
    switch (kind) {
    case PDX_HIP_MEM_PAGEABLE_HOST: return "pageable host";
    case PDX_HIP_MEM_PINNED_HOST:   return "pinned host";
    case PDX_HIP_MEM_DEVICE:        return "device";
    case PDX_HIP_MEM_MANAGED:       return "managed";
    default:                        return "?";
    }
}

static uint64_t derived_id(uintptr_t base, size_t size)
{
    return pdx_hash64((uint64_t)base ^ pdx_hash64((uint64_t)size)) | 1;
}

static pdx_hip_mem_t kind_of(const hipPointerAttribute_t *attr)
{
#if defined(PDX_HIP_PLATFORM_AMD)
    if (attr->isManaged)
        return PDX_HIP_MEM_MANAGED;
#endif
    switch (HIPX_ATTR_TYPE(*attr)) {
#ifdef HIPX_HAVE_MEM_UNREGISTERED
    case hipMemoryTypeUnregistered:
        return PDX_HIP_MEM_PAGEABLE_HOST;
#endif
#ifdef HIPX_HAVE_MEM_MANAGED
    case hipMemoryTypeManaged:
        return PDX_HIP_MEM_MANAGED;
#endif
#if defined(PDX_HIP_PLATFORM_AMD)
    case hipMemoryTypeUnified:
        return PDX_HIP_MEM_MANAGED;
    case hipMemoryTypeArray:
        return PDX_HIP_MEM_DEVICE;
#endif
    case hipMemoryTypeHost:
        return PDX_HIP_MEM_PINNED_HOST;
    case hipMemoryTypeDevice:
        return PDX_HIP_MEM_DEVICE;
    default:
        return PDX_HIP_MEM_PAGEABLE_HOST;
    }
}

/*
 * The allocation holding ptr: *base_p, *size_p and its identity. PDX_OK
 * with size 0 when the runtime does not say (the caller decides); an
 * error only when the runtime failed in a way that is not "unknown".
 */
#if defined(PDX_HIP_PLATFORM_NVIDIA)
static pdx_status_t alloc_of(const void *ptr, uintptr_t *base_p, size_t *size_p, uint64_t *id_p,
                             bool *unique_p)
{
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned long long id = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[] = {&id, &start, &size};
    const hipx_cu_t *cu;
    CUresult err;
    pdx_status_t st = hipx_cu(&cu);

    if (st != PDX_OK)
        return st;
    err = cu->pointer_get_attributes((unsigned)PDX_ARRAY_SIZE(attrs), attrs, data,
                                     (CUdeviceptr)(uintptr_t)ptr);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuPointerGetAttributes", "buffer id and range");
    if (size == 0) {
        err = cu->mem_get_address_range(&start, &size, (CUdeviceptr)(uintptr_t)ptr);
        if (err != CUDA_SUCCESS) {
            pdx_debug("hip: cuMemGetAddressRange(%p) failed (%d): range unknown", ptr, (int)err);
            start = 0;
            size = 0;
        }
    }
    *base_p = (uintptr_t)start;
    *size_p = size;
    *unique_p = id != 0;
    *id_p = id != 0 ? (uint64_t)id : derived_id((uintptr_t)start, size);
    return PDX_OK;
}
#else
static pdx_status_t alloc_of(const void *ptr, uintptr_t *base_p, size_t *size_p, uint64_t *id_p,
                             bool *unique_p)
{
    hipDeviceptr_t base = NULL;
    uint64_t id = 0;
    size_t size = 0;
    hipError_t err;

    err = hipMemGetAddressRange(&base, &size, (hipDeviceptr_t)(uintptr_t)ptr);
    if (err != hipSuccess) {
        pdx_debug("hip: hipMemGetAddressRange(%p): %s: range unknown", ptr,
                  hipGetErrorName(err));
        (void)hipGetLastError();
        base = NULL;
        size = 0;
    }
#ifdef HIPX_HAVE_BUFFER_ID
    err = hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                                 (hipDeviceptr_t)(uintptr_t)ptr);
    if (err != hipSuccess) {
        pdx_debug("hip: hipPointerGetAttribute(%p, BUFFER_ID): %s", ptr, hipGetErrorName(err));
        (void)hipGetLastError();
        id = 0;
    }
#endif
    *base_p = (uintptr_t)base;
    *size_p = size;
    *unique_p = id != 0;
    *id_p = id != 0 ? id : derived_id((uintptr_t)base, size);
    return PDX_OK;
}
#endif

pdx_status_t pdx_hip_classify(const void *ptr, size_t len, pdx_hip_ptr_t *info_p)
{
    hipPointerAttribute_t attr;
    pdx_hip_ptr_t info;
    uintptr_t p = (uintptr_t)ptr;
    hipError_t err;
    pdx_status_t st;
    int ndev;

    if (!ptr || len == 0 || p + len < p || !info_p) {
        pdx_error("hip: classify: bad range %p + %zu", ptr, len);
        return PDX_ERR_INVALID;
    }
    memset(&info, 0, sizeof(info));
    info.kind = PDX_HIP_MEM_PAGEABLE_HOST;
    info.device = -1;
    info.base = p;
    info.size = len;

    memset(&attr, 0, sizeof(attr));
    err = hipPointerGetAttributes(&attr, ptr);
    if (err != hipSuccess) {
        (void)hipGetLastError();
        if (err != hipErrorInvalidValue && pdx_hip_device_count(&ndev) == PDX_OK)
            return hipx_fail(err, "hipPointerGetAttributes", "classifying a pointer");
        *info_p = info; /* unknown to the runtime, or no GPU at all */
        return PDX_OK;
    }
    info.kind = kind_of(&attr);
    if (info.kind == PDX_HIP_MEM_PAGEABLE_HOST) {
        *info_p = info;
        return PDX_OK;
    }
    info.device = attr.device;
    st = alloc_of(ptr, &info.base, &info.size, &info.alloc_id, &info.id_unique);
    if (st != PDX_OK)
        return st;
    if (info.size == 0) {
        if (info.kind == PDX_HIP_MEM_DEVICE) {
            pdx_error("hip: classify: %p is device memory of GPU %d but the runtime does not "
                      "give its allocation's range", ptr, info.device);
            return PDX_ERR_IO;
        }
        /* Pinned or managed host memory whose allocation the runtime does
         * not describe: the range itself stands for it. */
        info.base = p;
        info.size = len;
        info.alloc_id = derived_id(p, len);
        info.id_unique = false;
    }
    if (p < info.base || p + len > info.base + info.size) {
        pdx_error("hip: classify: %p + %zu runs past its %s allocation [%#lx, %#lx) "
                  "(GPU %d)", ptr, len, pdx_hip_mem_name(info.kind), (unsigned long)info.base,
                  (unsigned long)(info.base + info.size), info.device);
        return PDX_ERR_RANGE;
    }
    *info_p = info;
    return PDX_OK;
}
