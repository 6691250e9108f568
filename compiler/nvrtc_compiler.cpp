#include "compiler/nvrtc_compiler.hpp"
#include "core/file_io.hpp"

#include "compiler/batch_unit.hpp"
#include "core/hash.hpp"
#include "core/protocol.hpp"
#include "core/unique_fd.hpp"
#include "cuda/cuda_api.hpp"
#include "jobs/artifact_cache.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <utility>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_fixed_options[] = {"-std=c++17", "--extra-device-vectorization",
                                           "--ptxas-options=-v"};
// Keeps nvrtc's notes on creating and using precompiled headers out of the log.
constexpr const char* k_pch_quiet_options[] = {"--pch-messages=false", "--pch-verbose=false"};
constexpr std::size_t k_max_log_bytes = 8 * 1024;
// Hex digits of the cache key in a renamed entry and a config's namespace.
constexpr std::size_t k_entry_key_digits = 16;
// The first declaration after a unit's hoisted includes: the end of the initial sequence of
// preprocessing directives, so that a PCH covers the headers and none of a config's #defines.
constexpr const char* k_prelude_end = "namespace ktune_unit {}\n";
// The name of a unit's program; not the source's path, which the unit #includes.
constexpr const char* k_unit_program_name = "ktune_batch_unit.cu";

bool is_identifier(const std::string& name) {
  if (name.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string upper(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string truncated(std::string log) {
  if (log.size() > k_max_log_bytes) log.resize(k_max_log_bytes);
  return log;
}

CompileOutcome failure(CompileOutcome outcome, std::string log) {
  outcome.status = CandidateStatus::compile_error;
  outcome.artifact_path.clear();
  outcome.log = truncated(std::move(log));
  return outcome;
}

// A compile that failed because of the host, not the candidate (docs/ARCHITECTURE.md § Whose
// failure): `why` becomes the outcome's `infra`.
CompileOutcome host_failure(CompileOutcome outcome, std::string why) {
  outcome = failure(std::move(outcome), why);
  outcome.infra = std::move(why);
  return outcome;
}

// The numeric part of "sm_90a" (90); -1 when there is none.
int arch_number(std::string_view arch) {
  int value = 0;
  std::size_t i = 3;
  for (; i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])); ++i)
    value = value * 10 + (arch[i] - '0');
  return i == 3 ? -1 : value;
}

std::string join_archs(const std::vector<int>& archs) {
  std::string out;
  for (int a : archs) out += (out.empty() ? "sm_" : ", sm_") + std::to_string(a);
  return out;
}

// An owned nvrtcProgram.
class Program {
public:
  Program(const cuda::NvrtcApi& api, const std::string& source, const std::string& name) : m_api(api) {
    KTUNE_NVRTC(m_api, nullptr,
                nvrtcCreateProgram(&m_program, source.c_str(), name.c_str(), 0, nullptr, nullptr));
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (m_program != nullptr) m_api.nvrtcDestroyProgram(&m_program);
  }
  [[nodiscard]] nvrtcProgram get() const { return m_program; }

private:
  const cuda::NvrtcApi& m_api;
  nvrtcProgram m_program = nullptr;
};

// The header names of a text's #include lines, each with whether it was quoted.
std::vector<std::pair<std::string, bool>> includes_of(std::string_view text) {
  std::vector<std::pair<std::string, bool>> out;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const auto skip_space = [&] {
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    };
    skip_space();
    if (line.empty() || line.front() != '#') continue;
    line.remove_prefix(1);
    skip_space();
    if (line.substr(0, 7) != "include") continue;
    line.remove_prefix(7);
    skip_space();
    if (line.empty() || (line.front() != '<' && line.front() != '"')) continue;
    const char close = line.front() == '<' ? '>' : '"';
    const std::size_t stop = line.find(close, 1);
    if (stop == std::string_view::npos) continue;
    out.emplace_back(std::string(line.substr(1, stop - 1)), close == '"');
  }
  return out;
}

} // namespace

// The precompiled headers of one NvrtcCompiler (nvrtc_compiler.hpp § Precompiled headers). A
// PCH is created into a private directory and kept as an open descriptor of the file, which is
// then unlinked (nvrtc reads it as /proc/self/fd/<n>): nothing is left on disk however the
// process ends.
class PchCache {
public:
  explicit PchCache(const cuda::NvrtcApi& api) : m_api(api) {}
  PchCache(const PchCache&) = delete;
  PchCache& operator=(const PchCache&) = delete;

  // How one compile takes part: the option it adds (--use-pch of a ready PCH, --create-pch of a
  // file in a new private directory when none was tried for the key yet), "" for none.
  struct Use {
    std::string key;
    std::string option;
    std::string created;  // the file a --create-pch writes
  };

  [[nodiscard]] Use plan(const std::string& key) {
    Use use{key, {}, {}};
    if (!m_api.has_pch()) return use;
    const std::lock_guard lock(m_mutex);
    const auto it = m_states.find(key);
    if (it == m_states.end()) {
      const std::string dir = private_dir();
      if (dir.empty()) return use;
      m_states[key] = Entry{};
      use.created = dir + "/" + key + ".pch";
      use.option = "--create-pch=" + use.created;
    } else if (it->second.state == State::ready) {
      use.option = "--use-pch=/proc/self/fd/" + std::to_string(it->second.file.get());
    }
    return use;
  }

  // After the compile that took part as `use` (`program` still alive): keeps a PCH it created,
  // forgets one nvrtc could not create or use (a warning or an error that names it in the log).
  // A compile that failed for its source leaves the key to the next compile.
  void done(const Use& use, nvrtcProgram program, bool compiled, const std::string& log) {
    if (use.option.empty()) return;
    const std::lock_guard lock(m_mutex);
    const bool named = log.find("precompiled header") != std::string::npos;
    if (!use.created.empty()) {
      UniqueFd file;
      if (compiled && m_api.nvrtcGetPCHCreateStatus(program) == NVRTC_SUCCESS) {
        file.reset(::open(use.created.c_str(), O_RDONLY | O_CLOEXEC));
      }
      ::unlink(use.created.c_str());
      ::rmdir(fs::path(use.created).parent_path().c_str());
      if (file.valid()) {
        m_states[use.key] = Entry{State::ready, std::move(file)};
        ++m_counts.created;
      } else if (compiled || named) {
        m_states[use.key] = Entry{State::failed, {}};
        ++m_counts.failed;
      } else {
        m_states.erase(use.key);
      }
      return;
    }
    if (named) {
      m_states[use.key] = Entry{State::failed, {}};
      ++m_counts.failed;
    } else if (compiled) {
      ++m_counts.used;
    }
  }

  [[nodiscard]] NvrtcCompiler::PchCounts counts() const {
    const std::lock_guard lock(m_mutex);
    return m_counts;
  }

  // Adds to `hasher` what a PCH of `headers` depends on beyond the options: the path, size and
  // modification time of every file they reach through `dirs` (quoted includes first next to
  // their includer), transitively; a header no directory has (one of nvrtc's built-in headers)
  // adds its name alone.
  void hash_headers(Hasher& hasher, const std::vector<std::string>& headers,
                    const std::vector<std::string>& dirs) {
    struct Pending {
      std::string name;
      bool quoted;
      std::string includer_dir;
    };
    std::vector<Pending> todo;
    for (const auto& header : headers) todo.push_back({header, false, {}});
    std::set<std::string> seen;
    while (!todo.empty()) {
      const Pending next = std::move(todo.back());
      todo.pop_back();
      std::string path;
      struct stat st {};
      const auto found = [&](const std::string& candidate) {
        if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
        path = fs::path(candidate).lexically_normal().string();
        return true;
      };
      bool resolved = next.quoted && !next.includer_dir.empty() && found(next.includer_dir + "/" + next.name);
      for (std::size_t i = 0; !resolved && i < dirs.size(); ++i) resolved = found(dirs[i] + "/" + next.name);
      if (!resolved) {
        hasher.update("built-in").update(next.name);
        continue;
      }
      if (!seen.insert(path).second) continue;
      hasher.update(path)
          .update(std::to_string(st.st_size))
          .update(std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec));
      const std::string dir = fs::path(path).parent_path().string();
      for (const auto& [name, quoted] : includes_in(path, st)) todo.push_back({name, quoted, dir});
    }
  }

private:
  enum class State { creating, ready, failed };

  // A new directory for one PCH's creation ($TMPDIR/ktune-pch.<pid>.XXXXXX, removed once it
  // is done); "" when none can be made. The first call removes those of processes that are
  // gone (killed while they created one).
  std::string private_dir() {
    const char* tmp = std::getenv("TMPDIR");
    const fs::path root = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    const std::string prefix = "ktune-pch.";
    if (!m_swept) {
      m_swept = true;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
        if (pid <= 0 || pid == ::getpid()) continue;
        if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
          std::error_code ignored;
          fs::remove_all(entry.path(), ignored);
        }
      }
    }
    std::string dir = (root / (prefix + std::to_string(::getpid()) + ".XXXXXX")).string();
    if (::mkdtemp(dir.data()) == nullptr) return {};
    return dir;
  }

  // The includes of the header at `path` (stat'ed as `st`), read once per version of the file.
  std::vector<std::pair<std::string, bool>> includes_in(const std::string& path, const struct stat& st) {
    const std::lock_guard lock(m_mutex);
    const std::string version = std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) +
                                "." + std::to_string(st.st_mtim.tv_nsec);
    auto& known = m_includes[path];
    if (known.first != version) known = {version, includes_of(read_file(path).value_or(std::string()))};
    return known.second;
  }

  struct Entry {
    State state = State::creating;
    UniqueFd file;  // the PCH, unlinked, when ready
  };

  const cuda::NvrtcApi& m_api;
  mutable std::mutex m_mutex;
  bool m_swept = false;
  std::map<std::string, Entry> m_states;
  NvrtcCompiler::PchCounts m_counts;
  std::map<std::string, std::pair<std::string, std::vector<std::pair<std::string, bool>>>> m_includes;
};

namespace {

// A source as units see it: its text and what scan_source found in it.
struct Source {
  bool readable = false;
  std::string text;
  SourceScan scan;
};

Source read_source(const std::string& path) {
  Source source;
  if (auto text = read_file(path)) {
    source.readable = true;
    source.text = std::move(*text);
    source.scan = scan_source(source.text);
  }
  return source;
}

// Why configs of a job cannot share a unit (and its entry is not renamed), "" when they can.
std::string cuda_obstacle(const CompileJob& job, const Source& source) {
  if (job.language != "cuda") return "language " + job.language;
  if (!source.readable) return "its source cannot be read";
  return unit_obstacle(job, source.text, source.scan);
}

// Everything of a job but its defines: the jobs that agree on it may share a unit.
std::string batch_signature(const CompileJob& job) {
  nlohmann::json j = job.to_json();
  j.erase("defines");
  return j.dump();
}

// The outcome's registers, spills and shared_bytes: the largest over the config's kernels, -1
// where none reports.
void summarize_resources(CompileOutcome& outcome, const std::vector<cuda::KernelResources>& kernels) {
  for (const auto& k : kernels) {
    outcome.registers = std::max(outcome.registers, k.registers);
    if (k.spill_store_bytes >= 0 || k.spill_load_bytes >= 0) {
      outcome.spills = std::max(outcome.spills, std::max(k.spill_store_bytes, 0) +
                                                    std::max(k.spill_load_bytes, 0));
    }
    outcome.shared_bytes = std::max(outcome.shared_bytes, k.shared_bytes);
  }
}

// One job on its way through compile_batch.
struct Planned {
  const CompileJob* job = nullptr;
  const Source* source = nullptr;
  std::string obstacle;            // cuda_obstacle: built alone, nothing renamed, when set
  NvrtcCompileResult result;       // final unless `pending`; cache_key and entry_symbol set
  bool pending = false;            // to be compiled
  std::string final_path;          // <cache_dir>/<key[0:2]>/<key>.cubin
  std::vector<std::string> options; // alone: with its defines; in a unit: without
  std::string scope;               // its namespace in a unit; "" when nothing is renamed
};

// The kernels of `all` that are the config's: its entry's function and the __global__
// functions of its namespace (their mangled names hold "<length><scope>"); all of them when
// nothing is renamed.
std::vector<cuda::KernelResources> kernels_of(const std::vector<cuda::KernelResources>& all,
                                              const Planned& planned) {
  if (planned.scope.empty()) return all;
  const std::string mangled = std::to_string(planned.scope.size()) + planned.scope;
  std::vector<cuda::KernelResources> mine;
  for (const auto& kernel : all) {
    if (kernel.name == planned.result.outcome.entry_symbol || kernel.name.find(mangled) != std::string::npos) {
      mine.push_back(kernel);
    }
  }
  return mine;
}

bool has_kernel(const std::vector<cuda::KernelResources>& kernels, const std::string& name) {
  return std::any_of(kernels.begin(), kernels.end(),
                     [&](const cuda::KernelResources& k) { return k.name == name; });
}

// One nvrtc program built for a unit of configs.
struct Run {
  bool built = false;
  std::string cubin;
  std::vector<cuda::KernelResources> kernels; // CUBIN and ptxas report merged
  std::string log;                 // nvrtc's log; why it failed when not built
  std::string infra;               // a failure of the host: every config's
  double wall_ms = 0;
};

// Builds units of planned configs with nvrtc: one config alone, or a unit of configs that agree
// on everything but their defines and rename their entries. A unit that fails is split in
// halves, down to single programs.
class UnitBuilder {
public:
  UnitBuilder(const cuda::NvrtcApi& api, PchCache& pch, const std::vector<std::string>& toolkit_includes,
              const std::string& version)
      : m_api(api), m_pch(pch), m_toolkit_includes(toolkit_includes), m_version(version) {}

  // Compiles `unit` and sets each config's result.
  void build(std::span<Planned* const> unit) {
    Run run = compile_unit(unit);
    if (run.built) return publish(unit, run);
    if (unit.size() == 1 || !run.infra.empty()) {
      for (Planned* planned : unit) fail(*planned, run, unit.size());
      return;
    }
    split_failed_unit(unit, run.log, [this](std::span<Planned* const> part) { build(part); },
                      [](Planned& p) -> CompileOutcome& { return p.result.outcome; });
  }

private:
  // The program of `unit`: the source itself for a config built alone without renaming, else
  // the unit text (batch_unit_text) of its configs.
  static std::pair<std::string, std::string> program_of(std::span<Planned* const> unit) {
    const Planned& first = *unit.front();
    if (first.scope.empty()) return {first.source->text, first.job->source_path};
    std::vector<UnitConfig> configs;
    for (const Planned* planned : unit) {
      const std::string& entry = planned->job->entry;
      configs.push_back({planned->job->defines,
                         {{entry, planned->result.outcome.entry_symbol}},
                         planned->scope});
    }
    const std::string source = fs::absolute(first.job->source_path).lexically_normal().string();
    return {batch_unit_text(source, first.source->scan, "", configs, k_prelude_end), k_unit_program_name};
  }

  // The headers a unit's PCH holds: the dtype's pre-included header, the source's hoisted ones.
  static std::vector<std::string> prelude_of(const Planned& first) {
    std::vector<std::string> headers;
    if (first.scope.empty()) return headers;
    if (std::string header = cuda_dtype_header(first.job->dtype); !header.empty()) {
      headers.push_back(std::move(header));
    }
    const auto& hoisted = first.source->scan.system_includes;
    headers.insert(headers.end(), hoisted.begin(), hoisted.end());
    return headers;
  }

  // The key of the PCH of `headers` compiled with `options`; "" when there are no headers.
  std::string pch_key(const Planned& first, const std::vector<std::string>& headers) {
    if (headers.empty()) return {};
    Hasher hasher;
    hasher.update("ktune-nvrtc-pch").update(std::to_string(k_nvrtc_pch_version)).update(m_version);
    hasher.update(std::to_string(first.options.size()));
    for (const auto& option : first.options) hasher.update(option);
    hasher.update(std::to_string(headers.size()));
    for (const auto& header : headers) hasher.update(header);
    std::vector<std::string> dirs = first.job->include_dirs;
    dirs.insert(dirs.end(), m_toolkit_includes.begin(), m_toolkit_includes.end());
    m_pch.hash_headers(hasher, headers, dirs);
    return hasher.hex_digest();
  }

  Run compile_unit(std::span<Planned* const> unit) {
    const Planned& first = *unit.front();
    const auto [text, name] = program_of(unit);
    const std::string key = pch_key(first, prelude_of(first));
    Run run;
    if (!key.empty()) {
      PchCache::Use use = m_pch.plan(key);
      if (!use.option.empty()) {
        run = run_program(text, name, first.options, &use);
        // A PCH nvrtc could not read fails the compile; it is forgotten, and the unit compiled
        // without one.
        if (run.built || run.log.find("precompiled header") == std::string::npos) return finish(unit, std::move(run));
      }
    }
    return finish(unit, run_program(text, name, first.options, nullptr));
  }

  // Runs nvrtc over one program.
  Run run_program(const std::string& text, const std::string& name, std::vector<std::string> options,
                  PchCache::Use* pch) {
    if (pch != nullptr) {
      options.insert(options.end(), std::begin(k_pch_quiet_options), std::end(k_pch_quiet_options));
      options.push_back(pch->option);
    }
    std::vector<const char*> argv;
    argv.reserve(options.size());
    for (const auto& option : options) argv.push_back(option.c_str());

    Run run;
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    // Tells the PCH cache how the compile went, once.
    const auto pch_done = [&](nvrtcProgram program, bool compiled, const std::string& log) {
      if (pch != nullptr) m_pch.done(*pch, program, compiled, log);
      pch = nullptr;
    };
    try {
      Program program(m_api, text, name);
      try {
        KTUNE_NVRTC(m_api, program.get(),
                    nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data()));
      } catch (const cuda::CudaCallError& error) {
        run.wall_ms = elapsed();
        const bool source_error = error.code() == NVRTC_ERROR_COMPILATION;
        std::string log = error.log();
        if (!source_error || log.empty()) log = error.summary() + (log.empty() ? "" : "\n" + log);
        pch_done(program.get(), false, log);
        run.log = std::move(log);
        return run;
      }
      run.log = cuda::program_log(m_api, program.get());
      pch_done(program.get(), true, run.log);
      std::size_t size = 0;
      KTUNE_NVRTC(m_api, program.get(), nvrtcGetCUBINSize(program.get(), &size));
      run.cubin.resize(size);
      KTUNE_NVRTC(m_api, program.get(), nvrtcGetCUBIN(program.get(), run.cubin.data()));
    } catch (const cuda::CudaCallError& error) {
      run.wall_ms = elapsed();
      run.log = error.what();
      pch_done(nullptr, false, run.log);
      return run;
    }
    run.wall_ms = elapsed();
    run.built = true;
    return run;
  }

  // Reads the kernels of a built program; a CUBIN that is unreadable or lacks a config's entry
  // counts as a failed build.
  Run finish(std::span<Planned* const> unit, Run run) {
    if (!run.built) return run;
    auto kernels = cuda::read_cubin_kernels(run.cubin);
    if (!kernels) {
      run.built = false;
      run.log = "nvrtc " + m_version + " returned an unreadable CUBIN for kernel '" +
                unit.front()->job->kernel + "': " + kernels.error().message + "\n" + run.log;
      return run;
    }
    std::string missing;
    for (const Planned* planned : unit) {
      const std::string& symbol = planned->result.outcome.entry_symbol;
      if (!symbol.empty() && !has_kernel(*kernels, symbol)) missing += " " + symbol;
    }
    if (!missing.empty()) {
      run.built = false;
      run.log += "\nthe CUBIN lacks the entry function(s)" + missing;
      return run;
    }
    run.kernels = cuda::merge_resources(std::move(kernels).value(), cuda::parse_ptxas_info(run.log));
    return run;
  }

  // Writes the CUBIN once, sealed with its content hash, publishes it under every config's key
  // (jobs/artifact_cache.hpp: a hard link where it can) and fills in their results.
  void publish(std::span<Planned* const> unit, const Run& run) {
    std::string trouble;
    std::string shared, record;
    if (auto temp = artifact_temp_file(unit.front()->final_path); !temp) {
      trouble = temp.error().message;
    } else {
      shared = std::move(temp).value();
      if (auto written = write_temp(shared, run.cubin); !written) {
        trouble = written.error().message;
      } else if (auto sealed = seal_artifact(shared); !sealed) {
        trouble = sealed.error().message;
      } else {
        record = std::move(sealed).value();
      }
    }
    for (Planned* planned : unit) {
      NvrtcCompileResult& result = planned->result;
      CompileOutcome& outcome = result.outcome;
      outcome.compile_ms = run.wall_ms / static_cast<double>(unit.size());
      outcome.batch_size = static_cast<int>(unit.size());
      std::string why = trouble;
      if (why.empty()) {
        if (auto published = publish_artifact(shared, record, planned->final_path); !published) {
          why = published.error().message;
        }
      }
      if (!why.empty()) {
        outcome = host_failure(std::move(outcome), why);
        continue;
      }
      outcome.status = CandidateStatus::ok;
      outcome.artifact_path = planned->final_path;
      outcome.log = truncated(run.log);
      result.kernels = kernels_of(run.kernels, *planned);
      summarize_resources(outcome, result.kernels);
    }
    if (!shared.empty()) ::unlink(shared.c_str());
  }

  // Writes `bytes` into the empty temp file `path` (artifact_temp_file made it, 0600).
  static Result<void> write_temp(const std::string& path, const std::string& bytes) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return make_error(ErrorCode::io_error, "cannot open " + path + ": " + std::strerror(errno));
    std::size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return make_error(ErrorCode::io_error, "cannot write " + path + ": " + std::strerror(errno));
      written += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Sets the result of a config whose unit failed.
  static void fail(Planned& planned, const Run& run, std::size_t unit_size) {
    CompileOutcome& outcome = planned.result.outcome;
    outcome.compile_ms = run.wall_ms / static_cast<double>(unit_size);
    outcome.batch_size = static_cast<int>(unit_size);
    outcome = failure(std::move(outcome), run.log);
    outcome.infra = run.infra;
  }

  const cuda::NvrtcApi& m_api;
  PchCache& m_pch;
  const std::vector<std::string>& m_toolkit_includes;
  const std::string& m_version;
};

} // namespace

nlohmann::json NvrtcCompileResult::to_json() const {
  nlohmann::json j = outcome.to_json();
  nlohmann::json list = nlohmann::json::array();
  for (const auto& kernel : kernels) list.push_back(kernel.to_json());
  j["kernels"] = std::move(list);
  return j;
}

std::string cuda_artifact_path(const std::string& cache_dir, const std::string& key) {
  return artifact_path(cache_dir, key, ".cubin");
}

Result<std::string> cuda_dtype_c_type(std::string_view dtype) {
  if (dtype == "f32") return std::string("float");
  if (dtype == "f64") return std::string("double");
  if (dtype == "f16") return std::string("__half");
  if (dtype == "bf16") return std::string("__nv_bfloat16");
  if (dtype == "i32") return std::string("int");
  if (dtype == "i64") return std::string("long long");
  return make_error(ErrorCode::bad_dtype,
                    "dtype '" + std::string(dtype) + "': expected one of f32, f64, f16, bf16, i32, i64");
}

std::string cuda_dtype_header(std::string_view dtype) {
  if (dtype == "f16") return "cuda_fp16.h";
  if (dtype == "bf16") return "cuda_bf16.h";
  return {};
}

bool is_cuda_arch(std::string_view arch) {
  if (arch.size() < 4 || arch.substr(0, 3) != "sm_") return false;
  std::size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) ++i;
  if (i == 3) return false;
  if (i == arch.size()) return true;
  return i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f');
}

Result<std::unique_ptr<NvrtcCompiler>> NvrtcCompiler::create() {
  auto api = cuda::load_nvrtc();
  if (!api) return api.error();
  return std::unique_ptr<NvrtcCompiler>(new NvrtcCompiler(api.value()));
}

NvrtcCompiler::NvrtcCompiler(const cuda::NvrtcApi* api)
    : m_api(api),
      m_version(api->version()),
      m_archs(api->supported_archs()),
      m_toolkit_includes(cuda::toolkit_include_dirs()),
      m_pch(std::make_unique<PchCache>(*api)) {}

NvrtcCompiler::~NvrtcCompiler() = default;

NvrtcCompiler::PchCounts NvrtcCompiler::pch_counts() const { return m_pch->counts(); }

Result<std::vector<std::string>> NvrtcCompiler::options(const CompileJob& job) const {
  return options_of(job, true);
}

Result<std::vector<std::string>> NvrtcCompiler::options_of(const CompileJob& job, bool with_defines) const {
  const std::string where = "kernel '" + job.kernel + "'";
  if (job.language != "cuda") {
    return make_error(ErrorCode::compile_error,
                      "nvrtc builds language 'cuda'; " + where + " is '" + job.language + "'");
  }
  if (job.arch.empty()) {
    return make_error(ErrorCode::compile_error, where + ": a CUDA compile job needs an arch (e.g. sm_90), found none");
  }
  if (!is_cuda_arch(job.arch)) {
    return make_error(ErrorCode::compile_error, where + ": arch '" + job.arch +
                                           "': expected sm_<digits> with an optional a or f suffix");
  }
  if (!m_archs.empty() && std::find(m_archs.begin(), m_archs.end(), arch_number(job.arch)) == m_archs.end()) {
    return make_error(ErrorCode::compile_error, where + ": arch '" + job.arch + "' is not supported by nvrtc " +
                                           m_version + " (it supports " + join_archs(m_archs) + ")");
  }
  Result<std::string> c_type = std::string();  // an empty dtype: no KTUNE_DTYPE (no dtype axis)
  if (!job.dtype.empty()) c_type = cuda_dtype_c_type(job.dtype);
  if (!c_type) return make_error(ErrorCode::compile_error, where + ": " + c_type.error().message);
  for (const auto& [name, value] : job.defines) {
    if (!is_identifier(name)) {
      return make_error(ErrorCode::compile_error, where + ": define '" + name + "' is not a C identifier");
    }
  }

  std::vector<std::string> options{"--gpu-architecture=" + job.arch};
  options.insert(options.end(), std::begin(k_fixed_options), std::end(k_fixed_options));
  for (const auto& dir : job.include_dirs) options.push_back("-I" + dir);
  for (const auto& dir : m_toolkit_includes) options.push_back("-I" + dir);
  if (!job.dtype.empty()) {
    if (const std::string header = cuda_dtype_header(job.dtype); !header.empty()) {
      options.push_back("--pre-include=" + header);
    }
    options.push_back("-DKTUNE_DTYPE=" + *c_type);
    options.push_back("-DKTUNE_DTYPE_" + upper(job.dtype) + "=1");
  }
  if (with_defines) {
    for (const auto& [name, value] : job.defines) options.push_back("-D" + name + "=" + std::to_string(value));
  }
  options.insert(options.end(), job.extra_flags.begin(), job.extra_flags.end());
  return options;
}

std::string NvrtcCompiler::cache_key(const CompileJob& job) const {
  return key_of(job, cuda_obstacle(job, read_source(job.source_path)).empty());
}

std::string NvrtcCompiler::key_of(const CompileJob& job, bool renamed) const {
  Hasher hasher;
  hasher.update("ktune-nvrtc-compile").update(std::to_string(k_nvrtc_cache_version));
  if (!job.source_hash.empty()) {
    hasher.update("source_hash").update(job.source_hash);
  } else {
    hasher.update("source_content").update(read_file(job.source_path).value_or(std::string()));
  }
  hasher.update(job.language).update(job.dtype);
  NamedValues defines = job.defines;
  std::sort(defines.begin(), defines.end());
  hasher.update(std::to_string(defines.size()));
  for (const auto& [name, value] : defines) hasher.update(name + "=" + std::to_string(value));
  hasher.update(std::to_string(job.extra_flags.size()));
  for (const auto& flag : job.extra_flags) hasher.update(flag);
  hasher.update(std::to_string(std::size(k_fixed_options)));
  for (const char* option : k_fixed_options) hasher.update(option);
  hasher.update(std::to_string(m_toolkit_includes.size()));
  for (const auto& dir : m_toolkit_includes) hasher.update(dir);
  hasher.update("renamed entry").update(renamed ? job.entry : std::string());
  hasher.update("nvrtc").update(m_version);
  hasher.update("arch").update(job.arch);
  return hasher.hex_digest();
}

CompileOutcome NvrtcCompiler::compile(const CompileJob& job) { return compile_with_resources(job).outcome; }

NvrtcCompileResult NvrtcCompiler::compile_with_resources(const CompileJob& job) {
  return std::move(compile_batch({job}).front());
}

std::vector<NvrtcCompileResult> NvrtcCompiler::compile_batch(const std::vector<CompileJob>& jobs) {
  std::map<std::string, Source> sources;  // by path: each is read once
  std::vector<Planned> planned(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const CompileJob& job = jobs[i];
    Planned& p = planned[i];
    CompileOutcome& outcome = p.result.outcome;
    p.job = &job;
    auto [source, added] = sources.try_emplace(job.source_path);
    if (added) source->second = read_source(job.source_path);
    p.source = &source->second;
    p.obstacle = cuda_obstacle(job, *p.source);
    const bool renamed = p.obstacle.empty();
    outcome.cache_key = key_of(job, renamed);
    if (renamed) {
      const std::string digits = outcome.cache_key.substr(0, k_entry_key_digits);
      outcome.entry_symbol = job.entry + "_k" + digits;
      p.scope = "ktune_k" + digits;
    }
    auto opts = options_of(job, !renamed);
    if (!opts) {
      outcome = failure(std::move(outcome), opts.error().message);
      continue;
    }
    p.options = std::move(opts).value();
    p.final_path = cuda_artifact_path(job.cache_dir, outcome.cache_key);
    // A hit only when the CUBIN matches the content hash recorded with its key
    // (jobs/artifact_cache.hpp) and holds the entry; anything else is compiled again and replaced.
    std::string cached;
    if (const ArtifactCheck check = verify_artifact(p.final_path, &cached); !check.ok()) {
      if (check.state != ArtifactState::missing) outcome.repaired = check.reason;
    } else if (auto kernels = cuda::read_cubin_kernels(cached);
               kernels && (!renamed || has_kernel(*kernels, outcome.entry_symbol))) {
      outcome.status = CandidateStatus::ok;
      outcome.artifact_path = p.final_path;
      outcome.cached = true;
      p.result.kernels = kernels_of(*kernels, p);
      summarize_resources(outcome, p.result.kernels);
      continue;
    }
    if (!p.source->readable) {
      outcome = failure(std::move(outcome), "cannot read source " + job.source_path + " of kernel '" +
                                                job.kernel + "' (missing or unreadable)");
      continue;
    }
    p.pending = true;
  }

  // Units of the pending jobs: those that may share one, by what they share; the others alone;
  // a key asked for twice is compiled once.
  std::map<std::string, std::vector<Planned*>> units, alone;
  std::map<std::string, Planned*> by_key;
  std::vector<std::pair<Planned*, const Planned*>> repeats;
  for (Planned& p : planned) {
    if (!p.pending) continue;
    if (auto [first, added] = by_key.try_emplace(p.result.outcome.cache_key, &p); !added) {
      repeats.emplace_back(&p, first->second);
      continue;
    }
    (p.obstacle.empty() ? units : alone)[batch_signature(*p.job)].push_back(&p);
  }
  UnitBuilder builder(*m_api, *m_pch, m_toolkit_includes, m_version);
  for (const auto& [signature, unit] : units) builder.build(unit);
  for (const auto& [signature, unit] : alone) {
    for (Planned* p : unit) {
      builder.build(std::span<Planned* const>(&p, 1));
      if (unit.size() > 1) p->result.outcome.batch_error = "the configs do not batch: " + p->obstacle;
    }
  }
  for (const auto& [repeat, first] : repeats) repeat->result = first->result;

  std::vector<NvrtcCompileResult> results;
  results.reserve(planned.size());
  for (Planned& p : planned) results.push_back(std::move(p.result));
  return results;
}

} // namespace ktune
