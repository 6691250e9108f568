#include "search/gaussian_process.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ktune::search {

namespace {

constexpr double k_sqrt5 = 2.23606797749979;
constexpr int k_adam_steps = 30;
constexpr double k_adam_rate = 0.08;

// Weak log-normal priors on the hyper-parameters, and their bounds (natural logs).
constexpr double k_length_prior_mean = -0.7; // length scale 0.5 on [0, 1] features
constexpr double k_length_prior_sd = 1.0;
constexpr double k_signal_prior_mean = 0.0;
constexpr double k_signal_prior_sd = 1.0;
constexpr double k_noise_prior_mean = -6.9; // 1e-3 of the target variance
constexpr double k_noise_prior_sd = 2.0;
constexpr double k_log_length_min = -4.0;
constexpr double k_log_length_max = 4.0;
constexpr double k_log_signal_min = -4.6;
constexpr double k_log_signal_max = 4.6;
constexpr double k_log_noise_min = -13.8;
constexpr double k_log_noise_max = 0.0;

// In-place Cholesky of the n x n symmetric matrix `a` (lower triangle written); false when not
// positive definite.
bool cholesky(std::vector<double>& a, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0) || !std::isfinite(d)) return false;
    const double l = std::sqrt(d);
    a[j * n + j] = l;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      const double* ri = &a[i * n];
      const double* rj = &a[j * n];
      for (std::size_t k = 0; k < j; ++k) s -= ri[k] * rj[k];
      a[i * n + j] = s / l;
    }
  }
  return true;
}

// Solves L z = b in place (L lower-triangular, row-major).
void forward(const std::vector<double>& l, std::size_t n, double* b) {
  for (std::size_t i = 0; i < n; ++i) {
    double s = b[i];
    const double* ri = &l[i * n];
    for (std::size_t k = 0; k < i; ++k) s -= ri[k] * b[k];
    b[i] = s / ri[i];
  }
}

// Solves L^T z = b in place.
void backward(const std::vector<double>& l, std::size_t n, double* b) {
  for (std::size_t i = n; i-- > 0;) {
    double s = b[i];
    for (std::size_t k = i + 1; k < n; ++k) s -= l[k * n + i] * b[k];
    b[i] = s / l[i * n + i];
  }
}

} // namespace

double GaussianProcess::kernel(const double* a, const double* b) const {
  double r2 = 0;
  for (std::size_t j = 0; j < m_features; ++j) {
    const double d = (a[j] - b[j]) / m_length[j];
    r2 += d * d;
  }
  const double r = std::sqrt(r2);
  return m_signal * (1 + k_sqrt5 * r + 5.0 / 3.0 * r2) * std::exp(-k_sqrt5 * r);
}

bool GaussianProcess::fit(const std::vector<double>& x, const std::vector<double>& y, std::size_t features,
                          HyperParameters hyper) {
  m_valid = false;
  m_features = features;
  m_rows = y.size();
  m_x = x;
  m_y = y;
  const auto finite = [](double v) { return std::isfinite(v); };
  if (m_rows == 0 || features == 0 || x.size() != m_rows * features || !std::all_of(x.begin(), x.end(), finite) ||
      !std::all_of(y.begin(), y.end(), finite)) {
    m_y_mean = 0;
    m_y_scale = 1;
    m_rows = 0;
    return false;
  }
  m_y_mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(m_rows);
  double var = 0;
  for (double v : y) var += (v - m_y_mean) * (v - m_y_mean);
  var /= static_cast<double>(m_rows);
  m_y_scale = var > 1e-24 ? std::sqrt(var) : 1.0;
  for (double& v : m_y) v = (v - m_y_mean) / m_y_scale;

  if (!m_initialised || m_length.size() != features) {
    m_length.assign(features, std::exp(k_length_prior_mean));
    m_signal = 1.0;
    m_noise = std::exp(k_noise_prior_mean);
    m_adam_m.assign(features + 2, 0.0);
    m_adam_v.assign(features + 2, 0.0);
    m_initialised = true;
  }

  if (hyper == HyperParameters::optimise && m_rows >= 2) {
    std::vector<double> theta(features + 2);
    for (std::size_t j = 0; j < features; ++j) theta[j] = std::log(m_length[j]);
    theta[features] = std::log(m_signal);
    theta[features + 1] = std::log(m_noise);
    std::vector<double> best_theta = theta;
    double best_value = -std::numeric_limits<double>::infinity();
    std::vector<double> gradient;
    for (int step = 1; step <= k_adam_steps; ++step) {
      double value = 0;
      if (!objective(gradient, value)) break;
      if (value > best_value) {
        best_value = value;
        best_theta = theta;
      }
      const double b1 = 0.9;
      const double b2 = 0.999;
      for (std::size_t j = 0; j < theta.size(); ++j) {
        m_adam_m[j] = b1 * m_adam_m[j] + (1 - b1) * gradient[j];
        m_adam_v[j] = b2 * m_adam_v[j] + (1 - b2) * gradient[j] * gradient[j];
        const double mh = m_adam_m[j] / (1 - std::pow(b1, step));
        const double vh = m_adam_v[j] / (1 - std::pow(b2, step));
        theta[j] += k_adam_rate * mh / (std::sqrt(vh) + 1e-8);
      }
      for (std::size_t j = 0; j < features; ++j) theta[j] = std::clamp(theta[j], k_log_length_min, k_log_length_max);
      theta[features] = std::clamp(theta[features], k_log_signal_min, k_log_signal_max);
      theta[features + 1] = std::clamp(theta[features + 1], k_log_noise_min, k_log_noise_max);
      for (std::size_t j = 0; j < features; ++j) m_length[j] = std::exp(theta[j]);
      m_signal = std::exp(theta[features]);
      m_noise = std::exp(theta[features + 1]);
    }
    double value = 0;
    if (objective(gradient, value) && value > best_value) best_theta = theta;
    for (std::size_t j = 0; j < features; ++j) m_length[j] = std::exp(best_theta[j]);
    m_signal = std::exp(best_theta[features]);
    m_noise = std::exp(best_theta[features + 1]);
  }
  m_valid = factorise();
  return m_valid;
}

bool GaussianProcess::factorise() {
  const std::size_t n = m_rows;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const double jitter = attempt == 0 ? 0.0 : 1e-8 * std::pow(100.0, attempt);
    m_chol.assign(n * n, 0.0);
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t b = 0; b <= a; ++b) {
        const double k = kernel(&m_x[a * m_features], &m_x[b * m_features]);
        m_chol[a * n + b] = k;
        m_chol[b * n + a] = k;
      }
      m_chol[a * n + a] += m_noise + jitter;
    }
    if (cholesky(m_chol, n)) {
      m_alpha = m_y;
      forward(m_chol, n, m_alpha.data());
      backward(m_chol, n, m_alpha.data());
      return true;
    }
  }
  return false;
}

bool GaussianProcess::objective(std::vector<double>& gradient, double& value) {
  const std::size_t n = m_rows;
  const std::size_t d = m_features;
  if (!factorise()) return false;
  // K^-1 from the Cholesky factor, column by column.
  std::vector<double> inverse(n * n, 0.0);
  std::vector<double> column(n);
  for (std::size_t c = 0; c < n; ++c) {
    std::fill(column.begin(), column.end(), 0.0);
    column[c] = 1.0;
    forward(m_chol, n, column.data());
    backward(m_chol, n, column.data());
    for (std::size_t r = 0; r < n; ++r) inverse[r * n + c] = column[r];
  }
  double log_det = 0;
  for (std::size_t i = 0; i < n; ++i) log_det += std::log(m_chol[i * n + i]);
  double fit = 0;
  for (std::size_t i = 0; i < n; ++i) fit += m_y[i] * m_alpha[i];
  value = -0.5 * fit - log_det;

  gradient.assign(d + 2, 0.0);
  // W = alpha alpha^T - K^-1; dL/dtheta = 1/2 sum W .* dK/dtheta.
  double trace_w = 0;
  for (std::size_t a = 0; a < n; ++a) {
    trace_w += m_alpha[a] * m_alpha[a] - inverse[a * n + a];
    const double* xa = &m_x[a * d];
    for (std::size_t b = 0; b < a; ++b) {
      const double w = m_alpha[a] * m_alpha[b] - inverse[a * n + b];
      const double* xb = &m_x[b * d];
      double r2 = 0;
      for (std::size_t j = 0; j < d; ++j) {
        const double t = (xa[j] - xb[j]) / m_length[j];
        r2 += t * t;
      }
      const double r = std::sqrt(r2);
      const double e = std::exp(-k_sqrt5 * r);
      const double k = m_signal * (1 + k_sqrt5 * r + 5.0 / 3.0 * r2) * e;
      const double common = m_signal * (5.0 / 3.0) * (1 + k_sqrt5 * r) * e;
      // Off-diagonal pairs count twice (the matrix is symmetric).
      for (std::size_t j = 0; j < d; ++j) {
        const double t = (xa[j] - xb[j]) / m_length[j];
        gradient[j] += w * common * t * t;
      }
      gradient[d] += w * k;
    }
  }
  // The sums above run over pairs a > b: each off-diagonal pair counts twice, times 1/2. On the
  // diagonal the kernel is m_signal and the noise m_noise; length scales do not enter.
  gradient[d] += 0.5 * trace_w * m_signal;
  gradient[d + 1] = 0.5 * trace_w * m_noise;

  // Priors.
  auto prior = [&](std::size_t j, double theta, double mean, double sd) {
    const double z = (theta - mean) / sd;
    value -= 0.5 * z * z;
    gradient[j] -= z / sd;
  };
  for (std::size_t j = 0; j < d; ++j) prior(j, std::log(m_length[j]), k_length_prior_mean, k_length_prior_sd);
  prior(d, std::log(m_signal), k_signal_prior_mean, k_signal_prior_sd);
  prior(d + 1, std::log(m_noise), k_noise_prior_mean, k_noise_prior_sd);
  return std::isfinite(value);
}

GpPrediction GaussianProcess::predict_bounded(const double* row, std::vector<double>& covariances) const {
  covariances.resize(m_rows);
  if (!m_valid) return {m_y_mean, prior_stddev()};
  double s = 0;
  double closest = 0;
  for (std::size_t i = 0; i < m_rows; ++i) {
    const double k = kernel(row, &m_x[i * m_features]);
    covariances[i] = k;
    s += k * m_alpha[i];
    closest = std::max(closest, k);
  }
  // Conditioning on one training point explains k^2 / (signal + noise) of the variance; on all
  // of them at least as much.
  const double var = std::max(m_signal - closest * closest / (m_signal + m_noise), 1e-12);
  return {m_y_mean + m_y_scale * s, m_y_scale * std::sqrt(var)};
}

double GaussianProcess::finish_stddev(std::vector<double>& covariances) const {
  if (!m_valid) return prior_stddev();
  forward(m_chol, m_rows, covariances.data());
  double explained = 0;
  for (double v : covariances) explained += v * v;
  return m_y_scale * std::sqrt(std::max(m_signal - explained, 1e-12));
}

GpPrediction GaussianProcess::predict(const double* row) const {
  std::vector<double> covariances;
  GpPrediction p = predict_bounded(row, covariances);
  p.stddev = finish_stddev(covariances);
  return p;
}

double GaussianProcess::prior_stddev() const { return m_y_scale * std::sqrt(m_signal); }

} // namespace ktune::search
