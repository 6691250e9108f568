#include "search/stop_condition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace ktune::search {

Result<std::size_t> parse_evaluation_budget(std::string_view text, std::size_t valid_configs) {
  const std::string shown(text);
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::bad_budget, "budget '" + shown + "': " + why);
  };
  if (text.empty()) {
    return bad("expected a number of evaluations (e.g. 200), a percentage (e.g. 2%) or seconds (e.g. 60s), found nothing");
  }
  if (text.back() == '%') {
    text.remove_suffix(1);
    double percent = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), percent);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(percent)) {
      return bad("expected a percentage such as 2% or 0.5%");
    }
    if (!(percent > 0 && percent <= 100)) return bad("expected a percentage in (0, 100]");
    const double count = std::round(percent / 100.0 * static_cast<double>(valid_configs));
    return std::max<std::size_t>(1, static_cast<std::size_t>(count));
  }
  std::size_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return bad("expected a positive whole number of evaluations or a percentage such as 2%");
  }
  if (count == 0) return bad("expected at least 1 evaluation");
  return count;
}

bool is_time_budget(std::string_view text) { return !text.empty() && text.back() == 's'; }

Result<std::chrono::milliseconds> parse_time_budget(std::string_view text) {
  const std::string shown(text);
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::bad_budget, "budget '" + shown + "': " + why);
  };
  if (!is_time_budget(text)) return bad("expected seconds such as 60s or 1.5s");
  text.remove_suffix(1);
  double seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(seconds)) {
    return bad("expected seconds such as 60s or 1.5s");
  }
  constexpr double k_year_s = 365.0 * 24 * 3600;
  if (!(seconds > 0 && seconds <= k_year_s)) return bad("expected more than 0 and at most a year of seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

StopCondition::StopCondition(const Budget& budget, std::size_t space_size, Clock::time_point start)
    : m_budget(budget), m_space_size(space_size), m_limit(space_size), m_start(start) {
  if (budget.max_evaluations) m_limit = std::min(m_limit, *budget.max_evaluations);
  if (budget.space_fraction) {
    const double f = std::isfinite(*budget.space_fraction) ? std::clamp(*budget.space_fraction, 0.0, 1.0) : 1.0;
    const auto share = static_cast<std::size_t>(std::round(f * static_cast<double>(space_size)));
    m_limit = std::min(m_limit, std::max<std::size_t>(1, share));
  }
}

void StopCondition::record(std::optional<double> time_ms) {
  ++m_evaluations;
  if (time_ms && (!m_best_ms || *time_ms < *m_best_ms)) {
    m_best_ms = time_ms;
    m_since_improvement = 0;
  } else {
    ++m_since_improvement;
  }
}

bool StopCondition::reached(Clock::time_point now) const { return !reason(now).empty(); }

std::size_t StopCondition::proposals_left(std::size_t pending) const {
  if (m_budget.patience && m_since_improvement >= *m_budget.patience) return 0;
  const std::size_t used = m_evaluations + pending;
  return used >= m_limit ? 0 : m_limit - used;
}

std::string StopCondition::reason(Clock::time_point now) const {
  if (m_evaluations >= m_limit) {
    if (m_limit == m_space_size) return "search space exhausted";
    return "budget of " + std::to_string(m_limit) + " evaluations";
  }
  if (m_budget.patience && m_since_improvement >= *m_budget.patience) {
    return "no improvement in " + std::to_string(m_since_improvement) + " evaluations";
  }
  if (m_budget.wall_time && now - m_start >= *m_budget.wall_time) {
    return "wall time of " + std::to_string(m_budget.wall_time->count()) + " ms";
  }
  return "";
}

} // namespace ktune::search
