#include "cli/repro_command.hpp"

#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"
#include "compiler/host_compiler.hpp"
#include "core/paths.hpp"
#include "core/shape.hpp"
#include "db/store.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/compile_job.hpp"
#include "jobs/kernel_registry.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <utility>
#include <vector>
#include <sys/stat.h>
#include <unistd.h>

namespace ktune::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string sh_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

// The path inside the bundle for a file of the family (under `family_dir`): kernel/<relative>.
// Files outside the family directory keep their absolute path (listed in `outside`).
std::string bundle_path(const std::string& path, const std::string& family_dir,
                        std::vector<std::string>& outside) {
  if (path.empty()) return path;
  const fs::path rel = fs::path(path).lexically_normal().lexically_relative(family_dir);
  if (rel.empty() || *rel.begin() == "..") {
    outside.push_back(path);
    return path;
  }
  return (fs::path("kernel") / rel).string();
}

void to_bundle(CompileJob& job, const std::string& family_dir, std::vector<std::string>& outside) {
  job.source_path = bundle_path(job.source_path, family_dir, outside);
  for (auto& dir : job.include_dirs) {
    dir = fs::path(dir).lexically_normal() == fs::path(family_dir).lexically_normal()
              ? "kernel"
              : bundle_path(dir, family_dir, outside);
  }
  job.cache_dir = "cache";
}

// ktune-worker next to this ktune, else the one on PATH.
std::string worker_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path next = self.parent_path() / "ktune-worker";
    if (fs::exists(next, ec)) return next.string();
  }
  return "ktune-worker";
}

// What the running ktuned says about itself (db, kernel dirs, settings); an empty object when
// none answers.
json daemon_stats(const GlobalOptions& global) {
  json stats = json::object();
  if (auto answered = call(socket_path(global), {{"op", "stats"}}, k_request_timeout)) {
    stats = json::parse(answered->dump());
    if (!stats.is_object()) stats = json::object();
  }
  return stats;
}

// Where the result and its kernel are: --db, else ktuned's, else the instance's database;
// --kernel-dir, else ktuned's kernel directories (none: a usage error).
struct Source {
  std::string db;
  std::vector<std::string> kernel_dirs;
};

Result<Source> bundle_source(const ReproOptions& o, const json& stats) {
  Source source{o.db, o.kernel_dirs};
  if (source.db.empty()) source.db = stats.value("db", std::string());
  if (source.db.empty()) source.db = resolve_paths(path_env_from_process()).db;
  if (source.kernel_dirs.empty() && stats.contains("kernel_dirs")) {
    source.kernel_dirs = stats.at("kernel_dirs").get<std::vector<std::string>>();
  }
  if (source.kernel_dirs.empty()) {
    return make_error(ErrorCode::usage, "no ktuned answers to name its kernel directories: pass --kernel-dir");
  }
  if (!fs::exists(source.db)) return make_error(ErrorCode::db_error, "no database at " + source.db);
  return source;
}

// The stored result, its job (a host job: bundles run cpp candidates only) and the device it
// was measured on (null when the store has no row for it).
struct Stored {
  ResultRecord result;
  JobRecord job;
  json device;
};

Result<Stored> load_stored(const Store& store, std::int64_t result_id, const std::string& db) {
  auto result = store.get_result(result_id);
  if (!result) return result.error();
  if (!result->has_value()) return make_error(ErrorCode::not_found, "no result " + std::to_string(result_id) + " in " + db);
  const ResultRecord& r = **result;
  auto job_row = store.get_job(r.job_id);
  if (!job_row) return job_row.error();
  if (!job_row->has_value()) {
    return make_error(ErrorCode::not_found, "result " + std::to_string(r.id) + " names job " +
                                                std::to_string(r.job_id) + ", not in " + db);
  }
  if (language_for_device((*job_row)->device) != Language::cpp) {
    return make_error(ErrorCode::unsupported, "result " + std::to_string(r.id) + " ran on " + (*job_row)->device +
                                                  ": repro bundles run host (cpp) candidates only");
  }
  Stored stored{r, **job_row, json()};
  auto device = store.get_device(r.fingerprint);
  if (device && device->has_value()) {
    stored.device = {{"name", (*device)->name},
                     {"fingerprint", (*device)->fingerprint},
                     {"details", (*device)->details}};
  }
  return stored;
}

// The candidate as it ran: the family today (refused when its source changed, unless --force),
// the stored config in the family's params order, and the shape conformed to its dims.
struct Candidate {
  LoadedKernel kernel;
  Config config;
  Shape shape;
  bool changed = false;  // the family's source hash differs from the result's
};

Result<Candidate> load_candidate(const ResultRecord& r, const std::vector<std::string>& kernel_dirs, bool force) {
  KernelRegistry registry;
  registry.load(kernel_dirs);
  auto kernel = registry.find(r.kernel, Language::cpp);
  if (!kernel) return kernel.error();
  const bool changed = kernel->source_hash != r.source_hash;
  if (changed && !force) {
    return make_error(ErrorCode::source_changed,
                      "kernel '" + r.kernel + "' has changed since result " + std::to_string(r.id) +
                          " was measured (source hash " + r.source_hash.substr(0, 12) + " then, " +
                          kernel->source_hash.substr(0, 12) + " now in " + kernel->dir +
                          "): the bundle would not hold the source as compiled (--force "
                          "writes it anyway, marked)");
  }
  Config config;
  const auto config_json = nlohmann::ordered_json::parse(r.config, nullptr, false);
  if (config_json.is_discarded() || !config_json.is_object()) {
    return make_error(ErrorCode::bad_result, "result " + std::to_string(r.id) + ": config " + r.config);
  }
  for (const auto& [name, value] : config_json.items()) config.emplace_back(name, value.get<std::int64_t>());
  auto shape = Shape::parse(r.shape);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, kernel->spec.shape_dims, r.kernel);
  if (!conformed) return conformed.error();
  return Candidate{std::move(*kernel), std::move(config), std::move(*conformed), changed};
}

// Settings as ktuned's: its [measure] and [limits] when it answered, else the defaults; the job's
// own deadlines within them; --compile-timeout and --bench-timeout over all.
struct Limits {
  MeasureSettings measure;
  double compile_timeout_s = 120;
  double bench_timeout_s = 600;
  long long memory_mb = 0;
};

Limits bundle_limits(const json& stats, const JobRecord& job, const ReproOptions& o) {
  Limits out;
  if (stats.contains("measure")) out.measure = MeasureSettings::from_json(stats.at("measure"));
  const json limits = stats.value("limits", json::object());
  out.compile_timeout_s = limits.value("compile_timeout_s", 120.0);
  if (job.options.compile_timeout_s && *job.options.compile_timeout_s > 0) {
    out.compile_timeout_s = std::min(out.compile_timeout_s, *job.options.compile_timeout_s);
  }
  const double max_s = limits.value("bench_timeout_max_s", 600.0);
  out.bench_timeout_s = limits.value("bench_timeout_s", 0.0) > 0 ? limits.value("bench_timeout_s", 0.0) : max_s;
  if (job.options.bench_timeout_s && *job.options.bench_timeout_s > 0) {
    out.bench_timeout_s = std::min(*job.options.bench_timeout_s, std::max(max_s, 1.0));
  }
  if (o.compile_timeout_s > 0) out.compile_timeout_s = o.compile_timeout_s;
  if (o.bench_timeout_s > 0) out.bench_timeout_s = o.bench_timeout_s;
  out.memory_mb = limits.value("worker_memory_mb", 0LL);
  return out;
}

// The worker's jobs for the candidate: its compile, its reference's (a reference function, or
// the default config), and the bench job, paths still the family directory's.
struct BundleJobs {
  CompileJob compile;
  std::optional<CompileJob> reference;
  BenchJob bench;
};

Result<BundleJobs> bundle_jobs(const Candidate& c, const std::string& dtype, const MeasureSettings& measure) {
  auto compile = make_compile_job(c.kernel, c.config, dtype, "cache");
  if (!compile) return compile.error();
  std::optional<CompileJob> reference;
  const auto kind = c.kernel.spec.check.reference;
  if (kind == ReferenceKind::function) {
    auto made = make_reference_compile_job(c.kernel, dtype, "cache");
    if (!made) return made.error();
    reference = std::move(*made);
  } else if (kind == ReferenceKind::default_config && !c.kernel.spec.default_config.empty()) {
    auto made = make_compile_job(c.kernel, c.kernel.spec.default_config, dtype, "cache");
    if (!made) return made.error();
    reference = std::move(*made);
  }
  auto bench = make_bench_job(c.kernel.spec, c.shape, c.config, dtype, "(compiled by run.sh)",
                              reference ? "(compiled by run.sh)" : "", measure);
  if (!bench) return bench.error();
  return BundleJobs{std::move(*compile), std::move(reference), std::move(*bench)};
}

// The family's directory as it is now (checked against the hash) copied to OUT/kernel, and the
// jobs' paths made the bundle's; files outside the family are named, listed in `outside`.
Result<void> copy_family(const fs::path& out, const std::string& family_dir, BundleJobs& jobs,
                         std::vector<std::string>& outside) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot create " + out.string() + ": " + ec.message());
  fs::remove_all(out / "kernel", ec);
  fs::copy(family_dir, out / "kernel", fs::copy_options::recursive, ec);
  if (ec) {
    return make_error(ErrorCode::io_error, "cannot copy " + family_dir + " to " + (out / "kernel").string() +
                                               ": " + ec.message());
  }
  to_bundle(jobs.compile, family_dir, outside);
  if (jobs.reference) to_bundle(*jobs.reference, family_dir, outside);
  for (auto& arg : jobs.bench.args) arg.expected = bundle_path(arg.expected, family_dir, outside);
  return {};
}

// result.json: the stored result as the store holds it.
json stored_json(const ResultRecord& r) {
  return {{"result_id", r.id},
          {"job_id", r.job_id},
          {"kernel", r.kernel},
          {"source_hash", r.source_hash},
          {"shape", r.shape},
          {"dtype", r.dtype},
          {"config", json::parse(r.config)},
          {"status", std::string(to_string(r.status))},
          {"reason", r.reason},
          {"log", r.log},
          {"median_ms", r.stats.median_ms},
          {"samples", r.stats.n},
          {"compile_ms", r.compile_ms}};
}

// env.json: what the bundle was made from and with.
json env_json(const Stored& s, const Candidate& c, const Limits& limits, const std::vector<std::string>& outside,
              const std::string& cxx) {
  return {{"ktune_version", KTUNE_VERSION},
          {"compiler", cxx},
          {"compiler_version_now", host_compiler_version(cxx)},
          {"device_measured", s.device},
          {"job", {{"id", s.job.id}, {"device", s.job.device}, {"strategy", s.job.strategy},
                   {"source_hash", s.job.source_hash}}},
          {"kernel_dir_then", c.kernel.dir},
          {"source_hash_now", c.kernel.source_hash},
          {"source_changed", c.changed},
          {"files_outside_family", outside},
          {"measure", limits.measure.to_json()},
          {"compile_timeout_s", limits.compile_timeout_s},
          {"bench_timeout_s", limits.bench_timeout_s},
          {"memory_mb", limits.memory_mb}};
}

// compile_command.txt: the host compiler's command line for the candidate.
std::string compile_command(const CompileJob& compile, const std::string& cxx) {
  std::string command;
  const auto unit = compile.shim.empty() ? compile.source_path : "unit.cpp";
  for (const auto& word : HostCompiler(cxx).command(compile, "candidate.so", unit)) {
    command += (command.empty() ? "" : " ") + sh_quote(word);
  }
  if (!compile.shim.empty()) {
    command = "# unit.cpp is: #include \"" + compile.source_path + "\" followed by shim.cpp\n" + command;
  }
  return command;
}

// run.sh: compiles and runs the candidate with the standalone worker.
std::string run_script(const ResultRecord& r) {
  const std::string status = std::string(to_string(r.status));
  return "#!/bin/sh\n"
         "# ktune repro bundle: result " + std::to_string(r.id) + " of job " +
         std::to_string(r.job_id) + ", " + r.kernel + " " + r.config + " " + r.shape + " " + r.dtype +
         "\n# stored status: " + status + (r.reason.empty() ? "" : " (" + r.reason + ")") +
         "\n# Compiles the candidate (and its reference) and runs it with the standalone ktune-worker,\n"
         "# which prints \"status: <status> ...\" as ktuned files it. KTUNE_WORKER overrides the worker.\n"
         "cd \"$(dirname \"$0\")\" || exit 2\n"
         "echo \"stored status: " + status + "\"\n"
         "exec \"${KTUNE_WORKER:-" + worker_path() + "}\" --run-repro repro.json\n";
}

// The bundle's files written into `out` (run.sh executable).
Result<void> write_files(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& files) {
  for (const auto& [name, text] : files) {
    if (auto written = write_file_atomic((out / name).string(), text); !written) return written.error();
  }
  ::chmod((out / "run.sh").c_str(), 0755);
  return {};
}

// The warnings (changed source, files outside the family) and what was written.
void print_written(const GlobalOptions& global, const fs::path& out, const Candidate& c, const ResultRecord& r,
                   const std::vector<std::string>& outside, Output& io) {
  const std::string status = std::string(to_string(r.status));
  if (c.changed) {
    io.err << "ktune: warning: kernel '" << r.kernel << "' changed since result " << r.id
           << " (source hash " << r.source_hash.substr(0, 12) << " then, "
           << c.kernel.source_hash.substr(0, 12) << " now): the bundle holds today's source\n";
  }
  for (const auto& path : outside) {
    io.err << "ktune: warning: " << path
           << " lies outside the family's directory: the bundle names it, it does not copy it\n";
  }
  if (global.json) {
    print_json(io, Json{{"dir", out.string()}, {"result_id", r.id}, {"status", status},
                        {"source_changed", c.changed}});
  } else {
    io.out << "wrote " << out.string() << " (result " << r.id << ", " << r.kernel << " "
           << r.config << ", stored status " << status << "); run " << (out / "run.sh").string()
           << "\n";
  }
}

// The bundle: the stored result's candidate, rebuilt from the family as it is now, with the
// settings ktuned would run it with.
Result<void> make_bundle(const GlobalOptions& global, const ReproOptions& o, Output& io) {
  const json stats = daemon_stats(global);
  auto source = bundle_source(o, stats);
  if (!source) return source.error();
  auto store = Store::open(source->db, OpenMode::read_only);
  if (!store) return store.error();
  auto stored = load_stored(*store, o.result_id, source->db);
  if (!stored) return stored.error();
  auto candidate = load_candidate(stored->result, source->kernel_dirs, o.force);
  if (!candidate) return candidate.error();
  const Limits limits = bundle_limits(stats, stored->job, o);
  auto jobs = bundle_jobs(*candidate, stored->job.dtype, limits.measure);
  if (!jobs) return jobs.error();
  const fs::path out(o.out_dir);
  std::vector<std::string> outside;
  if (auto copied = copy_family(out, candidate->kernel.dir, *jobs, outside); !copied) return copied.error();

  const ResultRecord& r = stored->result;
  const json repro{{"result_id", r.id},
                   {"compile", jobs->compile.to_json()},
                   {"reference_compile", jobs->reference ? jobs->reference->to_json() : json()},
                   {"bench", jobs->bench.to_json()},
                   {"compile_timeout_s", limits.compile_timeout_s},
                   {"bench_timeout_s", limits.bench_timeout_s},
                   {"memory_mb", limits.memory_mb}};
  const std::string cxx = host_cxx();
  std::vector<std::pair<std::string, std::string>> files = {
      {"repro.json", repro.dump(2) + "\n"},
      {"result.json", stored_json(r).dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"env.json", env_json(*stored, *candidate, limits, outside, cxx).dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"compile_command.txt", compile_command(jobs->compile, cxx) + "\n"},
      {"run.sh", run_script(r)}};
  if (!jobs->compile.shim.empty()) files.emplace_back("shim.cpp", jobs->compile.shim);
  if (auto written = write_files(out, files); !written) return written.error();
  print_written(global, out, *candidate, r, outside, io);
  return {};
}

int write_bundle(const GlobalOptions& global, const ReproOptions& o, Output& io) {
  auto made = make_bundle(global, o, io);
  if (made) return k_exit_ok;
  // No kernel directories to look in is the one usage error.
  const int exit_code = made.error().code == ErrorCode::usage ? k_exit_usage : k_exit_error;
  return report_error(io, made.error().code, made.error().message, exit_code);
}

} // namespace

void add_repro_command(CLI::App& app, ReproCommand& command) {
  ReproOptions& o = command.options;
  command.command = app.add_subcommand(
      "repro", "Write a bundle that rebuilds and reruns one result's candidate outside ktuned");
  CLI::App* cmd = command.command;
  cmd->add_option("result", o.result_id, "result id: the RESULT column of `ktune job JOB`")->required();
  cmd->add_option("-o,--out", o.out_dir, "the bundle's directory (created)")->required();
  cmd->add_option("--db", o.db, "the database to read (default: ktuned's, else the instance's)");
  cmd->add_option("--kernel-dir", o.kernel_dirs,
                  "where the family lives (default: the running ktuned's kernel directories)");
  cmd->add_option("--compile-timeout", o.compile_timeout_s,
                  "run.sh's compile deadline in seconds (default: ktuned's)");
  cmd->add_option("--bench-timeout", o.bench_timeout_s,
                  "run.sh's run deadline in seconds (default: ktuned's bench_timeout_s, else its "
                  "bench_timeout_max_s)");
  cmd->add_flag("--force", o.force,
                "write the bundle even when the family's source changed since the result");
  cmd->footer(
      "\nThe bundle (docs/operations.md § Repro bundles): kernel/ (the family's files as "
      "compiled),\nshim.cpp (a typed entry's generated shim), compile_command.txt (the exact "
      "compiler command),\nrepro.json (the compile and bench jobs: config, shape, dtype, input "
      "seeds, measurement\nsettings, deadlines), result.json (the stored status, reason and log "
      "tail), env.json\n(compiler, the device's fingerprint from the store) and run.sh, which "
      "builds and runs the\ncandidate with `ktune-worker --run-repro` and prints its status as "
      "ktuned files it:\n\"status: ok median ... ms\", \"status: crash (...)\", \"status: "
      "timeout ...\", ...\n\nThe store is read read-only. A family changed since the result is "
      "refused (--force).\nHost (cpp) candidates only.\n\nExit codes: 0 written; 1 an error; 2 "
      "usage.\n\nExample:\n  ktune repro 1234 -o /tmp/r1234 && /tmp/r1234/run.sh");
}

std::optional<int> run_repro_command(const ReproCommand& command, const GlobalOptions& global,
                                     Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  return write_bundle(global, command.options, io);
}

} // namespace ktune::cli
