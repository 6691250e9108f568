#pragma once
// Prior: earlier results of the same kernel that a search may learn from before its first
// evaluation -- other shapes on the same device, other devices, imported tables, recorded files.
//
// A prior is a list of sources, one per (shape, device) it was measured on; every result names a
// config of the space being searched (the caller maps its configs into the space and drops those
// that are not in it). Times of different sources are never compared with each other: each
// source only says which of its configs were fast, which slow and which failed.
//
// PriorEstimate turns a prior into one number per config (its quantile in the sources that
// measured it, 0 = the fastest) that `bayes` uses for its first picks and as an extra model
// input whose weight the model learns from the new results (search/bayes_search.cpp). Pure.
#include "search/search_space.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ktune::search {

struct PriorResult {
  std::size_t config = 0;        // id in the space being searched
  std::optional<double> time_ms; // nullopt: it failed there
};

struct PriorSource {
  std::string label;             // for messages: "shape 512x512x512 on this device", a file name
  std::vector<PriorResult> results;
};

using Prior = std::vector<PriorSource>;

// What a prior says about each config of a space.
struct PriorEstimate {
  // score[id]: the mean over the sources that have config id of its quantile among that source's
  // successful times (0 = the fastest, 1 = the slowest; a failure counts as 1); NaN where no
  // source has it.
  std::vector<double> score;
  // failure[id]: share of the sources having config id in which it failed; NaN where none has it.
  std::vector<double> failure;
  // The configs with a score whose sources never saw them fail, best score first (ties by id).
  std::vector<std::size_t> ranked;
  // by_source[s][id]: config id's quantile in the s-th source with a successful result (1 where
  // it failed there, NaN where that source does not have it); score is their mean.
  std::vector<std::vector<double>> by_source;
  std::size_t sources = 0;       // sources with at least one successful result
  std::size_t results = 0;       // results read

  [[nodiscard]] bool empty() const { return ranked.empty(); }
};

// Results with an id outside the space, a time that is not finite and positive, or the same
// config twice in one source (the later one is kept) are ignored; sources without a successful
// result add nothing.
[[nodiscard]] PriorEstimate estimate_prior(const SearchSpace& space, const Prior& prior);

} // namespace ktune::search
