# bench_lookup: lookup latency and throughput over ktuned's socket through libktune_client, the
# in-process cache hit and the database fallback (benchmarks/lookup.cpp).
add_executable(bench_lookup ${CMAKE_CURRENT_LIST_DIR}/lookup.cpp)
target_link_libraries(bench_lookup PRIVATE ktune_lookup_client_static nlohmann_json::nlohmann_json)
