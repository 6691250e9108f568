#include "daemon/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ktune::daemon {

Histogram::Histogram(std::vector<double> upper_bounds)
    : m_bounds(std::move(upper_bounds)), m_counts(m_bounds.size() + 1, 0) {
  std::sort(m_bounds.begin(), m_bounds.end());
}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(m_bounds.begin(), m_bounds.end(), value) - m_bounds.begin();
  ++m_counts[static_cast<std::size_t>(bucket)];
  ++m_count;
  m_sum += value;
}

Histogram lookup_latency_histogram() {
  return Histogram({1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                    1e-2});
}

Histogram write_latency_histogram() {
  return Histogram({1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
                    1, 2.5, 10});
}

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto written = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, written.ptr);
}

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  m_text += "# HELP ";
  m_text += name;
  m_text += ' ';
  for (const char c : help) {
    if (c == '\\') {
      m_text += "\\\\";
    } else if (c == '\n') {
      m_text += "\\n";
    } else {
      m_text += c;
    }
  }
  m_text += "\n# TYPE ";
  m_text += name;
  m_text += ' ';
  m_text += type;
  m_text += '\n';
}

void Exposition::append_labels(const Labels& labels, std::string_view le) {
  if (labels.empty() && le.empty()) return;
  m_text += '{';
  bool first = true;
  auto append = [&](std::string_view key, std::string_view value) {
    if (!first) m_text += ',';
    first = false;
    m_text += key;
    m_text += "=\"";
    for (const char c : value) {
      if (c == '\\') {
        m_text += "\\\\";
      } else if (c == '"') {
        m_text += "\\\"";
      } else if (c == '\n') {
        m_text += "\\n";
      } else {
        m_text += c;
      }
    }
    m_text += '"';
  };
  for (const auto& [key, value] : labels) append(key, value);
  if (!le.empty()) append("le", le);
  m_text += '}';
}

void Exposition::sample(std::string_view name, const Labels& labels, double value) {
  m_text += name;
  append_labels(labels);
  m_text += ' ';
  m_text += format_metric_value(value);
  m_text += '\n';
}

void Exposition::histogram(std::string_view name, const Labels& labels,
                           const Histogram& histogram) {
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  const auto& bounds = histogram.upper_bounds();
  const auto& counts = histogram.bucket_counts();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    m_text += bucket;
    append_labels(labels, format_metric_value(bounds[i]));
    m_text += ' ';
    m_text += std::to_string(cumulative);
    m_text += '\n';
  }
  m_text += bucket;
  append_labels(labels, "+Inf");
  m_text += ' ';
  m_text += std::to_string(histogram.count());
  m_text += '\n';
  sample(std::string(name) + "_sum", labels, histogram.sum());
  sample(std::string(name) + "_count", labels, static_cast<double>(histogram.count()));
}

} // namespace ktune::daemon
