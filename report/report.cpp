#include "report/report.hpp"

#include "report/assets.hpp"

#include "db/job_winner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace ktune::report {

namespace {

using nlohmann::ordered_json;

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

Result<std::int64_t> parse_id(std::string_view text, std::string_view item) {
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || value < 1) {
    return make_error(ErrorCode::bad_job_list, "job list item '" + std::string(item) +
                                          "': expected a job id >= 1 or a range like 3-7, found '" +
                                          std::string(text) + "'");
  }
  return value;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

ordered_json number_or_null(double value) {
  return std::isfinite(value) ? ordered_json(value) : ordered_json(nullptr);
}

ordered_json parse_config(const std::string& text) {
  ordered_json config = ordered_json::parse(text, nullptr, false);
  return config.is_discarded() ? ordered_json(text) : config;
}

// A parameter value as the label the page shows: strings bare, everything else as JSON.
std::string value_label(const ordered_json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

ordered_json job_header(const JobData& data) {
  const JobRecord& job = data.job;
  ordered_json device = {{"name", job.device}, {"fingerprint", job.fingerprint}};
  if (data.device && data.device->details.is_object()) {
    const auto& details = data.device->details;
    // CPU details name the processor "model", CUDA ones name the GPU "name".
    if (details.contains("model") && details["model"].is_string()) {
      device["model"] = details["model"].get<std::string>();
    } else if (details.contains("name") && details["name"].is_string()) {
      device["model"] = details["name"].get<std::string>();
    }
    for (const char* key : {"arch", "compute_capability", "cores", "compiler"}) {
      if (details.contains(key)) device[key] = ordered_json::parse(details[key].dump());
    }
  }
  return ordered_json{
      {"id", job.id},
      {"kernel", job.kernel},
      {"source_hash", job.source_hash},
      {"shape", job.shape},
      {"dtype", job.dtype},
      {"device", device},
      {"strategy", job.strategy},
      {"budget", job.budget ? ordered_json(*job.budget) : ordered_json(nullptr)},
      {"seed", job.seed ? ordered_json(*job.seed) : ordered_json(nullptr)},
      {"state", std::string(to_string(job.state))},
      {"total", job.total},
      {"done", job.done},
      {"failed", job.failed},
      {"error", job.error},
      {"created_at", job.created_at ? ordered_json(job.created_at) : ordered_json(nullptr)},
      {"started_at", job.started_at ? ordered_json(job.started_at) : ordered_json(nullptr)},
      {"finished_at", job.finished_at ? ordered_json(job.finished_at) : ordered_json(nullptr)},
      {"timing",
       {{"queue_ms", job.timing.queue_ms},
        {"compile_ms", job.timing.compile_ms},
        {"bench_ms", job.timing.bench_ms},
        {"overhead_ms", job.timing.overhead_ms},
        {"compile_sum_ms", job.timing.compile_sum_ms},
        {"bench_sum_ms", job.timing.bench_sum_ms},
        {"compiles", job.timing.compiles}}},
  };
}

ordered_json winner_json(const ResultRecord& r) {
  return ordered_json{{"config", parse_config(r.config)},
                      {"config_index", r.config_index},
                      {"median_ms", r.stats.median_ms},
                      {"q1_ms", r.stats.q1_ms},
                      {"q3_ms", r.stats.q3_ms},
                      {"n", static_cast<std::int64_t>(r.stats.n)},
                      {"gflops", r.gflops},
                      {"gbps", r.gbps},
                      {"registers", r.registers},
                      {"shared_bytes", r.shared_bytes},
                      {"tied", r.tied},
                      {"pruned", r.pruned}};
}

ordered_json sensitivity(const std::vector<const ResultRecord*>& rows) {
  struct ValueStats {
    ordered_json value;
    std::vector<double> ok_ms;
    std::int64_t failed = 0;
  };
  struct ParamStats {
    std::string name;
    std::vector<ValueStats> values;
  };
  std::vector<ParamStats> params;
  for (const ResultRecord* r : rows) {
    const ordered_json config = parse_config(r->config);
    if (!config.is_object()) continue;
    for (const auto& [key, value] : config.items()) {
      auto param = std::find_if(params.begin(), params.end(),
                                [&](const ParamStats& p) { return p.name == key; });
      if (param == params.end()) param = params.insert(params.end(), ParamStats{key, {}});
      auto slot = std::find_if(param->values.begin(), param->values.end(),
                               [&](const ValueStats& v) { return v.value == value; });
      if (slot == param->values.end()) slot = param->values.insert(param->values.end(), {value, {}, 0});
      if (r->status == CandidateStatus::ok && std::isfinite(r->stats.median_ms)) {
        slot->ok_ms.push_back(r->stats.median_ms);
      } else if (r->status != CandidateStatus::ok) {
        ++slot->failed;
      }
    }
  }
  ordered_json out = ordered_json::array();
  for (auto& param : params) {
    const bool numeric = std::all_of(param.values.begin(), param.values.end(),
                                     [](const ValueStats& v) { return v.value.is_number(); });
    std::stable_sort(param.values.begin(), param.values.end(),
                     [&](const ValueStats& a, const ValueStats& b) {
                       if (numeric) return a.value.get<double>() < b.value.get<double>();
                       return value_label(a.value) < value_label(b.value);
                     });
    ordered_json values = ordered_json::array();
    for (const auto& v : param.values) {
      const double best = v.ok_ms.empty() ? std::numeric_limits<double>::quiet_NaN()
                                          : *std::min_element(v.ok_ms.begin(), v.ok_ms.end());
      values.push_back({{"value", value_label(v.value)},
                        {"best_ms", number_or_null(best)},
                        {"median_ms", number_or_null(median_of(v.ok_ms))},
                        {"ok", static_cast<std::int64_t>(v.ok_ms.size())},
                        {"failed", v.failed}});
    }
    out.push_back({{"param", param.name}, {"values", std::move(values)}});
  }
  return out;
}

// The log of a failed candidate as the failures table shows it: its first k_log_excerpt
// characters (a compiler's first error comes first), then how much was left out.
constexpr std::size_t k_log_excerpt = 2000;
std::string log_excerpt(const std::string& log) {
  if (log.size() <= k_log_excerpt) return log;
  std::size_t cut = k_log_excerpt;
  while (cut > 0 && (static_cast<unsigned char>(log[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
  return log.substr(0, cut) + "\n... (" + std::to_string(log.size() - cut) + " more characters)";
}

ordered_json failures(const std::vector<const ResultRecord*>& rows) {
  ordered_json out = ordered_json::array();
  for (const ResultRecord* r : rows) {
    if (r->status == CandidateStatus::ok) continue;
    const std::string id = std::to_string(r->id);
    out.push_back({{"result_id", r->id},
                   {"config_index", r->config_index},
                   {"config", parse_config(r->config)},
                   {"status", std::string(to_string(r->status))},
                   {"reason", r->reason},
                   {"log", log_excerpt(r->log)},
                   {"repro", "ktune repro " + id + " -o repro-" + id}});
  }
  return out;
}

// The best ok median for each pair of values of the two parameters with the most values (ties:
// the earlier in config order); null when fewer than two parameters have two values or more.
ordered_json heatmap(const std::vector<const ResultRecord*>& rows, const ordered_json& params) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i]["values"].size() >= 2) order.push_back(i);
  }
  if (order.size() < 2) return nullptr;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return params[a]["values"].size() > params[b]["values"].size();
  });
  // Columns: the parameter earlier in config order; rows: the other.
  const std::size_t xi = std::min(order[0], order[1]), yi = std::max(order[0], order[1]);
  const std::string x = params[xi]["param"], y = params[yi]["param"];
  std::vector<std::string> xs, ys;
  for (const auto& v : params[xi]["values"]) xs.push_back(v["value"].get<std::string>());
  for (const auto& v : params[yi]["values"]) ys.push_back(v["value"].get<std::string>());
  struct Cell {
    double best = std::numeric_limits<double>::infinity();
    std::int64_t ok = 0, failed = 0;
  };
  std::vector<std::vector<Cell>> cells(ys.size(), std::vector<Cell>(xs.size()));
  for (const ResultRecord* r : rows) {
    const ordered_json config = parse_config(r->config);
    if (!config.is_object() || !config.contains(x) || !config.contains(y)) continue;
    const auto col = std::find(xs.begin(), xs.end(), value_label(config[x])) - xs.begin();
    const auto row = std::find(ys.begin(), ys.end(), value_label(config[y])) - ys.begin();
    if (col >= static_cast<std::ptrdiff_t>(xs.size()) || row >= static_cast<std::ptrdiff_t>(ys.size())) continue;
    Cell& cell = cells[static_cast<std::size_t>(row)][static_cast<std::size_t>(col)];
    if (r->status != CandidateStatus::ok) {
      ++cell.failed;
    } else if (std::isfinite(r->stats.median_ms)) {
      ++cell.ok;
      cell.best = std::min(cell.best, r->stats.median_ms);
    }
  }
  ordered_json grid = ordered_json::array();
  for (const auto& line : cells) {
    ordered_json out = ordered_json::array();
    for (const Cell& c : line) {
      out.push_back({{"best_ms", number_or_null(c.best)}, {"ok", c.ok}, {"failed", c.failed}});
    }
    grid.push_back(std::move(out));
  }
  return ordered_json{{"x", x}, {"y", y}, {"x_values", xs}, {"y_values", ys}, {"cells", std::move(grid)}};
}

ordered_json job_json(const JobData& data) {
  std::vector<const ResultRecord*> rows;
  rows.reserve(data.results.size());
  for (const auto& r : data.results) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(),
            [](const ResultRecord* a, const ResultRecord* b) { return a->id < b->id; });

  ordered_json progress = ordered_json::array();
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> times;
  std::vector<bool> pruned;
  for (const ResultRecord* r : rows) {
    const bool ok = r->status == CandidateStatus::ok && std::isfinite(r->stats.median_ms) &&
                    r->stats.median_ms > 0;
    if (ok) {
      best = std::min(best, r->stats.median_ms);
      times.push_back(r->stats.median_ms);
      pruned.push_back(r->pruned);
    }
    progress.push_back({{"config_index", r->config_index},
                        {"status", std::string(to_string(r->status))},
                        {"median_ms", ok ? ordered_json(r->stats.median_ms) : ordered_json(nullptr)},
                        {"best_ms", number_or_null(best)},
                        {"pruned", r->pruned}});
  }

  const Histogram h = histogram(times, pruned);
  ordered_json statuses = ordered_json::array();
  std::map<CandidateStatus, std::int64_t> counts;
  for (const ResultRecord* r : rows) ++counts[r->status];
  statuses.push_back({{"status", "ok"}, {"count", counts[CandidateStatus::ok]}});
  for (const auto& [status, count] : counts) {
    if (status != CandidateStatus::ok) {
      statuses.push_back({{"status", std::string(to_string(status))}, {"count", count}});
    }
  }

  const auto winner = job_winner(data);
  ordered_json params = sensitivity(rows);
  return ordered_json{
      {"job", job_header(data)},
      {"winner", winner ? winner_json(data.results[*winner]) : ordered_json(nullptr)},
      {"results", static_cast<std::int64_t>(rows.size())},
      {"progress", std::move(progress)},
      {"histogram",
       {{"edges", h.edges}, {"measured", h.measured}, {"pruned", h.pruned}, {"log", h.log}}},
      {"sensitivity", params},
      {"heatmap", heatmap(rows, params)},
      {"statuses", std::move(statuses)},
      {"failures", failures(rows)},
  };
}

} // namespace

Result<std::vector<std::int64_t>> parse_job_list(std::string_view text) {
  std::vector<std::int64_t> ids;
  std::set<std::int64_t> seen;
  if (trim(text).empty()) {
    return make_error(ErrorCode::bad_job_list, "expected a job id, a comma list or a range (3,5,9-12), "
                                      "found an empty job list");
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      return make_error(ErrorCode::bad_job_list, "job list '" + std::string(text) +
                                            "' has an empty item; expected ids or ranges "
                                            "separated by commas");
    }
    std::int64_t low = 0, high = 0;
    if (const std::size_t dash = item.find('-'); dash != std::string_view::npos) {
      auto first = parse_id(trim(item.substr(0, dash)), item);
      if (!first) return first.error();
      auto last = parse_id(trim(item.substr(dash + 1)), item);
      if (!last) return last.error();
      low = *first;
      high = *last;
      if (low > high) {
        return make_error(ErrorCode::bad_job_list, "job range '" + std::string(item) +
                                              "' runs backwards; expected low-high with low <= high");
      }
    } else {
      auto id = parse_id(item, item);
      if (!id) return id.error();
      low = high = *id;
    }
    if (static_cast<std::uint64_t>(high - low) >= k_max_report_jobs) {
      return make_error(ErrorCode::bad_job_list, "job range '" + std::string(item) + "' holds more than " +
                                            std::to_string(k_max_report_jobs) +
                                            " jobs, the most one report shows");
    }
    for (std::int64_t id = low; id <= high; ++id) {
      if (seen.insert(id).second) ids.push_back(id);
    }
    if (ids.size() > k_max_report_jobs) {
      return make_error(ErrorCode::bad_job_list, "job list '" + std::string(text) + "' names " +
                                            std::to_string(ids.size()) + " jobs or more; one "
                                            "report shows at most " +
                                            std::to_string(k_max_report_jobs));
    }
  }
  return ids;
}

Result<std::vector<JobData>> load_jobs(const Store& store, const std::vector<std::int64_t>& job_ids) {
  std::vector<JobData> jobs;
  jobs.reserve(job_ids.size());
  for (const std::int64_t id : job_ids) {
    auto job = store.get_job(id);
    if (!job) return job.error();
    if (!job->has_value()) {
      return make_error(ErrorCode::unknown_job, "job " + std::to_string(id) + " is not in the database " +
                                           store.path() + " (see `ktune jobs`)");
    }
    JobData data;
    data.job = std::move(**job);
    auto results = store.job_results(id);
    if (!results) return results.error();
    data.results = std::move(*results);
    const JobRecord& j = data.job;
    auto winner = store.find_winner(j.kernel, j.source_hash, j.shape, j.dtype, j.fingerprint);
    if (!winner) return winner.error();
    data.key_winner = std::move(*winner);
    auto device = store.get_device(j.fingerprint);
    if (!device) return device.error();
    data.device = std::move(*device);
    jobs.push_back(std::move(data));
  }
  return jobs;
}

std::optional<std::size_t> job_winner(const JobData& data) {
  // The winner the job named (db/job_winner.hpp), as `ktune job` and `history` show it.
  const ResultRecord* winner = ktune::job_winner(data.job, data.results,
                                                 data.key_winner ? &*data.key_winner : nullptr);
  if (winner == nullptr) return std::nullopt;
  return static_cast<std::size_t>(winner - data.results.data());
}

Histogram histogram(const std::vector<double>& times_ms, const std::vector<bool>& pruned) {
  Histogram h;
  std::vector<std::pair<double, bool>> points;
  for (std::size_t i = 0; i < times_ms.size(); ++i) {
    if (std::isfinite(times_ms[i]) && times_ms[i] > 0) {
      points.emplace_back(times_ms[i], i < pruned.size() && pruned[i]);
    }
  }
  if (points.empty()) return h;
  double lo = points.front().first, hi = lo;
  for (const auto& [t, p] : points) {
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  h.log = hi / lo > 20.0;
  if (hi == lo) {  // one distinct time: a bin of +-5% around it
    lo *= 0.95;
    hi *= 1.05;
  }
  const double a = h.log ? std::log(lo) : lo;
  const double b = h.log ? std::log(hi) : hi;
  // Freedman-Diaconis on the (log) scale the bins use: a bin width of 2 IQR / n^(1/3), so one
  // outlier does not squeeze the bulk of the times into a bin or two; Sturges' rule when the
  // IQR is 0.
  std::vector<double> scaled;
  for (const auto& [t, p] : points) scaled.push_back(h.log ? std::log(t) : t);
  std::sort(scaled.begin(), scaled.end());
  const auto quantile = [&](double q) {
    const double at = q * static_cast<double>(scaled.size() - 1);
    const auto i = static_cast<std::size_t>(at);
    const std::size_t j = std::min(i + 1, scaled.size() - 1);
    return scaled[i] + (scaled[j] - scaled[i]) * (at - static_cast<double>(i));
  };
  const double iqr = quantile(0.75) - quantile(0.25);
  double wanted = std::ceil(std::log2(static_cast<double>(points.size()))) + 1;
  if (iqr > 0) wanted = std::ceil((b - a) / (2 * iqr / std::cbrt(static_cast<double>(points.size()))));
  const auto bins = static_cast<std::size_t>(std::clamp(wanted, 5.0, 40.0));
  for (std::size_t i = 0; i <= bins; ++i) {
    const double x = a + (b - a) * static_cast<double>(i) / static_cast<double>(bins);
    h.edges.push_back(h.log ? std::exp(x) : x);
  }
  h.edges.front() = lo;
  h.edges.back() = hi;
  h.measured.assign(bins, 0);
  h.pruned.assign(bins, 0);
  for (const auto& [t, p] : points) {
    const double x = h.log ? std::log(t) : t;
    auto bin = static_cast<std::size_t>((x - a) / (b - a) * static_cast<double>(bins));
    bin = std::min(bin, bins - 1);
    ++(p ? h.pruned : h.measured)[bin];
  }
  return h;
}

ordered_json report_data(const std::vector<JobData>& jobs, std::int64_t written_at_ms) {
  ordered_json list = ordered_json::array();
  for (const auto& data : jobs) list.push_back(job_json(data));
  return ordered_json{{"written_at", written_at_ms},
                      {"chart_library", "Chart.js " + std::string(chart_library_version())},
                      {"jobs", std::move(list)}};
}

std::string render_html(const ordered_json& data) {
  const std::string_view page(reinterpret_cast<const char*>(assets::k_template),
                              assets::k_template_size);
  const std::string_view chart_js(reinterpret_cast<const char*>(assets::k_chart_js),
                                  assets::k_chart_js_size);
  // "<" only occurs inside JSON strings, where \u003c means the same character; so nothing in
  // the data can end the <script> element that holds it.
  std::string json_text;
  for (const char c : data.dump(-1, ' ', false, ordered_json::error_handler_t::replace)) {
    if (c == '<') {
      json_text += "\\u003c";
    } else {
      json_text += c;
    }
  }
  constexpr std::string_view k_library_slot = "/*@KTUNE_CHART_JS@*/";
  constexpr std::string_view k_data_slot = "@KTUNE_REPORT_DATA@";
  const std::size_t library_at = page.find(k_library_slot);
  const std::size_t data_at = page.find(k_data_slot);
  // The template is compiled in, so a template without both slots (in this order) is a build
  // mistake, not an input error.
  if (library_at == std::string_view::npos || data_at == std::string_view::npos ||
      data_at < library_at) {
    throw std::logic_error("report/template.html lacks the slots " + std::string(k_library_slot) +
                           " and then " + std::string(k_data_slot));
  }
  std::string html;
  html.reserve(page.size() + chart_js.size() + json_text.size());
  html.append(page.substr(0, library_at));
  html.append(chart_js);
  html.append(page.substr(library_at + k_library_slot.size(),
                          data_at - library_at - k_library_slot.size()));
  html.append(json_text);
  html.append(page.substr(data_at + k_data_slot.size()));
  return html;
}

std::string_view chart_library_version() { return assets::k_chart_js_version; }

} // namespace ktune::report
