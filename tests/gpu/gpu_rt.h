/*
 * The GPU runtime of the C++ test programs (cu_check.h includes it): CUDA's
 * on nvidia; on amd, where hipcc builds them, HIP's under the CUDA names
 * they use. Only the calls, types and constants those programs use.
 */
#ifndef PDX_GPU_RT_H
#define PDX_GPU_RT_H

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>

#define cudaError_t                    hipError_t
#define cudaSuccess                    hipSuccess
#define cudaErrorNotReady              hipErrorNotReady
#define cudaErrorInvalidResourceHandle hipErrorInvalidResourceHandle
#define cudaGetErrorName               hipGetErrorName
#define cudaSetDevice                  hipSetDevice
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
#else
#include <cuda_runtime.h>
#endif

#endif
