#pragma once
// Where a CPU candidate runs: the CPUs of its job (BenchJob::cpus), for every thread of the bench
// worker while it is measured. A threaded candidate (an OpenMP pool, std::threads, TBB) starts
// its threads from the calling thread, which passes its CPU set on; threads an earlier candidate
// left behind (libgomp keeps its pool for the life of the process) are moved too, so every
// thread the candidate uses can run on every CPU it was given. Destruction puts every thread
// back on the CPUs they had before (the bench CPU the worker is pinned to). Not thread-safe: the
// bench worker's one measuring thread uses it.
#include "core/result.hpp"

#include <sched.h>

#include <vector>

namespace ktune {

// The CPUs the calling thread may run on, in ascending order.
[[nodiscard]] std::vector<int> current_cpus();

class CpuPlacement {
public:
  // Moves every thread of this process onto `cpus`; an empty list changes nothing. Errors
  // ("internal"): a CPU index out of range, or sched_setaffinity refused the calling thread's move
  // (a thread that exits meanwhile is skipped).
  [[nodiscard]] static Result<CpuPlacement> apply(const std::vector<int>& cpus);
  CpuPlacement(CpuPlacement&& other) noexcept;
  CpuPlacement& operator=(CpuPlacement&&) = delete;
  CpuPlacement(const CpuPlacement&) = delete;
  CpuPlacement& operator=(const CpuPlacement&) = delete;
  ~CpuPlacement();

private:
  CpuPlacement() = default;
  cpu_set_t m_before{};
  bool m_moved = false;
};

} // namespace ktune
