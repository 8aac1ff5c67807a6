/*
 * hip dmabuf export: device memory as a dmabuf fd for ibv_reg_dmabuf_mr
 * (docs/architecture.md §6).
 *
 * amd: hsa_amd_portable_export_dmabuf(ptr, len) exports the allocation
 * holding the range and returns the range's offset inside it. It is
 * resolved with dlsym (entry.c): absent before ROCm 5.3, which is
 * PDX_ERR_UNSUPPORTED and sends the caller to peer memory.
 *
 * nvidia: cuMemGetHandleForAddressRange wants a start and a length aligned
 * to the host page size: the range is widened to whole pages (never past
 * the allocation, whose base is page aligned) and the offset is ptr minus
 * the aligned start. A device without dmabuf support is
 * PDX_ERR_UNSUPPORTED with the attribute that says so.
 *
 * The fd belongs to the caller from PDX_OK on; no path that fails leaves
 * one open. PDX_DMABUF=off is the caller's decision: this file only exports.
 */
#include "hip_api.h"

#include <stdio.h>
#include <unistd.h>

/* The range must be device memory of one allocation (pdx_hip_classify). */
static pdx_status_t check_device_range(const void *ptr, size_t len, pdx_hip_ptr_t *info_p)
{
    pdx_status_t st;
    int ndev;

    if (!ptr || len == 0) {
        pdx_error("hip: export_dmabuf: bad range %p + %zu", ptr, len);
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_device_count(&ndev);
    if (st != PDX_OK) {
        pdx_error("hip: export_dmabuf: %s", pdx_hip_no_device_reason());
        return st;
    }
    st = pdx_hip_classify(ptr, len, info_p);
    if (st != PDX_OK)
        return st;
    if (info_p->kind != PDX_HIP_MEM_DEVICE) {
        pdx_error("hip: export_dmabuf: %p is %s memory, not device memory", ptr,
                  pdx_hip_mem_name(info_p->kind));
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

#if defined(PDX_HIP_PLATFORM_NVIDIA)

/* Why cuMemGetHandleForAddressRange refused: say whether the device lacks
 * dmabuf support altogether. */
static pdx_status_t explain_refusal(CUresult err, int device, uintptr_t start, size_t len)
{
    int supported = -1;
    char what[128];

    if (hipx_cu_attribute(device, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                          "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED", &supported) == PDX_OK &&
        supported == 0) {
        pdx_error("hip: export_dmabuf: GPU %d does not support dmabuf "
                  "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: the driver or kernel lacks it); "
                  "GPU memory needs a peer-memory module instead", device);
        return PDX_ERR_UNSUPPORTED;
    }
    snprintf(what, sizeof(what), "GPU %d, [%#lx, +%zu)", device, (unsigned long)start, len);
    return hipx_cu_fail(err, "cuMemGetHandleForAddressRange", what);
}

pdx_status_t pdx_hip_export_dmabuf(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t p = (uintptr_t)ptr, start, end;
    const hipx_cu_t *cu;
    pdx_hip_ptr_t info;
    hipError_t herr;
    CUresult err;
    int fd = -1, prev;
    pdx_status_t st;

    if (!fd_p || !offset_p) {
        pdx_error("hip: export_dmabuf: NULL output");
        return PDX_ERR_INVALID;
    }
    st = check_device_range(ptr, len, &info);
    if (st != PDX_OK)
        return st;
    st = hipx_cu(&cu);
    if (st != PDX_OK)
        return st;
    start = p & ~(page - 1);
    end = (p + len + page - 1) & ~(page - 1);
    if (start < info.base || end > info.base + info.size) {
        pdx_error("hip: export_dmabuf: [%p, +%zu) widened to host pages [%#lx, %#lx) leaves its "
                  "allocation [%#lx, %#lx)", ptr, len, (unsigned long)start, (unsigned long)end,
                  (unsigned long)info.base, (unsigned long)(info.base + info.size));
        return PDX_ERR_RANGE;
    }
    /* The driver call needs a context: the owning device's, made current
     * for the call and the caller's current device restored after. */
    prev = hipx_current_device();
    herr = hipSetDevice(info.device);
    if (herr != hipSuccess)
        return hipx_fail(herr, "hipSetDevice", "before exporting a dmabuf");
    err = cu->mem_get_handle_for_address_range(&fd, (CUdeviceptr)start, end - start,
                                               CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (prev >= 0 && prev != info.device)
        (void)hipSetDevice(prev);
    if (err != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        return explain_refusal(err, info.device, start, (size_t)(end - start));
    }
    if (fd < 0) {
        pdx_error("hip: export_dmabuf: cuMemGetHandleForAddressRange succeeded without an fd");
        return PDX_ERR_IO;
    }
    *fd_p = fd;
    *offset_p = (uint64_t)(p - start);
    return PDX_OK;
}

#else /* amd */

pdx_status_t pdx_hip_export_dmabuf(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    const hipx_hsa_t *hsa;
    const char *text = NULL;
    hipx_hsa_status_t err;
    pdx_hip_ptr_t info;
    uint64_t offset = 0;
    int fd = -1;
    pdx_status_t st;

    if (!fd_p || !offset_p) {
        pdx_error("hip: export_dmabuf: NULL output");
        return PDX_ERR_INVALID;
    }
    /* Unsupported first: it is a property of this build and system, and
     * what sends the caller to peer memory. */
    st = hipx_hsa_dmabuf(&hsa);
    if (st != PDX_OK)
        return st;
    st = check_device_range(ptr, len, &info);
    if (st != PDX_OK)
        return st;
    err = hsa->portable_export_dmabuf(ptr, len, &fd, &offset);
    if (err != HIPX_HSA_STATUS_SUCCESS) {
        if (fd >= 0)
            close(fd);
        hsa->status_string(err, &text);
        pdx_error("hip: hsa_amd_portable_export_dmabuf(%p, %zu) on GPU %d: %s (0x%x)", ptr, len,
                  info.device, text ? text : "?", (unsigned)err);
        return PDX_ERR_IO;
    }
    if (fd < 0) {
        pdx_error("hip: hsa_amd_portable_export_dmabuf succeeded without an fd");
        return PDX_ERR_IO;
    }
    *fd_p = fd;
    *offset_p = offset;
    return PDX_OK;
}

#endif
