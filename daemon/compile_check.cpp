#include "daemon/compile_check.hpp"

#include "core/file_io.hpp"
#include "core/param_space.hpp"
#include "core/shape.hpp"
#include "daemon/replies.hpp"
#include "daemon/reply.hpp"

#include <algorithm>
#include <cctype>

namespace ktune::daemon {


namespace {

// "sm_" followed by digits and an optional 'a' or 'f' (the same rule as is_cuda_arch, which is
// compiled only with the CUDA backend).
bool looks_like_arch(const std::string& arch) {
  if (arch.size() < 4 || arch.rfind("sm_", 0) != 0) return false;
  std::size_t end = arch.size();
  if (arch.back() == 'a' || arch.back() == 'f') --end;
  if (end <= 3) return false;
  return std::all_of(arch.begin() + 3, arch.begin() + static_cast<std::ptrdiff_t>(end),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

// One check's results, filled as compiles answer; shared by the job's callbacks.
struct CheckRun {
  explicit CheckRun(Reply r) : client(std::move(r)) {}
  Reply client;  // the requesting connection
  std::int64_t job = 0;
  nlohmann::json header;
  std::vector<Config> configs;
  std::vector<std::pair<std::size_t, std::string>> tasks; // config, arch
  std::vector<nlohmann::json> rows;
  std::size_t errors = 0;
  std::size_t done = 0;

  void on_compiled(std::size_t index, Result<nlohmann::json> reply) {
    const auto& [config, arch] = tasks[index];
    nlohmann::json row{{"config", config_to_json(configs[config])}, {"arch", arch}};
    const auto failed = [&](const std::string& message) {
      row.update({{"status", "compile_error"}, {"message", message}, {"registers", -1},
                  {"spills", -1}, {"compile_ms", 0}, {"cached", false}, {"batch_size", 0}});
    };
    if (!reply) {
      failed(describe(reply.error()));
    } else if (auto outcome = CompileOutcome::from_json(*reply); !outcome) {
      failed(outcome.error().message);
    } else {
      const bool ok = outcome->status == CandidateStatus::ok;
      row.update({{"status", std::string(to_string(outcome->status))},
                  {"message", ok ? std::string() : first_line(outcome->log)},
                  {"registers", outcome->registers},
                  {"spills", outcome->spills},
                  {"compile_ms", outcome->compile_ms},
                  {"cached", outcome->cached},
                  {"batch_size", outcome->batch_size}});
    }
    if (row["status"] != "ok") ++errors;
    rows[index] = std::move(row);
    // Progress for the client, one small event per compile (a compile takes tens of ms).
    ++done;
    client.event("progress",
                {{"job", job}, {"done", done}, {"total", tasks.size()}, {"errors", errors}});
  }

  void on_end(JobState state) {
    if (state != JobState::done) {
      return client.error(make_error(ErrorCode::cancelled,
                                    "compile_check job " + std::to_string(job) + " " +
                                        std::string(to_string(state)) + " before it finished"));
    }
    nlohmann::json out = header;
    out["job"] = job;
    out["compiled"] = tasks.size();
    out["errors"] = errors;
    out["rows"] = std::move(rows);
    client.ok(out);
  }
};

} // namespace

Result<CompileCheckRequest> CompileCheckRequest::from_json(const nlohmann::json& body) {
  CompileCheckRequest req;
  const auto bad = [](const std::string& message) {
    return make_error(ErrorCode::bad_request, "compile_check: " + message);
  };
  const auto kernel = body.find("kernel");
  if (kernel == body.end() || !kernel->is_string() || kernel->get<std::string>().empty()) {
    return bad("field 'kernel' is missing (expected a family name)");
  }
  req.kernel = kernel->get<std::string>();
  const auto arch = body.find("arch");
  if (arch == body.end()) return bad("field 'arch' is missing (expected [\"sm_90\", ...])");
  if (arch->is_string()) {
    req.archs.push_back(arch->get<std::string>());
  } else if (arch->is_array()) {
    for (const auto& a : *arch) {
      if (!a.is_string()) return bad("field 'arch' must hold strings, found " + a.dump());
      req.archs.push_back(a.get<std::string>());
    }
  } else {
    return bad(std::string("field 'arch' must be an array of strings, found ") + arch->type_name());
  }
  if (req.archs.empty()) return bad("field 'arch' is empty (expected at least one sm_XX)");
  for (const auto& a : req.archs) {
    if (!looks_like_arch(a)) return bad("arch '" + a + "' is not an architecture like sm_90");
  }
  for (auto [key, field] : {std::pair{"shape", &req.shape}, std::pair{"dtype", &req.dtype}}) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return bad(std::string("field '") + key + "' must be a string, found " + it->type_name());
    }
    *field = it->get<std::string>();
  }
  return req;
}

Result<CheckTarget> resolve_check(const CompileCheckRequest& req, KernelRegistry& registry) {
  auto kernel = registry.find(req.kernel, Language::cuda);
  if (!kernel) return kernel.error();
  const KernelSpec& spec = kernel->spec;
  std::string shape_text = req.shape;
  if (shape_text.empty()) {
    for (const auto& dim : spec.shape_dims) {
      shape_text += (shape_text.empty() ? "" : ",") + dim + "=4096";
    }
  }
  auto shape = Shape::parse(shape_text);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, spec.shape_dims, spec.name);
  if (!conformed) return conformed.error();
  std::string dtype = req.dtype.empty() ? spec.dtypes.front() : req.dtype;
  return CheckTarget{std::move(*kernel), std::move(*conformed), std::move(dtype)};
}

namespace {

// The check's compiles in (arch, config) order, so that consecutive ones share compiler runs
// (the scheduler's batches), and run->tasks and run->rows in (config, arch) order; `row_of`
// maps a compile to its row. Errors: make_compile_job's.
Result<void> plan_compiles(const CompileCheckRequest& req, const CheckTarget& target,
                           const std::string& cache_dir, CheckRun& run, CheckPlan& plan,
                           std::vector<std::size_t>& row_of) {
  for (std::size_t c = 0; c < run.configs.size(); ++c) {
    for (const auto& arch : req.archs) run.tasks.emplace_back(c, arch);
  }
  for (std::size_t a = 0; a < req.archs.size(); ++a) {
    for (std::size_t c = 0; c < run.configs.size(); ++c) {
      auto job = make_compile_job(target.kernel, run.configs[c], target.dtype, cache_dir);
      if (!job) return job.error();
      job->arch = req.archs[a];
      plan.compiles.push_back(job->to_json());
      row_of.push_back(c * req.archs.size() + a);
    }
  }
  run.rows.resize(run.tasks.size());
  return {};
}

} // namespace

void start_compile_check(const std::shared_ptr<Client>& session, const protocol::Request& request,
                         const CompileCheckRequest& req, const CheckTarget& target,
                         std::vector<Config> configs, Scheduler& scheduler,
                         const Planner& planner, const std::string& cache_dir) {
  auto run = std::make_shared<CheckRun>(Reply(session, request.id));
  const auto fail = [&run](const Error& error) { run->client.error(error); };
  run->configs = std::move(configs);
  CheckPlan plan;
  std::vector<std::size_t> row_of;
  if (auto r = plan_compiles(req, target, cache_dir, *run, plan, row_of); !r) return fail(r.error());
  std::string archs;
  for (const auto& arch : req.archs) archs += (archs.empty() ? "" : ",") + arch;
  run->header = {{"kernel", target.kernel.spec.name},
                 {"shape", target.shape.to_string()},
                 {"dtype", target.dtype},
                 {"arch", req.archs},
                 {"configs", run->configs.size()}};

  JobRecord& record = plan.record;
  record.kernel = target.kernel.spec.name;
  record.source_hash = target.kernel.source_hash;
  record.shape = target.shape.to_string();
  record.dtype = target.dtype;
  record.device = archs;
  record.strategy = std::string(k_compile_check_strategy);
  record.total = static_cast<std::int64_t>(plan.compiles.size());
  record.options.priority = request.body.value("priority", 0);
  if (auto created = planner.create(record); !created) return fail(created.error());
  run->job = record.id;
  plan.on_compiled = [run, &scheduler, row_of](std::size_t index, Result<nlohmann::json> reply) {
    run->on_compiled(row_of.at(index), std::move(reply));
    // Nobody waits for the answer any more: stop handing out its compiles.
    if (run->client.gone()) scheduler.cancel(run->job);
  };
  plan.on_end = [run](JobState state) { run->on_end(state); };
  scheduler.enqueue(std::move(plan));
}

} // namespace ktune::daemon
