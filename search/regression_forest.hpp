#pragma once
// RegressionForest: an ensemble of extremely randomized regression trees (Geurts et al. 2006);
// the `bayes` strategy uses it to estimate the chance that a config fails. Each tree splits on
// the best of one random cut per feature tried (all features, or `split_features` of them) by
// squared-error reduction, thresholds drawn uniformly between the node's smallest and largest
// value of the feature. The spread of the trees'
// predictions serves as the model's uncertainty.
//
// Pure computation; deterministic for a given engine state.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ktune::search {

struct ForestOptions {
  std::size_t trees = 32;
  std::size_t min_leaf = 1;       // samples per leaf at least
  std::size_t max_depth = 24;
  std::size_t split_features = 0; // features tried per split; 0 = all
};

struct Prediction {
  double mean = 0;
  double stddev = 0; // across trees
};

class RegressionForest {
public:
  // `x` holds `rows` samples of `features` values each, row-major; `y` one target per sample.
  // rows >= 1 and features >= 1 (otherwise the forest predicts the mean of y, 0 when empty).
  void fit(const std::vector<double>& x, const std::vector<double>& y, std::size_t features,
           const ForestOptions& options, std::mt19937_64& rng);

  // `row` points at `features` values.
  [[nodiscard]] Prediction predict(const double* row) const;

private:
  struct Node {
    std::int32_t feature = -1; // -1: leaf
    std::uint32_t left = 0;    // right child is left + 1
    double threshold = 0;      // go left when value < threshold
    double value = 0;          // leaf prediction
  };
  struct Tree {
    std::vector<Node> nodes;
  };

  void grow(Tree& tree, std::size_t node, std::vector<std::uint32_t>& rows, std::size_t begin, std::size_t end,
            std::size_t depth, std::mt19937_64& rng);

  std::vector<Tree> m_trees;
  std::size_t m_features = 0;
  double m_fallback = 0;
  // Training data, referenced while growing.
  const std::vector<double>* m_x = nullptr;
  const std::vector<double>* m_y = nullptr;
  ForestOptions m_options;
};

} // namespace ktune::search
