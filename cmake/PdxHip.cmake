# The GPU runtime hip/ builds against: pdx_find_hip().
#
#   PDX_HIP_PLATFORM=auto    amd when HIP is found (hip/hip_runtime_api.h and
#                            libamdhip64), else nvidia when PDX_CUDA_ROOT has
#                            cuda_runtime_api.h and libcudart, else none
#   PDX_HIP_PLATFORM=amd     HIP, plain C with gcc: from PDX_ROCM_PATH (default
#                            /opt/rocm: AMD's ROCm 6.x/7.x) where it is there,
#                            else the system's (Debian's libamdhip64-dev); hipcc
#                            the same way; the libraries hip/ opens at run time
#                            (HSA, rocm-smi-lib, roctx) by name, then from
#                            PDX_ROCM_PATH/lib
#   PDX_HIP_PLATFORM=nvidia  the same sources against hip/hip_nvidia.h and the
#                            CUDA runtime (libcudart; libcuda is never linked)
#   PDX_HIP_PLATFORM=none    no GPU runtime: every hip call is unsupported
#
# PDX_GPU_TESTS builds tests/gpu/test_gpu, a plain C program (no Criterion)
# for machines with a GPU.

set(PDX_HIP_PLATFORM "auto" CACHE STRING "GPU runtime for hip/: auto, amd, nvidia, none")
set_property(CACHE PDX_HIP_PLATFORM PROPERTY STRINGS auto amd nvidia none)
set(PDX_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit for PDX_HIP_PLATFORM=nvidia")
set(PDX_ROCM_PATH "/opt/rocm" CACHE PATH
    "ROCm tree the amd platform takes HIP, hipcc and its libraries from first")
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
    find_path(PDX_HIP_INCLUDE_DIR hip/hip_runtime_api.h HINTS ${PDX_ROCM_PATH}/include)
    find_library(PDX_AMDHIP64_LIBRARY amdhip64 HINTS ${PDX_ROCM_PATH}/lib ${PDX_ROCM_PATH}/lib64)
    if(PDX_HIP_INCLUDE_DIR AND PDX_AMDHIP64_LIBRARY)
      set(platform amd)
      set(incs ${PDX_HIP_INCLUDE_DIR})
      set(libs ${PDX_AMDHIP64_LIBRARY} ${CMAKE_DL_LIBS})
      set(defs __HIP_PLATFORM_AMD__=1 PDX_ROCM_LIBDIR="${PDX_ROCM_PATH}/lib")
      message(STATUS "HIP headers: ${PDX_HIP_INCLUDE_DIR}, library: ${PDX_AMDHIP64_LIBRARY} "
                     "(PDX_ROCM_PATH=${PDX_ROCM_PATH}, then the system)")
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

set(PDX_HIP_GPU_TARGETS "gfx90a;gfx942;gfx950" CACHE STRING
    "AMD GPU targets hipcc builds hip/'s kernels for (those this hipcc knows)")

# pdx_hip_embed_kernel(SOURCE NAME OUT_VAR): at build time, compile the
# kernel source SOURCE for the platform's GPUs and embed the result in a
# generated C file defining NAME and NAME_size (cmake/PdxEmbed.cmake):
#   nvidia  nvcc -ptx for compute_75 (the driver JIT-compiles the PTX for the
#           GPU present, once per device and process)
#   amd     hipcc --genco, a code-object bundle for each PDX_HIP_GPU_TARGETS
#           entry this hipcc accepts (probed at configure time)
# OUT_VAR is the generated file, or "" when the compiler is missing (the
# kernel's calls then answer PDX_ERR_UNSUPPORTED): hipcc is optional on amd.
function(pdx_hip_embed_kernel source name out_var)
  set(${out_var} "" PARENT_SCOPE)
  set(image ${CMAKE_CURRENT_BINARY_DIR}/${name}.img)
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/${name}.c)
  set(embed ${CMAKE_COMMAND} -DIN=${image} -DOUT=${gen} -DNAME=${name}
            -P ${PROJECT_SOURCE_DIR}/cmake/PdxEmbed.cmake)
  if(PDX_HIP_PLATFORM_RESOLVED STREQUAL "nvidia")
    find_program(PDX_NVCC nvcc PATHS ${PDX_CUDA_ROOT}/bin NO_DEFAULT_PATH)
    if(NOT PDX_NVCC)
      message(STATUS "no nvcc under ${PDX_CUDA_ROOT}/bin: ${name} is not built (unsupported)")
      return()
    endif()
    add_custom_command(OUTPUT ${gen}
      COMMAND ${PDX_NVCC} -ptx -arch=compute_75 -o ${image} ${source}
      COMMAND ${embed}
      DEPENDS ${source} ${PROJECT_SOURCE_DIR}/cmake/PdxEmbed.cmake
      COMMENT "nvcc: ${name} to PTX (compute_75), embedded" VERBATIM)
  elseif(PDX_HIP_PLATFORM_RESOLVED STREQUAL "amd")
    find_program(PDX_HIPCC hipcc HINTS ${PDX_ROCM_PATH}/bin)
    if(NOT PDX_HIPCC)
      message(STATUS "no hipcc: ${name} is not built (its calls answer unsupported)")
      return()
    endif()
    message(STATUS "hipcc: ${PDX_HIPCC}")
    set(probe ${CMAKE_CURRENT_BINARY_DIR}/${name}_probe.hip)
    file(WRITE ${probe} "#include <hip/hip_runtime.h>\n"
                        "extern \"C\" __global__ void probe(int *p) { *p = 1; }\n")
    set(archs "")
    foreach(target ${PDX_HIP_GPU_TARGETS})
      execute_process(COMMAND ${PDX_HIPCC} --genco --offload-arch=${target} -o ${probe}.co
                              ${probe}
                      RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
      if(rc EQUAL 0)
        list(APPEND archs --offload-arch=${target})
      else()
        message(STATUS "hipcc cannot build for ${target}: ${name} skips it")
      endif()
    endforeach()
    set(PDX_HIPCC_ARCHS "${archs}" CACHE INTERNAL "the --offload-arch flags hipcc takes")
    if(NOT archs)
      message(STATUS "hipcc builds none of ${PDX_HIP_GPU_TARGETS}: ${name} is not built")
      return()
    endif()
    add_custom_command(OUTPUT ${gen}
      COMMAND ${PDX_HIPCC} --genco -O3 ${archs} -o ${image} -x hip ${source}
      COMMAND ${embed}
      DEPENDS ${source} ${PROJECT_SOURCE_DIR}/cmake/PdxEmbed.cmake
      COMMENT "hipcc: ${name} for ${archs}, embedded" VERBATIM)
  else()
    return()
  endif()
  set(${out_var} ${gen} PARENT_SCOPE)
endfunction()
