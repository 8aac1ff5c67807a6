# The GPU runtime hip/ builds against: pdx_find_hip().
#
#   PDX_HIP_PLATFORM=auto    amd when Debian's HIP is found (hip/hip_runtime_api.h
#                            and libamdhip64), else nvidia when PDX_CUDA_ROOT has
#                            cuda_runtime_api.h and libcudart, else none
#   PDX_HIP_PLATFORM=amd     HIP from Debian (libamdhip64-dev), plain C with gcc
#   PDX_HIP_PLATFORM=nvidia  the same sources against hip/hip_nvidia.h and the
#                            CUDA runtime (libcudart; libcuda is never linked)
#   PDX_HIP_PLATFORM=none    no GPU runtime: every hip call is unsupported
#
# PDX_GPU_TESTS builds tests/gpu/test_gpu, a plain C program (no Criterion)
# for machines with a GPU.

set(PDX_HIP_PLATFORM "auto" CACHE STRING "GPU runtime for hip/: auto, amd, nvidia, none")
set_property(CACHE PDX_HIP_PLATFORM PROPERTY STRINGS auto amd nvidia none)
set(PDX_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit for PDX_HIP_PLATFORM=nvidia")
option(PDX_GPU_TESTS "Build tests/gpu (plain C GPU tests, run on a machine with a GPU)" OFF)

# pdx_find_hip(): PDX_HIP_PLATFORM_RESOLVED (amd, nvidia or none),
# PDX_HIP_INCLUDE_DIRS, PDX_HIP_LIBRARIES, PDX_HIP_DEFINITIONS.
function(pdx_find_hip)
  set(want "${PDX_HIP_PLATFORM}")
  if(NOT want MATCHES "^(auto|amd|nvidia|none)$")
    message(FATAL_ERROR "PDX_HIP_PLATFORM=${want}: use auto, amd, nvidia or none")
  endif()
  set(platform none)
  set(incs "")
  set(libs "")
  set(defs "")

  if(want STREQUAL "auto" OR want STREQUAL "amd")
    find_path(PDX_HIP_INCLUDE_DIR hip/hip_runtime_api.h)
    find_library(PDX_AMDHIP64_LIBRARY amdhip64)
    if(PDX_HIP_INCLUDE_DIR AND PDX_AMDHIP64_LIBRARY)
      set(platform amd)
      set(incs ${PDX_HIP_INCLUDE_DIR})
      set(libs ${PDX_AMDHIP64_LIBRARY} ${CMAKE_DL_LIBS})
      set(defs __HIP_PLATFORM_AMD__=1)
    elseif(want STREQUAL "amd")
      message(FATAL_ERROR "PDX_HIP_PLATFORM=amd but HIP (hip/hip_runtime_api.h and "
                          "libamdhip64) was not found: install libamdhip64-dev")
    endif()
  endif()

  if(platform STREQUAL "none" AND (want STREQUAL "auto" OR want STREQUAL "nvidia"))
    find_path(PDX_CUDA_INCLUDE_DIR cuda_runtime_api.h
              PATHS ${PDX_CUDA_ROOT}/include NO_DEFAULT_PATH)
    find_library(PDX_CUDART_LIBRARY cudart
                 PATHS ${PDX_CUDA_ROOT}/lib64 ${PDX_CUDA_ROOT}/lib NO_DEFAULT_PATH)
    if(PDX_CUDA_INCLUDE_DIR AND PDX_CUDART_LIBRARY AND EXISTS ${PDX_CUDA_INCLUDE_DIR}/cuda.h)
      set(platform nvidia)
      set(incs ${PDX_CUDA_INCLUDE_DIR})
      set(libs ${PDX_CUDART_LIBRARY} ${CMAKE_DL_LIBS})
      if(EXISTS ${PDX_CUDA_INCLUDE_DIR}/nvtx3/nvToolsExt.h)
        list(APPEND defs PDX_HIP_HAVE_NVTX3=1)
      endif()
    elseif(want STREQUAL "nvidia")
      message(FATAL_ERROR "PDX_HIP_PLATFORM=nvidia but ${PDX_CUDA_ROOT} has no CUDA runtime "
                          "(include/cuda_runtime_api.h, include/cuda.h and lib64/libcudart): "
                          "install the CUDA toolkit or set PDX_CUDA_ROOT")
    else()
      message(STATUS "nvidia platform skipped: no CUDA (cuda_runtime_api.h, cuda.h and "
                     "libcudart under ${PDX_CUDA_ROOT})")
    endif()
  endif()

  string(TOUPPER ${platform} upper)
  list(APPEND defs PDX_HIP_PLATFORM_${upper}=1)
  message(STATUS "hip platform: ${platform}")
  set(PDX_HIP_PLATFORM_RESOLVED ${platform} PARENT_SCOPE)
  set(PDX_HIP_INCLUDE_DIRS "${incs}" PARENT_SCOPE)
  set(PDX_HIP_LIBRARIES "${libs}" PARENT_SCOPE)
  set(PDX_HIP_DEFINITIONS "${defs}" PARENT_SCOPE)
endfunction()
