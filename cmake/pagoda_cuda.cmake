# The CUDA backend (-DPAGODA_CUDA=ON): kernels/cuda/*.cu and backend/cuda_backend.cu in one
# library, pagoda_cuda, that the CPU build never sees (pagoda_module's glob skips */cuda/* and
# *.cu). Code for sm_90a only (Hopper: H100/H200; no PTX, which for 90a no later GPU could
# JIT either, so the binaries stay small enough to carry to the device). GPU tests (tests/cuda/*_test.cc) carry the ctest
# label `cuda`, which CI excludes; scripts/gpu-check runs them on the device machine.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a-real)
endif()
if(CCACHE_PROGRAM)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()
enable_language(CUDA)
# CMake 3.25 does not know that nvcc 13 takes C++20: teach it (the targets' CXX_STANDARD 20
# becomes their CUDA standard).
if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
set(CMAKE_CUDA_STANDARD 20)
find_package(CUDAToolkit REQUIRED)

file(GLOB PAGODA_CUDA_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backend/cuda_*.cu
     ${CMAKE_SOURCE_DIR}/src/parallel/cuda/*.cc)
# NCCL (tensor parallelism across GPUs) ships with the CUDA toolkit: its header at build time,
# the library opened at run time (parallel/cuda/nccl_group.cc), so pagoda starts without it.
add_library(pagoda_cuda STATIC ${PAGODA_CUDA_SOURCES})

# CUTLASS (headers only) for the Hopper GEMMs of many rows (kernels/cuda/gemm_cutlass.cu): the
# pinned nvidia-cutlass wheel from PyPI, checked by its SHA-256 and unpacked once into a cache
# (PAGODA_DEPS_CACHE), or an existing checkout's include/ via -DPAGODA_CUTLASS_INCLUDE=...
set(PAGODA_CUTLASS_INCLUDE "" CACHE PATH "CUTLASS include/ (cutlass/ and cute/); empty: the pinned wheel")
set(PAGODA_DEPS_CACHE "$ENV{HOME}/.cache/pagoda-deps" CACHE PATH "Where downloaded build dependencies are kept")
if(NOT PAGODA_CUTLASS_INCLUDE)
  set(_cutlass_version 4.2.0.0)
  set(_cutlass_wheel nvidia_cutlass-${_cutlass_version}-py3-none-any.whl)
  set(_cutlass_dir ${PAGODA_DEPS_CACHE}/nvidia-cutlass-${_cutlass_version})
  if(NOT EXISTS ${_cutlass_dir}/cutlass_library/source/include/cutlass/cutlass.h)
    message(STATUS "Downloading CUTLASS headers (nvidia-cutlass ${_cutlass_version} from PyPI)")
    file(DOWNLOAD
         https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/${_cutlass_wheel}
         ${PAGODA_DEPS_CACHE}/${_cutlass_wheel}
         EXPECTED_HASH SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
         STATUS _cutlass_status)
    list(GET _cutlass_status 0 _cutlass_code)
    if(NOT _cutlass_code EQUAL 0)
      message(FATAL_ERROR "CUTLASS download failed (${_cutlass_status}); pass -DPAGODA_CUTLASS_INCLUDE=<cutlass>/include")
    endif()
    file(ARCHIVE_EXTRACT INPUT ${PAGODA_DEPS_CACHE}/${_cutlass_wheel} DESTINATION ${_cutlass_dir}
         PATTERNS "cutlass_library/source/include/*")
    file(REMOVE ${PAGODA_DEPS_CACHE}/${_cutlass_wheel})
  endif()
  set(PAGODA_CUTLASS_INCLUDE ${_cutlass_dir}/cutlass_library/source/include)
endif()
if(NOT EXISTS ${PAGODA_CUTLASS_INCLUDE}/cute/tensor.hpp)
  message(FATAL_ERROR "PAGODA_CUTLASS_INCLUDE=${PAGODA_CUTLASS_INCLUDE} holds no cute/tensor.hpp")
endif()
target_include_directories(pagoda_cuda SYSTEM PRIVATE ${PAGODA_CUTLASS_INCLUDE})
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/kernels/cuda/gemm_cutlass.cu PROPERTIES
                            COMPILE_OPTIONS "--expt-relaxed-constexpr")
target_include_directories(pagoda_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(pagoda_cuda PUBLIC pagoda_backend CUDA::cudart_static ${CMAKE_DL_LIBS})
target_include_directories(pagoda_cuda PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(pagoda_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda -Xcompiler=-Wall>)
target_compile_definitions(pagoda_cuda PUBLIC PAGODA_WITH_CUDA=1)

# `pagoda --device cuda`.
target_link_libraries(pagoda PRIVATE pagoda_cuda)

# The kernels' device benchmark (scripts/gpu-check runs it beside gpu_baselines.py).
add_executable(pagoda_cuda_bench ${CMAKE_SOURCE_DIR}/bench/cuda/cuda_kernels_bench.cc)
target_link_libraries(pagoda_cuda_bench PRIVATE pagoda_cuda pagoda_model)

if(PAGODA_BUILD_TESTS)
  file(GLOB PAGODA_CUDA_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/*_test.cc)
  if(PAGODA_CUDA_TEST_SOURCES)
    pagoda_test(cuda SOURCES ${PAGODA_CUDA_TEST_SOURCES} tests/test_util.cc
                DEPS pagoda_cuda pagoda_engine pagoda_eval LABELS cuda)
    # The CUDA backend's host-side plans need no GPU (the binary links cudart statically and
    # touches the device only in the fixtures): CI runs them here, outside the `cuda` label.
    add_test(NAME cuda_host_plans COMMAND pagoda_cuda_tests --gtest_filter=FlashPlanTest.*)
  endif()
endif()
