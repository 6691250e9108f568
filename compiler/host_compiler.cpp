#include "compiler/host_compiler.hpp"
#include "core/file_io.hpp"

#include "compiler/shared_object.hpp"
#include "compiler/subprocess.hpp"
#include "core/hash.hpp"
#include "jobs/artifact_cache.hpp"
#include "jobs/typed_entry.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <sstream>
#include <unistd.h>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_fixed_flags[] = {"-std=c++17", "-O3", "-march=native", "-shared", "-fPIC"};
#if defined(__x86_64__)
// Code placement that does not depend on what else shares the object (host_layout_flags).
constexpr const char* k_layout_flags[] = {"-Wa,-mbranches-within-32B-boundaries",
                                          "-falign-functions=64", "-falign-loops=32"};
#else
constexpr std::array<const char*, 0> k_layout_flags{};
#endif
constexpr std::size_t k_max_log_bytes = 8 * 1024;

// Model name and ISA flags of the first processor in /proc/cpuinfo ("" when unreadable).
std::string read_host_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line) && (model.empty() || flags.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    if (key == "model name" && model.empty()) model = line.substr(colon + 1);
    if (key == "flags" && flags.empty()) flags = line.substr(colon + 1);
  }
  return model + "|" + flags;
}

bool is_identifier(const std::string& name) {
  if (name.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string upper(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// The defines in name order, so the key does not depend on the order the config lists them.
NamedValues sorted_defines(const CompileJob& job) {
  NamedValues defines = job.defines;
  std::sort(defines.begin(), defines.end());
  return defines;
}

CompileOutcome failure(CompileOutcome outcome, std::string log) {
  outcome.status = CandidateStatus::compile_error;
  outcome.artifact_path.clear();
  if (log.size() > k_max_log_bytes) log.resize(k_max_log_bytes);
  outcome.log = std::move(log);
  return outcome;
}

// A compile that failed because of the host, not the candidate: `why` becomes the outcome's
// `infra` (docs/ARCHITECTURE.md § Whose failure).
CompileOutcome host_failure(CompileOutcome outcome, std::string why) {
  outcome = failure(std::move(outcome), why);
  outcome.infra = std::move(why);
  return outcome;
}

// The compiler's own words for a file system that took nothing (its output or its temporaries).
std::string file_system_trouble(const std::string& log) {
  for (const char* words : {"No space left on device", "Disk quota exceeded",
                            "Read-only file system", "Permission denied", "Input/output error"}) {
    if (log.find(words) != std::string::npos) return words;
  }
  return {};
}

// Hex digits of the cache key in a renamed entry: 64 bits, unique among the keys of a cache.
constexpr std::size_t k_entry_key_digits = 16;

// A source as batches see it: its text and what scan_source found in it.
struct Source {
  std::string text;
  SourceScan scan;
};

Source read_source(const std::string& path) {
  Source source{read_file(path).value_or(std::string()), {}};
  source.scan = scan_source(source.text);
  return source;
}

// Why configs of `job` cannot share a translation unit, "" when they can (and then its entry is
// renamed): a cpp job that unit_obstacle (compiler/batch_unit.hpp) finds nothing against.
std::string batch_obstacle(const CompileJob& job, const Source& source) {
  if (job.language != "cpp") return "language " + job.language;
  return unit_obstacle(job, source.text, source.scan);
}

// The macros that rename `job`'s entry in the artifact of `key`: the entry, then with a shim the
// shim's symbol. The last one's replacement is the symbol a runner calls.
Renames entry_renames(const CompileJob& job, const std::string& key) {
  const std::string entry = job.entry + "_k" + key.substr(0, k_entry_key_digits);
  Renames renames{{job.entry, entry}};
  if (!job.shim.empty()) renames.emplace_back(host_shim_symbol(job.entry), host_shim_symbol(entry));
  return renames;
}

// Everything of a job but its defines: the jobs that agree on it may share a translation unit.
std::string batch_signature(const CompileJob& job) {
  nlohmann::json j = job.to_json();
  j.erase("defines");
  return j.dump();
}

// One job on its way through compile_batch.
struct Planned {
  const CompileJob* job = nullptr;
  const SourceScan* scan = nullptr;
  std::string obstacle;            // batch_obstacle: nothing is renamed when set
  CompileOutcome outcome;          // final unless `pending`; cache_key and entry_symbol set
  bool pending = false;            // to be compiled
  std::string final_path;          // <cache_dir>/<key[0:2]>/<key>.so
  Renames renames;                 // of its entry; empty when nothing is renamed
};

// The outcome of a job the compiler must not run for (a wrong language, dtype, flag, define or
// no cache directory); nullopt when it may run.
std::optional<CompileOutcome> refusal(const CompileJob& job, const CompileOutcome& outcome) {
  if (job.language != "cpp") {
    return failure(outcome, "the host compiler builds language 'cpp'; kernel '" + job.kernel +
                                "' is '" + job.language + "'");
  }
  Result<std::string> c_type = std::string();
  if (!job.dtype.empty()) c_type = dtype_c_type(job.dtype);
  if (!c_type) return failure(outcome, describe(c_type.error()));
  for (const auto& flag : job.removed_flags) {
    const bool fixed = std::find(std::begin(k_fixed_flags), std::end(k_fixed_flags), flag) !=
                       std::end(k_fixed_flags);
    const bool layout = std::find(std::begin(k_layout_flags), std::end(k_layout_flags), flag) !=
                        std::end(k_layout_flags);
    if (flag == "-shared" || flag == "-fPIC" || !(fixed || layout)) {
      return failure(outcome, "flags_remove of kernel '" + job.kernel + "': '" + flag +
                                  "' is not one of the fixed flags (-std=c++17, -O3, "
                                  "-march=native, and on x86-64 the layout flags "
                                  "-Wa,-mbranches-within-32B-boundaries, -falign-functions=64, "
                                  "-falign-loops=32; -shared and -fPIC stay)");
    }
  }
  for (const auto& [name, value] : job.defines) {
    if (!is_identifier(name)) {
      return failure(outcome, "define '" + name + "' of kernel '" + job.kernel +
                                  "' is not a C identifier");
    }
  }
  if (job.cache_dir.empty()) {
    return failure(outcome, "compile job for kernel '" + job.kernel + "' names no cache_dir");
  }
  return std::nullopt;
}

// A temp file of the cache, removed when its owner goes away unless released.
class TempFile {
public:
  TempFile() = default;
  explicit TempFile(std::string path) : m_path(std::move(path)) {}
  TempFile(TempFile&& other) noexcept : m_path(std::exchange(other.m_path, {})) {}
  TempFile& operator=(TempFile&& other) noexcept {
    if (this != &other) {
      remove();
      m_path = std::exchange(other.m_path, {});
    }
    return *this;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { remove(); }
  [[nodiscard]] const std::string& path() const { return m_path; }
  void release() { m_path.clear(); }

private:
  void remove() {
    if (!m_path.empty()) ::unlink(m_path.c_str());
  }
  std::string m_path;
};

// Functions a shared object runs when loaded that are not its code: the C runtime's frame_dummy
// (crtbeginS.o of GCC's runtime, which clang on Linux links too).
constexpr std::size_t k_runtime_init_functions = 1;

// One run of the compiler over a unit of configs.
struct Run {
  TempFile artifact;               // the shared object it built; empty path when it failed
  std::string log;
  std::string infra;               // a failure of the host: every config's
  // Why a batch that compiled cannot serve its configs together (it runs code when loaded:
  // every config's static initializers would run for any one of them).
  std::string unfit;
  double wall_ms = 0;
  [[nodiscard]] bool built() const { return !artifact.path().empty(); }
};

// Runs the compiler for units of planned configs: one config alone, or a batch of configs that
// agree on everything but their defines and rename their entries. A batch that fails is split
// in halves, down to single compiles.
class UnitBuilder {
public:
  explicit UnitBuilder(const std::string& cxx) : m_cxx(cxx) {}

  // Compiles `unit` and sets each config's outcome.
  void build(std::span<Planned* const> unit) {
    Run run = compile_unit(unit);
    if (run.built()) return publish(unit, run);
    if (!run.unfit.empty()) {
      for (Planned* planned : unit) {
        build(std::span<Planned* const>(&planned, 1));
        planned->outcome.batch_error = "the configs do not batch: " + run.unfit;
      }
      return;
    }
    if (unit.size() == 1 || !run.infra.empty()) {
      for (Planned* planned : unit) fail(*planned, run, unit.size());
      return;
    }
    split_failed_unit(unit, run.log, [this](std::span<Planned* const> part) { build(part); },
                      [](Planned& p) -> CompileOutcome& { return p.outcome; });
  }

private:
  // Runs the compiler over `unit` into a temp file next to the first config's artifact.
  Run compile_unit(std::span<Planned* const> unit) const {
    Run run;
    const fs::path dir = fs::path(unit.front()->final_path).parent_path();
    auto temp = artifact_temp_file(unit.front()->final_path);
    if (!temp) return host_trouble("cannot create a temp file in the compile cache: " + temp.error().message);
    TempFile artifact(*temp);
    const std::string tmp_path = artifact.path();
    const std::string text = unit_text(unit);
    TempFile unit_file(text.empty() ? std::string() : tmp_path + ".cpp");
    if (!text.empty()) {
      std::ofstream out(unit_file.path(), std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) return host_trouble("cannot write " + unit_file.path());
    }
    const std::string& input = text.empty() ? unit.front()->job->source_path : unit_file.path();
    const auto start = std::chrono::steady_clock::now();
    auto result = run_captured(command(unit, tmp_path, input), k_max_log_bytes);
    run.wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!result) return host_trouble("cannot run " + m_cxx + ": " + result.error().message);
    run.log = std::move(result->output);
    if (judge(*result, tmp_path, dir, run) && (unit.size() == 1 || serves_batch(unit, tmp_path, run))) {
      run.artifact = std::move(artifact);
    }
    return run;
  }

  static Run host_trouble(const std::string& why) {
    Run run;
    run.infra = why;
    run.log = why;
    return run;
  }

  // The source the compiler reads: the batch unit; for a config alone with a shim the source
  // then the shim; none (the source itself) for a config alone without one.
  static std::string unit_text(std::span<Planned* const> unit) {
    const CompileJob& job = *unit.front()->job;
    const std::string source = fs::absolute(job.source_path).lexically_normal().string();
    if (unit.size() > 1) {
      std::vector<UnitConfig> configs;
      for (const Planned* planned : unit) configs.push_back({planned->job->defines, planned->renames, {}});
      return batch_unit_text(source, *unit.front()->scan, job.shim, configs);
    }
    return job.shim.empty() ? std::string() : "#include \"" + source + "\"\n" + job.shim;
  }

  // A config alone: its defines and renames on the command line; a batch: in the unit.
  std::vector<std::string> command(std::span<Planned* const> unit, const std::string& output,
                                   const std::string& input) const {
    if (unit.size() == 1) {
      return host_compile_argv(*unit.front()->job, m_cxx, output, input, unit.front()->renames);
    }
    CompileJob common = *unit.front()->job;
    common.defines.clear();
    return host_compile_argv(common, m_cxx, output, input);
  }

  // Whether the compiler built the artifact; when not, says why in run.log or run.infra.
  bool judge(const ProcessResult& result, const std::string& tmp_path, const fs::path& dir,
             Run& run) const {
    std::error_code ec;
    const bool produced = fs::file_size(tmp_path, ec) > 0 && !ec;
    // A status reaped elsewhere (ProcessEnd::unknown) counts as success when the output exists.
    const bool ok = result.end == ProcessEnd::exited ? result.code == 0
                    : result.end == ProcessEnd::unknown ? produced
                                                        : false;
    if (ok && produced) return true;
    if (result.end == ProcessEnd::signaled) {
      run.log += "\n" + m_cxx + " was killed by signal " + std::to_string(result.code);
      if (result.code == SIGKILL) {
        // Not by us (the worker has no deadline of its own): the OOM killer or an administrator.
        run.infra = m_cxx + " was killed by SIGKILL from outside (the OOM killer or an administrator)";
        return false;
      }
    } else if (result.end == ProcessEnd::exited && result.code == 0) {
      run.log += "\n" + m_cxx + " exited 0 but wrote no output to " + tmp_path;
    }
    if (const std::string trouble = file_system_trouble(run.log); !trouble.empty()) {
      run.infra = m_cxx + " could not write its files (" + trouble + ") in the compile cache " +
                  dir.string() + " or its temporary directory";
    }
    return false;
  }

  // Whether a batch's shared object can serve each of its configs: it exports every config's
  // entry symbol (else run.log says which are missing: the batch failed) and runs no code of
  // its own when loaded (else run.unfit says so).
  static bool serves_batch(std::span<Planned* const> unit, const std::string& path, Run& run) {
    const auto object = read_shared_object(read_file(path).value_or(std::string()));
    if (!object) {
      run.log += "\n" + path + ": " + object.error().message;
      return false;
    }
    std::string missing;
    for (const Planned* planned : unit) {
      if (object->exports.count(planned->outcome.entry_symbol) == 0) {
        missing += " " + planned->outcome.entry_symbol;
      }
    }
    if (!missing.empty()) {
      run.log += "\nthe batch's shared object does not export the entry symbol(s)" + missing;
      return false;
    }
    if (object->init_functions > k_runtime_init_functions) {
      run.unfit = "the source runs code when loaded (static initializers or constructors)";
      return false;
    }
    return true;
  }

  // Publishes the built artifact under every config's key (compile cache: sealed once, then
  // recorded and linked per key) and fills in their outcomes.
  static void publish(std::span<Planned* const> unit, const Run& run) {
    auto record = seal_artifact(run.artifact.path());
    for (Planned* planned : unit) {
      CompileOutcome& outcome = planned->outcome;
      outcome.compile_ms = run.wall_ms / static_cast<double>(unit.size());
      outcome.batch_size = static_cast<int>(unit.size());
      auto published = record ? publish_artifact(run.artifact.path(), *record, planned->final_path)
                              : Result<void>(record.error());
      if (!published) {
        outcome = host_failure(std::move(outcome), published.error().message);
        continue;
      }
      outcome.status = CandidateStatus::ok;
      outcome.artifact_path = planned->final_path;
      outcome.log = run.log.size() > k_max_log_bytes ? run.log.substr(0, k_max_log_bytes) : run.log;
    }
  }

  // Sets the outcome of a config whose unit failed.
  static void fail(Planned& planned, const Run& run, std::size_t unit_size) {
    CompileOutcome& outcome = planned.outcome;
    outcome.compile_ms = run.wall_ms / static_cast<double>(unit_size);
    outcome.batch_size = static_cast<int>(unit_size);
    outcome = failure(std::move(outcome), run.log);
    outcome.infra = run.infra;
  }

  const std::string& m_cxx;
};

// Compiles the pending configs of `planned`: those that may share a unit, by what they share,
// the others alone; a key asked for twice is compiled once.
void build_pending(std::vector<Planned>& planned, const std::string& cxx) {
  std::map<std::string, std::vector<Planned*>> batches, alone;  // by batch_signature
  std::map<std::string, Planned*> by_key;
  std::vector<std::pair<Planned*, const Planned*>> repeats;
  for (Planned& p : planned) {
    if (!p.pending) continue;
    if (auto [first, added] = by_key.try_emplace(p.outcome.cache_key, &p); !added) {
      repeats.emplace_back(&p, first->second);
      continue;
    }
    (p.obstacle.empty() ? batches : alone)[batch_signature(*p.job)].push_back(&p);
  }
  UnitBuilder builder(cxx);
  for (const auto& [signature, unit] : batches) builder.build(unit);
  for (const auto& [signature, unit] : alone) {
    for (Planned* p : unit) {
      builder.build(std::span<Planned* const>(&p, 1));
      if (unit.size() > 1) p->outcome.batch_error = "the configs do not batch: " + p->obstacle;
    }
  }
  for (const auto& [repeat, first] : repeats) repeat->outcome = first->outcome;
}

} // namespace

std::string host_artifact_path(const std::string& cache_dir, const std::string& key) {
  return artifact_path(cache_dir, key, ".so");
}

std::string host_compiler_version(const std::string& cxx) {
  auto result = run_captured({cxx, "--version"}, 4096);
  if (!result) return {};
  if (result->end != ProcessEnd::unknown && !result->succeeded()) return {};
  const std::string& output = result->output;
  return first_line(output);
}

const std::vector<std::string>& host_layout_flags(const std::string& cxx) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<std::string>> accepted;
  const std::lock_guard lock(mutex);
  if (const auto it = accepted.find(cxx); it != accepted.end()) return it->second;
  std::vector<std::string> flags(std::begin(k_layout_flags), std::end(k_layout_flags));
  if (!flags.empty()) {
    std::vector<std::string> probe{cxx, "-x", "c++", "-c", "-o", "/dev/null"};
    probe.insert(probe.end(), flags.begin(), flags.end());
    probe.push_back("/dev/null");
    const auto result = run_captured(probe, 4096);
    if (!result || (result->end != ProcessEnd::unknown && !result->succeeded())) flags.clear();
  }
  return accepted.emplace(cxx, std::move(flags)).first->second;
}

std::vector<std::string> host_compile_argv(const CompileJob& job, const std::string& cxx,
                                           const std::string& output, const std::string& input,
                                           const Renames& renames) {
  std::vector<std::string> argv{cxx};
  const auto kept = [&](const std::string& flag) {
    return std::find(job.removed_flags.begin(), job.removed_flags.end(), flag) == job.removed_flags.end();
  };
  for (const char* flag : k_fixed_flags) {
    if (kept(flag)) argv.push_back(flag);
  }
  for (const std::string& flag : host_layout_flags(cxx)) {
    if (kept(flag)) argv.push_back(flag);
  }
  for (const auto& include_dir : job.include_dirs) argv.push_back("-I" + include_dir);
  if (!job.dtype.empty()) {
    if (auto c_type = dtype_c_type(job.dtype)) {
      argv.push_back("-DKTUNE_DTYPE=" + *c_type);
      argv.push_back("-DKTUNE_DTYPE_" + upper(job.dtype) + "=1");
    }
  }
  for (const auto& [name, value] : job.defines) {
    argv.push_back("-D" + name + "=" + std::to_string(value));
  }
  for (const auto& [from, to] : renames) argv.push_back("-D" + from + "=" + to);
  argv.insert(argv.end(), job.extra_flags.begin(), job.extra_flags.end());
  argv.push_back("-o");
  argv.push_back(output);
  argv.push_back(input);
  return argv;
}

std::string host_cxx() {
  const char* env = std::getenv("KTUNE_CXX");
  return env != nullptr && *env != '\0' ? env : "c++";
}

HostCompiler::HostCompiler(std::string cxx) : m_cxx(std::move(cxx)) {
  if (m_cxx.empty()) m_cxx = host_cxx();
  m_version = host_compiler_version(m_cxx);
  m_host_cpu = read_host_cpu();
}

std::string HostCompiler::cache_key(const CompileJob& job) const {
  return key_of(job, batch_obstacle(job, read_source(job.source_path)).empty());
}

std::string HostCompiler::key_of(const CompileJob& job, bool renamed) const {
  Hasher hasher;
  hasher.update("ktune-host-compile").update(std::to_string(k_cache_version));
  if (!job.source_hash.empty()) {
    hasher.update("source_hash").update(job.source_hash);
  } else {
    // A job without a source hash is keyed by the source's current content.
    hasher.update("source_content").update(read_file(job.source_path).value_or(std::string()));
  }
  hasher.update(job.language).update(job.dtype);
  const NamedValues defines = sorted_defines(job);
  hasher.update(std::to_string(defines.size()));
  for (const auto& [name, value] : defines) hasher.update(name + "=" + std::to_string(value));
  hasher.update(std::to_string(job.extra_flags.size()));
  for (const auto& flag : job.extra_flags) hasher.update(flag);
  hasher.update(std::to_string(job.removed_flags.size()));
  for (const auto& flag : job.removed_flags) hasher.update(flag);
  hasher.update("shim").update(job.shim);
  hasher.update("renamed entry").update(renamed ? job.entry : std::string());
  hasher.update(m_cxx).update(m_version).update(m_host_cpu);
  hasher.update(std::to_string(std::size(k_fixed_flags)));
  for (const char* flag : k_fixed_flags) hasher.update(flag);
  const std::vector<std::string>& layout = host_layout_flags(m_cxx);
  hasher.update(std::to_string(layout.size()));
  for (const std::string& flag : layout) hasher.update(flag);
  hasher.update(job.arch);
  return hasher.hex_digest();
}

std::vector<std::string> HostCompiler::command(const CompileJob& job, const std::string& output,
                                               const std::string& input) const {
  const bool renamed = batch_obstacle(job, read_source(job.source_path)).empty();
  return host_compile_argv(job, m_cxx, output, input,
                           renamed ? entry_renames(job, key_of(job, true)) : Renames{});
}

CompileOutcome HostCompiler::compile(const CompileJob& job) {
  return compile_batch({job}).front();
}

std::vector<CompileOutcome> HostCompiler::compile_batch(const std::vector<CompileJob>& jobs) {
  std::map<std::string, Source> sources;  // by path: each is read once
  std::vector<Planned> planned(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const CompileJob& job = jobs[i];
    Planned& p = planned[i];
    p.job = &job;
    auto [source, added] = sources.try_emplace(job.source_path);
    if (added) source->second = read_source(job.source_path);
    p.scan = &source->second.scan;
    p.obstacle = batch_obstacle(job, source->second);
    const bool renamed = p.obstacle.empty();
    p.outcome.cache_key = key_of(job, renamed);
    if (renamed) {
      p.renames = entry_renames(job, p.outcome.cache_key);
      p.outcome.entry_symbol = p.renames.back().second;
    }
    if (auto refused = refusal(job, p.outcome)) {
      p.outcome = std::move(*refused);
      continue;
    }
    p.final_path = host_artifact_path(fs::absolute(job.cache_dir).lexically_normal().string(),
                                      p.outcome.cache_key);
    // A hit only when the artifact matches the content hash recorded with its key; anything
    // else (missing, truncated, replaced, unreadable) is compiled again and replaced.
    const ArtifactCheck check = verify_artifact(p.final_path);
    p.outcome.cached = check.ok();
    if (p.outcome.cached) {
      p.outcome.artifact_path = p.final_path;
    } else {
      p.pending = true;
      if (check.state != ArtifactState::missing) p.outcome.repaired = check.reason;
    }
  }

  build_pending(planned, m_cxx);
  std::vector<CompileOutcome> outcomes;
  outcomes.reserve(planned.size());
  for (Planned& p : planned) outcomes.push_back(std::move(p.outcome));
  return outcomes;
}

} // namespace ktune
