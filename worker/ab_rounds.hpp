#pragma once
// The rounds of a bench_ab request (jobs/ab_job.hpp): A and B measured alternately, A first in
// even rounds and B first in odd ones, each round one measurement of each through `measure` (the
// worker's runner). Stops at the first measurement that is not ok (its status, side and reason
// in the outcome, the rounds before it kept) or that `measure` could not run (that error).
#include "core/result.hpp"
#include "jobs/ab_job.hpp"

#include <functional>

namespace ktune {

using MeasureFn = std::function<Result<BenchOutcome>(const BenchJob& job)>;

[[nodiscard]] Result<AbOutcome> run_ab_rounds(const AbRequest& request, const MeasureFn& measure);

} // namespace ktune
