#pragma once
// Measurement behind one interface: a Runner takes a BenchJob (jobs/bench_job.hpp) and returns
// its BenchOutcome.
#include "jobs/bench_job.hpp"

namespace ktune {

class Runner {
public:
  virtual ~Runner() = default;
  // Runs one candidate: checks its output against the reference, then measures it.
  // A crash inside the candidate kills the calling process: runners run in a worker.
  [[nodiscard]] virtual BenchOutcome run(const BenchJob& job) = 0;
};

} // namespace ktune
