#include "search/surrogate_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ktune::search {

double alignment(double value) {
  if (!(value >= 1) || value != std::floor(value) || value > 0x1p53) return 0;
  auto u = static_cast<std::uint64_t>(value);
  int zeros = 0;
  while ((u & 1) == 0 && zeros < 16) {
    u >>= 1;
    ++zeros;
  }
  return zeros;
}

bool wants_alignment_feature(const std::vector<double>& values) {
  std::vector<double> aligned;
  for (double v : values) {
    if (!(v >= 1) || v != std::floor(v)) return false;
    aligned.push_back(alignment(v));
  }
  std::vector<double> distinct = aligned;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() < 3) return false;
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (aligned[order[i]] < aligned[order[i - 1]]) return true;
  }
  return false;
}

FeatureEncoder::FeatureEncoder(const SearchSpace& space) : m_space(space) {
  for (std::size_t p = 0; p < space.param_count(); ++p) {
    const auto& values = space.params()[p].values;
    if (values.size() < 2) continue;
    m_features.push_back({p, false, 1.0 / static_cast<double>(values.size() - 1)});
    if (wants_alignment_feature(values)) {
      double most = 1;
      for (double v : values) most = std::max(most, alignment(v));
      m_features.push_back({p, true, 1.0 / most});
    }
  }
}

void FeatureEncoder::append(std::size_t config, std::vector<double>& out) const {
  const auto indices = m_space.indices(config);
  for (const Feature& f : m_features) {
    const double raw = f.alignment ? alignment(m_space.value(config, f.param)) : static_cast<double>(indices[f.param]);
    out.push_back(raw * f.scale);
  }
}

namespace {
double normal_pdf(double z) { return 0.3989422804014327 * std::exp(-0.5 * z * z); }
double normal_cdf(double z) { return 0.5 * std::erfc(-z * 0.7071067811865476); }
} // namespace

double expected_improvement(double mean, double stddev, double best) {
  if (!std::isfinite(mean) || !std::isfinite(stddev) || !std::isfinite(best)) return 0; // keeps rankings well-ordered
  const double gain = best - mean;
  if (stddev <= 1e-12) return std::max(gain, 0.0);
  const double z = gain / stddev;
  return gain * normal_cdf(z) + stddev * normal_pdf(z);
}

} // namespace ktune::search
