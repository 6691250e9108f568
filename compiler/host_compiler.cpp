#include "compiler/host_compiler.hpp"

#include "compiler/subprocess.hpp"
#include "core/hash.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_fixed_flags[] = {"-std=c++17", "-O3", "-march=native", "-shared", "-fPIC"};
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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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

} // namespace

std::string host_artifact_path(const std::string& cache_dir, const std::string& key) {
  return (fs::path(cache_dir) / key.substr(0, 2) / (key + ".so")).string();
}

std::string host_compiler_version(const std::string& cxx) {
  auto result = run_captured({cxx, "--version"}, 4096);
  if (!result) return {};
  if (result->end != ProcessEnd::unknown && !result->succeeded()) return {};
  const std::string& output = result->output;
  return output.substr(0, output.find('\n'));
}

std::vector<std::string> host_compile_argv(const CompileJob& job, const std::string& cxx,
                                           const std::string& output, const std::string& input) {
  std::vector<std::string> argv{cxx};
  for (const char* flag : k_fixed_flags) {
    if (std::find(job.removed_flags.begin(), job.removed_flags.end(), flag) == job.removed_flags.end()) {
      argv.push_back(flag);
    }
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
  Hasher hasher;
  hasher.update("ktune-host-compile").update(std::to_string(k_cache_version));
  if (!job.source_hash.empty()) {
    hasher.update("source_hash").update(job.source_hash);
  } else {
    // A job without a source hash is keyed by the source's current content.
    hasher.update("source_content").update(read_file(job.source_path));
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
  hasher.update(m_cxx).update(m_version).update(m_host_cpu);
  hasher.update(std::to_string(std::size(k_fixed_flags)));
  for (const char* flag : k_fixed_flags) hasher.update(flag);
  hasher.update(job.arch);
  return hasher.hex_digest();
}

CompileOutcome HostCompiler::compile(const CompileJob& job) {
  CompileOutcome outcome;
  outcome.cache_key = cache_key(job);

  if (job.language != "cpp") {
    return failure(std::move(outcome), "the host compiler builds language 'cpp'; kernel '" +
                                           job.kernel + "' is '" + job.language + "'");
  }
  Result<std::string> c_type = std::string();
  if (!job.dtype.empty()) c_type = dtype_c_type(job.dtype);
  if (!c_type)
    return failure(std::move(outcome), c_type.error().code + ": " + c_type.error().message);
  for (const auto& flag : job.removed_flags) {
    if (flag == "-shared" || flag == "-fPIC" ||
        std::find(std::begin(k_fixed_flags), std::end(k_fixed_flags), flag) == std::end(k_fixed_flags)) {
      return failure(std::move(outcome), "flags_remove of kernel '" + job.kernel + "': '" + flag +
                                             "' is not one of the fixed flags (-std=c++17, -O3, "
                                             "-march=native; -shared and -fPIC stay)");
    }
  }
  for (const auto& [name, value] : job.defines) {
    if (!is_identifier(name)) {
      return failure(std::move(outcome), "define '" + name + "' of kernel '" + job.kernel +
                                             "' is not a C identifier");
    }
  }

  if (job.cache_dir.empty()) {
    return failure(std::move(outcome),
                   "compile job for kernel '" + job.kernel + "' names no cache_dir");
  }
  const std::string final_path = host_artifact_path(
      fs::absolute(job.cache_dir).lexically_normal().string(), outcome.cache_key);
  std::error_code ec;
  if (fs::is_regular_file(final_path, ec)) {
    outcome.artifact_path = final_path;
    outcome.cached = true;
    return outcome;
  }
  const fs::path dir = fs::path(final_path).parent_path();
  fs::create_directories(dir, ec);
  if (ec) {
    return host_failure(std::move(outcome),
                        "cannot create cache directory " + dir.string() + ": " + ec.message());
  }

  std::string tmp_path = final_path + ".tmp.XXXXXX";
  const int tmp_fd = ::mkstemp(tmp_path.data());
  if (tmp_fd < 0) {
    return host_failure(std::move(outcome), "cannot create a temp file in the compile cache " +
                                                dir.string() + ": " + std::strerror(errno));
  }
  ::close(tmp_fd);

  // With a shim: one translation unit that includes the source, then the shim.
  std::string unit_path;
  if (!job.shim.empty()) {
    unit_path = tmp_path + ".cpp";
    std::ofstream unit(unit_path, std::ios::binary | std::ios::trunc);
    unit << "#include \"" << fs::absolute(job.source_path).lexically_normal().string() << "\"\n"
         << job.shim;
    unit.close();
    if (!unit) {
      ::unlink(tmp_path.c_str());
      ::unlink(unit_path.c_str());
      return host_failure(std::move(outcome), "cannot write " + unit_path);
    }
  }
  struct UnitRemover {
    const std::string& path;
    ~UnitRemover() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove_unit{unit_path};

  const std::vector<std::string> argv =
      host_compile_argv(job, m_cxx, tmp_path, unit_path.empty() ? job.source_path : unit_path);

  const auto start = std::chrono::steady_clock::now();
  auto result = run_captured(argv, k_max_log_bytes);
  outcome.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  if (!result) {
    ::unlink(tmp_path.c_str());
    return host_failure(std::move(outcome), "cannot run " + m_cxx + ": " + result.error().message);
  }
  std::string log = std::move(result->output);
  const bool produced = fs::file_size(tmp_path, ec) > 0 && !ec;
  // A status reaped elsewhere (ProcessEnd::unknown) counts as success when the output exists.
  const bool ok = result->end == ProcessEnd::exited ? result->code == 0
                  : result->end == ProcessEnd::unknown ? produced
                                                       : false;
  if (!ok || !produced) {
    ::unlink(tmp_path.c_str());
    if (result->end == ProcessEnd::signaled) {
      log += "\n" + m_cxx + " was killed by signal " + std::to_string(result->code);
      if (result->code == SIGKILL) {
        // Not by us (the worker has no deadline of its own): the OOM killer or an administrator.
        outcome = failure(std::move(outcome), std::move(log));
        outcome.infra = m_cxx + " was killed by SIGKILL from outside (the OOM killer or an administrator)";
        return outcome;
      }
    } else if (result->end == ProcessEnd::exited && result->code == 0) {
      log += "\n" + m_cxx + " exited 0 but wrote no output to " + tmp_path;
    }
    if (const std::string trouble = file_system_trouble(log); !trouble.empty()) {
      outcome = failure(std::move(outcome), std::move(log));
      outcome.infra = m_cxx + " could not write its files (" + trouble + ") in the compile cache " +
                      dir.string() + " or its temporary directory";
      return outcome;
    }
    return failure(std::move(outcome), std::move(log));
  }
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path.c_str());
    return host_failure(std::move(outcome), "cannot rename " + tmp_path + " to " + final_path +
                                                ": " + std::strerror(err));
  }
  outcome.status = CandidateStatus::ok;
  outcome.artifact_path = final_path;
  if (log.size() > k_max_log_bytes) log.resize(k_max_log_bytes);
  outcome.log = std::move(log);
  return outcome;
}

} // namespace ktune
