# The CUDA measurement backend, included from bench/CMakeLists.txt after ktune_bench is defined.
# cuda_launch.cpp (launch geometry from the spec, carried by BenchJob) is toolkit-free and always
# built; the runner and the device queries need the toolkit's headers (KTUNE_CUDA, ktune_cuda).
target_sources(ktune_bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_launch.cpp)
if(KTUNE_CUDA)
  target_sources(ktune_bench PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cuda_runner.cpp)
  target_link_libraries(ktune_bench PUBLIC ktune_cuda)
endif()
