#include "bench/cuda_runner.hpp"
#include "core/file_io.hpp"

#include "bench/cuda_timing.hpp"
#include "bench/host_buffers.hpp"
#include "bench/sampler.hpp"
#include "core/protocol.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/nvml.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using cuda::CudaCallError;
using cuda::DriverApi;

constexpr std::size_t k_guard_bytes = 256; // keeps the data 256-byte aligned
constexpr unsigned char k_guard_pattern = 0xa5;
constexpr std::size_t k_min_flush_bytes = std::size_t{8} << 20;

double elapsed_ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// What every owner of a driver handle shares: the table and whether the context is lost (then
// nothing is released: every call would fail, and the process is about to exit).
struct DeviceContext {
  const DriverApi* drv = nullptr;
  bool lost = false;
};

class DeviceMemory {
public:
  DeviceMemory(DeviceContext& ctx, std::size_t bytes) : m_ctx(&ctx) {
    KTUNE_CU(*ctx.drv, cuMemAlloc(&m_ptr, bytes));
  }
  DeviceMemory(DeviceMemory&& other) noexcept
      : m_ctx(other.m_ctx), m_ptr(std::exchange(other.m_ptr, CUdeviceptr{0})) {}
  DeviceMemory& operator=(DeviceMemory&&) = delete;
  DeviceMemory(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (m_ptr != 0 && !m_ctx->lost) KTUNE_CU_NOEXCEPT(*m_ctx->drv, cuMemFree(m_ptr));
  }
  [[nodiscard]] CUdeviceptr get() const { return m_ptr; }

private:
  DeviceContext* m_ctx;
  CUdeviceptr m_ptr = 0;
};

class Module {
public:
  Module(DeviceContext& ctx, const std::string& image) : m_ctx(&ctx) {
    KTUNE_CU(*ctx.drv, cuModuleLoadData(&m_module, image.data()));
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() {
    if (m_module != nullptr && !m_ctx->lost) KTUNE_CU_NOEXCEPT(*m_ctx->drv, cuModuleUnload(m_module));
  }
  [[nodiscard]] CUmodule get() const { return m_module; }

private:
  DeviceContext* m_ctx;
  CUmodule m_module = nullptr;
};

class PrimaryContext {
public:
  PrimaryContext(DeviceContext& ctx, CUdevice device) : m_ctx(&ctx), m_device(device) {
    KTUNE_CU(*ctx.drv, cuDevicePrimaryCtxRetain(&m_context, device));
  }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext() {
    if (m_context != nullptr && !m_ctx->lost) {
      KTUNE_CU_NOEXCEPT(*m_ctx->drv, cuDevicePrimaryCtxRelease(m_device));
    }
  }
  [[nodiscard]] CUcontext get() const { return m_context; }

private:
  DeviceContext* m_ctx;
  CUdevice m_device;
  CUcontext m_context = nullptr;
};

class Stream {
public:
  explicit Stream(DeviceContext& ctx) : m_ctx(&ctx) {
    // A blocking stream: work on it is ordered with the synchronous copies ktune issues on the
    // legacy default stream (inputs uploaded before a checked run).
    KTUNE_CU(*ctx.drv, cuStreamCreate(&m_stream, CU_STREAM_DEFAULT));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (m_stream != nullptr && !m_ctx->lost) KTUNE_CU_NOEXCEPT(*m_ctx->drv, cuStreamDestroy(m_stream));
  }
  [[nodiscard]] CUstream get() const { return m_stream; }

private:
  DeviceContext* m_ctx;
  CUstream m_stream = nullptr;
};

class Event {
public:
  explicit Event(DeviceContext& ctx) : m_ctx(&ctx) {
    KTUNE_CU(*ctx.drv, cuEventCreate(&m_event, CU_EVENT_DEFAULT));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (m_event != nullptr && !m_ctx->lost) KTUNE_CU_NOEXCEPT(*m_ctx->drv, cuEventDestroy(m_event));
  }
  [[nodiscard]] CUevent get() const { return m_event; }

private:
  DeviceContext* m_ctx;
  CUevent m_event = nullptr;
};

std::optional<ArgKind> parse_arg_kind(std::string_view text) {
  if (text == "in") return ArgKind::in;
  if (text == "out") return ArgKind::out;
  if (text == "inout") return ArgKind::inout;
  if (text == "scalar") return ArgKind::scalar;
  return std::nullopt;
}

// One spec arg as the kernel sees it.
struct DeviceArg {
  std::string name;
  ArgKind kind = ArgKind::in;
  DType dtype = DType::f32;
  std::size_t count = 0;
  std::size_t bytes = 0;
  std::optional<HostBuffer> initial;  // in: the inputs filled from the seed
  std::optional<DeviceMemory> memory; // buffers: guard + data + guard
  std::optional<DeviceMemory> pristine; // inout: the seeded contents, restored on the device
  CUdeviceptr data = 0;               // what the kernel receives
  alignas(8) unsigned char scalar[8] = {};

  [[nodiscard]] bool is_buffer() const { return kind != ArgKind::scalar; }
  [[nodiscard]] bool is_output() const { return kind == ArgKind::out || kind == ArgKind::inout; }
  [[nodiscard]] bool is_input() const { return kind == ArgKind::in || kind == ArgKind::inout; }
};

using Snapshot = std::vector<std::vector<unsigned char>>; // one per arg; empty unless an output

// One more copy of every buffer arg, for a batch that rotates over argument sets
// (bench/cuda_timing.hpp): no guards, contents copied from the first set when made.
struct ExtraSet {
  std::vector<DeviceMemory> memory;   // one per buffer arg, in arg order
  std::vector<CUdeviceptr> pointers;  // one per arg (0 for scalars): what the kernel receives
  std::vector<void*> params;          // cuLaunchKernel's kernelParams for this set
};

struct DeviceArgs {
  std::vector<DeviceArg> args;
  std::vector<void*> params;                                // cuLaunchKernel's kernelParams
  std::vector<std::pair<std::string, Snapshot>> references; // reference identity -> outputs
  std::vector<std::unique_ptr<ExtraSet>> extra_sets;        // sets 1.. of a rotating batch

  [[nodiscard]] std::size_t set_bytes() const {
    std::size_t bytes = 0;
    for (const auto& slot : args) bytes += slot.is_buffer() ? slot.bytes : 0;
    return bytes;
  }
  // kernelParams of argument set `i` (0: the checked set).
  [[nodiscard]] void** params_of(int i) {
    return i == 0 ? params.data() : extra_sets[static_cast<std::size_t>(i - 1)]->params.data();
  }
};



BenchOutcome failure(CandidateStatus status, std::string reason) {
  BenchOutcome outcome;
  outcome.status = status;
  outcome.reason = std::move(reason);
  return outcome;
}

// A failed candidate, as opposed to a CUDA call failing.
struct CandidateFailure {
  CandidateStatus status;
  std::string reason;
};

} // namespace

nlohmann::json CudaRunOutcome::to_json() const {
  nlohmann::json j = outcome.to_json();
  j["resources"] = resources ? resources->to_json() : nlohmann::json(nullptr);
  j["context_lost"] = context_lost;
  return j;
}

struct CudaRunner::State {
  // Declaration order is destruction order reversed: the context outlives every owner.
  DeviceContext ctx;
  CudaDeviceProperties props;
  std::string name; // the device as the daemon names it ("cuda:3"), in every message
  std::size_t flush_bytes = 0;
  std::optional<PrimaryContext> primary;
  std::optional<Stream> stream;
  std::optional<Event> start;
  std::optional<Event> stop;
  std::optional<DeviceMemory> flush;
  std::uint64_t flush_round = 0;
  std::string args_key;
  std::unique_ptr<DeviceArgs> args;
  std::string lost_reason;
  std::unique_ptr<cuda::NvmlClocks> clocks;
  std::optional<Module> spin_module; // k_spin_ptx, loaded once; none when the driver refused it
  CUfunction spin = nullptr;
  std::string spin_error;
  double enqueue_us = 20; // host time the last sample took to queue: sizes the next spin

  [[nodiscard]] const DriverApi& drv() const { return *ctx.drv; }

  void make_current() { KTUNE_CU(drv(), cuCtxSetCurrent(primary->get())); }

  void sync() { KTUNE_CU(drv(), cuStreamSynchronize(stream->get())); }

  // args[i]'s kind, dtype and, for a buffer, its init and size checked (a scalar holds its value).
  // Throws CandidateFailure naming `where`.
  static DeviceArg describe_arg(const BenchArg& arg, const std::string& where) {
    const auto kind = parse_arg_kind(arg.kind);
    if (!kind) {
      throw CandidateFailure{CandidateStatus::runtime_error,
                             where + ": kind '" + arg.kind + "': expected in, out, inout or scalar"};
    }
    const auto dtype = parse_dtype(arg.dtype);
    if (!dtype) {
      throw CandidateFailure{CandidateStatus::runtime_error,
                             where + ": dtype '" + arg.dtype + "': expected f32, f64, f16, i32 or i64"};
    }
    DeviceArg slot;
    slot.name = arg.name;
    slot.kind = *kind;
    slot.dtype = *dtype;
    if (*kind == ArgKind::scalar) {
      store_element(*dtype, slot.scalar, 0, arg.value);
      return slot;
    }
    if (arg.count < 1) {
      throw CandidateFailure{
          CandidateStatus::runtime_error,
          where + ": count " + std::to_string(arg.count) + ": expected at least 1 element"};
    }
    if (!parse_buffer_init(arg.init)) {
      throw CandidateFailure{CandidateStatus::runtime_error,
                             where + ": init '" + arg.init +
                                 "': expected uniform, normal, uniform(lo, hi), normal(mean, std), "
                                 "zero, ones, index or file:PATH"};
    }
    slot.count = static_cast<std::size_t>(arg.count);
    if (slot.count > (std::size_t{1} << 50) / dtype_bytes(*dtype)) {
      throw CandidateFailure{CandidateStatus::runtime_error, where + ": " + std::to_string(arg.count) +
                                                                 " elements of " + arg.dtype +
                                                                 " exceed any device's memory"};
    }
    slot.bytes = slot.count * dtype_bytes(*dtype);
    return slot;
  }

  // An input buffer's first contents on the host, from its init and seed (args[i]).
  static void fill_initial(DeviceArg& slot, const BenchArg& arg, std::size_t i, const BenchJob& job,
                           const std::string& where) {
    if (!slot.is_input()) return;
    const auto init = parse_buffer_init(arg.init);  // checked by describe_arg
    auto host = HostBuffer::allocate(slot.dtype, slot.count, arg.name);
    if (!host) {
      throw CandidateFailure{CandidateStatus::runtime_error, where + ": " + host.error().message};
    }
    const std::uint64_t seed = arg.seed >= 0 ? static_cast<std::uint64_t>(arg.seed) : job.settings.seed;
    if (auto filled = fill_input(slot.dtype, host->data(), slot.count, *init, seed, i); !filled) {
      throw CandidateFailure{CandidateStatus::runtime_error, where + ": init: " + filled.error().message};
    }
    slot.initial = std::move(host).value();
  }

  // The buffer on the device between guards, and an inout buffer's pristine copy there (so a
  // restore between samples is a device-side copy queued on the timed stream rather than a
  // host upload that would stall it). Running out of device memory is the candidate's failure.
  void allocate_on_device(DeviceArg& slot, const std::string& where) {
    try {
      slot.memory.emplace(ctx, slot.bytes + 2 * k_guard_bytes);
    } catch (const CudaCallError& error) {
      if (error.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
      throw CandidateFailure{CandidateStatus::runtime_error,
                             where + ": cannot allocate " + std::to_string(slot.bytes) + " bytes on " + name + " (" + error.summary() + ")"};
    }
    slot.data = slot.memory->get() + k_guard_bytes;
    if (slot.kind != ArgKind::inout) return;
    try {
      slot.pristine.emplace(ctx, slot.bytes);
    } catch (const CudaCallError& error) {
      if (error.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
      throw CandidateFailure{CandidateStatus::runtime_error,
                             where + ": cannot allocate the " + std::to_string(slot.bytes) +
                                 "-byte pristine copy on " + name + " (" + error.summary() + ")"};
    }
    KTUNE_CU(drv(), cuMemcpyHtoD(slot.pristine->get(), slot.initial->data(), slot.bytes));
    slot.initial.reset();
  }

  std::unique_ptr<DeviceArgs> build_args(const BenchJob& job) {
    auto set = std::make_unique<DeviceArgs>();
    set->args.reserve(job.args.size());
    for (std::size_t i = 0; i < job.args.size(); ++i) {
      const BenchArg& arg = job.args[i];
      const std::string where = "args[" + std::to_string(i) + "] '" + arg.name + "'";
      DeviceArg slot = describe_arg(arg, where);
      if (slot.kind != ArgKind::scalar) {
        fill_initial(slot, arg, i, job, where);
        allocate_on_device(slot, where);
      }
      set->args.push_back(std::move(slot));
    }
    for (auto& slot : set->args) {
      set->params.push_back(slot.is_buffer() ? static_cast<void*>(&slot.data)
                                             : static_cast<void*>(slot.scalar));
    }
    return set;
  }

  DeviceArgs& args_for(const BenchJob& job) {
    std::string key = buffers_key(job);
    if (!args || key != args_key) {
      args.reset(); // free the previous key's buffers before allocating the next
      args_key.clear();
      args = build_args(job);
      args_key = std::move(key);
    }
    return *args;
  }

  // Queues the copy of every inout buffer's pristine contents on the stream: no host work, no
  // wait, so a timed launch right after it measures the kernel alone.
  void restore_inouts(DeviceArgs& set) {
    for (auto& slot : set.args) {
      if (slot.pristine) {
        KTUNE_CU(drv(), cuMemcpyDtoDAsync(slot.data, slot.pristine->get(), slot.bytes, stream->get()));
      }
    }
  }

  // Inputs back to their seeded contents, outputs filled with the sentinel (k_sentinel_halfword:
  // NaN for floats, so an element the kernel skips fails the check), guards re-armed; then
  // synchronised.
  void reset_for_check(DeviceArgs& set) {
    for (auto& slot : set.args) {
      if (!slot.is_buffer()) continue;
      const CUdeviceptr base = slot.memory->get();
      KTUNE_CU(drv(), cuMemsetD8Async(base, k_guard_pattern, k_guard_bytes, stream->get()));
      KTUNE_CU(drv(), cuMemsetD8Async(slot.data + slot.bytes, k_guard_pattern, k_guard_bytes, stream->get()));
      if (slot.pristine) {
        KTUNE_CU(drv(), cuMemcpyDtoDAsync(slot.data, slot.pristine->get(), slot.bytes, stream->get()));
      } else if (slot.initial) {
        KTUNE_CU(drv(), cuMemcpyHtoD(slot.data, slot.initial->data(), slot.bytes));
      } else {
        KTUNE_CU(drv(), cuMemsetD16Async(slot.data, k_sentinel_halfword, slot.bytes / sizeof(std::uint16_t),
                                         stream->get()));
      }
    }
    sync();
  }

  // The first buffer whose guard bytes changed, if any.
  const DeviceArg* smashed_guard(const DeviceArgs& set) {
    unsigned char guard[k_guard_bytes];
    for (const auto& slot : set.args) {
      if (!slot.is_buffer()) continue;
      for (const CUdeviceptr at : {slot.memory->get(), slot.data + slot.bytes}) {
        KTUNE_CU(drv(), cuMemcpyDtoH(guard, at, k_guard_bytes));
        if (std::any_of(std::begin(guard), std::end(guard),
                        [](unsigned char b) { return b != k_guard_pattern; })) {
          return &slot;
        }
      }
    }
    return nullptr;
  }

  Snapshot snapshot_outputs(const DeviceArgs& set) {
    Snapshot out(set.args.size());
    for (std::size_t i = 0; i < set.args.size(); ++i) {
      const DeviceArg& slot = set.args[i];
      if (!slot.is_buffer() || !slot.is_output()) continue;
      out[i].resize(slot.bytes);
      KTUNE_CU(drv(), cuMemcpyDtoH(out[i].data(), slot.data, slot.bytes));
    }
    return out;
  }

  // Loads `path`'s CUBIN and looks up `entry`; a file or lookup problem is the candidate's.
  CUfunction load_function(std::optional<Module>& module, const std::string& path, const std::string& entry,
                           const std::string& what) {
    const auto image = read_file(path);
    if (!image || image->empty()) {
      throw CandidateFailure{CandidateStatus::runtime_error, what + ": cannot read CUBIN " + path};
    }
    try {
      module.emplace(ctx, *image);
    } catch (const CudaCallError& error) {
      if (cuda::is_fatal_error(error.code())) throw;
      std::string reason = what + ": cannot load " + path + " on " + name +
                           " (" + cuda_arch(props.cc_major, props.cc_minor) + "): " + error.summary();
      if (error.code() == CUDA_ERROR_NO_BINARY_FOR_GPU || error.code() == CUDA_ERROR_INVALID_IMAGE) {
        reason += "; the CUBIN was compiled for another architecture";
      }
      throw CandidateFailure{CandidateStatus::runtime_error, std::move(reason)};
    }
    CUfunction function = nullptr;
    try {
      KTUNE_CU(drv(), cuModuleGetFunction(&function, module->get(), entry.c_str()));
    } catch (const CudaCallError& error) {
      if (error.code() != CUDA_ERROR_NOT_FOUND) throw;
      throw CandidateFailure{CandidateStatus::runtime_error, what + ": no kernel '" + entry + "' in " + path +
                                                                 " (declare it extern \"C\" __global__)"};
    }
    return function;
  }

  int function_attribute(CUfunction function, CUfunction_attribute which) {
    int value = 0;
    KTUNE_CU(drv(), cuFuncGetAttribute(&value, which, function));
    return value;
  }

  cuda::KernelResources resources_of(CUfunction function, const std::string& entry) {
    cuda::KernelResources r;
    r.name = entry;
    r.registers = function_attribute(function, CU_FUNC_ATTRIBUTE_NUM_REGS);
    r.stack_bytes = function_attribute(function, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    r.shared_bytes = function_attribute(function, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    return r;
  }

  // Checks `launch` against the device's and the function's limits and opts in to large dynamic
  // shared memory when needed.
  void prepare_launch(CUfunction function, const CudaLaunch& launch, const cuda::KernelResources& resources,
                      const std::string& what) {
    const std::int64_t threads = launch.threads_per_block();
    if (threads > props.max_threads_per_block) {
      throw CandidateFailure{CandidateStatus::launch_error,
                             what + ": block of " + std::to_string(threads) +
                                 " threads: " + name + " allows at most " +
                                 std::to_string(props.max_threads_per_block)};
    }
    const int function_max = function_attribute(function, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    if (threads > function_max) {
      throw CandidateFailure{CandidateStatus::launch_error,
                             what + ": block of " + std::to_string(threads) +
                                 " threads: the kernel allows at most " + std::to_string(function_max) +
                                 " (" + std::to_string(resources.registers) + " registers per thread)"};
    }
    const std::int64_t shared_total = launch.shared_bytes + std::max(resources.shared_bytes, 0);
    if (shared_total > props.max_shared_bytes_per_block_optin) {
      throw CandidateFailure{
          CandidateStatus::launch_error,
          what + ": " + std::to_string(shared_total) + " bytes of shared memory per block (" +
              std::to_string(resources.shared_bytes) + " static + " + std::to_string(launch.shared_bytes) +
              " dynamic): " + name + " allows at most " +
              std::to_string(props.max_shared_bytes_per_block_optin)};
    }
    if (shared_total > props.max_shared_bytes_per_block) {
      KTUNE_CU(drv(), cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(launch.shared_bytes)));
    }
  }

  void launch(CUfunction function, const CudaLaunch& l, DeviceArgs& set) {
    launch_with(function, l, set.params.data());
  }

  std::string guard_reason(const DeviceArg& slot) {
    return "wrote past buffer end of '" + slot.name + "' (" + std::to_string(slot.count) + " elements of " +
           std::string(to_string(slot.dtype)) + ")";
  }

  std::string input_reason(const DeviceArg& slot) {
    return "wrote outside its outputs: input '" + slot.name + "' changed";
  }

  void forget_args() {
    args.reset();
    args_key.clear();
  }

  // BenchOutcome::conditions of a CUDA measurement (docs/gpu.md § Timing).
  nlohmann::json conditions(const TimingPlan& plan, double single_launch_ms, double warmed_ms,
                            const cuda::ClockReading& before, const cuda::ClockReading& after) const {
    nlohmann::json c{{"timing", plan.batched() ? "batch" : "events"},
                     {"launches_per_sample", plan.launches},
                     {"argument_sets", plan.sets},
                     {"single_launch_ms", single_launch_ms},
                     {"spin", spin != nullptr},
                     {"warmup_ms", warmed_ms}};
    if (spin == nullptr) c["spin_error"] = spin_error;
    if (before.known && after.known) {
      c["clocks"] = "nvml";
      c["sm_mhz"] = {before.sm_mhz, after.sm_mhz};
      c["mem_mhz"] = {before.mem_mhz, after.mem_mhz};
      c["clock_events"] = cuda::clock_event_names(before.events | after.events);
    } else {
      c["clocks"] = "unknown";
      c["clocks_reason"] = clocks ? clocks->reason() : std::string("no reading");
    }
    return c;
  }

  // `module` is the caller's, declared outside its try block: a module unloaded while a fatal
  // error unwinds would fail (and log) before the context is known to be lost.
  const Snapshot& reference_for(const BenchJob& job, DeviceArgs& set, const CudaLaunch& reference_launch,
                                std::optional<Module>& module) {
    const std::string& symbol = job.reference_entry.empty() ? job.entry : job.reference_entry;
    const std::string identity = reference_identity(job.reference_path) + "|" + symbol;
    for (const auto& [id, outputs] : set.references) {
      if (id == identity) return outputs;
    }
    const CUfunction function = load_function(module, job.reference_path, symbol, "reference");
    prepare_launch(function, reference_launch, resources_of(function, symbol), "reference");
    reset_for_check(set);
    launch(function, reference_launch, set);
    sync();
    if (const DeviceArg* slot = smashed_guard(set)) {
      throw CandidateFailure{CandidateStatus::runtime_error,
                             "reference " + job.reference_path + " " + guard_reason(*slot)};
    }
    set.references.emplace_back(identity, snapshot_outputs(set));
    return set.references.back().second;
  }

  // [check] reference = "files": the outputs' expected values read from their files, once per
  // set of files (identified as the host runner does).
  const Snapshot& expected_from_files(const BenchJob& job, DeviceArgs& set) {
    std::string identity = "files";
    for (const auto& arg : job.args) {
      if (!arg.expected.empty()) identity += "|" + reference_identity(arg.expected);
    }
    for (const auto& [id, outputs] : set.references) {
      if (id == identity) return outputs;
    }
    Snapshot outputs(set.args.size());
    for (std::size_t i = 0; i < set.args.size(); ++i) {
      const DeviceArg& slot = set.args[i];
      if (!slot.is_buffer() || !slot.is_output()) continue;
      if (job.args[i].expected.empty()) {
        throw CandidateFailure{CandidateStatus::runtime_error,
                               "output '" + slot.name + "' names no expected file"};
      }
      auto values = read_array_file(job.args[i].expected, slot.dtype, slot.count);
      if (!values) {
        throw CandidateFailure{CandidateStatus::runtime_error,
                               "expected values of '" + slot.name + "': " + values.error().message};
      }
      outputs[i] = std::move(values).value();
    }
    set.references.emplace_back(identity, std::move(outputs));
    return set.references.back().second;
  }

  std::optional<std::string> compare_outputs(const DeviceArgs& set, const Snapshot& got,
                                             const Snapshot& expected, const BenchJob& job) {
    OutputCheck check;
    for (std::size_t i = 0; i < set.args.size(); ++i) {
      const DeviceArg& slot = set.args[i];
      if (!slot.is_buffer() || !slot.is_output()) continue;
      check.compare(slot.name, slot.dtype, got[i].data(), expected[i].data(), slot.count,
                    job.args[i].rtol >= 0 ? job.args[i].rtol : job.rtol,
                    job.args[i].atol >= 0 ? job.args[i].atol : job.atol);
    }
    return check.failure();
  }

  void ensure_flush_buffer() {
    if (flush) return;
    flush.emplace(ctx, flush_bytes);
  }

  // The first `in` buffer whose device contents differ from the inputs it was given: a candidate
  // that wrote outside its outputs (issue: the next candidates must not be blamed for it).
  const DeviceArg* changed_input(const DeviceArgs& set) {
    std::vector<unsigned char> now;
    for (const auto& slot : set.args) {
      if (slot.kind != ArgKind::in || !slot.initial) continue;
      now.resize(slot.bytes);
      KTUNE_CU(drv(), cuMemcpyDtoH(now.data(), slot.data, slot.bytes));
      if (std::memcmp(now.data(), slot.initial->data(), slot.bytes) != 0) return &slot;
    }
    return nullptr;
  }

  // Device memory a rotating batch's extra sets may take: a quarter of what is free, at most 2 GiB.
  std::size_t extra_set_budget() {
    std::size_t free_bytes = 0, total_bytes = 0;
    KTUNE_CU(drv(), cuMemGetInfo(&free_bytes, &total_bytes));
    return std::min(free_bytes / 4, std::size_t{2} << 30);
  }

  // Makes sure `set` has sets 1 .. sets - 1, each a copy of set 0's buffers as they are now.
  void ensure_extra_sets(DeviceArgs& set, int sets) {
    while (static_cast<int>(set.extra_sets.size()) + 1 < sets) {
      auto extra = std::make_unique<ExtraSet>();
      extra->pointers.assign(set.args.size(), 0);
      for (std::size_t i = 0; i < set.args.size(); ++i) {
        const DeviceArg& slot = set.args[i];
        if (!slot.is_buffer()) continue;
        extra->memory.emplace_back(ctx, slot.bytes);
        extra->pointers[i] = extra->memory.back().get();
        KTUNE_CU(drv(), cuMemcpyDtoDAsync(extra->pointers[i], slot.data, slot.bytes, stream->get()));
      }
      for (std::size_t i = 0; i < set.args.size(); ++i) {
        DeviceArg& slot = set.args[i];
        extra->params.push_back(slot.is_buffer() ? static_cast<void*>(&extra->pointers[i])
                                                 : static_cast<void*>(slot.scalar));
      }
      set.extra_sets.push_back(std::move(extra));
    }
    sync();
  }

  // Queues the restore of every inout buffer of sets 0 .. sets - 1 from its pristine copy.
  void restore_sets(DeviceArgs& set, int sets) {
    restore_inouts(set);
    for (int k = 1; k < sets; ++k) {
      const ExtraSet& extra = *set.extra_sets[static_cast<std::size_t>(k - 1)];
      for (std::size_t i = 0; i < set.args.size(); ++i) {
        const DeviceArg& slot = set.args[i];
        if (slot.pristine) {
          KTUNE_CU(drv(), cuMemcpyDtoDAsync(extra.pointers[i], slot.pristine->get(), slot.bytes,
                                            stream->get()));
        }
      }
    }
  }

  void launch_with(CUfunction function, const CudaLaunch& l, void** params) {
    KTUNE_CU(drv(), cuLaunchKernel(function, static_cast<unsigned>(l.grid[0]),
                                   static_cast<unsigned>(l.grid[1]), static_cast<unsigned>(l.grid[2]),
                                   static_cast<unsigned>(l.block[0]), static_cast<unsigned>(l.block[1]),
                                   static_cast<unsigned>(l.block[2]), static_cast<unsigned>(l.shared_bytes),
                                   stream->get(), params, nullptr));
  }

  // One sample (docs/gpu.md § Timing): untimed and in stream order, the inout restore, the L2
  // flush and the spin; then the start event, `plan.launches` launches rotating over `plan.sets`
  // argument sets, the stop event. Returns the time per launch in ms.
  double timed_sample(CUfunction function, const CudaLaunch& geometry, DeviceArgs& set,
                      const TimingPlan& plan, const BenchJob& job) {
    if (job.inplace) restore_sets(set, plan.sets);
    if (job.settings.flush_cache) {
      KTUNE_CU(drv(), cuMemsetD8Async(flush->get(), static_cast<unsigned char>(++flush_round & 0xff),
                                      flush_bytes, stream->get()));
    }
    const auto queued = Clock::now();
    if (spin != nullptr) {
      unsigned long long spin_ns = spin_ns_for(enqueue_us);
      void* spin_params[] = {&spin_ns};
      KTUNE_CU(drv(), cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream->get(), spin_params, nullptr));
    }
    KTUNE_CU(drv(), cuEventRecord(start->get(), stream->get()));
    for (int i = 0; i < plan.launches; ++i) launch_with(function, geometry, set.params_of(i % plan.sets));
    KTUNE_CU(drv(), cuEventRecord(stop->get(), stream->get()));
    enqueue_us = std::chrono::duration<double, std::micro>(Clock::now() - queued).count();
    KTUNE_CU(drv(), cuEventSynchronize(stop->get()));
    float ms = 0;
    KTUNE_CU(drv(), cuEventElapsedTime(&ms, start->get(), stop->get()));
    return static_cast<double>(ms) / plan.launches;
  }

  // Warm-up (docs/gpu.md § Timing): launches for at least warmup_ms, and on until the SM clock
  // has settled (three readings 10 ms apart within 1%) or k_max_settle_ms more have passed. NVML
  // absent: warmup_ms only. Returns the warm-up's length in ms.
  double warm_up(CUfunction function, const CudaLaunch& geometry, DeviceArgs& set, const BenchJob& job) {
    constexpr double k_max_settle_ms = 2000;
    constexpr double k_reading_every_ms = 10;
    const double warmup_ms = job.settings.warmup_ms;
    const bool watch = clocks && clocks->available() && warmup_ms > 0;
    std::vector<cuda::ClockReading> readings;
    const auto begin = Clock::now();
    auto last_reading = begin;
    while (true) {
      const double elapsed = elapsed_ms(begin, Clock::now());
      if (elapsed >= warmup_ms &&
          (!watch || cuda::clocks_settled(readings) || elapsed >= warmup_ms + k_max_settle_ms)) {
        return elapsed;
      }
      if (job.inplace) restore_inouts(set);
      launch(function, geometry, set);
      sync();
      if (watch && elapsed_ms(last_reading, Clock::now()) >= k_reading_every_ms) {
        readings.push_back(clocks->read());
        last_reading = Clock::now();
      }
    }
  }

  CudaRunOutcome run(const BenchJob& job, const CudaLaunch& launch_geometry,
                     const std::optional<CudaLaunch>& reference_launch);

  // run()'s steps. expected_outputs: what the outputs must be (the reference's, or the expected
  // files'), nullptr when nothing checks them; `stage` names the step for a failed call.
  const Snapshot* expected_outputs(const BenchJob& job, DeviceArgs& set, const CudaLaunch& reference_geometry,
                                   std::optional<Module>& reference_module, std::string& stage);
  // The first, untimed launch: a failure when it smashed a guard, changed an input or gave
  // outputs other than `expected`.
  std::optional<BenchOutcome> checked_launch(CUfunction function, const CudaLaunch& geometry,
                                             DeviceArgs& set, const Snapshot* expected, const BenchJob& job);
  // The timing plan from the best of three single-launch samples (into `estimate_ms`), the extra
  // argument sets it needs allocated.
  TimingPlan timing_plan(CUfunction function, const CudaLaunch& geometry, DeviceArgs& set,
                         const BenchJob& job, double& estimate_ms, std::string& stage);
  // A failed driver call at `stage`: a fatal error loses the context (the worker must restart);
  // otherwise the buffers are rebuilt and the candidate failed to launch or to run.
  CudaRunOutcome failed_call(const CudaCallError& error, const std::string& stage);
};

const Snapshot* CudaRunner::State::expected_outputs(
    const BenchJob& job, DeviceArgs& set, const CudaLaunch& reference_geometry,
    std::optional<Module>& reference_module, std::string& stage) {
  if (!job.reference_path.empty()) {
    stage = "reference";
    return &reference_for(job, set, reference_geometry, reference_module);
  }
  if (std::any_of(job.args.begin(), job.args.end(), [](const BenchArg& a) { return !a.expected.empty(); })) {
    stage = "expected files";
    return &expected_from_files(job, set);
  }
  return nullptr;
}

std::optional<BenchOutcome> CudaRunner::State::checked_launch(CUfunction function, const CudaLaunch& geometry,
                                                              DeviceArgs& set, const Snapshot* expected,
                                                              const BenchJob& job) {
  reset_for_check(set);
  launch(function, geometry, set);
  sync();
  if (const DeviceArg* slot = smashed_guard(set)) {
    reset_for_check(set); // leave clean guards for the next candidate
    return failure(CandidateStatus::mismatch, guard_reason(*slot));
  }
  if (const DeviceArg* slot = changed_input(set)) {
    forget_args(); // the next candidate gets fresh inputs
    return failure(CandidateStatus::mismatch, input_reason(*slot));
  }
  if (expected != nullptr) {
    const Snapshot got = snapshot_outputs(set);
    if (auto reason = compare_outputs(set, got, *expected, job)) {
      return failure(CandidateStatus::mismatch, std::move(*reason));
    }
  }
  return std::nullopt;
}

TimingPlan CudaRunner::State::timing_plan(CUfunction function, const CudaLaunch& geometry, DeviceArgs& set,
                                          const BenchJob& job, double& estimate_ms, std::string& stage) {
  stage = "timed launch";
  for (int i = 0; i < 3; ++i) {
    const double ms = timed_sample(function, geometry, set, TimingPlan{}, job);
    estimate_ms = i == 0 ? ms : std::min(estimate_ms, ms);
  }
  const bool distinct_sets = job.settings.flush_cache || job.inplace;
  const TimingPlan plan =
      plan_timing(estimate_ms, distinct_sets, set.set_bytes(), distinct_sets ? extra_set_budget() : 0);
  if (plan.sets > 1) {
    stage = "argument sets";
    ensure_extra_sets(set, plan.sets);
    stage = "timed launch";
  }
  return plan;
}

CudaRunOutcome CudaRunner::State::failed_call(const CudaCallError& error, const std::string& stage) {
  CudaRunOutcome result;
  const std::string reason = stage + ": " + error.summary();
  if (cuda::is_fatal_error(error.code())) {
    ctx.lost = true;
    lost_reason = reason;
    result.context_lost = true;
    result.outcome = failure(CandidateStatus::crash, reason);
    return result;
  }
  // Buffers may be half-initialised after a failed call: rebuilt for the next candidate.
  forget_args();
  const bool bad_launch =
      cuda::is_out_of_resources(error.code()) ||
      (error.code() == CUDA_ERROR_INVALID_VALUE && error.call().rfind("cuLaunchKernel", 0) == 0);
  result.outcome =
      failure(bad_launch ? CandidateStatus::launch_error : CandidateStatus::runtime_error, reason);
  return result;
}

CudaRunOutcome CudaRunner::State::run(const BenchJob& job, const CudaLaunch& geometry,
                                      const std::optional<CudaLaunch>& reference_launch) {
  CudaRunOutcome result;
  if (ctx.lost) {
    result.outcome = failure(CandidateStatus::crash, "the CUDA context of " + name +
                                                         " was lost by an earlier candidate (" +
                                                         lost_reason + "); the worker must restart");
    result.context_lost = true;
    return result;
  }
  // Outside the try block: destroyed after the catch has marked a lost context, so nothing is
  // unloaded (and no failure logged) on a context that a fatal error took.
  std::optional<Module> module;
  std::optional<Module> reference_module;
  std::string stage = "setup";
  try {
    make_current();
    stage = "load";
    const CUfunction function = load_function(module, job.artifact_path, job.entry, "candidate");
    result.resources = resources_of(function, job.entry);
    prepare_launch(function, geometry, *result.resources, "candidate " + geometry.to_string());

    stage = "buffers";
    DeviceArgs& set = args_for(job);
    const Snapshot* expected =
        expected_outputs(job, set, reference_launch.value_or(geometry), reference_module, stage);

    const MeasureSettings& settings = job.settings;
    if (settings.flush_cache) {
      stage = "cache flush buffer";
      ensure_flush_buffer();
    }

    // The checked run is the first launch, which is never timed.
    stage = "checked launch";
    if (auto failed = checked_launch(function, geometry, set, expected, job)) {
      result.outcome = std::move(*failed);
      return result;
    }

    stage = "warm-up";
    const double warmed_ms = warm_up(function, geometry, set, job);

    // The plan follows from a single launch's time: the best of three samples of one launch.
    double estimate_ms = 0;
    const TimingPlan plan = timing_plan(function, geometry, set, job, estimate_ms, stage);

    const cuda::ClockReading before = clocks ? clocks->read() : cuda::ClockReading{};
    Sampler sampler(settings, job.prune_above_ms, Clock::now(), job.race_above_ms);
    sampler.finals_bound(job.finalist_below_ms);
    while (sampler.add(timed_sample(function, geometry, set, plan, job), Clock::now()) == SampleStop::more) {
    }
    const cuda::ClockReading after = clocks ? clocks->read() : cuda::ClockReading{};

    stage = "input check";
    if (const DeviceArg* slot = changed_input(set)) {
      result.outcome = failure(CandidateStatus::mismatch, input_reason(*slot) + " while timed");
      forget_args();
      return result;
    }
    result.outcome = sampled_outcome(sampler, job);
    result.outcome.conditions = conditions(plan, estimate_ms, warmed_ms, before, after);
    return result;
  } catch (const CandidateFailure& failed) {
    result.outcome = failure(failed.status, failed.reason);
    return result;
  } catch (const CudaCallError& error) {
    CudaRunOutcome failed = failed_call(error, stage);
    failed.resources = result.resources;
    return failed;
  }
}

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(int ordinal, std::size_t flush_bytes,
                                                       std::string name) {
  if (name.empty()) name = "cuda:" + std::to_string(ordinal);
  // query_cuda_device names the ordinal this process sees; the message names the daemon's device.
  auto named = [&](const Error& error) {
    std::string message = error.message;
    const std::string seen = "cuda:" + std::to_string(ordinal) + ": ";
    if (message.rfind(seen, 0) == 0) message.erase(0, seen.size());
    return make_error(error.code, name + ": " + message);
  };
  auto loaded = cuda::load_driver();
  if (!loaded) return named(loaded.error());
  auto props = query_cuda_device(ordinal);
  if (!props) return named(props.error());

  auto state = std::make_unique<State>();
  state->ctx.drv = loaded.value();
  state->props = std::move(props).value();
  state->name = name;
  const std::size_t l2 = static_cast<std::size_t>(std::max<std::int64_t>(state->props.l2_bytes, 0));
  state->flush_bytes = flush_bytes != 0 ? flush_bytes : std::max(2 * l2, k_min_flush_bytes);
  try {
    CUdevice device = 0;
    KTUNE_CU(state->drv(), cuDeviceGet(&device, ordinal));
    state->primary.emplace(state->ctx, device);
    state->make_current();
    state->stream.emplace(state->ctx);
    state->start.emplace(state->ctx);
    state->stop.emplace(state->ctx);
  } catch (const CudaCallError& error) {
    return make_error(ErrorCode::no_device, name + ": cannot set up the device: " + error.summary());
  }
  // Without the spin a sample may hold host launch latency: measured anyway, and said so in the
  // outcome's conditions.
  try {
    state->spin_module.emplace(state->ctx, std::string(k_spin_ptx));
    KTUNE_CU(state->drv(), cuModuleGetFunction(&state->spin, state->spin_module->get(), k_spin_entry));
  } catch (const CudaCallError& error) {
    state->spin = nullptr;
    state->spin_module.reset();
    state->spin_error = "the spin kernel could not be loaded: " + error.summary();
  }
  state->clocks = std::make_unique<cuda::NvmlClocks>(state->props.uuid);
  return std::unique_ptr<CudaRunner>(new CudaRunner(std::move(state)));
}

CudaRunner::CudaRunner(std::unique_ptr<State> state) : m_state(std::move(state)) {}

CudaRunner::~CudaRunner() = default;

BenchOutcome CudaRunner::run(const BenchJob& job) { return run_job(job).outcome; }

CudaRunOutcome CudaRunner::run_job(const BenchJob& job) {
  if (!job.launch) {
    CudaRunOutcome result;
    result.outcome = failure(CandidateStatus::runtime_error,
                             "bench job for " + job.kernel + " at " + job.shape +
                                 " carries no CUDA launch geometry (grid, block, shared_bytes from "
                                 "the spec's [launch])");
    return result;
  }
  CudaRunOutcome result = run_cuda(job, *job.launch, job.reference_launch);
  if (result.resources) {
    result.outcome.registers = result.resources->registers;
    result.outcome.spills = result.resources->spill_store_bytes;
    result.outcome.shared_bytes = result.resources->shared_bytes;
  }
  return result;
}

CudaRunOutcome CudaRunner::run_cuda(const BenchJob& job, const CudaLaunch& launch,
                                    const std::optional<CudaLaunch>& reference_launch) {
  try {
    return m_state->run(job, launch, reference_launch);
  } catch (const std::bad_alloc&) {
    m_state->forget_args();
    CudaRunOutcome result;
    result.outcome = failure(CandidateStatus::runtime_error,
                             "out of host memory preparing " + job.kernel + " at " + job.shape);
    return result;
  }
}

bool CudaRunner::context_lost() const { return m_state->ctx.lost; }

const CudaDeviceProperties& CudaRunner::device() const { return m_state->props; }

} // namespace ktune
