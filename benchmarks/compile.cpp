// bench_compile: how fast ktune compiles CUDA configs with nvrtc in compile processes, against
// `nvcc -cubin` run once per config as a subprocess (what a tuner without nvrtc does).
//
//   bench_compile [--configs N] [--workers W] [--arch sm_90] [--nvcc PATH] [--kernel-dir DIR]
//
// The configs are N admitted gemm configs at M=N=K=4096 spread evenly over the space (the CUDA
// family in kernels_src/cuda/gemm). Four timed passes, each into an empty cache:
//   nvrtc, 1 process   this binary re-run as a compile process (--child) compiling every config
//   nvrtc, W processes W compile processes, configs dealt round-robin
//   nvcc, 1 at a time  one nvcc per config
//   nvcc, W at a time  W nvcc subprocesses running at once
// Wall time includes starting the processes. Prints a table, then as its last line
//   {"bench":"compile","configs":N,"workers":W,"arch":..,"nvrtc_cfg_per_s":..,"nvcc_cfg_per_s":..,
//    "ratio":..,"nvrtc_1_cfg_per_s":..,"nvcc_1_cfg_per_s":..}
// where nvrtc_cfg_per_s and nvcc_cfg_per_s are the W-process rates and ratio = nvrtc / nvcc.
#include "jobs/kernel_registry.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "compiler/subprocess.hpp"
#include "core/param_space.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace ktune;

struct Options {
  std::size_t configs = 32;
  std::size_t workers = 2;
  std::string arch = "sm_90";
  std::string nvcc = KTUNE_NVCC;
  std::string kernel_dir = std::string(KTUNE_SOURCE_DIR) + "/kernels_src/cuda/gemm";
  bool child = false;
  std::string cache_dir;          // child only
  std::vector<std::size_t> slice; // child only: indices of the configs to compile
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "bench_compile: %s\n", message.c_str());
  std::exit(1);
}

std::vector<std::size_t> parse_indices(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(std::stoul(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--configs") {
        o.configs = std::stoul(value());
      } else if (arg == "--workers") {
        o.workers = std::stoul(value());
      } else if (arg == "--arch") {
        o.arch = value();
      } else if (arg == "--nvcc") {
        o.nvcc = value();
      } else if (arg == "--kernel-dir") {
        o.kernel_dir = value();
      } else if (arg == "--child") {
        o.child = true;
      } else if (arg == "--cache") {
        o.cache_dir = value();
      } else if (arg == "--slice") {
        o.slice = parse_indices(value());
      } else {
        fail("unknown option " + arg);
      }
    } catch (const std::logic_error&) {
      fail(arg + ": expected a number");
    }
  }
  if (o.configs == 0 || o.workers == 0) fail("--configs and --workers must be at least 1");
  return o;
}

// The benchmark's configs: `count` admitted configs spread evenly over gemm's space at 4096^3.
std::pair<LoadedKernel, std::vector<Config>> load_configs(const Options& o) {
  auto kernel = load_kernel(o.kernel_dir + "/kernel.toml");
  if (!kernel) fail(kernel.error().message);
  auto shape = Shape::parse("M=4096,N=4096,K=4096");
  auto space = ParamSpace::create(kernel->spec, *shape);
  if (!space) fail(space.error().message);
  auto all = space->enumerate();
  if (!all) fail(all.error().message);
  if (all->empty()) fail("gemm admits no config at 4096^3");
  std::vector<Config> picked;
  const std::size_t count = std::min(o.configs, all->size());
  for (std::size_t i = 0; i < count; ++i) picked.push_back((*all)[i * all->size() / count]);
  return {std::move(kernel).value(), std::move(picked)};
}

int run_child(const Options& o) {
  auto [kernel, configs] = load_configs(o);
  auto compiler = NvrtcCompiler::create();
  if (!compiler) fail(compiler.error().message);
  for (const std::size_t index : o.slice) {
    if (index >= configs.size()) fail("config index " + std::to_string(index) + " out of range");
    auto job = make_compile_job(kernel, configs[index], "f32", o.cache_dir);
    if (!job) fail(job.error().message);
    job->arch = o.arch;
    const CompileOutcome outcome = (*compiler)->compile(*job);
    if (outcome.status != CandidateStatus::ok) {
      fail("config " + config_to_string(configs[index]) + ": " +
           outcome.log.substr(0, outcome.log.find('\n')));
    }
  }
  return 0;
}

std::string self_path() {
  std::error_code ec;
  const fs::path path = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("cannot find this executable: " + ec.message());
  return path.string();
}

// Runs `tasks` (argv lists) on `parallel` threads, each running its share one after the other;
// returns the wall time in seconds. Any failing task ends the benchmark.
double run_tasks(const std::vector<std::vector<std::string>>& tasks, std::size_t parallel) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(parallel);
  for (std::size_t t = 0; t < parallel; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = t; i < tasks.size(); i += parallel) {
        auto result = run_captured(tasks[i], 64 * 1024);
        if (!result) {
          errors[t] = result.error().message;
          return;
        }
        if (result->end != ProcessEnd::unknown && !result->succeeded()) {
          errors[t] = tasks[i][0] + " failed: " + result->output.substr(0, 2000);
          return;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) {
    if (!error.empty()) fail(error);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::vector<std::string>> nvrtc_tasks(const Options& o, std::size_t configs,
                                                  std::size_t processes, const std::string& cache_dir) {
  std::vector<std::vector<std::string>> tasks;
  for (std::size_t p = 0; p < processes; ++p) {
    std::string slice;
    for (std::size_t i = p; i < configs; i += processes) {
      if (!slice.empty()) slice += ',';
      slice += std::to_string(i);
    }
    if (slice.empty()) continue;
    tasks.push_back({self_path(), "--child", "--arch", o.arch, "--cache", cache_dir, "--slice", slice,
                     "--configs", std::to_string(o.configs), "--kernel-dir", o.kernel_dir});
  }
  return tasks;
}

std::vector<std::vector<std::string>> nvcc_tasks(const Options& o, const LoadedKernel& kernel,
                                                 const std::vector<Config>& configs,
                                                 const std::string& out_dir) {
  std::vector<std::vector<std::string>> tasks;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::vector<std::string> argv{o.nvcc,
                                  "-cubin",
                                  "-arch=" + o.arch,
                                  "-std=c++17",
                                  "-I" + kernel.dir,
                                  "-DKTUNE_DTYPE=float",
                                  "-DKTUNE_DTYPE_F32=1"};
    for (const auto& [name, value] : configs[i]) argv.push_back("-D" + name + "=" + std::to_string(value));
    argv.push_back("-o");
    argv.push_back(out_dir + "/" + std::to_string(i) + ".cubin");
    argv.push_back(kernel.source_path);
    tasks.push_back(std::move(argv));
  }
  return tasks;
}

std::string fresh_dir(const fs::path& root, const std::string& name) {
  const fs::path dir = root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

} // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.child) return run_child(o);

  auto [kernel, configs] = load_configs(o);
  auto compiler = NvrtcCompiler::create();
  if (!compiler) fail(compiler.error().message);
  if (::access(o.nvcc.c_str(), X_OK) != 0) fail("nvcc not found at " + o.nvcc + " (use --nvcc)");

  const char* tmp = std::getenv("TMPDIR");
  const fs::path root = fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                        ("ktune-bench-compile-" + std::to_string(::getpid()));
  const std::size_t n = configs.size();
  std::printf("compiling %zu gemm configs for %s (nvrtc %s, %s)\n", n, o.arch.c_str(),
              (*compiler)->version().c_str(), o.nvcc.c_str());

  const double nvrtc_1 = run_tasks(nvrtc_tasks(o, n, 1, fresh_dir(root, "nvrtc1")), 1);
  const double nvrtc_w = run_tasks(nvrtc_tasks(o, n, o.workers, fresh_dir(root, "nvrtcW")), o.workers);
  const double nvcc_1 = run_tasks(nvcc_tasks(o, kernel, configs, fresh_dir(root, "nvcc1")), 1);
  const double nvcc_w = run_tasks(nvcc_tasks(o, kernel, configs, fresh_dir(root, "nvccW")), o.workers);
  fs::remove_all(root);

  const auto rate = [&](double seconds) { return static_cast<double>(n) / seconds; };
  std::printf("%-26s %10s %12s %12s\n", "", "wall s", "ms/config", "configs/s");
  const auto row = [&](const std::string& label, double seconds) {
    std::printf("%-26s %10.2f %12.1f %12.2f\n", label.c_str(), seconds,
                1000.0 * seconds / static_cast<double>(n), rate(seconds));
  };
  row("nvrtc, 1 process", nvrtc_1);
  row("nvrtc, " + std::to_string(o.workers) + " processes", nvrtc_w);
  row("nvcc -cubin, 1 at a time", nvcc_1);
  row("nvcc -cubin, " + std::to_string(o.workers) + " at a time", nvcc_w);
  std::printf("nvrtc / nvcc: %.2fx with 1 process, %.2fx with %zu\n", rate(nvrtc_1) / rate(nvcc_1),
              rate(nvrtc_w) / rate(nvcc_w), o.workers);

  const nlohmann::ordered_json summary = {{"bench", "compile"},
                                          {"configs", n},
                                          {"workers", o.workers},
                                          {"arch", o.arch},
                                          {"nvrtc_cfg_per_s", rate(nvrtc_w)},
                                          {"nvcc_cfg_per_s", rate(nvcc_w)},
                                          {"ratio", rate(nvrtc_w) / rate(nvcc_w)},
                                          {"nvrtc_1_cfg_per_s", rate(nvrtc_1)},
                                          {"nvcc_1_cfg_per_s", rate(nvcc_1)}};
  std::cout << summary.dump() << std::endl;
  return 0;
}
