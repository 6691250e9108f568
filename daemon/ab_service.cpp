#include "daemon/ab_service.hpp"

#include "daemon/reply.hpp"

#include "core/ab_judge.hpp"
#include "core/shape.hpp"
#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/service_work.hpp"
#include "jobs/ab_job.hpp"
#include "jobs/source_archive.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace ktune::daemon {


namespace {

using nlohmann::json;

// The least a side measures per round: a microsecond kernel's few samples are noise on a busy
// machine, and ten milliseconds of them cost an A/B of 20 rounds 0.4 s.
constexpr double k_min_round_s = 0.01;

// The rounds are measured in passes, each in a bench worker of its own (a CPU worker ends after
// its A/B): two builds measured in one process share its layout (where its stack, heap and code
// lie), which can favour one build by several percent for the whole process (seen: x1.17 for a
// source x1.10 slower, in 1 of 34 processes); over two processes such a bias widens the interval
// (an ambiguous verdict, more passes) instead of moving the ratio.
constexpr int k_passes = 2;

Error bad(const std::string& message) { return make_error(ErrorCode::bad_request, "confirm: " + message); }

std::string short_hash(const std::string& hash) { return hash.substr(0, 12); }

bool is_fingerprint(const std::string& text) {
  return text.size() == 32 && std::all_of(text.begin(), text.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) != 0;
         });
}

Result<AbSideRequest> side_from_json(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_object()) {
    return bad(std::string("field '") + key +
               "' must be an object: {\"result\": ID} or {\"source_hash\": .., \"config\": {..}}");
  }
  AbSideRequest side;
  if (const auto result = it->find("result"); result != it->end()) {
    if (!result->is_number_integer() || result->get<std::int64_t>() < 1) {
      return bad(std::string("field '") + key + ".result' must be a result id, found " + result->dump());
    }
    side.result = result->get<std::int64_t>();
    return side;
  }
  const auto hash = it->find("source_hash");
  const auto config = it->find("config");
  if (hash == it->end() || !hash->is_string() || hash->get<std::string>().empty()) {
    return bad(std::string("field '") + key + "' needs \"result\", or \"source_hash\" and \"config\"");
  }
  if (config == it->end() || !config->is_object()) {
    return bad(std::string("field '") + key + ".config' must be an object of params");
  }
  side.source_hash = hash->get<std::string>();
  side.config = *config;
  return side;
}

// The config of `spec` from a JSON object of params, in the spec's order.
Result<Config> config_of(const KernelSpec& spec, const json& object, const std::string& what) {
  Config config;
  for (const auto& param : spec.params) {
    const auto it = object.find(param.name);
    if (it == object.end() || !it->is_number_integer()) {
      return bad(what + ": the config " + object.dump() + " has no integer '" + param.name +
                 "', a parameter of " + spec.name);
    }
    config.emplace_back(param.name, it->get<std::int64_t>());
  }
  return config;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

} // namespace

Result<ConfirmRequest> ConfirmRequest::from_json(const json& body) {
  ConfirmRequest req;
  for (auto [key, field] : {std::pair{"kernel", &req.kernel}, std::pair{"shape", &req.shape},
                            std::pair{"dtype", &req.dtype}, std::pair{"device", &req.device}}) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_string()) return bad(std::string("field '") + key + "' must be a string");
    *field = it->get<std::string>();
  }
  if (req.kernel.empty()) return bad("field 'kernel' is missing");
  if (req.shape.empty()) return bad("field 'shape' is missing");
  auto baseline = side_from_json(body, "baseline");
  if (!baseline) return baseline.error();
  req.baseline = std::move(*baseline);
  auto candidate = side_from_json(body, "candidate");
  if (!candidate) return candidate.error();
  req.candidate = std::move(*candidate);
  if (const auto it = body.find("min_effect"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() >= 1) {
      return bad("field 'min_effect' must be a share from 0 to 1 (0.05 for 5%), found " + it->dump());
    }
    req.min_effect = it->get<double>();
  }
  if (const auto it = body.find("rounds"); it != body.end() && !it->is_null()) {
    const int most = k_max_ab_rounds / 2;
    if (!it->is_number_integer() || it->get<long long>() < static_cast<long long>(k_min_ab_rounds) ||
        it->get<long long>() > most) {
      return bad("field 'rounds' must be an integer from " + std::to_string(k_min_ab_rounds) +
                 " to " + std::to_string(most) + ", found " + it->dump());
    }
    req.rounds = it->get<int>();
  }
  return req;
}

struct AbService::Side {
  std::string source_hash;
  Config config;
  LoadedKernel kernel;
  Shape shape;
  std::string build;             // "current" or "archived"
  std::string impossible;        // why this side cannot be measured; "" when it can
  BuiltConfig built;
  bool ready = false;
};

struct AbService::Run {
  explicit Run(Reply r) : client(std::move(r)) {}
  Reply client;                  // the requesting connection
  ConfirmRequest request;
  DeviceInfo device;
  Side sides[2];                 // baseline, candidate
  MeasureSettings round_settings;
  AbOutcome measured;            // the rounds so far
  int passes = 0;
  std::string impossible;
};

AbService::AbService(asio::io_context& io, WorkerPool& pool, const Store& store, DeviceRegistry& devices,
                     KernelRegistry& registry, const DaemonConfig& config)
    : m_io(io), m_pool(pool), m_store(store), m_devices(devices), m_registry(registry),
      m_config(config) {}

Result<AbService::Side> AbService::resolve_side(const ConfirmRequest& request,
                                                const AbSideRequest& wanted,
                                                const std::string& what, Language language) {
  Side side;
  json config = wanted.config;
  side.source_hash = wanted.source_hash;
  if (wanted.result) {
    auto stored = m_store.get_result(*wanted.result);
    if (!stored) return internal_error(stored.error());
    if (!stored->has_value()) return bad(what + ": no result with id " + std::to_string(*wanted.result));
    const ResultRecord& row = **stored;
    if (row.kernel != request.kernel) {
      return bad(what + ": result " + std::to_string(row.id) + " is of kernel " + row.kernel +
                 ", not " + request.kernel);
    }
    side.source_hash = row.source_hash;
    config = json::parse(row.config, nullptr, false);
    if (!config.is_object()) return bad(what + ": result " + std::to_string(row.id) + " has no config");
  }
  auto current = m_registry.find(request.kernel, language);
  if (current && current->source_hash == side.source_hash) {
    side.kernel = std::move(*current);
    side.build = "current";
  } else {
    auto archived = load_archived_kernel(source_archive_dir(m_config.cache_dir), side.source_hash);
    if (archived && archived->has_value()) {
      side.kernel = std::move(**archived);
      side.build = "archived";
    } else if (!current && current.error().code == ErrorCode::unknown_kernel) {
      return current.error();
    } else {
      side.impossible =
          what + ": the source of " + request.kernel + " at " + short_hash(side.source_hash) +
          " is kept neither in the kernel directories" +
          (current ? " (now " + short_hash(current->source_hash) + ")" : std::string()) +
          " nor in the source archive" +
          (archived ? std::string(" (measured before ktune kept sources, or on another machine)")
                    : ": " + archived.error().message) +
          ": the old artifact is gone";
      return side;
    }
  }
  auto parsed = config_of(side.kernel.spec, config, what);
  if (!parsed) return parsed.error();
  side.config = std::move(*parsed);
  auto shape = Shape::parse(request.shape);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, side.kernel.spec.shape_dims, side.kernel.spec.name);
  if (!conformed) return conformed.error();
  side.shape = std::move(*conformed);
  return side;
}

void AbService::confirm(const std::shared_ptr<Client>& session, const protocol::Request& request) {
  const Reply reply(session, request.id);
  const auto fail = [&reply](const Error& error) { reply.error(error); };
  auto req = ConfirmRequest::from_json(request.body);
  if (!req) return fail(req.error());
  auto run = std::make_shared<Run>(reply);
  run->request = std::move(*req);
  if (is_fingerprint(run->request.device)) {
    const auto local = m_devices.all_local();
    const auto it = std::find_if(local.begin(), local.end(), [&](const DeviceInfo& d) {
      return d.fingerprint == run->request.device;
    });
    if (it == local.end()) {
      return fail(make_error(ErrorCode::unknown_device, "confirm: device " + run->request.device +
                                                       " is no device of this machine: an A/B "
                                                       "measures on the device itself"));
    }
    run->device = *it;
  } else {
    auto device = m_devices.local(run->request.device);
    if (!device) return fail(device.error());
    run->device = std::move(*device);
  }
  const Language language = is_cuda_device(run->device.name) ? Language::cuda : Language::cpp;
  const char* names[2] = {"baseline", "candidate"};
  const AbSideRequest* wanted[2] = {&run->request.baseline, &run->request.candidate};
  for (int i = 0; i < 2; ++i) {
    auto side = resolve_side(run->request, *wanted[i], names[i], language);
    if (!side) return fail(side.error());
    run->sides[i] = std::move(*side);
    if (run->impossible.empty()) run->impossible = run->sides[i].impossible;
  }
  MeasureSettings& s = run->round_settings;
  s = m_config.measure;
  const int rounds = std::max(1, run->request.rounds);
  s.min_time_s = std::max(s.min_time_s / rounds, k_min_round_s);
  s.max_time_s = std::max(4 * s.min_time_s, s.max_time_s / rounds);
  s.target_error *= std::sqrt(static_cast<double>(rounds));
  KTUNE_LOG(info) << "confirm " << run->request.kernel << " " << run->request.shape << " on "
                  << run->device.name << ": A/B of " << short_hash(run->sides[0].source_hash)
                  << " " << config_to_string(run->sides[0].config) << " against "
                  << short_hash(run->sides[1].source_hash) << " "
                  << config_to_string(run->sides[1].config);
  if (!run->impossible.empty()) return finish(run);
  build(run);
}

void AbService::build(const std::shared_ptr<Run>& run) {
  for (int i = 0; i < 2; ++i) {
    Side& side = run->sides[i];
    build_config(m_io, m_pool, side.kernel, side.config, run->request.dtype, run->device,
                 m_config.cache_dir, [this, run, i](Result<BuiltConfig> built) {
                   Side& s = run->sides[i];
                   s.ready = true;
                   if (built) {
                     s.built = std::move(*built);
                   } else if (run->impossible.empty()) {
                     run->impossible = std::string(i == 0 ? "baseline" : "candidate") +
                                       ": its build failed (" + std::string(to_string(built.error().code)) + "): " +
                                       built.error().message;
                   }
                   if (!run->sides[0].ready || !run->sides[1].ready) return;
                   if (!run->impossible.empty()) return finish(run);
                   measure(run);
                 });
  }
}

void AbService::measure(const std::shared_ptr<Run>& run) {
  AbRequest ab;
  ab.rounds = (run->request.rounds + k_passes - 1) / k_passes;  // a pass's share, rounded up
  BenchJob* jobs[2] = {&ab.a, &ab.b};
  for (int i = 0; i < 2; ++i) {
    const Side& side = run->sides[i];
    auto job = service_bench_job(side.kernel, side.shape, side.config, run->request.dtype,
                                 run->device, side.built, run->round_settings);
    if (!job) {
      run->impossible = std::string(i == 0 ? "baseline" : "candidate") + ": " + job.error().message;
      return finish(run);
    }
    *jobs[i] = std::move(*job);
  }
  ++run->passes;
  Work work;
  work.op = "bench_ab";
  work.job = ab.to_json();
  work.deadline = measure_deadline(run->round_settings, 2 * ab.rounds);
  work.priority = k_service_priority;
  work.owner = k_service_owner;
  work.device = run->device.name;
  work.on_reply = [this, run](Result<json> reply, const Delivery&) {
    if (!reply) {
      run->impossible = "the A/B measurement failed: " + describe(reply.error());
      return finish(run);
    }
    auto outcome = AbOutcome::from_json(*reply);
    if (!outcome) {
      run->impossible = "the worker's A/B outcome: " + outcome.error().message;
      return finish(run);
    }
    if (!outcome->unlocked.empty()) m_pool.note_unlocked(run->device.name, outcome->unlocked);
    auto& rounds = run->measured.rounds;
    rounds.insert(rounds.end(), outcome->rounds.begin(), outcome->rounds.end());
    if (outcome->status != CandidateStatus::ok) {
      run->impossible = std::string(outcome->failed_side == "a" ? "baseline" : "candidate") +
                        ": its measurement ended " + std::string(to_string(outcome->status)) +
                        (outcome->reason.empty() ? std::string() : ": " + outcome->reason);
      return finish(run);
    }
    // Judged after every k_passes passes; an ambiguous verdict gets as many passes more, once.
    if (run->passes % k_passes != 0) return measure(run);
    const auto judged = judge_ab(run->measured.a_medians(), run->measured.b_medians(),
                                 run->request.min_effect);
    if (judged.verdict == AbVerdict::ambiguous && run->passes < 2 * k_passes) return measure(run);
    finish(run);
  };
  submit_measurement(m_io, m_pool, run->device.name, std::move(work));
}

void AbService::finish(const std::shared_ptr<Run>& run) {
  const auto judged = judge_ab(run->measured.a_medians(), run->measured.b_medians(),
                               run->request.min_effect);
  json out{{"kernel", run->request.kernel},
           {"shape", run->request.shape},
           {"dtype", run->request.dtype},
           {"device", run->device.name},
           {"fingerprint", run->device.fingerprint},
           {"min_effect", run->request.min_effect}};
  if (!run->impossible.empty()) {
    out["verdict"] = "ambiguous";
    out["why"] = "not measured as an A/B: " + run->impossible;
    out["impossible"] = run->impossible;
  } else {
    out["verdict"] = std::string(to_string(judged.verdict));
    out["why"] = judged.why;
  }
  out["ratio"] = run->measured.rounds.empty() ? json(nullptr) : json(judged.ratio);
  out["ratio_interval"] = run->measured.rounds.empty()
                              ? json(nullptr)
                              : json::array({judged.ratio_low, judged.ratio_high});
  out["rounds"] = run->measured.rounds.size();
  out["slower_rounds"] = judged.slower_rounds;
  json rounds = json::array();
  for (const auto& r : run->measured.rounds) rounds.push_back({r.a.median_ms, r.b.median_ms});
  out["round_ms"] = std::move(rounds);
  const char* names[2] = {"baseline", "candidate"};
  const std::vector<double> medians[2] = {run->measured.a_medians(), run->measured.b_medians()};
  for (int i = 0; i < 2; ++i) {
    const Side& side = run->sides[i];
    json config = json::object();
    for (const auto& [name, value] : side.config) config[name] = value;
    out[names[i]] = {{"source_hash", side.source_hash},
                     {"config", std::move(config)},
                     {"build", side.build},
                     {"cached", side.built.cached},
                     {"median_ms", medians[i].empty() ? json(nullptr) : json(median_of(medians[i]))}};
  }
  KTUNE_LOG(info) << "confirm " << run->request.kernel << " " << run->request.shape << " on "
                  << run->device.name << ": " << out["verdict"].get<std::string>() << ": "
                  << out["why"].get<std::string>();
  run->client.ok(out);
}

} // namespace ktune::daemon
