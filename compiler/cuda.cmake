# The CUDA compile backend, included from compiler/CMakeLists.txt after ktune_compiler is
# defined. Compiled only when the top level found a CUDA toolkit (KTUNE_CUDA, target ktune_cuda).
if(KTUNE_CUDA)
  target_sources(ktune_compiler PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nvrtc_compiler.cpp)
  target_link_libraries(ktune_compiler PUBLIC ktune_cuda)
endif()
