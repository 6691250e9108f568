#include "daemon/batch_sizer.hpp"

namespace ktune::daemon {

void BatchSizer::observe(std::size_t configs, double per_config_ms) {
  if (configs == 0 || per_config_ms <= 0) return;
  Sum& sum = m_times[configs];
  sum.ms += per_config_ms;
  ++sum.count;
}

// Least squares of the mean per-config time against 1 / B over the batch sizes measured.
bool BatchSizer::fitted(Fit& fit) const {
  if (m_times.size() < 2) return false;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [configs, sum] : m_times) {
    const double x = 1.0 / static_cast<double>(configs);
    const double y = sum.ms / static_cast<double>(sum.count);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(m_times.size());
  fit.a = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  fit.b = (sy - fit.a * sx) / n;
  return true;
}

std::map<std::size_t, double> BatchSizer::measured_ms() const {
  std::map<std::size_t, double> means;
  for (const auto& [configs, sum] : m_times) means[configs] = sum.ms / static_cast<double>(sum.count);
  return means;
}

std::size_t BatchSizer::size() const {
  if (m_stopped || m_times.empty()) return 1;
  Fit fit;
  if (!fitted(fit)) return m_times.begin()->first == 1 ? 2 : 1;  // measure the other end
  std::size_t size = 1;
  for (std::size_t next = 2; next <= k_max_size; next *= 2) {
    const double t = fit.a / static_cast<double>(next) + fit.b;
    const double half = fit.a / static_cast<double>(next / 2) + fit.b;
    const double batch_ms = fit.a + fit.b * static_cast<double>(next);
    if (t > (1.0 - k_min_gain) * half || batch_ms > m_max_batch_ms) break;
    size = next;
  }
  return size;
}

} // namespace ktune::daemon
