#include "cli/ab_confirm.hpp"

#include "cli/daemon_calls.hpp"

namespace ktune::cli {

namespace {

using nlohmann::json;

json side(const std::optional<std::int64_t>& result, const std::optional<tableio::TableRow>& row) {
  if (result) return {{"result", *result}};
  json config = json::object();
  if (row) {
    for (const auto& [name, value] : row->config.items()) config[name] = value;
  }
  return {{"source_hash", row ? row->source_hash : std::string()}, {"config", config}};
}

tableio::Verdict verdict_of(const std::string& text) {
  if (text == "regressed") return tableio::Verdict::regressed;
  if (text == "improved") return tableio::Verdict::improved;
  if (text == "same") return tableio::Verdict::same;
  return tableio::Verdict::ambiguous;
}

std::string describe(const tableio::KeyComparison& k) {
  return k.key.kernel + " " + k.key.shape + " " + k.key.dtype;
}

// The A/B of the baseline's build against the current source at the baseline's config.
json same_config_request(const tableio::KeyComparison& k, double min_effect) {
  json request = confirm_request(k, min_effect);
  json config = json::object();
  for (const auto& [name, value] : k.baseline->config.items()) config[name] = value;
  request["candidate"] = {{"source_hash", k.current->source_hash}, {"config", config}};
  return request;
}

} // namespace

json confirm_request(const tableio::KeyComparison& key, double min_effect) {
  return {{"op", "confirm"},
          {"kernel", key.key.kernel},
          {"shape", key.key.shape},
          {"dtype", key.key.dtype},
          {"device", key.key.fingerprint},
          {"baseline", side(key.baseline_result, key.baseline)},
          {"candidate", side(key.current_result, key.current)},
          {"min_effect", min_effect}};
}

tableio::AbFigures ab_figures(const nlohmann::ordered_json& reply) {
  tableio::AbFigures ab;
  ab.verdict = verdict_of(reply.value("verdict", std::string()));
  ab.why = reply.value("why", std::string());
  ab.measured = !reply.contains("impossible");
  ab.rounds = reply.value("rounds", std::size_t{0});
  if (const auto r = reply.find("ratio"); r != reply.end() && r->is_number()) ab.ratio = r->get<double>();
  if (const auto ci = reply.find("ratio_interval"); ci != reply.end() && ci->is_array() && ci->size() == 2) {
    ab.ratio_ci = tableio::Interval{(*ci)[0].get<double>(), (*ci)[1].get<double>()};
  }
  for (auto [key, ms, build] : {std::tuple{"baseline", &ab.baseline_ms, &ab.baseline_build},
                                std::tuple{"candidate", &ab.current_ms, &ab.current_build}}) {
    const auto it = reply.find(key);
    if (it == reply.end() || !it->is_object()) continue;
    if (const auto m = it->find("median_ms"); m != it->end() && m->is_number()) *ms = m->get<double>();
    *build = it->value("build", std::string());
  }
  return ab;
}

Result<std::size_t> confirm_changed(Connection& conn, tableio::Comparison& comparison, Output& io) {
  std::size_t tried = 0;
  for (auto& k : comparison.keys) {
    if (!tableio::needs_confirmation(k, comparison.options)) continue;
    ++tried;
    io.err << "confirming " << describe(k) << " (ratio "
           << (k.ratio ? std::to_string(*k.ratio).substr(0, 5) : std::string("-"))
           << "): an A/B of the baseline's build and the current one\n";
    auto reply = call(conn, confirm_request(k, comparison.options.min_effect), k_confirm_timeout);
    if (!reply) {
      if (reply.error().code == ErrorCode::not_running || reply.error().code == ErrorCode::io_error) return reply.error();
      tableio::AbFigures ab;
      ab.why = "ktuned could not measure it: " + describe(reply.error());
      tableio::apply_ab(k, std::move(ab));
    } else {
      tableio::apply_ab(k, ab_figures(*reply));
    }
    io.err << "  " << tableio::to_string(k.verdict) << ": " << k.ab->why << '\n';
    const auto check = tableio::winner_check(k);
    if (check == tableio::WinnerCheck::same_source) {
      tableio::settle_same_source(k);
      io.err << "  same: the source is unchanged; tonight's tuning chose a slower config\n";
      continue;
    }
    if (check != tableio::WinnerCheck::at_baseline_config) continue;
    io.err << "  the source changed and so did the winner: the current source at the baseline's "
              "config, against the baseline's build\n";
    auto same = call(conn, same_config_request(k, comparison.options.min_effect), k_confirm_timeout);
    if (!same) {
      if (same.error().code == ErrorCode::not_running || same.error().code == ErrorCode::io_error) return same.error();
      io.err << "  not measured: " << same.error().code << ": " << same.error().message << '\n';
      continue;
    }
    tableio::AbFigures at_config = ab_figures(*same);
    io.err << "  " << tableio::to_string(at_config.verdict) << ": " << at_config.why << '\n';
    tableio::apply_config_ab(k, std::move(at_config));
  }
  return tried;
}

std::size_t mark_unconfirmed(tableio::Comparison& comparison, const std::string& why) {
  std::size_t marked = 0;
  for (auto& k : comparison.keys) {
    if (!tableio::needs_confirmation(k, comparison.options)) continue;
    tableio::AbFigures ab;
    ab.why = why;
    tableio::apply_ab(k, std::move(ab));
    ++marked;
  }
  return marked;
}

} // namespace ktune::cli
