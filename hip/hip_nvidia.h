/*
 * The HIP names pdx uses, mapped onto the CUDA 13 runtime (cudart), so the
 * hip/ sources build unchanged for the nvidia platform. Only what pdx (and
 * tests/gpu) calls is here: a name missing from this list fails to compile,
 * which is how a new use gets noticed and mapped.
 *
 * Driver calls (cu*) are not mapped: hip/entry.c resolves them through
 * cudaGetDriverEntryPointByVersion. cuda.h is included for their types and
 * enums only; libcuda is never linked.
 *
 * Included by hip/hip_api.h only.
 */
#ifndef PDX_HIP_NVIDIA_H
#define PDX_HIP_NVIDIA_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda.h>
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

/* ------------------------------------------------------------------ types */

typedef cudaError_t                  hipError_t;
typedef cudaStream_t                 hipStream_t;
typedef cudaEvent_t                  hipEvent_t;
typedef struct cudaPointerAttributes hipPointerAttribute_t; /* field .type, as in ROCm 6 */
typedef enum cudaMemcpyKind          hipMemcpyKind;
typedef struct cudaDeviceProp        hipDeviceProp_t;       /* .name, as in HIP */
typedef cudaIpcMemHandle_t           hipIpcMemHandle_t;     /* 64 bytes, as in HIP */

/* ----------------------------------------------------------------- errors */

#define hipSuccess                cudaSuccess
#define hipErrorInvalidValue      cudaErrorInvalidValue
#define hipErrorOutOfMemory       cudaErrorMemoryAllocation
#define hipErrorNoDevice          cudaErrorNoDevice
#define hipErrorInvalidDevice     cudaErrorInvalidDevice
#define hipErrorNotReady          cudaErrorNotReady
#define hipErrorNotSupported      cudaErrorNotSupported
#define hipErrorInvalidHandle     cudaErrorInvalidResourceHandle

#define hipGetErrorName           cudaGetErrorName
#define hipGetErrorString         cudaGetErrorString
#define hipGetLastError           cudaGetLastError

/* ---------------------------------------------------------------- devices */

#define hipGetDeviceCount         cudaGetDeviceCount
#define hipGetDevice              cudaGetDevice
#define hipSetDevice              cudaSetDevice
#define hipDeviceGetPCIBusId      cudaDeviceGetPCIBusId
#define hipGetDeviceProperties    cudaGetDeviceProperties
#define hipDeviceGetByPCIBusId    cudaDeviceGetByPCIBusId
#define hipDeviceSynchronize      cudaDeviceSynchronize
#define hipDeviceCanAccessPeer    cudaDeviceCanAccessPeer

/* ----------------------------------------------------------------- memory */

#define hipMemoryTypeUnregistered cudaMemoryTypeUnregistered
#define hipMemoryTypeHost         cudaMemoryTypeHost
#define hipMemoryTypeDevice       cudaMemoryTypeDevice
#define hipMemoryTypeManaged      cudaMemoryTypeManaged
#define hipPointerGetAttributes   cudaPointerGetAttributes

#define hipHostMallocPortable     cudaHostAllocPortable
#define hipHostMallocMapped       cudaHostAllocMapped
#define hipHostMalloc             cudaHostAlloc
#define hipHostFree               cudaFreeHost
#define hipHostGetDevicePointer   cudaHostGetDevicePointer

/* tests/gpu allocates the memory it classifies and exports */
#define hipMalloc                 cudaMalloc
#define hipFree                   cudaFree
#define hipMemAttachGlobal        cudaMemAttachGlobal
#define hipMallocManaged          cudaMallocManaged
#define hipMemcpy                 cudaMemcpy
#define hipMemset                 cudaMemset

/* ------------------------------------------------------------------- IPC */

#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define hipIpcGetMemHandle        cudaIpcGetMemHandle
#define hipIpcOpenMemHandle       cudaIpcOpenMemHandle
#define hipIpcCloseMemHandle      cudaIpcCloseMemHandle

/* -------------------------------------------------------- streams, events */

#define hipStreamNonBlocking      cudaStreamNonBlocking
#define hipStreamCreateWithFlags  cudaStreamCreateWithFlags
#define hipStreamDestroy          cudaStreamDestroy
#define hipStreamSynchronize      cudaStreamSynchronize

#define hipEventDisableTiming     cudaEventDisableTiming
#define hipEventCreateWithFlags   cudaEventCreateWithFlags
#define hipEventDestroy           cudaEventDestroy
#define hipEventRecord            cudaEventRecord
#define hipEventQuery             cudaEventQuery
#define hipStreamWaitEvent        cudaStreamWaitEvent
#define hipStreamAddCallback      cudaStreamAddCallback
/* tests/gpu times copies */
#define hipEventCreate            cudaEventCreate
#define hipEventSynchronize       cudaEventSynchronize
#define hipEventElapsedTime       cudaEventElapsedTime

#define hipMemcpyHostToDevice     cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost     cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice   cudaMemcpyDeviceToDevice
#define hipMemcpyAsync            cudaMemcpyAsync

#endif
