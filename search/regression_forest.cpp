#include "search/regression_forest.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ktune::search {

namespace {

double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::size_t below(std::mt19937_64& rng, std::size_t n) {
  // n is small (a feature count); the modulo bias of a 64-bit draw is negligible and, unlike
  // std::uniform_int_distribution, the same in every standard library.
  return static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(n));
}

} // namespace

void RegressionForest::fit(const std::vector<double>& x, const std::vector<double>& y, std::size_t features,
                           const ForestOptions& options, std::mt19937_64& rng) {
  m_trees.clear();
  m_features = features;
  m_options = options;
  m_fallback = y.empty() ? 0.0 : std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
  if (y.empty() || features == 0 || x.size() != y.size() * features) return;
  m_x = &x;
  m_y = &y;
  m_trees.resize(std::max<std::size_t>(1, options.trees));
  std::vector<std::uint32_t> rows(y.size());
  for (auto& tree : m_trees) {
    std::iota(rows.begin(), rows.end(), 0u);
    tree.nodes.emplace_back();
    grow(tree, 0, rows, 0, rows.size(), 0, rng);
  }
  m_x = nullptr;
  m_y = nullptr;
}

void RegressionForest::grow(Tree& tree, std::size_t node, std::vector<std::uint32_t>& rows, std::size_t begin,
                            std::size_t end, std::size_t depth, std::mt19937_64& rng) {
  const auto& x = *m_x;
  const auto& y = *m_y;
  const std::size_t n = end - begin;
  double sum = 0;
  for (std::size_t i = begin; i < end; ++i) sum += y[rows[i]];
  const double mean = sum / static_cast<double>(n);
  tree.nodes[node].value = mean;

  const std::size_t min_leaf = std::max<std::size_t>(1, m_options.min_leaf);
  if (n < 2 * min_leaf || depth >= m_options.max_depth) return;
  bool constant_y = true;
  for (std::size_t i = begin + 1; i < end && constant_y; ++i) constant_y = y[rows[i]] == y[rows[begin]];
  if (constant_y) return;

  // Try the features in random order; `tries` of them that vary in this node get a random cut.
  std::vector<std::size_t> order(m_features);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::size_t tries = m_options.split_features == 0 ? m_features : std::min(m_options.split_features, m_features);
  std::size_t tried = 0;
  double best_score = -1;
  std::int32_t best_feature = -1;
  double best_threshold = 0;
  for (std::size_t k = 0; k < m_features && tried < tries; ++k) {
    std::swap(order[k], order[k + below(rng, m_features - k)]);
    const std::size_t f = order[k];
    double lo = x[rows[begin] * m_features + f];
    double hi = lo;
    for (std::size_t i = begin + 1; i < end; ++i) {
      const double v = x[rows[i] * m_features + f];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (!(hi > lo)) continue;
    ++tried;
    double threshold = lo + unit(rng) * (hi - lo);
    if (!(threshold > lo)) threshold = hi; // keeps the split proper: lo goes left, hi right
    double left_sum = 0;
    std::size_t left_n = 0;
    for (std::size_t i = begin; i < end; ++i) {
      if (x[rows[i] * m_features + f] < threshold) {
        left_sum += y[rows[i]];
        ++left_n;
      }
    }
    const std::size_t right_n = n - left_n;
    if (left_n < min_leaf || right_n < min_leaf) continue;
    const double right_sum = sum - left_sum;
    // Squared-error reduction up to a constant: sum^2/n of both sides.
    const double score = left_sum * left_sum / static_cast<double>(left_n) +
                         right_sum * right_sum / static_cast<double>(right_n);
    if (score > best_score) {
      best_score = score;
      best_feature = static_cast<std::int32_t>(f);
      best_threshold = threshold;
    }
  }
  if (best_feature < 0) return;

  const auto f = static_cast<std::size_t>(best_feature);
  const auto mid = std::partition(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                                  rows.begin() + static_cast<std::ptrdiff_t>(end),
                                  [&](std::uint32_t r) { return x[r * m_features + f] < best_threshold; });
  const auto split = static_cast<std::size_t>(mid - rows.begin());
  const auto left = static_cast<std::uint32_t>(tree.nodes.size());
  tree.nodes[node].feature = best_feature;
  tree.nodes[node].threshold = best_threshold;
  tree.nodes[node].left = left;
  tree.nodes.emplace_back();
  tree.nodes.emplace_back();
  grow(tree, left, rows, begin, split, depth + 1, rng);
  grow(tree, left + 1, rows, split, end, depth + 1, rng);
}

Prediction RegressionForest::predict(const double* row) const {
  if (m_trees.empty()) return {m_fallback, 0.0};
  double sum = 0;
  double sum_sq = 0;
  for (const auto& tree : m_trees) {
    std::size_t i = 0;
    while (tree.nodes[i].feature >= 0) {
      const Node& node = tree.nodes[i];
      i = row[node.feature] < node.threshold ? node.left : node.left + 1;
    }
    const double v = tree.nodes[i].value;
    sum += v;
    sum_sq += v * v;
  }
  const auto t = static_cast<double>(m_trees.size());
  const double mean = sum / t;
  return {mean, std::sqrt(std::max(0.0, sum_sq / t - mean * mean))};
}

} // namespace ktune::search
