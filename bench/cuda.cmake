# The CUDA measurement backend, included from bench/CMakeLists.txt after ktune_bench is defined.
# The launch geometry carried by BenchJob is toolkit-free (jobs/cuda_launch.*); the runner and
# the device queries need the toolkit's headers (KTUNE_CUDA, ktune_cuda).
if(KTUNE_CUDA)
  target_sources(ktune_bench PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cuda_runner.cpp)
  target_link_libraries(ktune_bench PUBLIC ktune_cuda)
endif()
