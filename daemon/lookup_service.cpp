#include "daemon/lookup_service.hpp"

#include "core/device_identity.hpp"
#include "core/param_space.hpp"
#include "core/quote.hpp"
#include "daemon/compile_check.hpp"
#include "daemon/devices.hpp"
#include "daemon/log.hpp"
#include "daemon/lookup_line.hpp"
#include "daemon/replies.hpp"
#include "jobs/dtype.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <tuple>

namespace ktune::daemon {

namespace {

std::string lookup_key(const std::string& kernel, const std::string& source_hash,
                       const std::string& shape, const std::string& dtype) {
  return kernel + '\x1f' + source_hash + '\x1f' + shape + '\x1f' + dtype;
}

} // namespace

LookupService::LookupService(LookupContext context) : m_ctx(std::move(context)) {
  const char* policy = std::getenv("KTUNE_TUNE_ON_MISS");
  m_tune_on_miss_policy = policy && std::string_view(policy) == "1";
  if (auto devices = m_ctx.store.list_devices()) {
    for (const DeviceInfo& d : *devices) m_index.set_identity(d.fingerprint, split_device_identity(d.details));
  } else {
    KTUNE_LOG(error) << "cannot read the stored devices; no winner answers as stale: "
                     << devices.error().message;
  }
  auto winners = m_ctx.store.all_winners();
  if (winners) {
    for (const auto& w : *winners) m_index.put(w);
    KTUNE_LOG(info) << "winner index: " << m_index.size() << " winner(s) loaded";
  } else {
    KTUNE_LOG(error) << "cannot load the winners; lookups start from an empty index: "
                     << winners.error().message;
  }
  // A family edited while ktuned runs is read (parsed, hashed) on the helper thread; lookups
  // go on from the entry they had meanwhile.
  m_kernel_cache.set_reload([this](std::string spec_path, std::string kernel_dir,
                                   KernelCache::Done done) {
    asio::post(m_ctx.offload, [this, spec_path = std::move(spec_path),
                               kernel_dir = std::move(kernel_dir), done = std::move(done)]() mutable {
      std::vector<FileStamp> inputs;
      auto loaded = load_kernel(spec_path, kernel_dir, &inputs);
      asio::post(m_ctx.io, [done = std::move(done), loaded = std::move(loaded),
                            inputs = std::move(inputs)]() mutable {
        done(std::move(loaded), std::move(inputs));
      });
    });
  });
}

bool LookupService::answer_line(Client& client, std::string_view line) {
  auto read = read_lookup_line(line);
  if (!read) return false;
  const std::string_view id = read->id;
  auto result = result_text(read->kernel, read->shape, read->dtype, read->device,
                            read->tune_on_miss, client.peer().uid);
  if (!result) {
    const auto id_json = nlohmann::json::parse(id.begin(), id.end(), nullptr, false);
    client.send(protocol::encode_error(id_json.is_discarded() ? nlohmann::json() : id_json,
                                       result.error().code, result.error().message));
    return true;
  }
  std::string reply;
  reply.reserve(result->size() + id.size() + 40);
  reply += "{\"v\":1,\"id\":";
  reply += id;
  reply += ",\"ok\":true,\"result\":";
  reply += *result;
  reply += "}\n";
  client.send(std::move(reply));
  return true;
}

Result<nlohmann::json> LookupService::revalidate_all(const protocol::Request& request, uid_t client) {
  auto text_field = [&](const char* name) -> Result<std::string> {
    const auto it = request.body.find(name);
    if (it == request.body.end() || it->is_null()) return std::string();
    if (!it->is_string()) {
      return make_error(ErrorCode::bad_request, std::string("revalidate: field '") + name +
                                                    "' must be a string, found " + it->dump());
    }
    return it->get<std::string>();
  };
  auto kernel_filter = text_field("kernel");
  if (!kernel_filter) return kernel_filter.error();
  auto device_filter = text_field("device");
  if (!device_filter) return device_filter.error();
  if (m_stopping) return make_error(ErrorCode::shutting_down, "revalidate: ktuned is stopping");
  std::vector<DeviceInfo> devices;
  if (device_filter->empty()) {
    devices = m_ctx.devices.all_local();
  } else {
    auto local = m_ctx.devices.local(*device_filter);
    if (!local) return local.error();
    devices.push_back(std::move(*local));
  }
  nlohmann::json out = nlohmann::json::array();
  const auto now = std::chrono::steady_clock::now();
  for (const DeviceInfo& device : devices) {
    learn_identity(device.fingerprint);
    const Language language = device.name == "cpu" ? Language::cpp : Language::cuda;
    // The keys tuned on this hardware under other environments, once each.
    std::set<std::tuple<std::string, std::string, std::string>> keys;
    m_index.for_each([&](const WinnerRecord& w) {
      if ((kernel_filter->empty() || w.kernel == *kernel_filter) &&
          m_index.same_hardware(w.fingerprint, device.fingerprint)) {
        keys.emplace(w.kernel, w.shape, w.dtype);
      }
    });
    for (const auto& [kernel_name, shape, dtype] : keys) {
      auto cached = m_kernel_cache.get(kernel_name, language, now);
      if (!cached) continue;  // the family is gone or broken: nothing to measure
      const LadderAnswer answer = climb_ladder(m_index, **cached, shape, dtype, device.fingerprint);
      if (answer.rung != Rung::stale) continue;  // tuned here already, or an older source
      const ResolvedDevice resolved{device.name, device.fingerprint, language, true};
      const auto job = revalidate(**cached, shape, dtype, resolved, answer.stale, client);
      out.push_back({{"kernel", kernel_name}, {"shape", shape}, {"dtype", dtype},
                     {"device", device.name}, {"change", *answer.stale.change},
                     {"job", job ? nlohmann::json(*job) : nlohmann::json()}});
    }
  }
  return nlohmann::json{{"revalidations", std::move(out)}};
}

Result<nlohmann::json> LookupService::lookup(const protocol::Request& request, uid_t client) {
  auto req = protocol::LookupRequest::from_json(request.body);
  if (!req) return req.error();
  bool tune_on_miss = false;
  if (const auto it = request.body.find("tune_on_miss"); it != request.body.end()) {
    if (!it->is_boolean()) {
      return make_error(ErrorCode::bad_request, "lookup: field 'tune_on_miss' must be true or false, "
                                           "found " + it->dump());
    }
    tune_on_miss = it->get<bool>();
  }
  auto text =
      result_text(req->kernel, req->shape, req->dtype, req->device, tune_on_miss, client);
  if (!text) return text.error();
  return nlohmann::json::parse(*text);
}

Result<std::string> LookupService::result_text(const std::string& kernel_name,
                                                  const std::string& shape_text,
                                                  const std::string& dtype,
                                                  const std::string& device_name,
                                                  bool tune_on_miss, uid_t client) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<Rung> rung;
  auto result = climb(kernel_name, shape_text, dtype, device_name, tune_on_miss, client, rung);
  m_lookups.add(result ? rung : std::nullopt,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

Result<std::string> LookupService::climb(const std::string& kernel_name,
                                          const std::string& shape_text,
                                          const std::string& requested_dtype,
                                          const std::string& device_name, bool tune_on_miss,
                                          uid_t client, std::optional<Rung>& rung) {
  auto device = m_ctx.devices.resolve(device_name, Language::cuda);
  if (!device) return device.error();
  // The common case is checked against the cached kernel; anything that does not pass goes
  // through TargetResolver::resolve(), which owns the error messages.
  const auto now = std::chrono::steady_clock::now();
  auto cached = m_kernel_cache.get(kernel_name, device->language, now);
  if (!cached && !device->local && device->language == Language::cuda) {
    // A fingerprint never seen here: the family that exists answers.
    device->language = Language::cpp;
    cached = m_kernel_cache.get(kernel_name, Language::cpp, now);
  }
  const CachedKernel* kernel = cached ? *cached : nullptr;
  // As TargetResolver::resolve(): a family without a dtype axis answers the default dtype with its own.
  const std::string dtype = kernel != nullptr && !kernel->dtype_axis && requested_dtype == "f32"
                                ? kernel->dtypes.front()
                                : requested_dtype;
  std::optional<Shape> shape;
  if (kernel) {
    if (auto parsed = Shape::parse(shape_text)) {
      if (auto conformed = conform_shape(*parsed, kernel->dims, kernel->name)) {
        shape = std::move(*conformed);
      }
    }
  }
  const bool cpu = device->language == Language::cpp;
  const bool valid = kernel && shape &&
                     std::find(kernel->dtypes.begin(), kernel->dtypes.end(), dtype) !=
                         kernel->dtypes.end() &&
                     (!cpu || static_cast<bool>(dtype_c_type(dtype)));
  if (!valid) {
    // The same checks with their messages; a remote device is checked as a local one of its kind.
    auto target = m_ctx.targets.resolve(kernel_name, shape_text, dtype, cpu ? "cpu" : "cuda:0");
    if (!target && target.error().code != ErrorCode::no_device) return target.error();
    if (!kernel) {
      return make_error(ErrorCode::unknown_kernel,
                        "kernel " + clip_quoted(kernel_name) + " has no " +
                            std::string(cpu ? "cpu (cpp)" : "CUDA") + " family to answer device " +
                            device_name + ": " + cached.error().message);
    }
    return make_error(ErrorCode::internal, "lookup of " + clip_quoted(kernel_name) + " " + clip_quoted(shape_text) +
                                          ": the kernel cache disagrees with the registry");
  }

  const std::string canonical = shape->to_string();
  if (device->local && !m_index.knows_identity(device->fingerprint)) learn_identity(device->fingerprint);
  const LadderAnswer answer = climb_ladder(m_index, *kernel, canonical, dtype, device->fingerprint);
  rung = answer.rung;
  std::optional<std::int64_t> tune_job;
  if (answer.rung == Rung::stale && device->local && !m_stopping) {
    tune_job = revalidate(*kernel, canonical, dtype, *device, answer.stale, client);
  } else if (answer.rung != Rung::exact && (tune_on_miss || m_tune_on_miss_policy) && !m_stopping &&
             device->local) {
    auto queued = this->tune_on_miss(*kernel, canonical, dtype, *device, client);
    if (queued) {
      tune_job = *queued;
    } else if (queued.error().code == ErrorCode::too_many_jobs) {
      KTUNE_LOG(debug) << "tune-on-miss for " << kernel->name << " " << canonical << " " << dtype
                       << " not queued: " << queued.error().message;
    } else {
      KTUNE_LOG(warn) << "tune-on-miss for " << kernel->name << " " << canonical << " " << dtype
                      << " not queued: " << queued.error().message;
    }
  }
  std::string out;
  out.reserve(160 + (answer.config ? answer.config->size() : 0));
  append_lookup_result(out, answer, tune_job);
  return out;
}

Result<std::optional<std::int64_t>> LookupService::tune_on_miss(const CachedKernel& kernel,
                                                                 const std::string& shape,
                                                                 const std::string& dtype,
                                                                 const ResolvedDevice& device,
                                                                 uid_t client) {
  using Queued = std::optional<std::int64_t>;
  std::string key = lookup_key(kernel.name, kernel.source_hash, shape, dtype);
  key += '\x1f';
  key += device.fingerprint;
  if (const auto it = m_pending_tunes.find(key); it != m_pending_tunes.end()) {
    return it->second == 0 ? Queued() : Queued(it->second);
  }
  if (auto refused = m_ctx.jobs.quota().refusal(client)) return *refused;
  auto target = m_ctx.targets.resolve(kernel.name, shape, dtype, std::string(device.name));
  if (!target) return target.error();
  PlanRequest request = PlanRequest::of(std::move(*target));
  request.options.priority = k_background_priority;
  return plan_and_submit(key, std::move(request), client, "tune-on-miss");
}

Result<std::optional<std::int64_t>> LookupService::plan_and_submit(const std::string& key,
                                                                    PlanRequest request,
                                                                    uid_t client,
                                                                    std::string_view kind) {
  using Queued = std::optional<std::int64_t>;
  // A space enumerated at once is submitted before enumerate() returns and its job id answered;
  // a big one is planned off the loop, the misses answered meanwhile carry no tune_job.
  m_pending_tunes[key] = 0;
  auto now = std::make_shared<std::optional<Result<std::int64_t>>>();
  auto later = std::make_shared<bool>(false);
  std::vector<PlanRequest> plans;
  plans.push_back(std::move(request));
  m_ctx.jobs.enumerate(std::move(plans), [this, key, client, now, later, kind](
                                             std::vector<PlanRequest> planned,
                                             std::vector<Result<std::vector<Config>>> spaces) {
    if (m_stopping) return;
    auto id = submit_tune_on_miss(key, std::move(planned.front()), std::move(spaces.front()), client,
                                  kind);
    if (*later) {
      if (!id) KTUNE_LOG(warn) << kind << " not queued: " << id.error().message;
      return;
    }
    *now = std::move(id);
  });
  *later = true;
  if (!*now) return Queued();
  if (!**now) return (*now)->error();
  return Queued(***now);
}

Result<std::int64_t> LookupService::submit_tune_on_miss(const std::string& key,
                                                         PlanRequest request,
                                                         Result<std::vector<Config>> configs,
                                                         uid_t client, std::string_view kind) {
  const std::string what = request.kernel.spec.name + " " + request.shape.to_string() + " " +
                           request.dtype + " on " + request.device.name;
  auto submitted = m_ctx.jobs.submit(std::move(request), std::move(configs), client);
  if (!submitted) {
    m_pending_tunes.erase(key);
    m_revalidations.erase(key);
    return submitted.error();
  }
  const std::int64_t id = submitted->at("job").get<std::int64_t>();
  KTUNE_LOG(info) << kind << ": " << what
                  << (submitted->value("joined", false) ? " joins" : " is") << " job " << id;
  m_pending_tunes[key] = id;
  m_pending_jobs.emplace(id, key);
  return id;
}

void LookupService::learn_identity(std::string_view fingerprint) {
  for (const DeviceInfo& local : m_ctx.devices.all_local()) {
    if (local.fingerprint == fingerprint) {
      m_index.set_identity(local.fingerprint, split_device_identity(local.details));
      return;
    }
  }
  if (m_index.knows_identity(fingerprint)) return;
  auto stored = m_ctx.store.get_device(std::string(fingerprint));
  if (stored && stored->has_value()) {
    m_index.set_identity((*stored)->fingerprint, split_device_identity((*stored)->details));
  } else if (!stored) {
    KTUNE_LOG(warn) << "device " << fingerprint << ": cannot read its identity: "
                    << stored.error().message;
  }
}

std::optional<std::int64_t> LookupService::revalidate(const CachedKernel& kernel,
                                                      const std::string& shape,
                                                      const std::string& dtype,
                                                      const ResolvedDevice& device,
                                                      const WinnerIndex::Stale& stale,
                                                      uid_t client) {
  std::string key = lookup_key(kernel.name, kernel.source_hash, shape, dtype);
  key += '\x1f';
  key += device.fingerprint;
  if (const auto it = m_pending_tunes.find(key); it != m_pending_tunes.end()) {
    return it->second == 0 ? std::nullopt : std::optional(it->second);
  }
  const std::string what = kernel.name + " " + shape + " " + dtype + " on " + std::string(device.name);
  if (auto refused = m_ctx.jobs.quota().refusal(client)) {
    KTUNE_LOG(debug) << "revalidation of " << what << " not queued: " << refused->message;
    return std::nullopt;
  }
  auto target = m_ctx.targets.resolve(kernel.name, shape, dtype, std::string(device.name));
  if (!target) {
    KTUNE_LOG(warn) << "revalidation of " << what << " not queued: " << target.error().message;
    return std::nullopt;
  }
  auto configs = revalidation_configs(kernel, shape, dtype, *target, stale);
  if (!configs) {
    KTUNE_LOG(warn) << "revalidation of " << what << " not queued: " << configs.error().message;
    return std::nullopt;
  }
  PlanRequest request = PlanRequest::of(std::move(*target));
  request.options.priority = k_background_priority;
  request.given = std::move(*configs);
  KTUNE_LOG(info) << "revalidation of " << what << " (" << *stale.change << "): "
                  << request.given.size() << " config(s) near the stale winner to measure again";
  auto queued = plan_and_submit(key, std::move(request), client, "revalidation");
  if (!queued) {
    KTUNE_LOG(warn) << "revalidation of " << what << " not queued: " << queued.error().message;
    return std::nullopt;
  }
  m_revalidations[key] = Revalidation{kernel.name, shape, dtype, std::string(device.name),
                                      stale.winner->config, client};
  return *queued;
}

Result<std::vector<nlohmann::json>> LookupService::revalidation_configs(
    const CachedKernel& kernel, const std::string& shape, const std::string& dtype,
    const Target& target, const WinnerIndex::Stale& stale) {
  auto space = ParamSpace::create(target.kernel.spec, target.shape);
  if (!space) return space.error();
  // The stale winner first, then its old key's near configs, fastest first, then the default.
  std::vector<std::string> texts{stale.winner->config};
  auto rows = m_ctx.store.results_for_key(kernel.name, kernel.source_hash, shape, dtype,
                                          *stale.fingerprint);
  if (!rows) return rows.error();
  std::vector<const ResultRecord*> near;
  for (const ResultRecord& row : *rows) {
    if (row.status == CandidateStatus::ok && row.stats.median_ms > 0 &&
        row.stats.median_ms <= stale.winner->median_ms * k_revalidate_within) {
      near.push_back(&row);
    }
  }
  std::stable_sort(near.begin(), near.end(), [](const ResultRecord* a, const ResultRecord* b) {
    return a->stats.median_ms < b->stats.median_ms;
  });
  for (const ResultRecord* row : near) texts.push_back(row->config);
  std::vector<nlohmann::json> given;
  std::set<std::string> seen;
  // The default comes last but always: the near configs take the places before it.
  auto take = [&](const std::string& text) {
    auto object = nlohmann::json::parse(text, nullptr, false);
    if (!object.is_object() || !seen.insert(object.dump()).second) return;
    Config config;
    for (const auto& param : target.kernel.spec.params) {
      const auto it = object.find(param.name);
      if (it == object.end() || !it->is_number_integer()) break;
      config.emplace_back(param.name, it->get<std::int64_t>());
    }
    if (config.size() != target.kernel.spec.params.size() || object.size() != config.size()) return;
    auto admitted = space->admits(config);
    if (admitted && *admitted) given.push_back(std::move(object));
  };
  for (const std::string& text : texts) {
    if (given.size() + 1 >= k_revalidate_configs) break;
    take(text);
  }
  take(kernel.default_config);
  if (given.empty()) {
    return make_error(ErrorCode::not_found, "none of the stale winner's configs is admitted at " + shape);
  }
  return given;
}

void LookupService::revalidation_ended(std::int64_t job_id, const WinnerRecord& winner,
                                       const Revalidation& r) {
  if (m_stopping) return;
  auto rows = m_ctx.store.results_for_key(winner.kernel, winner.source_hash, winner.shape,
                                          winner.dtype, winner.fingerprint);
  if (!rows) return;
  const auto old_config = nlohmann::json::parse(r.old_config, nullptr, false);
  std::optional<double> old_ms;
  for (const ResultRecord& row : *rows) {
    if (row.job_id != job_id || nlohmann::json::parse(row.config, nullptr, false) != old_config) continue;
    old_ms = row.status == CandidateStatus::ok && row.stats.median_ms > 0
                 ? std::optional(row.stats.median_ms) : std::nullopt;
  }
  const double best = winner.median_ms;
  const bool moved = !old_ms || *old_ms > best * k_revalidate_moved;
  const std::string what = r.kernel + " " + r.shape + " " + r.dtype + " on " + r.device;
  if (!moved) {
    KTUNE_LOG(info) << "revalidation of " << what << " (job " << job_id
                    << "): the old winner is still near the top; no full search";
    return;
  }
  KTUNE_LOG(info) << "revalidation of " << what << " (job " << job_id << "): the old winner "
                  << (old_ms ? "is " + std::to_string(*old_ms / best) + "x the new best" : std::string("failed"))
                  << "; the full search is queued";
  auto target = m_ctx.targets.resolve(r.kernel, r.shape, r.dtype, r.device);
  if (!target) return;
  PlanRequest request = PlanRequest::of(std::move(*target));
  request.options.priority = k_background_priority;
  std::string key = lookup_key(r.kernel, winner.source_hash, request.shape.to_string(), winner.dtype);
  key += '\x1f';
  key += winner.fingerprint;
  if (m_pending_tunes.count(key)) return;
  if (auto queued = plan_and_submit(key, std::move(request), r.client, "full search after a revalidation"); !queued) {
    KTUNE_LOG(warn) << "the full search of " << what << " not queued: " << queued.error().message;
  }
}

void LookupService::job_ended(std::int64_t job_id, JobState state) {
  std::optional<WinnerRecord> learnt;  // a done tune job's winner, read once
  if (state == JobState::done) {
    auto job = m_ctx.store.get_job(job_id);
    if (job && job->has_value() && (*job)->strategy != k_compile_check_strategy) {
      const JobRecord& rec = **job;
      auto winner = m_ctx.store.find_winner(rec.kernel, rec.source_hash, rec.shape, rec.dtype,
                                            rec.fingerprint);
      if (winner && winner->has_value()) {
        if (!m_index.knows_identity((*winner)->fingerprint)) learn_identity((*winner)->fingerprint);
        m_index.put(**winner);
        learnt = std::move(**winner);
      } else if (!winner) {
        KTUNE_LOG(error) << "job " << job_id << ": cannot read its winner for the index: "
                         << winner.error().message;
      }
    } else if (!job) {
      KTUNE_LOG(error) << "job " << job_id << ": cannot read it for the winner index: "
                       << job.error().message;
    }
  }
  std::vector<Revalidation> revalidated;
  for (auto it = m_pending_jobs.find(job_id); it != m_pending_jobs.end() && it->first == job_id;
       it = m_pending_jobs.erase(it)) {
    m_pending_tunes.erase(it->second);
    if (auto r = m_revalidations.find(it->second); r != m_revalidations.end()) {
      revalidated.push_back(std::move(r->second));
      m_revalidations.erase(r);
    }
  }
  if (!learnt) return;
  for (const Revalidation& r : revalidated) revalidation_ended(job_id, *learnt, r);
}

} // namespace ktune::daemon
