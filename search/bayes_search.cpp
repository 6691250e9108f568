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
// Cost: the training set is capped at k_max_train results (the fastest half and the most recent
// half), so a proposal costs O(k_max_train^2) per candidate at worst, and the hyper-parameters
// are refitted only while the data is small or has grown by k_refit_growth. Proposals in one
// batch come from the same fit, each excluded from the next.
#include "search/gaussian_process.hpp"
#include "search/regression_forest.hpp"
#include "search/strategies.hpp"
#include "search/surrogate_support.hpp"

#include <algorithm>
#include <cmath>

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

class BayesSearch final : public Strategy {
public:
  BayesSearch(const SearchSpace& space, std::uint64_t seed)
      : Strategy(space, seed), m_encoder(space) {}
  [[nodiscard]] std::string_view name() const override { return "bayes"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    const bool model_ready = proposed_count() >= k_initial && best() && m_encoder.size() > 0;
    while (out.size() < max_batch) {
      std::optional<std::size_t> pick;
      if (model_ready) pick = choose(out);
      if (!pick) pick = random_unproposed();
      if (!pick || std::find(out.begin(), out.end(), *pick) != out.end()) return;
      out.push_back(*pick);
    }
  }

  void learn(std::size_t config, std::optional<double>) override { m_observed_ids.push_back(config); }

  // The unproposed candidate not in `taken` with the largest expected improvement (times the
  // chance that it runs); nullopt when there is none.
  std::optional<std::size_t> choose(const std::vector<std::size_t>& taken) {
    if (m_fitted_at != observed_count()) fit();
    const std::size_t d = m_encoder.size();
    const double best_y = std::log(best()->time_ms);

    const std::vector<std::size_t> pool = candidates(taken);
    if (pool.empty()) return std::nullopt;

    // Means are cheap, variances are not: rank by EI at an upper bound of the standard deviation
    // and finish exact scores only while that bound can still beat the best exact score. The
    // result is the same as scoring every candidate exactly.
    std::vector<double> rows;
    rows.reserve(pool.size() * d);
    for (std::size_t id : pool) m_encoder.append(id, rows);
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
      if (m_failures_seen) score *= 1.0 - std::clamp(m_failure_forest.predict(&rows[i * d]).mean, 0.0, 1.0);
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
    x.reserve(train.size() * m_encoder.size());
    for (std::size_t id : train) {
      m_encoder.append(id, x);
      y.push_back(std::log(time(id)));
    }
    // The most recent failures enter the time model as the slowest time seen.
    if (!y.empty()) {
      const double worst = *std::max_element(y.begin(), y.end());
      std::size_t added = 0;
      for (auto it = m_observed_ids.rbegin(); it != m_observed_ids.rend() && added < k_max_failures; ++it) {
        if (state(*it) != State::failed) continue;
        m_encoder.append(*it, x);
        y.push_back(worst);
        ++added;
      }
    }
    const bool refit = m_hyper_fitted_at == 0 || train.size() < k_always_refit_below ||
                       static_cast<double>(train.size()) >= k_refit_growth * static_cast<double>(m_hyper_fitted_at);
    if (refit) m_hyper_fitted_at = train.size();
    // A failed factorisation leaves a model that predicts the mean with the prior's variance:
    // the search then degrades to exploring, it does not stop.
    (void)m_gp.fit(x, y, m_encoder.size(), refit ? HyperParameters::optimise : HyperParameters::keep);

    m_failures_seen = failed_count() > 0;
    if (m_failures_seen) {
      std::vector<double> fx;
      std::vector<double> fy;
      fx.reserve(m_observed_ids.size() * m_encoder.size());
      for (std::size_t id : m_observed_ids) {
        m_encoder.append(id, fx);
        fy.push_back(state(id) == State::failed ? 1.0 : 0.0);
      }
      ForestOptions options;
      options.trees = k_failure_trees;
      m_failure_forest.fit(fx, fy, m_encoder.size(), options, rng());
    }
  }

  FeatureEncoder m_encoder;
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

std::unique_ptr<Strategy> make_bayes(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<BayesSearch>(space, seed);
}

} // namespace ktune::search
