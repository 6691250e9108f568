# bench_strategies: every search strategy replayed on the recorded GPU spaces of the shared
# dataset (benchmarks/bench_strategies.cpp, run by benchmarks/strategies).
add_executable(bench_strategies ${CMAKE_CURRENT_LIST_DIR}/bench_strategies.cpp)
target_link_libraries(bench_strategies PRIVATE ktune_replay ktune_search nlohmann_json::nlohmann_json Threads::Threads)
