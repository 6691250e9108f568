// bench_compile: how fast CUDA configs compile three ways, each with one process and with a pool
// of W processes, side by side in one run:
//   nvcc      `nvcc -cubin` run once per config as a subprocess (what a tuner without nvrtc does)
//   nvrtc     one nvrtc program per config, the source with the config's -D options, in
//             processes that each compile their share one after the other (Triton's shape)
//   ktune     ktune-worker processes (role compile) answering compile_batch requests, fed from
//             one queue in requests sized by one BatchSizer from the times measured, as ktuned
//             feeds a compile check: several configs per nvrtc program, precompiled headers
//
//   bench_compile [--configs N] [--workers W] [--arch sm_90] [--dtype f32] [--nvcc PATH]
//                 [--kernel-dir DIR] [--max-batch-ms MS]
//
// The configs are N admitted configs of the family (default: the CUDA gemm in
// kernels_src/cuda/gemm) at 4096 for every shape dim, spread evenly over the space. Six timed
// passes, each into an empty cache; the pools deal configs round-robin; wall time includes
// starting the processes. Prints a table, then as its last line
//   {"bench":"compile","configs":N,"workers":W,"arch":..,"nvcc_1_cfg_per_s":..,
//    "nvcc_pool_cfg_per_s":..,"nvrtc_1_cfg_per_s":..,"nvrtc_pool_cfg_per_s":..,
//    "ktune_1_cfg_per_s":..,"ktune_pool_cfg_per_s":..,"ratio_vs_nvcc":..,"ratio_vs_single":..,
//    "cpu_ms_per_cfg":{"nvcc":..,"nvrtc":..,"ktune":..},"ktune_batch_sizes":{..}}
// where ratio_vs_nvcc = ktune / nvcc and ratio_vs_single = ktune / nvrtc, both for the pools;
// cpu_ms_per_cfg is the pools' CPU time (user + system of every process they ran) per config,
// the figure to compare on a machine others load too; ktune_batch_sizes counts the ktune
// passes' programs by their configs.
#include "compiler/nvrtc_compiler.hpp"
#include "core/file_io.hpp"
#include "compiler/subprocess.hpp"
#include "core/param_space.hpp"
#include "cuda/cuda_api.hpp"
#include "daemon/batch_sizer.hpp"
#include "daemon/worker_process.hpp"
#include "jobs/kernel_registry.hpp"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace ktune;

struct Options {
  std::size_t configs = 64;
  std::size_t workers = 2;
  std::string arch = "sm_90";
  std::string dtype;  // "" = the family's first
  std::string nvcc = KTUNE_NVCC;
  std::string kernel_dir = std::string(KTUNE_SOURCE_DIR) + "/kernels_src/cuda/gemm";
  // A compile check's limit on one batch: a quarter of the default compile deadline (120 s).
  double max_batch_ms = 30000;
  std::string child;               // "nvrtc": a compile process of that pass
  std::string cache_dir;           // child only
  std::vector<std::size_t> slice;  // child only: indices of the configs to compile
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
      } else if (arg == "--dtype") {
        o.dtype = value();
      } else if (arg == "--nvcc") {
        o.nvcc = value();
      } else if (arg == "--kernel-dir") {
        o.kernel_dir = value();
      } else if (arg == "--max-batch-ms") {
        o.max_batch_ms = std::stod(value());
      } else if (arg == "--child") {
        o.child = value();
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
  if (!o.child.empty() && o.child != "nvrtc") fail("--child: expected nvrtc");
  return o;
}

struct Family {
  LoadedKernel kernel;
  std::vector<Config> configs;
  std::string dtype;
};

// `count` admitted configs spread evenly over the family's space at 4096 for every dim.
Family load_family(const Options& o) {
  auto kernel = load_kernel(o.kernel_dir + "/kernel.toml");
  if (!kernel) fail(kernel.error().message);
  std::string shape_text;
  for (const auto& dim : kernel->spec.shape_dims) shape_text += (shape_text.empty() ? "" : ",") + dim + "=4096";
  auto shape = Shape::parse(shape_text);
  if (!shape) fail(shape.error().message);
  auto space = ParamSpace::create(kernel->spec, *shape);
  if (!space) fail(space.error().message);
  auto all = space->enumerate();
  if (!all) fail(all.error().message);
  if (all->empty()) fail(kernel->spec.name + " admits no config at " + shape_text);
  std::vector<Config> picked;
  const std::size_t count = std::min(o.configs, all->size());
  for (std::size_t i = 0; i < count; ++i) picked.push_back((*all)[i * all->size() / count]);
  std::string dtype = o.dtype.empty() ? kernel->spec.dtypes.front() : o.dtype;
  return {std::move(kernel).value(), std::move(picked), std::move(dtype)};
}

std::vector<CompileJob> slice_jobs(const Options& o, const Family& family) {
  std::vector<CompileJob> jobs;
  for (const std::size_t index : o.slice) {
    if (index >= family.configs.size()) fail("config index " + std::to_string(index) + " out of range");
    auto job = make_compile_job(family.kernel, family.configs[index], family.dtype, o.cache_dir);
    if (!job) fail(job.error().message);
    job->arch = o.arch;
    jobs.push_back(std::move(*job));
  }
  return jobs;
}

// One nvrtc program per config: the source with its options, the CUBIN written to the cache dir.
void run_nvrtc_child(const Options& o, const Family& family, const NvrtcCompiler& compiler) {
  auto api = cuda::load_nvrtc();
  if (!api) fail(api.error().message);
  const cuda::NvrtcApi& nv = **api;
  const std::string source = read_file(family.kernel.source_path).value_or(std::string());
  std::size_t n = 0;
  for (const CompileJob& job : slice_jobs(o, family)) {
    auto options = compiler.options(job);
    if (!options) fail(options.error().message);
    std::vector<const char*> argv;
    for (const auto& option : *options) argv.push_back(option.c_str());
    nvrtcProgram program = nullptr;
    std::string cubin;
    try {
      KTUNE_NVRTC(nv, nullptr, nvrtcCreateProgram(&program, source.c_str(), job.source_path.c_str(), 0,
                                                  nullptr, nullptr));
      KTUNE_NVRTC(nv, program, nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data()));
      std::size_t size = 0;
      KTUNE_NVRTC(nv, program, nvrtcGetCUBINSize(program, &size));
      cubin.resize(size);
      KTUNE_NVRTC(nv, program, nvrtcGetCUBIN(program, cubin.data()));
    } catch (const cuda::CudaCallError& error) {
      fail(config_to_string(job.defines) + ": " + error.what());
    }
    nv.nvrtcDestroyProgram(&program);
    std::ofstream(o.cache_dir + "/" + std::to_string(n++) + ".cubin", std::ios::binary) << cubin;
  }
}

int run_child(const Options& o) {
  const Family family = load_family(o);
  auto compiler = NvrtcCompiler::create();
  if (!compiler) fail(compiler.error().message);
  run_nvrtc_child(o, family, **compiler);
  return 0;
}

std::string self_path() {
  std::error_code ec;
  const fs::path path = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("cannot find this executable: " + ec.message());
  return path.string();
}

// CPU time (user + system) of this process's children that have been waited for, in seconds.
double children_cpu_s() {
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Pass {
  double wall_s = 0;
  double cpu_s = 0;                  // of the processes it ran
  std::vector<std::string> outputs;  // one per task
};

// Runs `tasks` (argv lists) on `parallel` threads, each running its share one after the other.
// Any failing task ends the benchmark.
Pass run_tasks(const std::vector<std::vector<std::string>>& tasks, std::size_t parallel) {
  const double cpu_before = children_cpu_s();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(parallel);
  std::vector<std::string> outputs(tasks.size());
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
        outputs[i] = result->output;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) {
    if (!error.empty()) fail(error);
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          children_cpu_s() - cpu_before, outputs};
}

std::vector<std::vector<std::string>> child_tasks(const Options& o, const std::string& mode, std::size_t configs,
                                                  std::size_t processes, const std::string& cache_dir) {
  std::vector<std::vector<std::string>> tasks;
  for (std::size_t p = 0; p < processes; ++p) {
    std::string slice;
    for (std::size_t i = p; i < configs; i += processes) {
      if (!slice.empty()) slice += ',';
      slice += std::to_string(i);
    }
    if (slice.empty()) continue;
    tasks.push_back({self_path(), "--child", mode, "--arch", o.arch, "--cache", cache_dir, "--slice", slice,
                     "--configs", std::to_string(o.configs), "--kernel-dir", o.kernel_dir, "--max-batch-ms",
                     std::to_string(o.max_batch_ms)});
    if (!o.dtype.empty()) {
      tasks.back().push_back("--dtype");
      tasks.back().push_back(o.dtype);
    }
  }
  return tasks;
}

// One ktune-worker (role compile) on a socketpair: request lines out, reply lines in.
class Worker {
public:
  explicit Worker(const std::string& path) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair failed");
    m_socket.reset(fds[0]);
    ktune::UniqueFd theirs(fds[1]);
    auto pid = daemon::spawn_group_leader("worker " + path, {path, "--fd", "3", "--role", "compile"},
                                          environ, theirs.get());
    if (!pid) fail(pid.error().message);
    m_pid = *pid;
    if (read_line().find("\"ready\"") == std::string::npos) fail(path + " did not say it is ready");
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Closes the socket (the worker exits at end of input) and waits for it, so that its CPU time
  // counts among this process's children.
  ~Worker() {
    m_socket.reset();
    int status = 0;
    ::waitpid(m_pid, &status, 0);
  }

  // Sends compile_batch of `jobs`; returns its outcomes.
  std::vector<CompileOutcome> compile(const nlohmann::json& jobs) {
    std::string line = nlohmann::json{{"id", ++m_id}, {"op", "compile_batch"}, {"jobs", jobs}}.dump() + "\n";
    for (std::size_t sent = 0; sent < line.size();) {
      const ssize_t n = ::write(m_socket.get(), line.data() + sent, line.size() - sent);
      if (n <= 0) fail("cannot write to a ktune-worker");
      sent += static_cast<std::size_t>(n);
    }
    const auto reply = nlohmann::json::parse(read_line(), nullptr, false);
    if (reply.is_discarded() || !reply.value("ok", false)) fail("ktune-worker: " + reply.dump().substr(0, 2000));
    std::vector<CompileOutcome> outcomes;
    for (const auto& item : reply["outcome"]["outcomes"]) {
      auto outcome = CompileOutcome::from_json(item);
      if (!outcome) fail(outcome.error().message);
      outcomes.push_back(std::move(*outcome));
    }
    return outcomes;
  }

private:
  std::string read_line() {
    for (;;) {
      if (const auto end = m_buffer.find('\n'); end != std::string::npos) {
        std::string line = m_buffer.substr(0, end);
        m_buffer.erase(0, end + 1);
        return line;
      }
      char chunk[64 * 1024];
      const ssize_t n = ::read(m_socket.get(), chunk, sizeof chunk);
      if (n <= 0) fail("a ktune-worker closed its socket");
      m_buffer.append(chunk, static_cast<std::size_t>(n));
    }
  }

  ktune::UniqueFd m_socket;
  pid_t m_pid = -1;
  long m_id = 0;
  std::string m_buffer;
};

// ktune's pass: `processes` ktune-workers, each taking requests from one queue of the configs,
// each request as many configs as one BatchSizer (fed every outcome) finds worth it.
Pass run_ktune_pool(const Options& o, const Family& family, std::size_t processes, const std::string& cache_dir,
                    std::map<std::size_t, std::size_t>& programs) {
  std::vector<nlohmann::json> jobs;
  for (const Config& config : family.configs) {
    auto job = make_compile_job(family.kernel, config, family.dtype, cache_dir);
    if (!job) fail(job.error().message);
    job->arch = o.arch;
    jobs.push_back(job->to_json());
  }
  const std::string path = (fs::path(self_path()).parent_path() / "ktune-worker").string();
  const double cpu_before = children_cpu_s();
  const auto start = std::chrono::steady_clock::now();
  {
    // Spawned from this thread, which outlives them (the workers die with the thread that
    // spawned them: PR_SET_PDEATHSIG).
    std::vector<std::unique_ptr<Worker>> workers;
    for (std::size_t w = 0; w < processes; ++w) workers.push_back(std::make_unique<Worker>(path));
    std::mutex mutex;
    daemon::BatchSizer sizer(o.max_batch_ms);
    std::size_t next = 0;
    std::vector<std::thread> threads;
    for (auto& worker : workers) {
      threads.emplace_back([&, w = worker.get()] {
        for (;;) {
          nlohmann::json request = nlohmann::json::array();
          {
            const std::lock_guard lock(mutex);
            const std::size_t size = std::min(sizer.size(), jobs.size() - next);
            if (size == 0) return;
            for (std::size_t i = 0; i < size; ++i) request.push_back(jobs[next++]);
            ++programs[size];
          }
          const auto outcomes = w->compile(request);
          const std::lock_guard lock(mutex);
          for (const CompileOutcome& outcome : outcomes) {
            if (outcome.status != CandidateStatus::ok) fail("a config failed: " + outcome.log.substr(0, 500));
            if (!outcome.cached) sizer.observe(static_cast<std::size_t>(outcome.batch_size), outcome.compile_ms);
            if (!outcome.batch_error.empty()) sizer.stop();
          }
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          children_cpu_s() - cpu_before, {}};
}

std::vector<std::vector<std::string>> nvcc_tasks(const Options& o, const Family& family,
                                                 const std::string& out_dir) {
  std::vector<std::vector<std::string>> tasks;
  for (std::size_t i = 0; i < family.configs.size(); ++i) {
    auto job = make_compile_job(family.kernel, family.configs[i], family.dtype, out_dir);
    if (!job) fail(job.error().message);
    std::vector<std::string> argv{o.nvcc, "-cubin", "-arch=" + o.arch, "-std=c++17", "-I" + family.kernel.dir};
    if (!job->dtype.empty()) {
      if (const std::string header = cuda_dtype_header(job->dtype); !header.empty()) {
        argv.push_back("--pre-include=" + header);
      }
      argv.push_back("-DKTUNE_DTYPE=" + cuda_dtype_c_type(job->dtype).value());
      std::string upper = job->dtype;
      for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      argv.push_back("-DKTUNE_DTYPE_" + upper + "=1");
    }
    for (const auto& [name, value] : family.configs[i]) argv.push_back("-D" + name + "=" + std::to_string(value));
    argv.insert(argv.end(), job->extra_flags.begin(), job->extra_flags.end());
    argv.push_back("-o");
    argv.push_back(out_dir + "/" + std::to_string(i) + ".cubin");
    argv.push_back(family.kernel.source_path);
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
  if (!o.child.empty()) return run_child(o);

  const Family family = load_family(o);
  auto compiler = NvrtcCompiler::create();
  if (!compiler) fail(compiler.error().message);
  if (::access(o.nvcc.c_str(), X_OK) != 0) fail("nvcc not found at " + o.nvcc + " (use --nvcc)");

  const char* tmp = std::getenv("TMPDIR");
  const fs::path root = fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                        ("ktune-bench-compile-" + std::to_string(::getpid()));
  const std::size_t n = family.configs.size();
  const std::size_t w = o.workers;
  std::printf("compiling %zu %s configs (%s) for %s with 1 and %zu processes (nvrtc %s, %s)\n", n,
              family.kernel.spec.name.c_str(), family.dtype.c_str(), o.arch.c_str(), w,
              (*compiler)->version().c_str(), o.nvcc.c_str());

  const auto timed = [&](const std::string& mode, std::size_t processes) {
    return run_tasks(child_tasks(o, mode, n, processes, fresh_dir(root, mode + std::to_string(processes))),
                     processes);
  };
  const Pass nvcc_1 = run_tasks(nvcc_tasks(o, family, fresh_dir(root, "nvcc1")), 1);
  const Pass nvcc_w = run_tasks(nvcc_tasks(o, family, fresh_dir(root, "nvccW")), w);
  const Pass nvrtc_1 = timed("nvrtc", 1);
  const Pass nvrtc_w = timed("nvrtc", w);
  std::map<std::size_t, std::size_t> programs;  // configs per request -> requests, both passes
  const Pass ktune_1 = run_ktune_pool(o, family, 1, fresh_dir(root, "ktune1"), programs);
  const Pass ktune_w = run_ktune_pool(o, family, w, fresh_dir(root, "ktuneW"), programs);
  fs::remove_all(root);
  nlohmann::json sizes = nlohmann::json::object();
  for (const auto& [size, count] : programs) sizes[std::to_string(size)] = count;

  const auto rate = [&](const Pass& pass) { return static_cast<double>(n) / pass.wall_s; };
  const auto cpu_ms = [&](const Pass& pass) { return 1000.0 * pass.cpu_s / static_cast<double>(n); };
  std::printf("%-36s %8s %11s %10s %14s\n", "", "wall s", "ms/config", "configs/s", "CPU ms/config");
  const auto row = [&](const std::string& label, const Pass& pass) {
    std::printf("%-36s %8.2f %11.1f %10.2f %14.1f\n", label.c_str(), pass.wall_s,
                1000.0 * pass.wall_s / static_cast<double>(n), rate(pass), cpu_ms(pass));
  };
  const std::string pool = std::to_string(w) + " processes";
  row("nvcc -cubin per config, 1 at a time", nvcc_1);
  row("nvcc -cubin per config, " + std::to_string(w) + " at a time", nvcc_w);
  row("nvrtc program per config, 1 process", nvrtc_1);
  row("nvrtc program per config, " + pool, nvrtc_w);
  row("ktune batched + PCH, 1 process", ktune_1);
  row("ktune batched + PCH, " + pool, ktune_w);
  std::printf("ktune requests by configs per request: %s\n", sizes.dump().c_str());
  std::printf("pool: ktune / nvcc %.2fx, ktune / nvrtc %.2fx (CPU per config: %.2fx, %.2fx)\n",
              rate(ktune_w) / rate(nvcc_w), rate(ktune_w) / rate(nvrtc_w), cpu_ms(nvcc_w) / cpu_ms(ktune_w),
              cpu_ms(nvrtc_w) / cpu_ms(ktune_w));

  const nlohmann::ordered_json summary = {{"bench", "compile"},
                                          {"kernel", family.kernel.spec.name},
                                          {"configs", n},
                                          {"workers", w},
                                          {"arch", o.arch},
                                          {"nvcc_1_cfg_per_s", rate(nvcc_1)},
                                          {"nvcc_pool_cfg_per_s", rate(nvcc_w)},
                                          {"nvrtc_1_cfg_per_s", rate(nvrtc_1)},
                                          {"nvrtc_pool_cfg_per_s", rate(nvrtc_w)},
                                          {"ktune_1_cfg_per_s", rate(ktune_1)},
                                          {"ktune_pool_cfg_per_s", rate(ktune_w)},
                                          {"ratio_vs_nvcc", rate(ktune_w) / rate(nvcc_w)},
                                          {"ratio_vs_single", rate(ktune_w) / rate(nvrtc_w)},
                                          {"cpu_ms_per_cfg", {{"nvcc", cpu_ms(nvcc_w)},
                                                              {"nvrtc", cpu_ms(nvrtc_w)},
                                                              {"ktune", cpu_ms(ktune_w)}}},
                                          {"ktune_batch_sizes", sizes}};
  std::cout << summary.dump() << std::endl;
  return 0;
}
