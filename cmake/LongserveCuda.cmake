# Helpers for targets with .cu sources, shared by the main build and the GPU machine's build
# (bench/cuda/gpu_project).

# CMake before 3.26 knows no C++20 flag for nvcc (both builds ask for CUDA 20): name it.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

# What every target with .cu sources needs: host warnings, relaxed constexpr (device code calls
# constexpr host helpers), and constexpr fmt: fmt 9 turns its constexpr support off under
# __NVCC__ but keeps constexpr callers of it, which GCC rejects in C++20; core/status.h
# includes fmt.
function(longserve_cuda_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>)
  target_compile_definitions(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
endfunction()
