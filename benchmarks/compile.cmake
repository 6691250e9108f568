# bench_compile: CUDA compile throughput of gemm configs -- nvcc -cubin per config, one nvrtc
# program per config, ktune's batched + PCH path -- with 1 and N processes
# (benchmarks/compile.cpp). Needs the CUDA backend.
if(KTUNE_CUDA)
  add_executable(bench_compile ${CMAKE_CURRENT_LIST_DIR}/compile.cpp)
  target_link_libraries(bench_compile PRIVATE ktune_compiler ktune_daemon Threads::Threads)
  target_compile_definitions(bench_compile PRIVATE
    KTUNE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KTUNE_NVCC="${CUDAToolkit_NVCC_EXECUTABLE}")
  add_dependencies(bench_compile ktune-worker)  # the ktune pass runs real compile workers
endif()
