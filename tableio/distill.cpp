#include "tableio/distill.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

namespace ktune::tableio {

namespace {

const double k_failure_cost = std::log(k_failure_regret);
constexpr std::size_t k_max_depth = 16;
constexpr int k_max_swap_passes = 20;

// The input with every cell the distill consults resolved: `unknown` cells asked of
// input.admits once (not admitted, or missing), regrets as logs.
class Matrix {
public:
  explicit Matrix(const DistillInput& input) : m_in(input) {
    const std::size_t n_configs = input.configs.size();
    m_best.assign(input.shapes.size(), 0.0);
    m_admitted.assign(input.shapes.size(), std::vector<signed char>(n_configs, -1));
    for (std::size_t s = 0; s < input.shapes.size(); ++s) {
      for (std::size_t c = 0; c < n_configs; ++c) {
        const Cell& cell = input.cells[s][c];
        if (cell.state == CellState::measured && cell.median_ms > 0 &&
            (m_best[s] == 0 || cell.median_ms < m_best[s])) {
          m_best[s] = cell.median_ms;
        }
      }
    }
  }

  [[nodiscard]] double best(std::size_t s) const { return m_best[s]; }
  [[nodiscard]] const Cell& cell(std::size_t s, std::size_t c) const { return m_in.cells[s][c]; }

  // Whether the kernel admits config c at shape s (asks input.admits for an unknown cell, once).
  [[nodiscard]] bool admitted(std::size_t s, std::size_t c) {
    const Cell& cell = m_in.cells[s][c];
    if (cell.state == CellState::not_admitted) return false;
    if (cell.state != CellState::unknown) return true;
    signed char& memo = m_admitted[s][c];
    if (memo < 0) memo = !m_in.admits || m_in.admits(s, c) ? 1 : 0;
    return memo == 1;
  }

  // Known and admitted: its cost is known.
  [[nodiscard]] bool usable(std::size_t s, std::size_t c) const {
    const CellState state = m_in.cells[s][c].state;
    return state == CellState::measured || state == CellState::failed;
  }

  // Log regret of a usable cell.
  [[nodiscard]] double cost(std::size_t s, std::size_t c) const {
    const Cell& cell = m_in.cells[s][c];
    if (cell.state != CellState::measured || m_best[s] <= 0) return k_failure_cost;
    return std::min(std::log(cell.median_ms / m_best[s]), k_failure_cost);
  }

  // Looks at cell (s, c) on behalf of a rule or baseline: an admitted cell that is not known is
  // recorded as missing.
  void need(std::size_t s, std::size_t c) {
    if (m_in.cells[s][c].state == CellState::unknown && admitted(s, c)) m_missing.emplace(s, c);
  }

  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> missing() const {
    return {m_missing.begin(), m_missing.end()};
  }

private:
  const DistillInput& m_in;
  std::vector<double> m_best;
  std::vector<std::vector<signed char>> m_admitted;  // -1 not asked, 0 no, 1 yes
  std::set<std::pair<std::size_t, std::size_t>> m_missing;
};

// The candidate pool of `shapes`: each one's winner and its `per_shape` fastest measured configs.
std::vector<std::size_t> pool_of(const DistillInput& in, const Matrix& m,
                                 const std::vector<std::size_t>& shapes, std::size_t per_shape) {
  std::set<std::size_t> pool;
  for (std::size_t s : shapes) {
    pool.insert(in.shapes[s].winner);
    std::vector<std::size_t> measured;
    for (std::size_t c = 0; c < in.configs.size(); ++c) {
      if (m.cell(s, c).state == CellState::measured) measured.push_back(c);
    }
    const std::size_t take = std::min(per_shape, measured.size());
    std::partial_sort(measured.begin(), measured.begin() + static_cast<std::ptrdiff_t>(take),
                      measured.end(), [&](std::size_t a, std::size_t b) {
                        const double ta = m.cell(s, a).median_ms, tb = m.cell(s, b).median_ms;
                        return ta != tb ? ta < tb : a < b;
                      });
    pool.insert(measured.begin(), measured.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return {pool.begin(), pool.end()};
}

// Summed cost of `shapes` when each takes the best usable config of `set` (the failure cost when
// none is usable).
double oracle_cost(const Matrix& m, const std::vector<std::size_t>& shapes,
                   const std::vector<std::size_t>& set) {
  double total = 0;
  for (std::size_t s : shapes) {
    double best = k_failure_cost;
    for (std::size_t c : set) {
      if (m.usable(s, c)) best = std::min(best, m.cost(s, c));
    }
    total += best;
  }
  return total;
}

// At most k configs of `pool` that together cover `shapes` best: greedy additions, then single
// swaps while one lowers the oracle cost. Ties go to the lower config index.
std::vector<std::size_t> select_configs(const Matrix& m, const std::vector<std::size_t>& shapes,
                                        const std::vector<std::size_t>& pool, std::size_t k) {
  std::vector<std::size_t> chosen;
  double current = oracle_cost(m, shapes, chosen);
  while (chosen.size() < std::min(k, pool.size())) {
    std::optional<std::size_t> pick;
    double pick_cost = std::numeric_limits<double>::infinity();
    for (std::size_t c : pool) {
      if (std::find(chosen.begin(), chosen.end(), c) != chosen.end()) continue;
      chosen.push_back(c);
      const double cost = oracle_cost(m, shapes, chosen);
      chosen.pop_back();
      if (cost < pick_cost - 1e-12) {
        pick_cost = cost;
        pick = c;
      }
    }
    if (!pick) break;
    // A config that lowers nothing is not added (fewer configs, same regret).
    if (!chosen.empty() && pick_cost >= current - 1e-12) break;
    chosen.push_back(*pick);
    current = pick_cost;
  }
  for (int pass = 0; pass < k_max_swap_passes; ++pass) {
    bool improved = false;
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      for (std::size_t c : pool) {
        if (std::find(chosen.begin(), chosen.end(), c) != chosen.end()) continue;
        const std::size_t old = chosen[i];
        chosen[i] = c;
        const double cost = oracle_cost(m, shapes, chosen);
        if (cost < current - 1e-9) {
          current = cost;
          improved = true;
        } else {
          chosen[i] = old;
        }
      }
    }
    if (!improved) break;
  }
  return chosen;
}

// A leaf's ranking of `set` for `shapes` and its cost. Built greedily: each next config is the
// one that serves the shapes not yet served (those where no earlier config is usable) best,
// counting for a shape it cannot serve the best of the configs still unranked; configs that
// serve nothing more follow by their mean cost where they are usable.
struct Leaf {
  std::vector<std::size_t> ranking;  // positions in `set`
  double cost = 0;
};

Leaf rank_leaf(const Matrix& m, const std::vector<std::size_t>& shapes,
               const std::vector<std::size_t>& set) {
  Leaf leaf;
  std::vector<bool> served(shapes.size(), false);
  std::vector<bool> ranked(set.size(), false);
  auto fallback = [&](std::size_t s, std::size_t except) {
    double best = k_failure_cost;
    for (std::size_t j = 0; j < set.size(); ++j) {
      if (!ranked[j] && j != except && m.usable(s, set[j])) best = std::min(best, m.cost(s, set[j]));
    }
    return best;
  };
  for (std::size_t step = 0; step < set.size(); ++step) {
    std::size_t pick = set.size();
    double pick_cost = std::numeric_limits<double>::infinity();
    double pick_total = 0;
    for (std::size_t j = 0; j < set.size(); ++j) {
      if (ranked[j]) continue;
      double cost = 0, usable_cost = 0;
      std::size_t usable_shapes = 0;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const std::size_t s = shapes[i];
        const bool usable = m.usable(s, set[j]);
        if (usable) {
          usable_cost += m.cost(s, set[j]);
          ++usable_shapes;
        }
        if (served[i]) continue;
        cost += usable ? m.cost(s, set[j]) : fallback(s, j);
      }
      // Equal costs (nothing left to serve): the lower mean cost where the config is usable
      // (how it does where the kernel admits it), then the lower position.
      const double total = usable_shapes ? usable_cost / static_cast<double>(usable_shapes) : k_failure_cost;
      if (cost < pick_cost - 1e-12 || (std::abs(cost - pick_cost) <= 1e-12 && total < pick_total - 1e-12)) {
        pick = j;
        pick_cost = cost;
        pick_total = total;
      }
    }
    ranked[pick] = true;
    leaf.ranking.push_back(pick);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      if (!served[i] && m.usable(shapes[i], set[pick])) {
        served[i] = true;
        leaf.cost += m.cost(shapes[i], set[pick]);
      }
    }
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (!served[i]) leaf.cost += k_failure_cost;
  }
  return leaf;
}

struct TreeBuilder {
  const DistillInput& in;
  const Matrix& m;
  const std::vector<std::size_t>& set;  // the rule's configs (input indices)
  double min_gain;
  Rule rule;

  std::size_t grow(const std::vector<std::size_t>& shapes, std::size_t depth) {
    Leaf leaf = rank_leaf(m, shapes, set);
    const std::size_t index = rule.nodes.size();
    rule.nodes.push_back({});
    struct Split {
      int dim = -1;
      std::int64_t below = 0;
      double gain = 0;
      std::vector<std::size_t> left, right;
    } best;
    if (shapes.size() >= 2 && depth < k_max_depth && leaf.cost > 0) {
      for (std::size_t d = 0; d < in.dims.size(); ++d) {
        std::vector<std::int64_t> values;
        for (std::size_t s : shapes) values.push_back(in.shapes[s].values[d]);
        std::sort(values.begin(), values.end());
        values.erase(std::unique(values.begin(), values.end()), values.end());
        for (std::size_t i = 0; i + 1 < values.size(); ++i) {
          // The geometric middle between two neighbouring values, rounded up: a shape between
          // them goes to the side it is nearer to in log space.
          const double middle = std::sqrt(static_cast<double>(values[i]) * static_cast<double>(values[i + 1]));
          const std::int64_t below = std::clamp(static_cast<std::int64_t>(std::ceil(middle)),
                                                values[i] + 1, values[i + 1]);
          std::vector<std::size_t> left, right;
          for (std::size_t s : shapes) (in.shapes[s].values[d] < below ? left : right).push_back(s);
          const double gain = leaf.cost - rank_leaf(m, left, set).cost - rank_leaf(m, right, set).cost;
          if (gain > best.gain + 1e-12) best = {static_cast<int>(d), below, gain, left, right};
        }
      }
    }
    if (best.dim < 0 || best.gain <= min_gain) {
      rule.nodes[index].ranking = std::move(leaf.ranking);
      return index;
    }
    rule.nodes[index].dim = best.dim;
    rule.nodes[index].below = best.below;
    const std::size_t left = grow(best.left, depth + 1);
    const std::size_t right = grow(best.right, depth + 1);
    rule.nodes[index].left = left;
    rule.nodes[index].right = right;
    return index;
  }
};

struct Built {
  Rule rule;
  std::vector<std::size_t> configs;  // input indices of rule.configs
  bool regret_met = true;
};

Rule make_rule(const DistillInput& in, const Matrix& m, const std::vector<std::size_t>& shapes,
               const std::vector<std::size_t>& set, double min_gain) {
  TreeBuilder builder{in, m, set, min_gain, {}};
  builder.rule.dims = in.dims;
  builder.rule.params = in.params;
  for (std::size_t c : set) builder.rule.configs.push_back(in.configs[c]);
  builder.grow(shapes, 0);
  return std::move(builder.rule);
}

// The rule's config at shape s (an input index): the leaf's first admitted, else the default
// when admitted; nullopt when neither.
std::optional<std::size_t> rule_choice(const DistillInput& in, Matrix& m, const Built& built,
                                       std::size_t s, bool& fell_back) {
  fell_back = false;
  const auto choice = built.rule.choose(in.shapes[s].values, [&](std::size_t position) {
    return m.admitted(s, built.configs[position]);
  });
  if (choice) return built.configs[*choice];
  fell_back = true;
  if (in.default_config && m.admitted(s, *in.default_config)) return *in.default_config;
  return std::nullopt;
}

// The worst in-sample regret of a rule over `shapes` (unknown cells left out).
double worst_regret(const DistillInput& in, Matrix& m, const Built& built,
                    const std::vector<std::size_t>& shapes) {
  double worst = 1;
  for (std::size_t s : shapes) {
    bool fell_back = false;
    const auto c = rule_choice(in, m, built, s, fell_back);
    if (!c) {
      worst = std::max(worst, k_failure_regret);
    } else if (m.usable(s, *c)) {
      worst = std::max(worst, std::exp(m.cost(s, *c)));
    }
  }
  return worst;
}

Built build(const DistillInput& in, Matrix& m, const std::vector<std::size_t>& shapes,
            const DistillOptions& options) {
  const std::vector<std::size_t> pool = pool_of(in, m, shapes, options.pool_per_shape);
  const std::size_t first = options.max_regret ? 1 : options.max_configs;
  Built built;
  for (std::size_t k = first; k <= options.max_configs; ++k) {
    built.configs = select_configs(m, shapes, pool, k);
    built.rule = make_rule(in, m, shapes, built.configs, options.min_split_gain);
    if (!options.max_regret) break;
    built.regret_met = worst_regret(in, m, built, shapes) <= *options.max_regret;
    if (built.regret_met || built.configs.size() < k) break;  // no more configs help
  }
  return built;
}

ShapeChoice score(Matrix& m, std::size_t s, std::optional<std::size_t> config) {
  ShapeChoice choice{s, config, std::nullopt};
  if (!config) return choice;
  m.need(s, *config);
  if (m.usable(s, *config)) choice.regret = std::exp(m.cost(s, *config));
  return choice;
}

double log_distance(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::log(static_cast<double>(a[i])) - std::log(static_cast<double>(b[i]));
    sum += d * d;
  }
  return std::sqrt(sum);
}

// Candidate shapes ordered as the nearest rung would try them: distance, then shape text.
std::vector<std::size_t> by_distance(const std::vector<DistillShape>& shapes,
                                     std::span<const std::int64_t> values,
                                     const std::vector<std::size_t>& candidates) {
  constexpr double k_tie = 1e-9;
  std::vector<std::pair<double, std::size_t>> order;
  for (std::size_t c : candidates) order.emplace_back(log_distance(values, shapes[c].values), c);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    if (std::abs(a.first - b.first) > k_tie) return a.first < b.first;
    return shapes[a.second].text < shapes[b.second].text;
  });
  std::vector<std::size_t> out;
  for (const auto& [distance, index] : order) out.push_back(index);
  return out;
}

Result<void> check_input(const DistillInput& in, const DistillOptions& options) {
  auto bad = [](const std::string& what) { return make_error(ErrorCode::bad_request, "distill: " + what); };
  if (options.max_configs == 0) return bad("max_configs must be at least 1");
  if (in.shapes.empty()) return bad("no tuned shapes");
  if (in.cells.size() != in.shapes.size()) return bad("cells has a row per shape");
  for (std::size_t s = 0; s < in.shapes.size(); ++s) {
    const DistillShape& shape = in.shapes[s];
    if (in.cells[s].size() != in.configs.size()) return bad("cells[" + std::to_string(s) + "] has a cell per config");
    if (shape.values.size() != in.dims.size()) return bad("shape " + shape.text + " has a value per dim");
    for (std::int64_t v : shape.values) {
      if (v <= 0) return bad("shape " + shape.text + " has a dim <= 0");
    }
    if (shape.winner >= in.configs.size()) return bad("the winner of " + shape.text + " is not a config");
    const bool any = std::any_of(in.cells[s].begin(), in.cells[s].end(), [](const Cell& c) {
      return c.state == CellState::measured && c.median_ms > 0;
    });
    if (!any) return bad("shape " + shape.text + " has no measured config");
  }
  for (const auto& config : in.configs) {
    if (config.size() != in.params.size()) return bad("every config has a value per param");
  }
  if (in.default_config && *in.default_config >= in.configs.size()) return bad("the default is not a config");
  return {};
}

} // namespace

const std::vector<std::size_t>& Rule::ranking(std::span<const std::int64_t> values) const {
  static const std::vector<std::size_t> k_none;
  if (nodes.empty()) return k_none;
  std::size_t at = 0;
  while (nodes[at].dim >= 0) {
    const auto d = static_cast<std::size_t>(nodes[at].dim);
    at = d < values.size() && values[d] < nodes[at].below ? nodes[at].left : nodes[at].right;
  }
  return nodes[at].ranking;
}

std::optional<std::size_t> Rule::choose(std::span<const std::int64_t> values,
                                        const std::function<bool(std::size_t)>& admitted) const {
  for (std::size_t c : ranking(values)) {
    if (admitted(c)) return c;
  }
  return std::nullopt;
}

std::size_t Rule::leaves() const {
  return static_cast<std::size_t>(
      std::count_if(nodes.begin(), nodes.end(), [](const RuleNode& n) { return n.dim < 0; }));
}

RegretSummary summarize_regret(const std::vector<ShapeChoice>& choices) {
  RegretSummary summary;
  std::vector<double> regrets;
  for (const ShapeChoice& c : choices) {
    if (!c.config) {
      ++summary.no_choice;
    } else if (!c.regret) {
      ++summary.unknown;
    } else {
      regrets.push_back(*c.regret);
      if (*c.regret >= k_failure_regret) ++summary.failures;
    }
  }
  summary.shapes = regrets.size();
  if (regrets.empty()) return summary;
  std::sort(regrets.begin(), regrets.end());
  double logs = 0;
  for (double r : regrets) logs += std::log(r);
  summary.geomean = std::exp(logs / static_cast<double>(regrets.size()));
  const auto rank = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(regrets.size())));
  summary.p95 = regrets[std::max<std::size_t>(rank, 1) - 1];
  summary.worst = regrets.back();
  return summary;
}

std::optional<std::size_t> nearest_shape(const std::vector<DistillShape>& shapes,
                                         std::span<const std::int64_t> values,
                                         const std::vector<std::size_t>& candidates) {
  const auto order = by_distance(shapes, values, candidates);
  if (order.empty()) return std::nullopt;
  return order.front();
}

Result<Distilled> distill(const DistillInput& in, const DistillOptions& options) {
  if (auto ok = check_input(in, options); !ok) return ok.error();
  Matrix m(in);
  const std::size_t n = in.shapes.size();
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);

  Distilled out;
  // Every cell of the pool that is admitted and unknown is needed: some fold's selection reads it.
  for (std::size_t c : pool_of(in, m, all, options.pool_per_shape)) {
    for (std::size_t s = 0; s < n; ++s) m.need(s, c);
  }

  const Built full = build(in, m, all, options);
  out.rule = full.rule;
  out.rule_configs = full.configs;
  out.regret_met = full.regret_met;
  for (std::size_t s = 0; s < n; ++s) {
    bool fell_back = false;
    const auto c = rule_choice(in, m, full, s, fell_back);
    out.in_sample.shapes.push_back(score(m, s, c));
    if (fell_back) ++out.in_sample.substituted;
  }

  for (std::size_t s = 0; s < n; ++s) {
    std::vector<std::size_t> others;
    for (std::size_t t = 0; t < n; ++t) {
      if (t != s) others.push_back(t);
    }
    std::optional<std::size_t> rule_pick, nearest_pick;
    if (!others.empty()) {
      const Built fold = build(in, m, others, options);
      bool fell_back = false;
      rule_pick = rule_choice(in, m, fold, s, fell_back);
      if (fell_back) ++out.loso.substituted;
      const auto order = by_distance(in.shapes, in.shapes[s].values, others);
      for (std::size_t i = 0; i < order.size(); ++i) {
        const std::size_t w = in.shapes[order[i]].winner;
        if (m.admitted(s, w)) {
          nearest_pick = w;
          if (i > 0) ++out.nearest.substituted;
          break;
        }
      }
    } else {
      rule_pick = in.shapes[s].winner;  // one shape: its own winner is all there is
      nearest_pick = in.shapes[s].winner;
    }
    out.loso.shapes.push_back(score(m, s, rule_pick));
    out.nearest.shapes.push_back(score(m, s, nearest_pick));
  }
  out.in_sample.summary = summarize_regret(out.in_sample.shapes);
  out.loso.summary = summarize_regret(out.loso.shapes);
  out.nearest.summary = summarize_regret(out.nearest.shapes);
  out.missing = m.missing();
  return out;
}

} // namespace ktune::tableio
