/*
 * The one place that chooses the GPU runtime header, and what the hip/
 * sources share beyond pdx_hip.h: error translation and the late-bound
 * entry points (entry.c).
 *
 *   PDX_HIP_PLATFORM_AMD     <hip/hip_runtime_api.h> with __HIP_PLATFORM_AMD__
 *   PDX_HIP_PLATFORM_NVIDIA  hip/hip_nvidia.h: the HIP names pdx uses mapped
 *                            onto the CUDA runtime, plus cuda.h for driver types
 *   PDX_HIP_PLATFORM_NONE    no runtime header: hip/none.c answers every call
 *
 * Runtime headers are included with their warnings silenced: pdx builds with
 * -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
 * and does not own them.
 */
#ifndef PDX_HIP_API_H
#define PDX_HIP_API_H

#include "pdx_hip.h"
#include "log.h"

#if defined(PDX_HIP_PLATFORM_AMD) + defined(PDX_HIP_PLATFORM_NVIDIA) + \
    defined(PDX_HIP_PLATFORM_NONE) != 1
#error "define exactly one of PDX_HIP_PLATFORM_AMD, PDX_HIP_PLATFORM_NVIDIA, PDX_HIP_PLATFORM_NONE"
#endif

#if defined(PDX_HIP_PLATFORM_AMD)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <hip/hip_runtime_api.h>
#pragma GCC diagnostic pop
#define PDX_HIP_PLATFORM "amd"
/* ROCm 6 renamed hipPointerAttribute_t.memoryType to .type and renumbered
 * hipMemoryType (adding Unregistered = 0 and Managed); pdx compares names
 * only and reads the field through this macro. */
#if HIP_VERSION >= 60000000
#define HIPX_ATTR_TYPE(a)        ((a).type)
#define HIPX_HAVE_MEM_UNREGISTERED 1
#define HIPX_HAVE_MEM_MANAGED    1
#else
#define HIPX_ATTR_TYPE(a)        ((a).memoryType)
#endif
/* hipPointerGetAttribute (and so HIP_POINTER_ATTRIBUTE_BUFFER_ID) came in 5.0. */
#if HIP_VERSION >= 50000000
#define HIPX_HAVE_BUFFER_ID 1
#endif

#elif defined(PDX_HIP_PLATFORM_NVIDIA)
#include "hip_nvidia.h"
#define PDX_HIP_PLATFORM "nvidia"
#define HIPX_ATTR_TYPE(a)        ((a).type)
#define HIPX_HAVE_MEM_UNREGISTERED 1
#define HIPX_HAVE_MEM_MANAGED    1

#else
#define PDX_HIP_PLATFORM "none"
#endif

#if !defined(PDX_HIP_PLATFORM_NONE)

/* The status for a runtime error; hipErrorNotReady is PDX_INPROGRESS. */
pdx_status_t hipx_status(hipError_t err);

/*
 * Log "hip: <call>: <hipErrorName>: <description>" (what adds context, may
 * be NULL), clear the thread's last error so it does not stick, and return
 * hipx_status(err).
 */
pdx_status_t hipx_fail(hipError_t err, const char *call, const char *what);

/* Runtime ordinal of the calling thread's current device, -1 on error. */
int hipx_current_device(void);

/* dlopen(name, RTLD_NOW | RTLD_LOCAL) of a GPU runtime library: by name (the
 * loader's path), then, on amd, from the ROCm tree the build took HIP from
 * (PDX_ROCM_LIBDIR). NULL: dlerror() says why. */
void *hipx_dlopen(const char *name);

/* Keep the text of a runtime error for pdx_hip_last_error(). */
void hipx_last_error_set(const char *name, const char *text);

/* ------------------------------------------------------ entry points (entry.c) */

#if defined(PDX_HIP_PLATFORM_NVIDIA)
/*
 * CUDA driver calls, resolved once through cudaGetDriverEntryPointByVersion
 * (the runtime finds the driver; pdx never links libcuda). Types come from
 * cuda.h; each pointer is the ABI of the CUDA version in entry.c.
 */
typedef struct hipx_cu {
    CUresult (*get_error_name)(CUresult err, const char **name);
    CUresult (*get_error_string)(CUresult err, const char **text);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*device_get_attribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    CUresult (*pointer_get_attributes)(unsigned int n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr ptr);
    CUresult (*mem_get_address_range)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    CUresult (*mem_get_handle_for_address_range)(void *handle, CUdeviceptr ptr, size_t size,
                                                 CUmemRangeHandleType type,
                                                 unsigned long long flags);
    CUresult (*stream_write_value64)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                     unsigned int flags);
    CUresult (*stream_wait_value64)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                    unsigned int flags);
    CUresult (*flush_gpu_direct_rdma_writes)(CUflushGPUDirectRDMAWritesTarget target,
                                             CUflushGPUDirectRDMAWritesScope scope);
    CUresult (*module_load_data)(CUmodule *module, const void *image);
    CUresult (*module_get_function)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*module_unload)(CUmodule module);
    CUresult (*launch_kernel)(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz,
                              unsigned int shared, CUstream stream, void **params, void **extra);
} hipx_cu_t;

/* The driver table; PDX_ERR_UNSUPPORTED (logged) when an entry is missing. */
pdx_status_t hipx_cu(const hipx_cu_t **cu_p);

/* Like hipx_fail, for a driver result. */
pdx_status_t hipx_cu_fail(CUresult err, const char *call, const char *what);

/* Driver device handle and one attribute of a runtime ordinal. */
pdx_status_t hipx_cu_attribute(int device, CUdevice_attribute attr, const char *attr_name,
                               int *value_p);
#endif

#if defined(PDX_HIP_PLATFORM_AMD)
/*
 * HSA calls pdx needs beyond HIP, declared here (not from <hsa/hsa.h>) and
 * resolved with dlsym from libhsa-runtime64.so.1: Debian's ROCm 5.2 lacks
 * hsa_amd_portable_export_dmabuf (it came in 5.3).
 */
typedef int hipx_hsa_status_t;          /* hsa_status_t: 0 is HSA_STATUS_SUCCESS */
#define HIPX_HSA_STATUS_SUCCESS 0
#define HIPX_HSA_SYSTEM_INFO_DMABUF_SUPPORTED 0x204 /* hsa_amd_system_info_t */

typedef struct hipx_hsa {
    hipx_hsa_status_t (*system_get_info)(int attribute, void *value);
    hipx_hsa_status_t (*status_string)(hipx_hsa_status_t status, const char **text);
    hipx_hsa_status_t (*portable_export_dmabuf)(const void *ptr, size_t size, int *dmabuf,
                                                uint64_t *offset);
    bool dmabuf_supported;              /* HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED */
} hipx_hsa_t;

/* The HSA table with dmabuf export; PDX_ERR_UNSUPPORTED when this ROCm or
 * its kernel driver cannot export dmabufs (logged once per process, as a
 * warning: the caller falls back to peer memory). */
pdx_status_t hipx_hsa_dmabuf(const hipx_hsa_t **hsa_p);

/* ------------------------------------------------------------ rocm-smi (smi.c) */

#define HIPX_SMI_MAX 64 /* GPUs read from rocm-smi (8 GPUs of 8 partitions each) */

typedef struct hipx_smi_gpu {
    char     pci_bus_id[PDX_HIP_BUS_ID_MAX]; /* "0000:c1:00.0", decoded from the BDFID */
    int      numa_node;                      /* -1: rocm-smi did not say */
    uint64_t hive_id;                        /* 0: none, or rocm-smi did not say */
    char     name[PDX_HIP_NAME_MAX];         /* "" when rocm-smi did not say */
} hipx_smi_gpu_t;

/* What rocm-smi said of each GPU it lists, in its own order (not HIP's). */
typedef struct hipx_smi_facts {
    uint32_t       count;
    hipx_smi_gpu_t gpu[HIPX_SMI_MAX];
} hipx_smi_facts_t;

/*
 * Open rocm-smi-lib (lib: a file name or path for dlopen; NULL: the names
 * ROCm installs, librocm_smi64.so.1, .so.7, .so.6, .so.5, .so), rsmi_init
 * it, read every GPU it lists into *facts_p, rsmi_shut_down and dlclose it:
 * nothing stays open. No library or a symbol missing: PDX_ERR_UNSUPPORTED;
 * rsmi_init or rsmi_num_monitor_devices failing: PDX_ERR_IO; each logged at
 * info with its cause (rocm-smi is optional: never an error for pdx).
 */
pdx_status_t hipx_smi_load(const char *lib, hipx_smi_facts_t *facts_p);

/* The GPU of facts whose PCI bus id is pci_bus_id (as pdx_hip_identity_t
 * writes it), or NULL. */
const hipx_smi_gpu_t *hipx_smi_find(const hipx_smi_facts_t *facts, const char *pci_bus_id);

/* Fill id's NUMA node (when rocm-smi knows it), hive, name and source from
 * the GPU of facts with id's bus id; id is left as it is when there is none. */
void hipx_smi_apply(const hipx_smi_facts_t *facts, pdx_hip_identity_t *id);

/*
 * The process's table: hipx_smi_load(), run once, the first time it is
 * asked after the runtime counted a GPU (pdx_hip_device_count() PDX_OK).
 * Without a GPU rocm-smi is not opened and the table is empty; so it is
 * when the load failed. Any thread.
 */
const hipx_smi_facts_t *hipx_smi_facts(void);

/* Test hook: the library hipx_smi_facts() opens (NULL: the default names).
 * Call before the first hipx_smi_facts() or pdx_hip_device_identity();
 * lib must stay valid for the process. */
void hipx_smi_library_set(const char *lib);
#endif

#endif /* !PDX_HIP_PLATFORM_NONE */

#endif
