// bayes: Bayesian optimisation with a Gaussian-process surrogate and expected improvement.
//
// The first k_initial configs are drawn at random. From then on every proposal refits a
// Gaussian process (Matern 5/2, one length scale per feature) to the log time of the results and
// proposes the candidate with the largest expected improvement over the best log time, times the
// chance that it runs at all. Failures are learned twice: the k_max_failures most recent ones
// enter the time model as the slowest time seen, and a regression forest over every result
// (failures counted as 1) estimates the failure probability. Configs next to the optimum often
// sit next to resource limits, so a failure region is made unattractive, not forbidden.
//
// Features (search/surrogate_support.hpp): each param's value index scaled to [0, 1], plus the
// power-of-two alignment of values like 16, 32, 48, ...
//
// Candidates alternate between a trust region and the whole space. Every k_trust_every-th pick
// looks only at configs within Hamming distance k_trust_radius of the fastest config: on rough
// landscapes the model's uncertainty is high everywhere, and expected improvement alone then
// spends most evaluations far from the best find. The other picks look at every unproposed
// config while there are at most k_pool_all of them, else at k_pool_random random ones plus the
// unproposed Hamming neighbours of the k_elite fastest configs.
//
// With a prior (search/prior.hpp: earlier results of the kernel on other shapes or devices) the
// first k_prior_picks picks are the prior's best configs, then come the k_initial random ones
// (so that the prior is checked against configs it did not choose). A prior of several sources
// (other shapes, other devices) weighs them by how each ranks the configs measured here (its
// Spearman correlation with their times, squared; 0 when not positive), so that a source of
// another kind of device stops counting and the most alike one counts most. The prior is trusted
// while its scores agree with the results measured here: a Spearman correlation over the configs
// it scored of at least k_min_agreement and significant at k_agreement_p (divided by the number
// of weighed sources), or fewer than k_agreement_after such configs; a prior of one source must
// also have had its favourite beat the k_initial random picks (with several, the favourite of
// their unweighted mean says little of the best-weighed one). Trusted, its score of a config is
// one more model input (its length scale, fitted like the others, decides how much it counts),
// the share of its sources in which a config failed is one more input of the failure forest,
// and the global pool always holds its k_prior_pool best unproposed configs. A prior that
// disagrees gives those inputs one constant value, which the models ignore: the search goes on
// as without it.
//
// Cost: the training set is capped at k_max_train results (the fastest half and the most recent
// half), so a proposal costs O(k_max_train^2) per candidate at worst, and the hyper-parameters
// are refitted only while the data is small or has grown by k_refit_growth. Proposals in one
// batch come from the same fit, each excluded from the next.
#include "search/gaussian_process.hpp"
#include "search/prior.hpp"
#include "search/regression_forest.hpp"
#include "search/strategies.hpp"
#include "search/surrogate_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune::search {

namespace {

constexpr std::size_t k_initial = 5;
constexpr std::size_t k_pool_all = 1024;
constexpr std::size_t k_pool_random = 512;
constexpr std::size_t k_elite = 4;
constexpr std::size_t k_max_train = 120;
constexpr std::size_t k_always_refit_below = 30; // results; hyper-parameters refitted every time
constexpr double k_refit_growth = 1.15;
constexpr std::size_t k_max_failures = 30;       // failed results added to the time model
constexpr std::size_t k_failure_trees = 16;
constexpr std::size_t k_trust_every = 2;
constexpr std::size_t k_trust_radius = 2;
constexpr std::size_t k_prior_picks = 1;   // the prior's best configs, evaluated first
constexpr std::size_t k_prior_pool = 64;
constexpr std::size_t k_agreement_after = 4;
constexpr double k_min_agreement = 0.3;
// The prior's agreement must be significant at this level; a prior whose source weights were
// chosen from the results here (several sources) divides it by their number (Bonferroni): the
// best of several chance correlations is not evidence.
constexpr double k_agreement_p = 0.05;
// The prior's score of a config no source measured: the middle.
constexpr double k_unknown_score = 0.5;

// Spearman's rank correlation of the pairs (ties share their mean rank); nullopt when either
// side is constant.
std::optional<double> spearman(const std::vector<std::pair<double, double>>& pairs) {
  auto ranks = [&](auto key) {
    std::vector<std::size_t> order(pairs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(pairs[a]) < key(pairs[b]); });
    std::vector<double> rank(pairs.size());
    for (std::size_t i = 0; i < order.size();) {
      std::size_t j = i;
      while (j + 1 < order.size() && key(pairs[order[j + 1]]) == key(pairs[order[i]])) ++j;
      for (std::size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * static_cast<double>(i + j);
      i = j + 1;
    }
    return rank;
  };
  const auto a = ranks([](const auto& p) { return p.first; });
  const auto b = ranks([](const auto& p) { return p.second; });
  const double mean = 0.5 * static_cast<double>(pairs.size() - 1);
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    ab += (a[i] - mean) * (b[i] - mean);
    aa += (a[i] - mean) * (a[i] - mean);
    bb += (b[i] - mean) * (b[i] - mean);
  }
  if (aa <= 0 || bb <= 0) return std::nullopt;
  return ab / std::sqrt(aa * bb);
}

class BayesSearch final : public Strategy {
public:
  BayesSearch(const SearchSpace& space, std::uint64_t seed, const Prior& prior)
      : Strategy(space, seed), m_encoder(space), m_prior(estimate_prior(space, prior)),
        m_features(m_encoder.size() + (m_prior.empty() ? 0 : 1)), m_score(m_prior.score),
        m_ranked(m_prior.ranked), m_prior_picked(space.size(), false) {}
  [[nodiscard]] std::string_view name() const override { return "bayes"; }
  [[nodiscard]] std::optional<PriorUse> prior_use() const override {
    if (m_prior.empty()) return std::nullopt;
    return PriorUse{m_prior_trusted, m_prior.ranked.front()};
  }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    const std::size_t prior_picks = m_prior.empty() ? 0 : k_prior_picks;
    const bool model_ready = proposed_count() >= prior_picks + k_initial && best() && m_features > 0;
    while (out.size() < max_batch) {
      std::optional<std::size_t> pick;
      if (model_ready) {
        pick = choose(out);
      } else if (proposed_count() + out.size() < prior_picks) {
        pick = prior_pick(out);
      }
      if (!pick) pick = random_unproposed();
      if (!pick || std::find(out.begin(), out.end(), *pick) != out.end()) return;
      out.push_back(*pick);
    }
  }

  void learn(std::size_t config, std::optional<double>) override { m_observed_ids.push_back(config); }

  // The best unproposed config of the prior not in `taken`; nullopt without a prior.
  std::optional<std::size_t> prior_pick(const std::vector<std::size_t>& taken) {
    for (; m_prior_next < m_prior.ranked.size(); ++m_prior_next) {
      const std::size_t id = m_prior.ranked[m_prior_next];
      if (!is_proposed(id) && std::find(taken.begin(), taken.end(), id) == taken.end()) {
        m_prior_picked[id] = true;
        return id;
      }
    }
    return std::nullopt;
  }

  // The model inputs of a config: the encoder's features, then the prior's score.
  void append_features(std::size_t id, std::vector<double>& out) const {
    m_encoder.append(id, out);
    if (m_prior.empty()) return;
    const double score = m_score[id];
    out.push_back(!m_prior_trusted || std::isnan(score) ? k_unknown_score : score);
  }

  // The unproposed candidate not in `taken` with the largest expected improvement (times the
  // chance that it runs); nullopt when there is none.
  std::optional<std::size_t> choose(const std::vector<std::size_t>& taken) {
    if (m_fitted_at != observed_count()) fit();
    const std::size_t d = m_features;
    const double best_y = std::log(best()->time_ms);

    const std::vector<std::size_t> pool = candidates(taken);
    if (pool.empty()) return std::nullopt;

    // Means are cheap, variances are not: rank by EI at an upper bound of the standard deviation
    // and finish exact scores only while that bound can still beat the best exact score. The
    // result is the same as scoring every candidate exactly.
    std::vector<double> rows;
    rows.reserve(pool.size() * d);
    for (std::size_t id : pool) append_features(id, rows);
    std::vector<std::vector<double>> covariances(pool.size());
    std::vector<double> means(pool.size());
    std::vector<std::pair<double, std::size_t>> bound(pool.size());
    for (std::size_t i = 0; i < pool.size(); ++i) {
      const GpPrediction p = m_gp.predict_bounded(&rows[i * d], covariances[i]);
      means[i] = p.mean;
      bound[i] = {-expected_improvement(p.mean, p.stddev, best_y), i};
    }
    std::sort(bound.begin(), bound.end());
    double best_score = -1;
    std::size_t best_id = pool[bound.front().second];
    for (const auto& [negative_bound, i] : bound) {
      if (-negative_bound <= best_score) break;
      double score = expected_improvement(means[i], m_gp.finish_stddev(covariances[i]), best_y);
      if (m_failures_seen) score *= 1.0 - std::clamp(failure_chance(pool[i], &rows[i * d]), 0.0, 1.0);
      if (score > best_score) {
        best_score = score;
        best_id = pool[i];
      }
    }
    return best_id;
  }

  // Every k_trust_every-th model pick: the unproposed configs within Hamming distance
  // k_trust_radius of the fastest config (the trust region); otherwise, or when the region is
  // used up, the global pool. Never a config in `taken`; ascending ids.
  std::vector<std::size_t> candidates(const std::vector<std::size_t>& taken) {
    const auto free = [&](std::size_t id) { return std::find(taken.begin(), taken.end(), id) == taken.end(); };
    std::vector<std::size_t> pool;
    ++m_model_picks;
    if (m_model_picks % k_trust_every == 0 && !m_ranked_ok.empty()) {
      const std::size_t centre = m_ranked_ok.front();
      for (std::uint32_t id : unproposed()) {
        if (space().hamming_distance(centre, id) <= k_trust_radius && free(id)) pool.push_back(id);
      }
    }
    if (pool.empty()) {
      if (unproposed_count() <= k_pool_all) {
        pool.assign(unproposed().begin(), unproposed().end());
      } else {
        std::vector<std::uint32_t> all(unproposed());
        const std::size_t take = std::min(k_pool_random, all.size());
        for (std::size_t k = 0; k < take; ++k) {
          std::swap(all[k], all[k + uniform_index(all.size() - k)]);
          pool.push_back(all[k]);
        }
        std::size_t added = 0;
        for (std::size_t id : m_ranked) {
          if (added == k_prior_pool || !m_prior_trusted) break;
          if (!is_proposed(id)) {
            pool.push_back(id);
            ++added;
          }
        }
        for (std::size_t e = 0; e < std::min(k_elite, m_ranked_ok.size()); ++e) {
          for (std::size_t n : space().neighbours(m_ranked_ok[e], Neighbourhood::hamming)) {
            if (!is_proposed(n)) pool.push_back(n);
          }
        }
      }
      pool.erase(std::remove_if(pool.begin(), pool.end(), [&](std::size_t id) { return !free(id); }), pool.end());
    }
    std::sort(pool.begin(), pool.end());
    pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
    return pool;
  }

  void fit() {
    m_fitted_at = observed_count();
    std::vector<std::pair<double, std::size_t>> ok;
    for (std::size_t id : m_observed_ids) {
      if (state(id) == State::ok) ok.emplace_back(time(id), id);
    }
    std::sort(ok.begin(), ok.end());
    m_ranked_ok.clear();
    for (const auto& entry : ok) m_ranked_ok.push_back(entry.second);
    if (!m_prior.empty()) {
      reweigh();
      m_prior_trusted = prior_agrees();
    }

    // Training set: every success, or the fastest half and the most recent half of the cap.
    std::vector<std::size_t> train;
    if (ok.size() <= k_max_train) {
      train = m_ranked_ok;
    } else {
      train.assign(m_ranked_ok.begin(), m_ranked_ok.begin() + static_cast<std::ptrdiff_t>(k_max_train / 2));
      std::vector<std::size_t> chosen = train;
      std::sort(chosen.begin(), chosen.end());
      for (auto it = m_observed_ids.rbegin(); it != m_observed_ids.rend() && train.size() < k_max_train; ++it) {
        if (state(*it) != State::ok || std::binary_search(chosen.begin(), chosen.end(), *it)) continue;
        train.push_back(*it);
      }
    }
    std::vector<double> x;
    std::vector<double> y;
    x.reserve(train.size() * m_features);
    for (std::size_t id : train) {
      append_features(id, x);
      y.push_back(std::log(time(id)));
    }
    // The most recent failures enter the time model as the slowest time seen.
    if (!y.empty()) {
      const double worst = *std::max_element(y.begin(), y.end());
      std::size_t added = 0;
      for (auto it = m_observed_ids.rbegin(); it != m_observed_ids.rend() && added < k_max_failures; ++it) {
        if (state(*it) != State::failed) continue;
        append_features(*it, x);
        y.push_back(worst);
        ++added;
      }
    }
    const bool refit = m_hyper_fitted_at == 0 || train.size() < k_always_refit_below ||
                       static_cast<double>(train.size()) >= k_refit_growth * static_cast<double>(m_hyper_fitted_at);
    if (refit) m_hyper_fitted_at = train.size();
    // A failed factorisation leaves a model that predicts the mean with the prior's variance:
    // the search then degrades to exploring, it does not stop.
    (void)m_gp.fit(x, y, m_features, refit ? HyperParameters::optimise : HyperParameters::keep);

    m_failures_seen = failed_count() > 0;
    if (m_failures_seen) {
      std::vector<double> fx;
      std::vector<double> fy;
      fx.reserve(m_observed_ids.size() * (m_features + 1));
      for (std::size_t id : m_observed_ids) {
        append_failure_features(id, fx);
        fy.push_back(state(id) == State::failed ? 1.0 : 0.0);
      }
      ForestOptions options;
      options.trees = k_failure_trees;
      m_failure_forest.fit(fx, fy, failure_features(), options, rng());
    }
  }

  // Whether the prior's own picks (the first k_prior_picks results) did better than the
  // k_initial random ones after them: a prior whose favourites lose to random configs is one of
  // another kind of device. True until those results are in.
  [[nodiscard]] bool prior_picks_won() const {
    if (m_observed_ids.size() < k_prior_picks + k_initial) return true;
    double picked = std::numeric_limits<double>::infinity();
    double random = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < k_prior_picks + k_initial; ++i) {
      const std::size_t id = m_observed_ids[i];
      if (state(id) != State::ok) continue;
      double& best = m_prior_picked[id] ? picked : random;
      best = std::min(best, time(id));
    }
    return picked <= random;
  }

  // Whether the prior's scores rank the configs measured here as their times do: Spearman
  // correlation at least k_min_agreement, or too few scored configs to tell.
  [[nodiscard]] bool prior_agrees() const {
    if (m_prior.by_source.size() < 2 && !prior_picks_won()) return false;
    const auto pairs = scored_results(m_score);
    if (pairs.size() < k_agreement_after) return true;
    const auto rho = spearman(pairs);
    if (!rho) return true;
    const double z = upper_quantile(k_agreement_p / static_cast<double>(std::max<std::size_t>(m_weighed_sources, 1)));
    const double needed = std::max(k_min_agreement, z / std::sqrt(static_cast<double>(pairs.size() - 1)));
    return *rho >= needed;
  }

  // z with P(Z > z) = p for a standard normal Z (bisection; p in (0, 0.5]).
  static double upper_quantile(double p) {
    double lo = 0, hi = 10;
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(mid / std::sqrt(2.0)) > p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  }

  // (score, time) of every success measured here that `score` has.
  [[nodiscard]] std::vector<std::pair<double, double>> scored_results(const std::vector<double>& score) const {
    std::vector<std::pair<double, double>> pairs;
    for (std::size_t id : m_ranked_ok) {
      if (!std::isnan(score[id])) pairs.emplace_back(score[id], time(id));
    }
    return pairs;
  }

  // Weighs the prior's sources by how they rank the configs measured here: each by its Spearman
  // correlation with their times, squared (0 when not positive), equal while it has fewer than
  // k_agreement_after of them. m_score becomes the weighted mean of the sources' quantiles,
  // m_ranked its order. A source that points the wrong way then stops counting, and the one of
  // the most alike device counts most.
  void reweigh() {
    const auto& sources = m_prior.by_source;
    if (sources.size() < 2) return;
    std::vector<double> weight(sources.size(), 1.0);
    bool any = false;
    m_weighed_sources = 0;
    for (std::size_t s = 0; s < sources.size(); ++s) {
      const auto pairs = scored_results(sources[s]);
      if (pairs.size() >= k_agreement_after) {
        ++m_weighed_sources;
        const double rho = spearman(pairs).value_or(0.0);
        weight[s] = rho > 0 ? rho * rho : 0.0;
      }
      any = any || weight[s] > 0;
    }
    if (!any) weight.assign(sources.size(), 1.0);
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t id = 0; id < m_score.size(); ++id) {
      double sum = 0, total = 0;
      for (std::size_t s = 0; s < sources.size(); ++s) {
        if (weight[s] <= 0 || std::isnan(sources[s][id])) continue;
        sum += weight[s] * sources[s][id];
        total += weight[s];
      }
      m_score[id] = total > 0 ? sum / total : std::numeric_limits<double>::quiet_NaN();
      if (total > 0 && m_prior.failure[id] == 0) ranked.emplace_back(m_score[id], id);
    }
    std::sort(ranked.begin(), ranked.end());
    m_ranked.clear();
    for (const auto& entry : ranked) m_ranked.push_back(entry.second);
  }

  // The failure forest's inputs: the model's, then (with a prior) the share of the prior's
  // sources in which the config failed.
  [[nodiscard]] std::size_t failure_features() const { return m_features + (m_prior.empty() ? 0 : 1); }
  void append_failure_features(std::size_t id, std::vector<double>& out) const {
    append_features(id, out);
    if (m_prior.empty()) return;
    const double failed = m_prior.failure[id];
    out.push_back(!m_prior_trusted || std::isnan(failed) ? 0.0 : failed);
  }
  // The failure forest's estimate for config `id` whose model inputs are `row`.
  [[nodiscard]] double failure_chance(std::size_t id, const double* row) const {
    if (m_prior.empty()) return m_failure_forest.predict(row).mean;
    std::vector<double> features(row, row + m_features);
    const double failed = m_prior.failure[id];
    features.push_back(!m_prior_trusted || std::isnan(failed) ? 0.0 : failed);
    return m_failure_forest.predict(features.data()).mean;
  }

  FeatureEncoder m_encoder;
  PriorEstimate m_prior;
  std::size_t m_features = 0;         // model inputs: the encoder's, plus one with a prior
  std::vector<double> m_score;        // the prior's score of each config, its sources weighed (reweigh())
  std::vector<std::size_t> m_ranked;  // m_prior.ranked by m_score
  std::size_t m_weighed_sources = 0;  // sources whose weight was chosen from the results here
  std::size_t m_prior_next = 0;       // position in m_prior.ranked of the next prior pick
  bool m_prior_trusted = true;        // as of the last fit (prior_agrees())
  std::vector<bool> m_prior_picked;   // per config: proposed as one of the prior's picks
  std::vector<std::size_t> m_observed_ids; // in the order the results arrived
  std::vector<std::size_t> m_ranked_ok;    // successes, fastest first (as of the last fit)
  GaussianProcess m_gp;
  RegressionForest m_failure_forest;
  bool m_failures_seen = false;
  std::size_t m_model_picks = 0;    // proposals chosen by the model
  std::size_t m_fitted_at = 0;        // observed_count() at the last fit
  std::size_t m_hyper_fitted_at = 0;  // training-set size at the last hyper-parameter fit
};

} // namespace

std::unique_ptr<Strategy> make_bayes(const SearchSpace& space, std::uint64_t seed, const Prior& prior) {
  return std::make_unique<BayesSearch>(space, seed, prior);
}

} // namespace ktune::search
