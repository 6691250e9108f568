#include "cli/format.hpp"

#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace ktune::cli {

using json = nlohmann::ordered_json;

namespace {

std::string printf_text(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

} // namespace

const json& field(const json& object, const char* key) {
  static const json null_value;
  if (!object.is_object()) return null_value;
  auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

std::int64_t as_int(const json& v, std::int64_t fallback) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) return static_cast<std::int64_t>(v.get<double>());
  return fallback;
}

double as_double(const json& v, double fallback) {
  return v.is_number() ? v.get<double>() : fallback;
}


std::string as_text(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) return printf_text("%g", v.get<double>());
  if (v.is_array()) {
    std::string text;
    for (const auto& item : v) {
      if (!text.empty()) text += ',';
      text += as_text(item);
    }
    return text.empty() ? "-" : text;
  }
  return format_config(v, ",");
}

std::string format_time(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return "-";
  double seconds = v.get<double>();
  if (seconds > 1e11) seconds /= 1000;
  auto t = static_cast<std::time_t>(seconds);
  std::tm local{};
  if (::localtime_r(&t, &local) == nullptr) return as_text(v);
  char buf[40];
  if (std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &local) == 0) return as_text(v);
  std::string text = buf;
  if (text.size() > 2) text.insert(text.size() - 2, ":");  // +0100 -> +01:00
  return text;
}

std::string format_duration(double seconds) {
  char buf[64];
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
    return buf;
  }
  auto total = static_cast<std::int64_t>(seconds);
  if (total < 3600)
    std::snprintf(buf, sizeof(buf), "%" PRId64 "m %02" PRId64 "s", total / 60, total % 60);
  else
    std::snprintf(buf, sizeof(buf), "%" PRId64 "h %02" PRId64 "m %02" PRId64 "s", total / 3600,
                  (total / 60) % 60, total % 60);
  return buf;
}


std::string format_config(const json& config, std::string_view separator) {
  if (!config.is_object() || config.empty()) return "-";
  std::string text;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!text.empty()) text += separator;
    text += it.key() + "=" + as_text(it.value());
  }
  return text;
}

std::string format_ms(double ms) {
  if (ms >= 1000) return printf_text("%.1f", ms);
  if (ms >= 1) return printf_text("%.3f", ms);
  return printf_text("%.3g", ms);
}

std::string format_gflops(double gflops) {
  if (gflops <= 0) return "-";
  if (gflops >= 1) return printf_text("%.1f", gflops);
  return printf_text("%.3g", gflops);
}


} // namespace ktune::cli
