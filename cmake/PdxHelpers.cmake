# Helpers that keep each CMakeLists short: pdx_library(), pdx_test(),
# pdx_tool(), pdx_install().

set(PDX_WARNINGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2)
if(PDX_WERROR)
  list(APPEND PDX_WARNINGS -Werror)
endif()

function(pdx_sanitize target)
  if(PDX_SANITIZE)
    string(REPLACE ";" "," san "${PDX_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${san} -fno-omit-frame-pointer
                           -fno-sanitize-recover=all)
    target_link_options(${target} PUBLIC -fsanitize=${san})
  endif()
endfunction()

# pdx_library(NAME SOURCES ...): an object library of the product.
# pdx_library(NAME SOURCES ... [INCLUDES dir...] [LIBS ...]): an object
# library that sees the public header, base/ and only the INCLUDES it names,
# so a layer cannot include another's internals (tests/boundary.sh).
function(pdx_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;INCLUDES" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${PDX_WARNINGS})
  target_compile_definitions(${name} PRIVATE PDX_BUILDING_LIBRARY _GNU_SOURCE)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/runtime/include
                             ${PROJECT_SOURCE_DIR}/base ${ARG_INCLUDES})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON
                        C_VISIBILITY_PRESET hidden)
  if(ARG_LIBS)
    target_link_libraries(${name} PUBLIC ${ARG_LIBS})
  endif()
  pdx_sanitize(${name})
endfunction()

# pdx_find_ibverbs(): PDX_HAVE_RDMA, PDX_IBVERBS_INCLUDE_DIR, PDX_IBVERBS_LIBRARY.
function(pdx_find_ibverbs)
  set(have OFF)
  if(NOT PDX_RDMA STREQUAL "off")
    find_path(PDX_IBVERBS_INCLUDE_DIR infiniband/verbs.h)
    find_library(PDX_IBVERBS_LIBRARY ibverbs)
    if(PDX_IBVERBS_INCLUDE_DIR AND PDX_IBVERBS_LIBRARY)
      set(have ON)
    elseif(PDX_RDMA STREQUAL "on")
      message(FATAL_ERROR "PDX_RDMA=on but libibverbs (headers and library) was not found: "
                          "install libibverbs-dev")
    else()
      message(STATUS "rdma transport skipped: libibverbs headers or library not found")
    endif()
  endif()
  set(PDX_HAVE_RDMA ${have} PARENT_SCOPE)
endfunction()

# pdx_find_sodium(): PDX_HAVE_SODIUM, PDX_SODIUM_INCLUDE_DIR, PDX_SODIUM_LIBRARY.
# libsodium gives PDX_AUTH_KEY its MACs and sealing; without it a key is refused.
function(pdx_find_sodium)
  find_path(PDX_SODIUM_INCLUDE_DIR sodium.h)
  find_library(PDX_SODIUM_LIBRARY sodium)
  if(PDX_SODIUM_INCLUDE_DIR AND PDX_SODIUM_LIBRARY)
    set(PDX_HAVE_SODIUM ON PARENT_SCOPE)
  else()
    set(PDX_HAVE_SODIUM OFF PARENT_SCOPE)
    message(STATUS "libsodium not found (libsodium-dev): PDX_AUTH_KEY will be refused")
  endif()
endfunction()

# pdx_find_hwloc(): PDX_HAVE_HWLOC, PDX_HWLOC_INCLUDE_DIR, PDX_HWLOC_LIBRARY.
# hwloc places the engine's GPU, its NICs and its CPUs (runtime/topo_hwloc.c);
# without it NICs keep the device list's order and nothing is bound by GPU.
function(pdx_find_hwloc)
  find_path(PDX_HWLOC_INCLUDE_DIR hwloc.h)
  find_library(PDX_HWLOC_LIBRARY hwloc)
  if(PDX_HWLOC_INCLUDE_DIR AND PDX_HWLOC_LIBRARY AND EXISTS "${PDX_HWLOC_INCLUDE_DIR}/hwloc.h")
    set(PDX_HAVE_HWLOC ON PARENT_SCOPE)
  else()
    set(PDX_HAVE_HWLOC OFF PARENT_SCOPE)
    message(STATUS "hwloc not found (libhwloc-dev): no GPU/NIC/CPU placement")
  endif()
endfunction()

# pdx_tool(NAME SOURCES ... [VERBS lib]): a program linked against the
# internal archive. Its rdma objects resolve the verbs symbols against VERBS:
# libibverbs by default, the software NIC (softnic) in tests.
function(pdx_tool name)
  cmake_parse_arguments(ARG "" "VERBS" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${PDX_WARNINGS})
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  target_link_libraries(${name} PRIVATE pdx_internal ${ARG_LIBS})
  if(PDX_HAVE_RDMA)
    if(NOT ARG_VERBS)
      set(ARG_VERBS ${PDX_IBVERBS_LIBRARY})
    endif()
    target_link_libraries(${name} PRIVATE ${ARG_VERBS})
    target_compile_definitions(${name} PRIVATE PDX_HAVE_RDMA=1)
  endif()
  pdx_sanitize(${name})
endfunction()

# Criterion cannot start under ThreadSanitizer (its inheritable arena
# collides with TSan's shadow mapping): tsan builds compile the same tests
# against tests/shim, a Criterion-compatible harness.
if("thread" IN_LIST PDX_SANITIZE)
  set(PDX_TEST_SHIM ON)
endif()
find_package(PkgConfig)
if(PDX_BUILD_TESTS AND NOT PDX_TEST_SHIM)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()

# pdx_test(NAME SOURCES ... [TIMEOUT s] [VERBS lib]): a Criterion test
# registered with ctest; its verbs calls reach softnic unless VERBS says.
function(pdx_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;VERBS" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_VERBS AND PDX_HAVE_RDMA)
    set(ARG_VERBS softnic)
  endif()
  if(PDX_TEST_SHIM)
    pdx_tool(${name} SOURCES ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/shim/shim_main.c
             LIBS ${ARG_LIBS} VERBS ${ARG_VERBS})
    target_include_directories(${name} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/tests/shim)
    target_compile_options(${name} PRIVATE -Wno-format-zero-length)
  else()
    pdx_tool(${name} SOURCES ${ARG_SOURCES} LIBS PkgConfig::CRITERION ${ARG_LIBS}
             VERBS ${ARG_VERBS})
  endif()
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --jobs 2)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(PDX_SANITIZE)
    # Criterion reports a sanitizer finding in a test's worker (a leak at
    # exit, say) without failing the test: the report itself fails it.
    set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION
      "ERROR: (Address|Leak|Thread)Sanitizer;WARNING: ThreadSanitizer;runtime error:")
  endif()
endfunction()

function(pdx_install)
  include(CMakePackageConfigHelpers)
  install(TARGETS pdx EXPORT pdxTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/runtime/include/pdx/pdx.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pdx)
  install(EXPORT pdxTargets NAMESPACE pdx:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pdx)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pdx-config.cmake.in
    ${PROJECT_BINARY_DIR}/pdx-config.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pdx)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/pdx-config-version.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/pdx-config.cmake ${PROJECT_BINARY_DIR}/pdx-config-version.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pdx)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/pdx.pc.in ${PROJECT_BINARY_DIR}/pdx.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pdx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
