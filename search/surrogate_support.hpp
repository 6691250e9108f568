#pragma once
// Pieces of the model-based strategy (bayes): how configs become model inputs, and expected
// improvement. Internal to ktune_search.
#include "search/search_space.hpp"

#include <cstddef>
#include <vector>

namespace ktune::search {

// Power-of-two alignment of a positive integer value: its number of trailing zero bits (at most
// 16); 0 for anything else. GPU performance often hinges on it (warp and wavefront sizes, vector
// widths, memory transactions) while being far from monotone in the value itself.
[[nodiscard]] double alignment(double value);

// Whether a param's values deserve an alignment feature besides their own: positive integers
// with at least three different alignments that do not simply grow with the value (16, 32, 48,
// 64, ... does; 1, 2, 4, 8 does not).
[[nodiscard]] bool wants_alignment_feature(const std::vector<double>& values);

// How configs become model inputs: every param with more than one value gives one feature, its
// value index in the declared order scaled to [0, 1]; a param that wants_alignment_feature()
// gives a second one, its value's alignment scaled to [0, 1]. The space must outlive the encoder.
class FeatureEncoder {
public:
  explicit FeatureEncoder(const SearchSpace& space);

  [[nodiscard]] std::size_t size() const { return m_features.size(); }
  // Appends the size() features of `config` to `out`.
  void append(std::size_t config, std::vector<double>& out) const;

private:
  struct Feature {
    std::size_t param = 0;
    bool alignment = false;
    double scale = 1;
  };
  const SearchSpace& m_space;
  std::vector<Feature> m_features;
};

// Expected improvement of a minimisation below `best` for a normal prediction; 0 when any input
// is not finite.
[[nodiscard]] double expected_improvement(double mean, double stddev, double best);

} // namespace ktune::search
