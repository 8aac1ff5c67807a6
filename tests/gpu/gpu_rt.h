/*
 * The GPU runtime of the C++ test programs (cu_check.h includes it): CUDA's
 * on nvidia; on amd, where hipcc builds them, HIP's under the CUDA names
 * they use. Only the calls, types and constants those programs use, and
 * gpu_ns(): a device clock in nanoseconds (nvidia: the global timer; amd:
 * the 100 MHz wall clock of gfx9, which gpu_clock_ok() checks).
 */
#ifndef PDX_GPU_RT_H
#define PDX_GPU_RT_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>

#define cudaError_t                    hipError_t
#define cudaSuccess                    hipSuccess
#define cudaErrorNotReady              hipErrorNotReady
#define cudaErrorInvalidResourceHandle hipErrorInvalidResourceHandle
#define cudaGetErrorName               hipGetErrorName
#define cudaSetDevice                  hipSetDevice
#define cudaGetDevice                  hipGetDevice
#define cudaGetDeviceCount             hipGetDeviceCount
#define cudaDeviceCanAccessPeer        hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess     hipDeviceEnablePeerAccess
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaMemcpyPeerAsync            hipMemcpyPeerAsync
#define cudaMalloc                     hipMalloc
#define cudaFree                       hipFree
#define cudaHostAlloc                  hipHostMalloc
#define cudaHostAllocMapped            hipHostMallocMapped
#define cudaHostAllocPortable          hipHostMallocPortable
#define cudaFreeHost                   hipHostFree
#define cudaMemcpy                     hipMemcpy
#define cudaMemcpyAsync                hipMemcpyAsync
#define cudaMemset                     hipMemset
#define cudaMemcpyHostToDevice         hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost         hipMemcpyDeviceToHost
#define cudaStream_t                   hipStream_t
#define cudaStreamNonBlocking          hipStreamNonBlocking
#define cudaStreamCreateWithFlags      hipStreamCreateWithFlags
#define cudaStreamDestroy              hipStreamDestroy
#define cudaStreamSynchronize          hipStreamSynchronize
#define cudaStreamQuery                hipStreamQuery
#define cudaEvent_t                    hipEvent_t
#define cudaEventDisableTiming         hipEventDisableTiming
#define cudaEventCreateWithFlags       hipEventCreateWithFlags
#define cudaEventDestroy               hipEventDestroy
#define cudaEventRecord                hipEventRecord
#define cudaEventQuery                 hipEventQuery
#define cudaEventSynchronize           hipEventSynchronize
#define cudaEventCreate                hipEventCreate
#define cudaEventElapsedTime           hipEventElapsedTime
#define cudaMemcpyDeviceToDevice       hipMemcpyDeviceToDevice
#define cudaDeviceSynchronize          hipDeviceSynchronize
#define cudaGraph_t                    hipGraph_t
#define cudaGraphExec_t                hipGraphExec_t
#define cudaStreamBeginCapture         hipStreamBeginCapture
#define cudaStreamEndCapture           hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaGraphInstantiate           hipGraphInstantiateWithFlags
#define cudaGraphLaunch                hipGraphLaunch
#define cudaGraphExecDestroy           hipGraphExecDestroy
#define cudaGraphDestroy               hipGraphDestroy

#define GPU_CLOCK_KHZ 100000 /* s_memrealtime on gfx9 (MI200, MI300): the wall clock */

__device__ static inline uint64_t gpu_ns(void)
{
#if defined(__HIP_DEVICE_COMPILE__)
    return __builtin_amdgcn_s_memrealtime() * (1000000ull / GPU_CLOCK_KHZ);
#else
    return 0; /* the host pass: never called there */
#endif
}

/* Whether gpu_ns() counts nanoseconds on the current device (HIP before
 * 5.3 cannot say: assumed). */
static inline bool gpu_clock_ok(void)
{
#if HIP_VERSION >= 50300000
    int dev = 0, khz = 0;

    return hipGetDevice(&dev) == hipSuccess &&
           hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, dev) == hipSuccess &&
           khz == GPU_CLOCK_KHZ;
#else
    return true;
#endif
}
#else
#include <cuda_runtime.h>

__device__ static inline uint64_t gpu_ns(void)
{
    uint64_t t;

    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static inline bool gpu_clock_ok(void)
{
    return true;
}
#endif

#endif
