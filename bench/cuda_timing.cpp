#include "bench/cuda_timing.hpp"

#include <algorithm>
#include <cmath>

namespace ktune {

TimingPlan plan_timing(double estimate_ms, bool distinct_sets, std::size_t set_bytes,
                       std::size_t budget_bytes) {
  if (!(estimate_ms > 0) || estimate_ms >= k_batch_below_ms) return {};
  int launches = static_cast<int>(std::ceil(k_batch_target_ms / estimate_ms));
  launches = std::clamp(launches, 2, k_max_batch_launches);
  if (!distinct_sets) return {launches, 1};
  const std::size_t extra = budget_bytes / std::max<std::size_t>(set_bytes, 1);
  launches = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(launches), extra + 1));
  if (launches < 2) return {};
  return {launches, launches};
}

std::uint64_t spin_ns_for(double enqueue_us) {
  const double us = std::clamp(2 * std::max(enqueue_us, 0.0) + 5, 10.0, 2000.0);
  return static_cast<std::uint64_t>(us * 1000);
}

} // namespace ktune
