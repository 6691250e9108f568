#include "jobs/ab_job.hpp"

namespace ktune {

namespace {

using nlohmann::json;

Error bad(const std::string& message) { return make_error(ErrorCode::bad_request, message); }

json side_json(const AbSide& side) {
  return {{"median_ms", side.median_ms}, {"samples", side.samples}, {"retaken", side.retaken}};
}

Result<AbSide> side_from_json(const json& j, const std::string& field) {
  if (!j.is_object()) return bad("A/B outcome: field '" + field + "' must be an object");
  AbSide side;
  const auto median = j.find("median_ms");
  if (median == j.end() || !median->is_number()) {
    return bad("A/B outcome: field '" + field + ".median_ms' must be a number");
  }
  side.median_ms = median->get<double>();
  if (const auto n = j.find("samples"); n != j.end() && n->is_number_unsigned()) {
    side.samples = n->get<std::size_t>();
  }
  if (const auto r = j.find("retaken"); r != j.end() && r->is_number_integer()) {
    side.retaken = r->get<std::int64_t>();
  }
  return side;
}

} // namespace

json AbRequest::to_json() const {
  json out{{"a", a.to_json()}, {"b", b.to_json()}, {"rounds", rounds}};
  if (seed) out["seed"] = *seed;
  return out;
}

Result<AbRequest> AbRequest::from_json(const json& j) {
  if (!j.is_object()) return bad("bench_ab: the request must be an object");
  AbRequest out;
  for (auto [key, job] : {std::pair{"a", &out.a}, std::pair{"b", &out.b}}) {
    const auto it = j.find(key);
    if (it == j.end()) {
      return bad(std::string("bench_ab: field '") + key + "' is missing (expected a bench job)");
    }
    auto parsed = BenchJob::from_json(*it);
    if (!parsed) return bad(std::string(key) + ": " + parsed.error().message);
    *job = std::move(*parsed);
  }
  if (const auto it = j.find("rounds"); it != j.end()) {
    if (!it->is_number_integer() || it->get<long long>() < 1 ||
        it->get<long long>() > k_max_ab_rounds) {
      return bad("bench_ab: field 'rounds' must be an integer from 1 to " +
                 std::to_string(k_max_ab_rounds) + ", found " + it->dump());
    }
    out.rounds = it->get<int>();
  }
  if (const auto it = j.find("seed"); it != j.end()) {
    if (!it->is_number_unsigned()) {
      return bad("bench_ab: field 'seed' must be an integer >= 0, found " + it->dump());
    }
    out.seed = it->get<std::uint64_t>();
  }
  return out;
}

json AbOutcome::to_json() const {
  json list = json::array();
  for (const auto& r : rounds) {
    list.push_back({{"a", side_json(r.a)}, {"b", side_json(r.b)}, {"a_first", r.a_first}});
  }
  json out{{"status", std::string(ktune::to_string(status))},
           {"side", failed_side},
           {"reason", reason},
           {"rounds", std::move(list)}};
  if (!unlocked.empty()) out["unlocked"] = unlocked;
  return out;
}

Result<AbOutcome> AbOutcome::from_json(const json& j) {
  if (!j.is_object()) return bad("A/B outcome: expected an object");
  AbOutcome out;
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) return bad("A/B outcome: field 'status' is missing");
  const auto parsed = parse_candidate_status(status->get<std::string>());
  if (!parsed) return bad("A/B outcome: unknown status '" + status->get<std::string>() + "'");
  out.status = *parsed;
  out.failed_side = j.value("side", std::string());
  out.reason = j.value("reason", std::string());
  out.unlocked = j.value("unlocked", std::string());
  const auto rounds = j.find("rounds");
  if (rounds == j.end() || !rounds->is_array()) return bad("A/B outcome: field 'rounds' must be an array");
  for (std::size_t i = 0; i < rounds->size(); ++i) {
    const json& r = (*rounds)[i];
    const std::string field = "rounds[" + std::to_string(i) + "]";
    if (!r.is_object()) return bad("A/B outcome: field '" + field + "' must be an object");
    AbRound round;
    auto a = side_from_json(r.value("a", json()), field + ".a");
    if (!a) return a.error();
    auto b = side_from_json(r.value("b", json()), field + ".b");
    if (!b) return b.error();
    round.a = *a;
    round.b = *b;
    round.a_first = r.value("a_first", true);
    out.rounds.push_back(round);
  }
  return out;
}

std::vector<double> AbOutcome::a_medians() const {
  std::vector<double> out;
  for (const auto& r : rounds) out.push_back(r.a.median_ms);
  return out;
}

std::vector<double> AbOutcome::b_medians() const {
  std::vector<double> out;
  for (const auto& r : rounds) out.push_back(r.b.median_ms);
  return out;
}

} // namespace ktune
