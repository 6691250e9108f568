#pragma once
// GaussianProcess: Gaussian-process regression with a Matern-5/2 kernel and one length scale per
// feature (ARD), the surrogate of the `bayes` strategy.
//
// Targets are standardised internally (zero mean, unit variance); predictions are returned in
// the caller's units. Hyper-parameters (length scales, signal variance, noise variance) are
// fitted by maximising the log marginal likelihood plus a weak log-normal prior, with Adam
// steps on their logarithms, warm-started from the previous fit.
//
// Pure computation: O(n^3) per fit, O(n) per mean and O(n^2) per variance. Not thread-safe.
#include <cstddef>
#include <vector>

namespace ktune::search {

struct GpPrediction {
  double mean = 0;
  double stddev = 0;
};

// Whether fit() re-estimates the hyper-parameters or keeps those of the previous fit.
enum class HyperParameters { optimise, keep };

class GaussianProcess {
public:
  // `x`: `rows` x `features` values, row-major, features roughly in [0, 1]; `y`: one target per
  // row. Returns false for no rows, mismatched sizes or non-finite values, and when the kernel
  // matrix cannot be factorised even with added jitter; the model then predicts the mean of y
  // (0 without data) with the prior's standard deviation.
  [[nodiscard]] bool fit(const std::vector<double>& x, const std::vector<double>& y, std::size_t features,
                         HyperParameters hyper);

  // Mean and standard deviation (of the latent function) at `row` (`features` values).
  [[nodiscard]] GpPrediction predict(const double* row) const;

  // The same in two steps, for screening many candidates: the mean and an upper bound of the
  // standard deviation (from the single closest training point) cost O(n); finishing the exact
  // standard deviation costs O(n^2). `covariances` carries the state from the first step to the
  // second (it is consumed).
  [[nodiscard]] GpPrediction predict_bounded(const double* row, std::vector<double>& covariances) const;
  [[nodiscard]] double finish_stddev(std::vector<double>& covariances) const;
  // Largest possible standard deviation (the prior's), in the caller's units.
  [[nodiscard]] double prior_stddev() const;

private:
  [[nodiscard]] double kernel(const double* a, const double* b) const;
  // Log marginal likelihood + log prior and its gradient w.r.t. the log hyper-parameters
  // [length scales..., signal, noise]; false when the factorisation fails.
  bool objective(std::vector<double>& gradient, double& value);
  bool factorise();

  std::size_t m_features = 0;
  std::size_t m_rows = 0;
  std::vector<double> m_x;
  std::vector<double> m_y; // standardised
  double m_y_mean = 0;
  double m_y_scale = 1;

  std::vector<double> m_length;   // per feature
  double m_signal = 1;            // variance, standardised units
  double m_noise = 1e-3;          // variance, standardised units
  bool m_initialised = false;
  std::vector<double> m_adam_m;   // optimiser state, kept between fits
  std::vector<double> m_adam_v;

  std::vector<double> m_chol;  // lower-triangular L, K = L L^T, row-major n x n
  std::vector<double> m_alpha; // K^-1 y
  bool m_valid = false;
};

} // namespace ktune::search
