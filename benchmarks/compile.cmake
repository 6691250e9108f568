# bench_compile: nvrtc compile throughput for gemm configs with 1 and N compile processes, side by
# side with `nvcc -cubin` run once per config (benchmarks/compile.cpp). Needs the CUDA backend.
if(KTUNE_CUDA)
  add_executable(bench_compile ${CMAKE_CURRENT_LIST_DIR}/compile.cpp)
  target_link_libraries(bench_compile PRIVATE ktune_compiler Threads::Threads)
  target_compile_definitions(bench_compile PRIVATE
    KTUNE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KTUNE_NVCC="${CUDAToolkit_NVCC_EXECUTABLE}")
endif()
