#pragma once
// Distilled rules (docs/ARCHITECTURE.md § Distilled rules): from the per-shape results of one
// kernel source, dtype and device, a small set of configs and a rule from shape to config -- a
// decision tree over the shape dims whose leaves rank the chosen configs -- with its regret
// measured by leave-one-shape-out.
//
// Pure: no store, no I/O. The input is a matrix of cells (tuned shape x candidate config), each
// measured (a median), failed, not admitted by the kernel's constraints at that shape, or not
// known yet. Nothing is guessed: a cell the rule or a baseline needs and that is not known is
// listed in Distilled::missing, and the figures that would use it are left out until it is
// measured (Distilled::complete() says whether any were).
//
// Regret of config c at shape s: median(s, c) / the lowest median measured at s (>= 1); a config
// that failed at s counts k_failure_regret. Summaries are over shapes: geomean, p95 (nearest
// rank: the ceil(0.95 n)-th smallest) and worst.
#include "core/result.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ktune::tableio {

// What a failed config costs at a shape, as a regret: a rule must never prefer one.
inline constexpr double k_failure_regret = 10.0;

enum class CellState { unknown, measured, failed, not_admitted };

struct Cell {
  CellState state = CellState::unknown;
  double median_ms = 0;  // measured only
};

struct DistillShape {
  std::string text;                  // canonical "M=256,N=256,K=256"
  std::vector<std::int64_t> values;  // in DistillInput::dims order
  std::size_t winner = 0;            // the key's stored winner: index into DistillInput::configs
};

struct DistillInput {
  std::vector<std::string> dims;     // shape dims, the kernel's order
  std::vector<std::string> params;   // param names, spec order
  std::vector<DistillShape> shapes;  // the tuned shapes (each with a winner)
  std::vector<std::vector<std::int64_t>> configs; // candidate configs, values in params order
  std::vector<std::vector<Cell>> cells;            // cells[shape][config]
  std::optional<std::size_t> default_config;       // the kernel's [default], index into configs
  // Whether the kernel admits config c at shape s; asked only for cells still `unknown` that
  // the rule may use (nullptr: every unknown cell counts as admitted, so it is missing).
  std::function<bool(std::size_t shape, std::size_t config)> admits;
};

struct DistillOptions {
  std::size_t max_configs = 8;       // K: the rule uses at most this many configs (>= 1)
  // Stop at the fewest configs whose rule has at most this worst regret over the tuned shapes
  // (in-sample); nullopt: use K.
  std::optional<double> max_regret;
  // The candidate pool: every shape's winner and its this many fastest configs.
  std::size_t pool_per_shape = 8;
  // A split must lower the summed log regret of the node's shapes by more than this
  // (docs/ARCHITECTURE.md § Distilled rules).
  double min_split_gain = 0.02;
};

// A decision tree over shape dims. Node 0 is the root; an inner node sends a shape left when
// its value of `dim` is below `below`; a leaf ranks the rule's configs: the first the kernel
// admits at the shape is the rule's choice.
struct RuleNode {
  int dim = -1;                      // index into Rule::dims; -1 = leaf
  std::int64_t below = 0;
  std::size_t left = 0, right = 0;   // child node indices (inner nodes)
  std::vector<std::size_t> ranking;  // leaf: indices into Rule::configs, best first
};

struct Rule {
  std::vector<std::string> dims, params;
  std::vector<std::vector<std::int64_t>> configs;  // at most K
  std::vector<RuleNode> nodes;

  // The ranking of the leaf `values` (in dims order) falls in.
  [[nodiscard]] const std::vector<std::size_t>& ranking(std::span<const std::int64_t> values) const;
  // The leaf's first config `admitted` accepts (an index into configs); nullopt when none.
  [[nodiscard]] std::optional<std::size_t> choose(
      std::span<const std::int64_t> values,
      const std::function<bool(std::size_t config)>& admitted) const;
  [[nodiscard]] std::size_t leaves() const;
};

struct RegretSummary {
  std::size_t shapes = 0;            // shapes with a known regret
  double geomean = 0, p95 = 0, worst = 0;
  std::size_t failures = 0;          // shapes where the choice failed (counted k_failure_regret)
  std::size_t unknown = 0;           // shapes left out: the choice is not measured there yet
  std::size_t no_choice = 0;         // shapes where the method has no admitted config at all
};

struct ShapeChoice {
  std::size_t shape = 0;             // index into DistillInput::shapes
  std::optional<std::size_t> config; // index into DistillInput::configs; nullopt: none admitted
  std::optional<double> regret;      // nullopt: not measured yet (or no choice)
};

struct MethodRegret {
  RegretSummary summary;
  std::vector<ShapeChoice> shapes;   // one per tuned shape, in input order
  // Shapes answered by the method's second resort: for the rule, the kernel's default (the
  // leaf holds no config the kernel admits there); for nearest, the next nearest shape whose
  // winner the kernel admits there (it does not admit the nearest shape's).
  std::size_t substituted = 0;
};

struct Distilled {
  Rule rule;                         // built from every tuned shape
  std::vector<std::size_t> rule_configs; // rule.configs as indices into DistillInput::configs
  bool regret_met = true;            // max_regret reached (true when none was asked)
  MethodRegret in_sample;            // the rule at the shapes it was built from
  MethodRegret loso;                 // leave-one-shape-out: the rule built without each shape
  MethodRegret nearest;              // baseline: the nearest other tuned shape's winner
  // (shape, config) cells the rule, its folds or the baseline need and that are not known: to
  // be measured. Sorted, unique.
  std::vector<std::pair<std::size_t, std::size_t>> missing;
  [[nodiscard]] bool complete() const { return missing.empty(); }
};

// Builds the rule from every shape and measures its regret. Errors: "bad_request" for an input
// whose sizes disagree, no shapes, max_configs 0.
[[nodiscard]] Result<Distilled> distill(const DistillInput& input, const DistillOptions& options);

// The summary of per-shape regrets (the ones with a value; the counts from the rest).
[[nodiscard]] RegretSummary summarize_regret(const std::vector<ShapeChoice>& choices);

// The nearest-shape rule of ktuned's `nearest` rung (daemon/winner_index): the tuned shape at the
// least Euclidean distance between the logs of the dims, ties to the shape whose text sorts
// first. Among `candidates` (indices into shapes); nullopt when there are none.
[[nodiscard]] std::optional<std::size_t> nearest_shape(const std::vector<DistillShape>& shapes,
                                                       std::span<const std::int64_t> values,
                                                       const std::vector<std::size_t>& candidates);

} // namespace ktune::tableio
