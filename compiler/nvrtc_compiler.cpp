#include "compiler/nvrtc_compiler.hpp"

#include "core/hash.hpp"
#include "core/protocol.hpp"
#include "cuda/cuda_api.hpp"
#include "jobs/artifact_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_fixed_options[] = {"-std=c++17", "--extra-device-vectorization",
                                           "--ptxas-options=-v"};
constexpr std::size_t k_max_log_bytes = 8 * 1024;

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

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return out.str();
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
  if (dtype == "i32") return std::string("int");
  if (dtype == "i64") return std::string("long long");
  return make_error(protocol::code::bad_dtype,
                    "dtype '" + std::string(dtype) + "': expected one of f32, f64, f16, i32, i64");
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
      m_toolkit_include(cuda::toolkit_include_dir()) {}

Result<std::vector<std::string>> NvrtcCompiler::options(const CompileJob& job) const {
  const std::string where = "kernel '" + job.kernel + "'";
  if (job.language != "cuda") {
    return make_error("compile_error",
                      "nvrtc builds language 'cuda'; " + where + " is '" + job.language + "'");
  }
  if (job.arch.empty()) {
    return make_error("compile_error", where + ": a CUDA compile job needs an arch (e.g. sm_90), found none");
  }
  if (!is_cuda_arch(job.arch)) {
    return make_error("compile_error", where + ": arch '" + job.arch +
                                           "': expected sm_<digits> with an optional a or f suffix");
  }
  if (!m_archs.empty() && std::find(m_archs.begin(), m_archs.end(), arch_number(job.arch)) == m_archs.end()) {
    return make_error("compile_error", where + ": arch '" + job.arch + "' is not supported by nvrtc " +
                                           m_version + " (it supports " + join_archs(m_archs) + ")");
  }
  Result<std::string> c_type = std::string();  // an empty dtype: no KTUNE_DTYPE (no dtype axis)
  if (!job.dtype.empty()) c_type = cuda_dtype_c_type(job.dtype);
  if (!c_type) return make_error("compile_error", where + ": " + c_type.error().message);
  for (const auto& [name, value] : job.defines) {
    if (!is_identifier(name)) {
      return make_error("compile_error", where + ": define '" + name + "' is not a C identifier");
    }
  }

  std::vector<std::string> options{"--gpu-architecture=" + job.arch};
  options.insert(options.end(), std::begin(k_fixed_options), std::end(k_fixed_options));
  for (const auto& dir : job.include_dirs) options.push_back("-I" + dir);
  if (!m_toolkit_include.empty()) options.push_back("-I" + m_toolkit_include);
  if (!job.dtype.empty()) {
    options.push_back("-DKTUNE_DTYPE=" + *c_type);
    options.push_back("-DKTUNE_DTYPE_" + upper(job.dtype) + "=1");
  }
  for (const auto& [name, value] : job.defines) options.push_back("-D" + name + "=" + std::to_string(value));
  options.insert(options.end(), job.extra_flags.begin(), job.extra_flags.end());
  return options;
}

std::string NvrtcCompiler::cache_key(const CompileJob& job) const {
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
  hasher.update("nvrtc").update(m_version);
  hasher.update("arch").update(job.arch);
  return hasher.hex_digest();
}

CompileOutcome NvrtcCompiler::compile(const CompileJob& job) { return compile_with_resources(job).outcome; }

namespace {

// The outcome's registers, spills and shared_bytes: the largest over the CUBIN's kernels (a
// family has one entry; helpers that are __global__ too count as well), -1 where none reports.
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

} // namespace

NvrtcCompileResult NvrtcCompiler::compile_with_resources(const CompileJob& job) {
  NvrtcCompileResult result;
  CompileOutcome& outcome = result.outcome;
  outcome.cache_key = cache_key(job);

  auto opts = options(job);
  if (!opts) {
    outcome = failure(std::move(outcome), opts.error().message);
    return result;
  }

  const std::string final_path = cuda_artifact_path(job.cache_dir, outcome.cache_key);
  // A hit only when the CUBIN matches the content hash recorded with its key
  // (jobs/artifact_cache.hpp); anything else is compiled again and replaced.
  std::string cached;
  if (const ArtifactCheck check = verify_artifact(final_path, &cached); !check.ok()) {
    if (check.state != ArtifactState::missing) outcome.repaired = check.reason;
  } else if (auto kernels = cuda::read_cubin_kernels(cached)) {
    outcome.status = CandidateStatus::ok;
    outcome.artifact_path = final_path;
    outcome.cached = true;
    result.kernels = std::move(kernels).value();
    summarize_resources(outcome, result.kernels);
    return result;
  }
  // Missing, failed its check, or not a readable CUBIN: compiled again below and replaced.

  const auto source = read_file(job.source_path);
  if (!source) {
    outcome = failure(std::move(outcome), "cannot read source " + job.source_path + " of kernel '" +
                                              job.kernel + "' (missing or unreadable)");
    return result;
  }
  std::vector<const char*> argv;
  argv.reserve(opts->size());
  for (const auto& option : *opts) argv.push_back(option.c_str());

  const auto start = std::chrono::steady_clock::now();
  outcome.batch_size = 1;  // nvrtc compiles one config per program
  std::string cubin;
  std::string log;
  try {
    const cuda::NvrtcApi& api = *m_api;
    Program program(api, *source, job.source_path);
    try {
      KTUNE_NVRTC(api, program.get(),
                  nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data()));
    } catch (const cuda::CudaCallError& error) {
      outcome.compile_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      const bool source_error = error.code() == NVRTC_ERROR_COMPILATION;
      std::string text = error.log();
      if (!source_error || text.empty()) text = error.summary() + (text.empty() ? "" : "\n" + text);
      outcome = failure(std::move(outcome), std::move(text));
      return result;
    }
    log = cuda::program_log(api, program.get());
    std::size_t size = 0;
    KTUNE_NVRTC(api, program.get(), nvrtcGetCUBINSize(program.get(), &size));
    cubin.resize(size);
    KTUNE_NVRTC(api, program.get(), nvrtcGetCUBIN(program.get(), cubin.data()));
  } catch (const cuda::CudaCallError& error) {
    outcome = failure(std::move(outcome), error.what());
    return result;
  }
  outcome.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  auto kernels = cuda::read_cubin_kernels(cubin);
  if (!kernels) {
    outcome =
        failure(std::move(outcome), "nvrtc " + m_version + " returned an unreadable CUBIN for kernel '" +
                                        job.kernel + "': " + kernels.error().message + "\n" + log);
    return result;
  }
  if (auto written = store_artifact(final_path, cubin); !written) {
    outcome = failure(std::move(outcome), written.error().message);
    return result;
  }
  outcome.status = CandidateStatus::ok;
  outcome.artifact_path = final_path;
  result.kernels = cuda::merge_resources(std::move(kernels).value(), cuda::parse_ptxas_info(log));
  summarize_resources(outcome, result.kernels);
  outcome.log = truncated(std::move(log));
  return result;
}

} // namespace ktune
