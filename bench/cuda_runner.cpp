#include "bench/cuda_runner.hpp"

#include "bench/host_buffers.hpp"
#include "bench/sampler.hpp"
#include "core/protocol.hpp"
#include "cuda/cuda_api.hpp"

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

struct DeviceArgs {
  std::vector<DeviceArg> args;
  std::vector<void*> params;                                // cuLaunchKernel's kernelParams
  std::vector<std::pair<std::string, Snapshot>> references; // reference identity -> outputs
};



std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return out.str();
}

std::string format_value(double value, int precision) {
  std::ostringstream out;
  out.precision(precision);
  out << value;
  return out.str();
}

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

  [[nodiscard]] const DriverApi& drv() const { return *ctx.drv; }

  void make_current() { KTUNE_CU(drv(), cuCtxSetCurrent(primary->get())); }

  void sync() { KTUNE_CU(drv(), cuStreamSynchronize(stream->get())); }

  std::unique_ptr<DeviceArgs> build_args(const BenchJob& job) {
    auto set = std::make_unique<DeviceArgs>();
    set->args.reserve(job.args.size());
    for (std::size_t i = 0; i < job.args.size(); ++i) {
      const BenchArg& arg = job.args[i];
      const std::string where = "args[" + std::to_string(i) + "] '" + arg.name + "'";
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
        set->args.push_back(std::move(slot));
        continue;
      }
      if (arg.count < 1) {
        throw CandidateFailure{
            CandidateStatus::runtime_error,
            where + ": count " + std::to_string(arg.count) + ": expected at least 1 element"};
      }
      const auto init = parse_buffer_init(arg.init);
      if (!init) {
        throw CandidateFailure{CandidateStatus::runtime_error,
                               where + ": init '" + arg.init +
                                   "': expected uniform, normal, uniform(lo, hi), normal(mean, std), "
                                   "zero, ones or index"};
      }
      slot.count = static_cast<std::size_t>(arg.count);
      if (slot.count > (std::size_t{1} << 50) / dtype_bytes(*dtype)) {
        throw CandidateFailure{CandidateStatus::runtime_error, where + ": " + std::to_string(arg.count) +
                                                                   " elements of " + arg.dtype +
                                                                   " exceed any device's memory"};
      }
      slot.bytes = slot.count * dtype_bytes(*dtype);
      if (slot.is_input()) {
        auto host = HostBuffer::allocate(*dtype, slot.count, arg.name);
        if (!host) {
          throw CandidateFailure{CandidateStatus::runtime_error, where + ": " + host.error().message};
        }
        const std::uint64_t seed =
            arg.seed >= 0 ? static_cast<std::uint64_t>(arg.seed) : job.settings.seed;
        fill_elements(*dtype, host->data(), slot.count, *init, seed, i);
        slot.initial = std::move(host).value();
      }
      try {
        slot.memory.emplace(ctx, slot.bytes + 2 * k_guard_bytes);
      } catch (const CudaCallError& error) {
        if (error.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
        throw CandidateFailure{CandidateStatus::runtime_error,
                               where + ": cannot allocate " + std::to_string(slot.bytes) + " bytes on cuda:" +
                                   std::to_string(props.ordinal) + " (" + error.summary() + ")"};
      }
      slot.data = slot.memory->get() + k_guard_bytes;
      if (slot.kind == ArgKind::inout) {
        // Kept on the device, so a restore between samples is a device-side copy queued on the
        // timed stream rather than a host upload that would stall it.
        try {
          slot.pristine.emplace(ctx, slot.bytes);
        } catch (const CudaCallError& error) {
          if (error.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
          throw CandidateFailure{CandidateStatus::runtime_error,
                                 where + ": cannot allocate the " + std::to_string(slot.bytes) +
                                     "-byte pristine copy on cuda:" + std::to_string(props.ordinal) + " (" +
                                     error.summary() + ")"};
        }
        KTUNE_CU(drv(), cuMemcpyHtoD(slot.pristine->get(), slot.initial->data(), slot.bytes));
        slot.initial.reset();
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
      std::string reason = what + ": cannot load " + path + " on cuda:" + std::to_string(props.ordinal) +
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
                                 " threads: cuda:" + std::to_string(props.ordinal) + " allows at most " +
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
              " dynamic): cuda:" + std::to_string(props.ordinal) + " allows at most " +
              std::to_string(props.max_shared_bytes_per_block_optin)};
    }
    if (shared_total > props.max_shared_bytes_per_block) {
      KTUNE_CU(drv(), cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(launch.shared_bytes)));
    }
  }

  void launch(CUfunction function, const CudaLaunch& l, DeviceArgs& set) {
    KTUNE_CU(drv(), cuLaunchKernel(function, static_cast<unsigned>(l.grid[0]),
                                   static_cast<unsigned>(l.grid[1]), static_cast<unsigned>(l.grid[2]),
                                   static_cast<unsigned>(l.block[0]), static_cast<unsigned>(l.block[1]),
                                   static_cast<unsigned>(l.block[2]), static_cast<unsigned>(l.shared_bytes),
                                   stream->get(), set.params.data(), nullptr));
  }

  std::string guard_reason(const DeviceArg& slot) {
    return "wrote past buffer end of '" + slot.name + "' (" + std::to_string(slot.count) + " elements of " +
           std::string(to_string(slot.dtype)) + ")";
  }

  const Snapshot& reference_for(const BenchJob& job, DeviceArgs& set, const CudaLaunch& reference_launch) {
    const std::string& symbol = job.reference_entry.empty() ? job.entry : job.reference_entry;
    const std::string identity = reference_identity(job.reference_path) + "|" + symbol;
    for (const auto& [id, outputs] : set.references) {
      if (id == identity) return outputs;
    }
    std::optional<Module> module;
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

  std::optional<std::string> compare_outputs(const DeviceArgs& set, const Snapshot& got,
                                             const Snapshot& expected, const BenchJob& job) {
    std::size_t checked = 0, differing = 0;
    std::string first;
    for (std::size_t i = 0; i < set.args.size(); ++i) {
      const DeviceArg& slot = set.args[i];
      if (!slot.is_buffer() || !slot.is_output()) continue;
      checked += slot.count;
      const double rtol = job.args[i].rtol >= 0 ? job.args[i].rtol : job.rtol;
      const double atol = job.args[i].atol >= 0 ? job.args[i].atol : job.atol;
      const auto mismatch =
          compare_elements(slot.dtype, got[i].data(), expected[i].data(), slot.count, rtol, atol);
      if (!mismatch) continue;
      differing += mismatch->differing;
      if (first.empty()) {
        first = slot.name + "[" + std::to_string(mismatch->index) + "]: got " +
                format_value(mismatch->got, 9) + ", expected " + format_value(mismatch->expected, 9) +
                (is_integral(slot.dtype)
                     ? std::string(" (exact)")
                     : " (rtol " + format_value(rtol, 6) + ", atol " + format_value(atol, 6) + ")");
      }
    }
    if (differing == 0) return std::nullopt;
    return first + "; " + std::to_string(differing) + " of " + std::to_string(checked) + " elements differ";
  }

  void ensure_flush_buffer() {
    if (flush) return;
    flush.emplace(ctx, flush_bytes);
  }

  CudaRunOutcome run(const BenchJob& job, const CudaLaunch& launch_geometry,
                     const std::optional<CudaLaunch>& reference_launch);
};

CudaRunOutcome CudaRunner::State::run(const BenchJob& job, const CudaLaunch& geometry,
                                      const std::optional<CudaLaunch>& reference_launch) {
  CudaRunOutcome result;
  if (ctx.lost) {
    result.outcome =
        failure(CandidateStatus::crash, "the CUDA context of cuda:" + std::to_string(props.ordinal) +
                                            " was lost by an earlier candidate (" + lost_reason +
                                            "); the worker must restart");
    result.context_lost = true;
    return result;
  }
  std::string stage = "setup";
  try {
    make_current();
    std::optional<Module> module;
    stage = "load";
    const CUfunction function = load_function(module, job.artifact_path, job.entry, "candidate");
    result.resources = resources_of(function, job.entry);
    prepare_launch(function, geometry, *result.resources, "candidate " + geometry.to_string());

    stage = "buffers";
    DeviceArgs& set = args_for(job);

    const Snapshot* expected = nullptr;
    if (!job.reference_path.empty()) {
      stage = "reference";
      expected = &reference_for(job, set, reference_launch.value_or(geometry));
    }

    const MeasureSettings& settings = job.settings;
    if (settings.flush_cache) {
      stage = "cache flush buffer";
      ensure_flush_buffer();
    }

    // The checked run is the first launch, which is never timed.
    stage = "checked launch";
    reset_for_check(set);
    launch(function, geometry, set);
    sync();
    if (const DeviceArg* slot = smashed_guard(set)) {
      reset_for_check(set); // leave clean guards for the next candidate
      result.outcome = failure(CandidateStatus::mismatch, guard_reason(*slot));
      return result;
    }
    if (expected != nullptr) {
      const Snapshot got = snapshot_outputs(set);
      if (auto reason = compare_outputs(set, got, *expected, job)) {
        result.outcome = failure(CandidateStatus::mismatch, std::move(*reason));
        return result;
      }
    }

    stage = "warm-up";
    if (settings.warmup_ms > 0) {
      const auto start = Clock::now();
      do {
        if (job.inplace) restore_inouts(set);
        launch(function, geometry, set);
        sync();
      } while (elapsed_ms(start, Clock::now()) < settings.warmup_ms);
    }

    stage = "timed launch";
    Sampler sampler(settings, job.prune_above_ms, Clock::now(), job.race_above_ms);
    sampler.finals_bound(job.finalist_below_ms);
    while (true) {
      // Untimed and in stream order before the start event: the restore, then the flush, so
      // the restored buffers are as cold in L2 as every other input.
      if (job.inplace) restore_inouts(set);
      if (settings.flush_cache) {
        KTUNE_CU(drv(), cuMemsetD8Async(flush->get(), static_cast<unsigned char>(++flush_round & 0xff),
                                        flush_bytes, stream->get()));
      }
      KTUNE_CU(drv(), cuEventRecord(start->get(), stream->get()));
      launch(function, geometry, set);
      KTUNE_CU(drv(), cuEventRecord(stop->get(), stream->get()));
      KTUNE_CU(drv(), cuEventSynchronize(stop->get()));
      float ms = 0;
      KTUNE_CU(drv(), cuEventElapsedTime(&ms, start->get(), stop->get()));
      if (sampler.add(ms, Clock::now()) != SampleStop::more) break;
    }

    result.outcome.status = CandidateStatus::ok;
    result.outcome.pruned =
        sampler.reason() == SampleStop::pruned || sampler.reason() == SampleStop::raced;
    result.outcome.stop = std::string(to_string(sampler.reason()));
    std::vector<double> samples = sampler.take_samples();
    result.outcome.samples_ms.assign(samples.begin(), samples.end());
    result.outcome.stats = summarize(std::move(samples));
    if (result.outcome.stats.median_ms > 0) {
      if (job.flops > 0) result.outcome.gflops = job.flops / (result.outcome.stats.median_ms * 1e6);
      if (job.bytes > 0) result.outcome.gbps = job.bytes / (result.outcome.stats.median_ms * 1e6);
    }
    return result;
  } catch (const CandidateFailure& failed) {
    result.outcome = failure(failed.status, failed.reason);
    return result;
  } catch (const CudaCallError& error) {
    const std::string reason = stage + ": " + error.summary();
    if (cuda::is_fatal_error(error.code())) {
      ctx.lost = true;
      lost_reason = reason;
      result.context_lost = true;
      result.outcome = failure(CandidateStatus::crash, reason);
      return result;
    }
    // Buffers may be half-initialised after a failed call: rebuilt for the next candidate.
    args.reset();
    args_key.clear();
    const bool bad_launch =
        cuda::is_out_of_resources(error.code()) ||
        (error.code() == CUDA_ERROR_INVALID_VALUE && error.call().rfind("cuLaunchKernel", 0) == 0);
    result.outcome =
        failure(bad_launch ? CandidateStatus::launch_error : CandidateStatus::runtime_error, reason);
    return result;
  }
}

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(int ordinal, std::size_t flush_bytes) {
  auto loaded = cuda::load_driver();
  if (!loaded) return loaded.error();
  auto props = query_cuda_device(ordinal);
  if (!props) return props.error();

  auto state = std::make_unique<State>();
  state->ctx.drv = loaded.value();
  state->props = std::move(props).value();
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
    return make_error(protocol::code::no_device,
                      "cuda:" + std::to_string(ordinal) + ": cannot set up the device: " + error.summary());
  }
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
    m_state->args.reset();
    m_state->args_key.clear();
    CudaRunOutcome result;
    result.outcome = failure(CandidateStatus::runtime_error,
                             "out of host memory preparing " + job.kernel + " at " + job.shape);
    return result;
  }
}

bool CudaRunner::context_lost() const { return m_state->ctx.lost; }

const CudaDeviceProperties& CudaRunner::device() const { return m_state->props; }

} // namespace ktune
