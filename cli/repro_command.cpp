#include "cli/repro_command.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/output_file.hpp"
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

int write_bundle(const GlobalOptions& global, const ReproOptions& o, Output& io) {
  // What the running ktuned says about itself (db, kernel dirs, settings); optional.
  json daemon_stats = json::object();
  if (auto stats = call(socket_path(global), {{"op", "stats"}}, k_request_timeout)) {
    daemon_stats = json::parse(stats->dump());
    if (!daemon_stats.is_object()) daemon_stats = json::object();
  }
  std::string db = o.db;
  if (db.empty()) db = daemon_stats.value("db", std::string());
  if (db.empty()) db = resolve_paths(path_env_from_process()).db;
  std::vector<std::string> kernel_dirs = o.kernel_dirs;
  if (kernel_dirs.empty() && daemon_stats.contains("kernel_dirs")) {
    kernel_dirs = daemon_stats.at("kernel_dirs").get<std::vector<std::string>>();
  }
  if (kernel_dirs.empty()) {
    return report_error(io, ErrorCode::usage,
                        "no ktuned answers to name its kernel directories: pass --kernel-dir",
                        k_exit_usage);
  }
  if (!fs::exists(db)) return report_error(io, ErrorCode::db_error, "no database at " + db);
  auto store = Store::open(db, OpenMode::read_only);
  if (!store) return report_error(io, store.error().code, store.error().message);
  auto result = store->get_result(o.result_id);
  if (!result) return report_error(io, result.error().code, result.error().message);
  if (!result->has_value()) {
    return report_error(io, ErrorCode::not_found,
                        "no result " + std::to_string(o.result_id) + " in " + db);
  }
  const ResultRecord& r = **result;
  auto job_row = store->get_job(r.job_id);
  if (!job_row) return report_error(io, job_row.error().code, job_row.error().message);
  if (!job_row->has_value()) {
    return report_error(io, ErrorCode::not_found, "result " + std::to_string(r.id) + " names job " +
                                             std::to_string(r.job_id) + ", not in " + db);
  }
  const JobRecord& job = **job_row;
  if (language_for_device(job.device) != Language::cpp) {
    return report_error(io, ErrorCode::unsupported, "result " + std::to_string(r.id) + " ran on " +
                                               job.device +
                                               ": repro bundles run host (cpp) candidates only");
  }

  KernelRegistry registry;
  registry.load(kernel_dirs);
  auto kernel = registry.find(r.kernel, Language::cpp);
  if (!kernel) return report_error(io, kernel.error().code, kernel.error().message);
  const bool changed = kernel->source_hash != r.source_hash;
  if (changed && !o.force) {
    return report_error(io, ErrorCode::source_changed,
                        "kernel '" + r.kernel + "' has changed since result " +
                            std::to_string(r.id) + " was measured (source hash " +
                            r.source_hash.substr(0, 12) + " then, " +
                            kernel->source_hash.substr(0, 12) + " now in " + kernel->dir +
                            "): the bundle would not hold the source as compiled (--force "
                            "writes it anyway, marked)");
  }

  // The config, in the family's params order as stored.
  Config config;
  const auto config_json = nlohmann::ordered_json::parse(r.config, nullptr, false);
  if (config_json.is_discarded() || !config_json.is_object()) {
    return report_error(io, ErrorCode::bad_result, "result " + std::to_string(r.id) + ": config " + r.config);
  }
  for (const auto& [name, value] : config_json.items()) config.emplace_back(name, value.get<std::int64_t>());
  auto shape = Shape::parse(r.shape);
  if (!shape) return report_error(io, shape.error().code, shape.error().message);
  auto conformed = conform_shape(*shape, kernel->spec.shape_dims, r.kernel);
  if (!conformed) return report_error(io, conformed.error().code, conformed.error().message);

  // Settings as ktuned's: its [measure] and [limits] when it answered, else the defaults.
  MeasureSettings measure;
  if (daemon_stats.contains("measure")) measure = MeasureSettings::from_json(daemon_stats.at("measure"));
  const json limits = daemon_stats.value("limits", json::object());
  double compile_timeout_s = limits.value("compile_timeout_s", 120.0);
  if (job.options.compile_timeout_s && *job.options.compile_timeout_s > 0) {
    compile_timeout_s = std::min(compile_timeout_s, *job.options.compile_timeout_s);
  }
  const double max_s = limits.value("bench_timeout_max_s", 600.0);
  double bench_timeout_s = limits.value("bench_timeout_s", 0.0) > 0
                               ? limits.value("bench_timeout_s", 0.0)
                               : max_s;
  if (job.options.bench_timeout_s && *job.options.bench_timeout_s > 0) {
    bench_timeout_s = std::min(*job.options.bench_timeout_s, std::max(max_s, 1.0));
  }
  if (o.compile_timeout_s > 0) compile_timeout_s = o.compile_timeout_s;
  if (o.bench_timeout_s > 0) bench_timeout_s = o.bench_timeout_s;
  const long long memory_mb = limits.value("worker_memory_mb", 0LL);

  auto compile = make_compile_job(*kernel, config, job.dtype, "cache");
  if (!compile) return report_error(io, compile.error().code, compile.error().message);
  std::optional<CompileJob> reference;
  const auto kind = kernel->spec.check.reference;
  if (kind == ReferenceKind::function) {
    auto made = make_reference_compile_job(*kernel, job.dtype, "cache");
    if (!made) return report_error(io, made.error().code, made.error().message);
    reference = std::move(*made);
  } else if (kind == ReferenceKind::default_config && !kernel->spec.default_config.empty()) {
    auto made = make_compile_job(*kernel, kernel->spec.default_config, job.dtype, "cache");
    if (!made) return report_error(io, made.error().code, made.error().message);
    reference = std::move(*made);
  }
  auto bench = make_bench_job(kernel->spec, *conformed, config, job.dtype, "(compiled by run.sh)",
                              reference ? "(compiled by run.sh)" : "", measure);
  if (!bench) return report_error(io, bench.error().code, bench.error().message);

  // The files: the family's directory as it is now (checked against the hash above).
  const fs::path out(o.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return report_error(io, ErrorCode::io_error, "cannot create " + out.string() + ": " + ec.message());
  fs::remove_all(out / "kernel", ec);
  fs::copy(kernel->dir, out / "kernel", fs::copy_options::recursive, ec);
  if (ec) {
    return report_error(io, ErrorCode::io_error, "cannot copy " + kernel->dir + " to " +
                                            (out / "kernel").string() + ": " + ec.message());
  }
  std::vector<std::string> outside;
  to_bundle(*compile, kernel->dir, outside);
  if (reference) to_bundle(*reference, kernel->dir, outside);
  for (auto& arg : bench->args) arg.expected = bundle_path(arg.expected, kernel->dir, outside);

  const json repro{{"result_id", r.id},
                   {"compile", compile->to_json()},
                   {"reference_compile", reference ? reference->to_json() : json()},
                   {"bench", bench->to_json()},
                   {"compile_timeout_s", compile_timeout_s},
                   {"bench_timeout_s", bench_timeout_s},
                   {"memory_mb", memory_mb}};
  const json stored{{"result_id", r.id},
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
  auto device = store->get_device(r.fingerprint);
  json device_json;
  if (device && device->has_value()) {
    device_json = {{"name", (*device)->name},
                   {"fingerprint", (*device)->fingerprint},
                   {"details", (*device)->details}};
  }
  const std::string cxx = host_cxx();
  const json env{{"ktune_version", KTUNE_VERSION},
                 {"compiler", cxx},
                 {"compiler_version_now", host_compiler_version(cxx)},
                 {"device_measured", device_json},
                 {"job", {{"id", job.id}, {"device", job.device}, {"strategy", job.strategy},
                          {"source_hash", job.source_hash}}},
                 {"kernel_dir_then", kernel->dir},
                 {"source_hash_now", kernel->source_hash},
                 {"source_changed", changed},
                 {"files_outside_family", outside},
                 {"measure", measure.to_json()},
                 {"compile_timeout_s", compile_timeout_s},
                 {"bench_timeout_s", bench_timeout_s},
                 {"memory_mb", memory_mb}};

  std::string command;
  const auto unit = compile->shim.empty() ? compile->source_path : "unit.cpp";
  for (const auto& word : HostCompiler(cxx).command(*compile, "candidate.so", unit)) {
    command += (command.empty() ? "" : " ") + sh_quote(word);
  }
  if (!compile->shim.empty()) {
    command = "# unit.cpp is: #include \"" + compile->source_path + "\" followed by shim.cpp\n" +
              command;
  }
  const std::string status = std::string(to_string(r.status));
  std::string run_sh =
      "#!/bin/sh\n"
      "# ktune repro bundle: result " + std::to_string(r.id) + " of job " +
      std::to_string(r.job_id) + ", " + r.kernel + " " + r.config + " " + r.shape + " " + r.dtype +
      "\n# stored status: " + status + (r.reason.empty() ? "" : " (" + r.reason + ")") +
      "\n# Compiles the candidate (and its reference) and runs it with the standalone ktune-worker,\n"
      "# which prints \"status: <status> ...\" as ktuned files it. KTUNE_WORKER overrides the worker.\n"
      "cd \"$(dirname \"$0\")\" || exit 2\n"
      "echo \"stored status: " + status + "\"\n"
      "exec \"${KTUNE_WORKER:-" + worker_path() + "}\" --run-repro repro.json\n";
  std::vector<std::pair<std::string, std::string>> files = {
      {"repro.json", repro.dump(2) + "\n"},
      {"result.json", stored.dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"env.json", env.dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"compile_command.txt", command + "\n"},
      {"run.sh", run_sh}};
  if (!compile->shim.empty()) files.emplace_back("shim.cpp", compile->shim);
  for (const auto& [name, text] : files) {
    if (auto written = write_file_atomic((out / name).string(), text); !written) {
      return report_error(io, written.error().code, written.error().message);
    }
  }
  ::chmod((out / "run.sh").c_str(), 0755);

  if (changed) {
    io.err << "ktune: warning: kernel '" << r.kernel << "' changed since result " << r.id
           << " (source hash " << r.source_hash.substr(0, 12) << " then, "
           << kernel->source_hash.substr(0, 12) << " now): the bundle holds today's source\n";
  }
  for (const auto& path : outside) {
    io.err << "ktune: warning: " << path
           << " lies outside the family's directory: the bundle names it, it does not copy it\n";
  }
  if (global.json) {
    print_json(io, Json{{"dir", out.string()}, {"result_id", r.id}, {"status", status},
                        {"source_changed", changed}});
  } else {
    io.out << "wrote " << out.string() << " (result " << r.id << ", " << r.kernel << " "
           << r.config << ", stored status " << status << "); run " << (out / "run.sh").string()
           << "\n";
  }
  return 0;
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
