/*
 * hip visibility: whether data a NIC wrote into device memory (RDMA WRITE
 * over PCIe) is visible to kernels launched after the completion arrived
 * in host memory, and the flush that makes it so (docs/architecture.md §5).
 *
 * Data and completion travel different paths, so in general a flush is
 * needed between "the notify arrived" and "the room is SUCCESS":
 *
 * nvidia: the device's CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING
 *   says for which consumers remote writes are already ordered. At owner
 *   scope or wider (CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER = 100, the
 *   H200 reports it) kernels on the owning device see them: no flush.
 *   Below, cuFlushGPUDirectRDMAWrites(TARGET_CURRENT_CTX, TO_OWNER) blocks
 *   until they are visible, where the device supports the host flush
 *   (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS); the engine
 *   may equally use its loopback RDMA READ.
 * amd: no such attribute: a flush is always needed, and the engine does it
 *   with an RDMA READ over a loopback QP per NIC (the RCCL recipe). This
 *   awaits validation on real AMD hardware.
 */
#include "hip_api.h"

#if defined(PDX_HIP_PLATFORM_NVIDIA)

pdx_status_t pdx_hip_rdma_write_ordering(int device, int *ordering_p)
{
    int value = 0;
    pdx_status_t st;

    if (!ordering_p) {
        pdx_error("hip: rdma_write_ordering: NULL output");
        return PDX_ERR_INVALID;
    }
    st = hipx_cu_attribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
                           "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING", &value);
    if (st != PDX_OK)
        return st;
    *ordering_p = value;
    return PDX_OK;
}

pdx_status_t pdx_hip_rdma_flush_needed(int device, bool *needed_p)
{
    int ordering;
    pdx_status_t st;

    if (!needed_p) {
        pdx_error("hip: rdma_flush_needed: NULL output");
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_rdma_write_ordering(device, &ordering);
    if (st != PDX_OK)
        return st;
    *needed_p = ordering < CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER;
    pdx_debug("hip: GPU %d: RDMA write ordering %d: %s", device, ordering,
              *needed_p ? "flush needed" : "owner-ordered, no flush");
    return PDX_OK;
}

pdx_status_t pdx_hip_rdma_host_flush_supported(int device, bool *yes_p)
{
    int options = 0;
    pdx_status_t st;

    if (!yes_p)
        return PDX_ERR_INVALID;
    st = hipx_cu_attribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                           "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS", &options);
    if (st != PDX_OK)
        return st;
    *yes_p = (options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) != 0;
    return PDX_OK;
}

pdx_status_t pdx_hip_flush_rdma_writes(void)
{
    const hipx_cu_t *cu;
    int device = hipx_current_device();
    int options = 0;
    hipError_t herr;
    CUresult err;
    pdx_status_t st;

    if (device < 0) {
        pdx_error("hip: flush_rdma_writes: the calling thread has no current GPU");
        return PDX_ERR_STATE;
    }
    st = hipx_cu_attribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                           "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS", &options);
    if (st != PDX_OK)
        return st;
    if (!(options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST)) {
        pdx_error("hip: flush_rdma_writes: GPU %d has no host-side GPUDirect RDMA flush "
                  "(flush options 0x%x); use the loopback RDMA READ", device, options);
        return PDX_ERR_UNSUPPORTED;
    }
    st = hipx_cu(&cu);
    if (st != PDX_OK)
        return st;
    /* Binds the device's primary context to the thread if nothing has yet:
     * the flush targets the current context. */
    herr = hipSetDevice(device);
    if (herr != hipSuccess)
        return hipx_fail(herr, "hipSetDevice", "before the RDMA flush");
    err = cu->flush_gpu_direct_rdma_writes(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                           CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    if (err != CUDA_SUCCESS)
        return hipx_cu_fail(err, "cuFlushGPUDirectRDMAWrites", "owner scope");
    return PDX_OK;
}

#else /* amd */

pdx_status_t pdx_hip_rdma_write_ordering(int device, int *ordering_p)
{
    (void)ordering_p;
    pdx_error("hip: rdma_write_ordering: GPU %d: the amd platform has no RDMA write-ordering "
              "attribute", device);
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_hip_rdma_flush_needed(int device, bool *needed_p)
{
    (void)device;
    if (!needed_p) {
        pdx_error("hip: rdma_flush_needed: NULL output");
        return PDX_ERR_INVALID;
    }
    *needed_p = true;
    return PDX_OK;
}

pdx_status_t pdx_hip_flush_rdma_writes(void)
{
    pdx_error("hip: flush_rdma_writes: the amd platform has no host-side RDMA flush; the engine "
              "flushes with a loopback RDMA READ");
    return PDX_ERR_UNSUPPORTED;
}

pdx_status_t pdx_hip_rdma_host_flush_supported(int device, bool *yes_p)
{
    (void)device;
    if (!yes_p)
        return PDX_ERR_INVALID;
    *yes_p = false;
    return PDX_OK;
}

#endif
