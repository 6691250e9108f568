#include "bench/host_runner.hpp"

#include "bench/sampler.hpp"

#include "bench/cpu_placement.hpp"
#include "bench/host_buffers.hpp"
#include "bench/host_device.hpp"
#include "bench/shared_library.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <ctime>
#include <vector>

namespace ktune {

namespace {

using Clock = std::chrono::steady_clock;
using EntryFn = void (*)(void**);

// How often sampling stops to check the inputs and canaries (untimed, between two samples): every
// k_integrity_interval, or 20 times as long as a check takes when that is longer (large inputs),
// so the checks cost at most 5% of the sampling time.
constexpr auto k_integrity_interval = std::chrono::milliseconds(100);
constexpr int k_integrity_share = 20;

double elapsed_ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// CPU time of `clock` (CLOCK_THREAD_CPUTIME_ID: the calling thread; CLOCK_PROCESS_CPUTIME_ID: every
// thread of the process, a threaded candidate's together), user and system, ms.
double cpu_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The CPU time that brackets one run, as the Sampler reads it against the wall time. A
// single-threaded candidate: its thread's. A threaded one: the whole process's, capped at the wall
// time -- its threads together use at least one CPU all along unless they were off the CPU, and
// a candidate whose threads wait on each other is not taken for preempted. A sample where a
// second thread was preempted while the first ran is not seen: the check is weaker for threads.
class RunClock {
public:
  explicit RunClock(bool threaded) : m_threaded(threaded) {}
  [[nodiscard]] double now_ms() const {
    return cpu_ms(m_threaded ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID);
  }
  [[nodiscard]] double used_ms(double from_ms, double wall_ms) const {
    const double used = now_ms() - from_ms;
    return m_threaded ? std::min(used, wall_ms) : used;
  }

private:
  bool m_threaded;
};

std::optional<ArgKind> parse_arg_kind(std::string_view text) {
  if (text == "in") return ArgKind::in;
  if (text == "out") return ArgKind::out;
  if (text == "inout") return ArgKind::inout;
  if (text == "scalar") return ArgKind::scalar;
  return std::nullopt;
}

BenchOutcome failure(CandidateStatus status, std::string reason) {
  BenchOutcome outcome;
  outcome.status = status;
  outcome.reason = std::move(reason);
  return outcome;
}

// Whether the CPU has an instruction that evicts a cache line from every level (clflush, dc civac).
#if defined(__x86_64__) || defined(__aarch64__)
constexpr bool k_can_evict = true;
#else
constexpr bool k_can_evict = false;
#endif

#if defined(__x86_64__)
// clflushopt evicts like clflush but without ordering one flush after the other: a 3 MiB set of
// buffers is out of the caches in 0.2 ms instead of 6.3 ms (measured on a Xeon; the fence after
// the loop orders them all before the timed run). CPUs without it use clflush.
const bool k_has_clflushopt = __builtin_cpu_supports("clflushopt");

__attribute__((target("clflushopt"))) void evict_lines_opt(const char* begin, const char* end) {
  for (const char* p = begin; p < end; p += 64) __builtin_ia32_clflushopt(p);
}

void evict_lines(const char* begin, const char* end) {
  if (k_has_clflushopt) {
    evict_lines_opt(begin, end);
    return;
  }
  for (const char* p = begin; p < end; p += 64) __builtin_ia32_clflush(p);
}
#endif

std::string format_element(DType dtype, const void* data, std::size_t index) {
  return format_value(element_as_double(dtype, data, index), 9);
}

// One spec arg as the kernel sees it.
struct ArgSlot {
  std::string name;
  ArgKind kind = ArgKind::in;
  DType dtype = DType::f32;
  std::optional<HostBuffer> buffer;      // in, out, inout
  SealedCopy initial;                    // in, inout: the contents right after filling
  alignas(8) unsigned char scalar[8] = {};

  [[nodiscard]] bool is_output() const { return kind == ArgKind::out || kind == ArgKind::inout; }
  [[nodiscard]] bool is_input() const { return kind == ArgKind::in || kind == ArgKind::inout; }
};

// The buffers of one (shape, arg layout, seed) key and the reference outputs computed on them.
struct ArgSet {
  std::vector<ArgSlot> slots;
  std::vector<void*> pointers;  // what the entry point receives
  // reference identity -> one snapshot per slot (empty for slots that are not outputs)
  std::vector<std::pair<std::string, std::vector<SealedCopy>>> references;

  // Inputs back to their initial contents, outputs zeroed, guards re-armed.
  void reset_for_check() {
    for (auto& slot : slots) {
      if (!slot.buffer) continue;
      if (slot.is_input()) {
        std::memcpy(slot.buffer->data(), slot.initial.data(), slot.initial.size());
      } else {
        std::memset(slot.buffer->data(), 0, slot.buffer->bytes());
      }
      slot.buffer->reset_guards();
    }
  }

  // The inout buffers back to their initial contents (an inplace kernel's inputs between
  // samples). `in` buffers are not touched: a change there is the candidate's fault, found by
  // changed_input(), never hidden by a restore.
  void restore_inplace() {
    for (auto& slot : slots) {
      if (slot.buffer && slot.kind == ArgKind::inout) {
        std::memcpy(slot.buffer->data(), slot.initial.data(), slot.initial.size());
      }
    }
  }

  [[nodiscard]] std::size_t buffer_bytes() const {
    std::size_t total = 0;
    for (const auto& slot : slots) total += slot.buffer ? slot.buffer->bytes() : 0;
    return total;
  }

  // Evicts every buffer's cache lines from all cache levels (to memory). Only where
  // k_can_evict; elsewhere it does nothing.
  void evict_buffers() const {
#if defined(__x86_64__) || defined(__aarch64__)
    for (const auto& slot : slots) {
      if (!slot.buffer) continue;
      const auto* begin = static_cast<const char*>(slot.buffer->data());
      const char* end = begin + slot.buffer->bytes();
#if defined(__x86_64__)
      evict_lines(begin, end);
#else
      constexpr std::size_t k_line = 64;  // a multiple of it on the aarch64 cores we know
      for (const char* p = begin; p < end; p += k_line) asm volatile("dc civac, %0" : : "r"(p) : "memory");
#endif
    }
#if defined(__x86_64__)
    __builtin_ia32_mfence();
#else
    asm volatile("dsb ish" : : : "memory");
#endif
#endif
  }

  // The first buffer whose guard bytes were overwritten, if any.
  [[nodiscard]] const ArgSlot* smashed_guard() const {
    for (const auto& slot : slots) {
      if (slot.buffer && !slot.buffer->guards_intact()) return &slot;
    }
    return nullptr;
  }

  [[nodiscard]] Result<std::vector<SealedCopy>> snapshot_outputs() const {
    std::vector<SealedCopy> out(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto& slot = slots[i];
      if (!slot.buffer || !slot.is_output()) continue;
      auto copy = SealedCopy::of(slot.buffer->data(), slot.buffer->bytes(),
                                 "the reference output of '" + slot.name + "'");
      if (!copy) return copy.error();
      out[i] = std::move(copy).value();
    }
    return out;
  }

  // The first `in` buffer whose contents differ from its pristine copy (a hash compared, then
  // the elements where it differs), restored; nullopt when every input is unchanged. `when`
  // says when it was seen ("in its checked run", "while it was sampled").
  [[nodiscard]] std::optional<std::string> changed_input(std::string_view when) {
    for (auto& slot : slots) {
      if (!slot.buffer || slot.kind != ArgKind::in) continue;
      void* data = slot.buffer->data();
      if (content_hash(data, slot.initial.size()) == slot.initial.hash()) continue;
      const std::size_t count = slot.buffer->count();
      std::size_t first = count, differing = 0;
      const std::size_t element = dtype_bytes(slot.dtype);
      for (std::size_t i = 0; i < count; ++i) {
        if (std::memcmp(static_cast<const unsigned char*>(data) + i * element,
                        slot.initial.data() + i * element, element) == 0) {
          continue;
        }
        if (first == count) first = i;
        ++differing;
      }
      std::string reason = "wrote outside its outputs: input '" + slot.name + "' changed " +
                           std::string(when);
      if (first < count) {
        reason += " (" + std::to_string(differing) + " of " + std::to_string(count) +
                  " elements; " + slot.name + "[" + std::to_string(first) + "] was " +
                  format_element(slot.dtype, slot.initial.data(), first) + ", became " +
                  format_element(slot.dtype, data, first) + ")";
      }
      std::memcpy(data, slot.initial.data(), slot.initial.size());
      return reason;
    }
    return std::nullopt;
  }
};

Result<std::unique_ptr<ArgSet>> build_args(const BenchJob& job) {
  auto set = std::make_unique<ArgSet>();
  set->slots.reserve(job.args.size());
  for (std::size_t i = 0; i < job.args.size(); ++i) {
    const BenchArg& arg = job.args[i];
    const std::string where = "bench job " + job.kernel + ": args[" + std::to_string(i) + "] '" +
                              arg.name + "'";
    const auto kind = parse_arg_kind(arg.kind);
    if (!kind) {
      return make_error(ErrorCode::bench_failed,
                        where + ": kind '" + arg.kind + "': expected in, out, inout or scalar");
    }
    const auto dtype = parse_dtype(arg.dtype);
    if (!dtype) {
      return make_error(ErrorCode::bench_failed,
                        where + ": dtype '" + arg.dtype + "': expected f32, f64, f16, i32 or i64");
    }
    ArgSlot slot;
    slot.name = arg.name;
    slot.kind = *kind;
    slot.dtype = *dtype;
    if (*kind == ArgKind::scalar) {
      store_element(*dtype, slot.scalar, 0, arg.value);
    } else {
      if (arg.count < 1) {
        return make_error(ErrorCode::bench_failed, where + ": count " + std::to_string(arg.count) +
                                               ": expected at least 1 element");
      }
      const auto init = parse_buffer_init(arg.init);
      if (!init) {
        return make_error(ErrorCode::bench_failed, where + ": init '" + arg.init +
                                               "': expected uniform, normal, uniform(lo, hi), "
                                               "normal(mean, std), zero, ones, index or file:PATH");
      }
      auto buffer = HostBuffer::allocate(*dtype, static_cast<std::size_t>(arg.count), arg.name,
                                         static_cast<std::size_t>(job.buffer_alignment),
                                         static_cast<std::size_t>(job.buffer_offset));
      if (!buffer) return make_error(ErrorCode::bench_failed, where + ": " + buffer.error().message);
      buffer->describe((*kind == ArgKind::in ? "input '" : *kind == ArgKind::out ? "output '"
                                                                                 : "inout '") +
                       arg.name + "'");
      if (*kind == ArgKind::out) {
        std::memset(buffer->data(), 0, buffer->bytes());
      } else {
        const std::uint64_t seed =
            arg.seed >= 0 ? static_cast<std::uint64_t>(arg.seed) : job.settings.seed;
        if (auto filled = fill_input(*dtype, buffer->data(), buffer->count(), *init, seed, i);
            !filled) {
          return make_error(ErrorCode::bench_failed, where + ": init: " + filled.error().message);
        }
        auto initial = SealedCopy::of(buffer->data(), buffer->bytes(),
                                      "the pristine copy of '" + arg.name + "'");
        if (!initial) return make_error(ErrorCode::bench_failed, where + ": " + initial.error().message);
        slot.initial = std::move(initial).value();
      }
      slot.buffer = std::move(buffer).value();
    }
    set->slots.push_back(std::move(slot));
  }
  for (auto& slot : set->slots) {
    set->pointers.push_back(slot.buffer ? slot.buffer->data() : static_cast<void*>(slot.scalar));
  }
  return set;
}

std::string guard_reason(const ArgSlot& slot) {
  return "wrote past buffer end of '" + slot.name + "' (" + std::to_string(slot.buffer->count()) +
         " elements of " + std::string(to_string(slot.dtype)) + ")";
}

// Compares every output against `expected`; the reason names the first differing element.
std::optional<std::string> compare_outputs(const ArgSet& set,
                                           const std::vector<SealedCopy>& expected,
                                           const BenchJob& job) {
  OutputCheck check;
  for (std::size_t i = 0; i < set.slots.size(); ++i) {
    const ArgSlot& slot = set.slots[i];
    if (!slot.buffer || !slot.is_output()) continue;
    check.compare(slot.name, slot.dtype, slot.buffer->data(), expected[i].data(), slot.buffer->count(),
                  job.args[i].rtol >= 0 ? job.args[i].rtol : job.rtol,
                  job.args[i].atol >= 0 ? job.args[i].atol : job.atol);
  }
  return check.failure();
}

} // namespace

struct HostRunner::State {
  std::size_t flush_bytes = 0;  // 0: 2 x last-level cache
  std::string args_key;
  std::unique_ptr<ArgSet> args;
  std::optional<HostBuffer> flush_buffer;
  std::uint64_t flush_round = 0;
  volatile std::uint64_t flush_sink = 0;

  Result<ArgSet*> args_for(const BenchJob& job) {
    std::string key = buffers_key(job);
    if (!args || key != args_key) {
      args.reset();  // free the previous key's buffers before allocating the next
      auto built = build_args(job);
      if (!built) return built.error();
      args = std::move(built).value();
      args_key = std::move(key);
    }
    return args.get();
  }

  // The reference outputs on `set`, computed on first use.
  Result<const std::vector<SealedCopy>*> reference_for(const BenchJob& job,
                                                                       ArgSet& set) {
    const std::string& symbol = job.reference_entry.empty() ? job.entry : job.reference_entry;
    const std::string identity = reference_identity(job.reference_path) + "|" + symbol;
    for (const auto& [id, outputs] : set.references) {
      if (id == identity) return &outputs;
    }
    auto library = SharedLibrary::open(job.reference_path);
    if (!library) return make_error(ErrorCode::bench_failed, "reference: " + library.error().message);
    auto address = library->symbol(symbol);
    if (!address) return make_error(ErrorCode::bench_failed, "reference: " + address.error().message);
    const auto entry = reinterpret_cast<EntryFn>(address.value());
    set.reset_for_check();
    entry(set.pointers.data());
    if (const ArgSlot* slot = set.smashed_guard()) {
      return make_error(ErrorCode::bench_failed,
                        "reference " + job.reference_path + " " + guard_reason(*slot));
    }
    auto snapshot = set.snapshot_outputs();
    if (!snapshot) return make_error(ErrorCode::bench_failed, "reference: " + snapshot.error().message);
    set.references.emplace_back(identity, std::move(snapshot).value());
    return &set.references.back().second;
  }

  // The expected outputs read from the files the job's outputs name, once per key.
  Result<const std::vector<SealedCopy>*> expected_from_files(const BenchJob& job,
                                                                             ArgSet& set) {
    std::string identity = "files";
    for (const auto& arg : job.args) {
      if (!arg.expected.empty()) identity += "|" + reference_identity(arg.expected);
    }
    for (const auto& [id, outputs] : set.references) {
      if (id == identity) return &outputs;
    }
    std::vector<SealedCopy> outputs(set.slots.size());
    for (std::size_t i = 0; i < set.slots.size(); ++i) {
      const ArgSlot& slot = set.slots[i];
      if (!slot.buffer || !slot.is_output()) continue;
      if (job.args[i].expected.empty()) {
        return make_error(ErrorCode::bench_failed, "output '" + slot.name + "' names no expected file");
      }
      auto values = read_array_file(job.args[i].expected, slot.dtype, slot.buffer->count());
      if (!values) {
        return make_error(ErrorCode::bench_failed, "expected values of '" + slot.name + "': " +
                                               values.error().message);
      }
      auto sealed = SealedCopy::of(values->data(), values->size(),
                                   "the expected values of '" + slot.name + "'");
      if (!sealed) return sealed.error();
      outputs[i] = std::move(sealed).value();
    }
    set.references.emplace_back(identity, std::move(outputs));
    return &set.references.back().second;
  }

  // 2x the last-level cache, capped: virtual machines often report the whole socket's L3
  // (hundreds of MiB) while one core only ever fills its own slice of it.
  static std::size_t default_flush_bytes() {
    constexpr std::size_t k_max_flush_bytes = std::size_t{64} << 20;
    return std::min(2 * last_level_cache_bytes(), k_max_flush_bytes);
  }

  [[nodiscard]] std::size_t sweep_bytes() const {
    return std::max<std::size_t>(flush_bytes != 0 ? flush_bytes : default_flush_bytes(),
                                 sizeof(std::uint64_t));
  }

  Result<void> ensure_flush_buffer() {
    if (flush_buffer) return {};
    const std::size_t bytes = sweep_bytes();
    auto buffer = HostBuffer::allocate(DType::i64, bytes / sizeof(std::uint64_t), "cache flush");
    if (!buffer) return buffer.error();
    flush_buffer = std::move(buffer).value();
    return {};
  }

  // Writes then reads the whole flush buffer, evicting the kernel's data from every cache level.
  void sweep_cache() {
    auto* data = static_cast<unsigned char*>(flush_buffer->data());
    const std::size_t bytes = flush_buffer->bytes();
    std::memset(data, static_cast<int>(++flush_round & 0xff), bytes);
    std::uint64_t sum = 0;
    for (std::size_t offset = 0; offset + sizeof(std::uint64_t) <= bytes; offset += 64) {
      std::uint64_t word;
      std::memcpy(&word, data + offset, sizeof(word));
      sum += word;
    }
    flush_sink = flush_sink + sum;
  }

  BenchOutcome run(const BenchJob& job, int threads);

  // How a sample's caches are made cold: not at all, the buffers' own lines evicted, or the
  // flush buffer swept.
  enum class CacheCooling { none, evict, sweep };
  // The first, checked run (its CPU time into `cpu_ms`): a failure when it smashed a guard,
  // changed an input or gave outputs other than `expected`.
  std::optional<BenchOutcome> checked_run(EntryFn entry, ArgSet& set,
                                          const std::vector<SealedCopy>* expected,
                                          const BenchJob& job, const RunClock& clock, double& cpu_ms);
  // Samples until `sampler` stops, checking guards and inputs every k_integrity_interval and
  // at the end: a failure when they changed.
  std::optional<BenchOutcome> sample(EntryFn entry, ArgSet& set, const BenchJob& job,
                                     const RunClock& clock, Sampler& sampler, CacheCooling cooling);
  std::optional<BenchOutcome> integrity_failure(ArgSet& set);
};

std::optional<BenchOutcome> HostRunner::State::checked_run(EntryFn entry, ArgSet& set,
                                                           const std::vector<SealedCopy>* expected,
                                                           const BenchJob& job, const RunClock& clock,
                                                           double& cpu_ms) {
  set.reset_for_check();
  const double c0 = clock.now_ms();
  const auto t0 = Clock::now();
  entry(set.pointers.data());
  cpu_ms = clock.used_ms(c0, elapsed_ms(t0, Clock::now()));
  if (const ArgSlot* slot = set.smashed_guard()) {
    set.reset_for_check();  // leave clean guards for the next candidate
    return failure(CandidateStatus::mismatch, guard_reason(*slot));
  }
  if (auto changed = set.changed_input("in its checked run")) {
    return failure(CandidateStatus::mismatch, std::move(*changed));
  }
  if (expected != nullptr) {
    if (auto reason = compare_outputs(set, *expected, job)) {
      return failure(CandidateStatus::mismatch, std::move(*reason));
    }
  }
  return std::nullopt;
}

std::optional<BenchOutcome> HostRunner::State::integrity_failure(ArgSet& set) {
  if (const ArgSlot* slot = set.smashed_guard()) {
    set.reset_for_check();
    return failure(CandidateStatus::mismatch, guard_reason(*slot) + " while it was sampled");
  }
  if (auto changed = set.changed_input("while it was sampled")) {
    return failure(CandidateStatus::mismatch, std::move(*changed));
  }
  return std::nullopt;
}

std::optional<BenchOutcome> HostRunner::State::sample(EntryFn entry, ArgSet& set, const BenchJob& job,
                                                      const RunClock& clock, Sampler& sampler,
                                                      CacheCooling cooling) {
  auto next_check = Clock::now() + k_integrity_interval;
  while (true) {
    if (const auto now = Clock::now(); now >= next_check) {
      if (auto failed = integrity_failure(set)) return failed;
      const auto checked = Clock::now();
      next_check = checked + std::max<Clock::duration>(k_integrity_interval,
                                                       k_integrity_share * (checked - now));
    }
    if (job.inplace) set.restore_inplace();  // before making the caches cold: the copy warms them
    if (cooling == CacheCooling::evict) set.evict_buffers();
    if (cooling == CacheCooling::sweep) sweep_cache();
    // The CPU time brackets the wall time, so the timed interval is what it was before; a wall
    // time well above it means the candidate was off the CPU (Sampler: retaken).
    const double c0 = clock.now_ms();
    const auto t0 = Clock::now();
    entry(set.pointers.data());
    const auto t1 = Clock::now();
    const double wall_ms = elapsed_ms(t0, t1);
    if (sampler.add(wall_ms, t1, clock.used_ms(c0, wall_ms)) != SampleStop::more) break;
  }
  return integrity_failure(set);
}

BenchOutcome HostRunner::State::run(const BenchJob& job, int threads) {
  auto library = SharedLibrary::open(job.artifact_path);
  if (!library) return failure(CandidateStatus::runtime_error, library.error().message);
  // An OpenMP candidate's team is as large as its threads (libgomp read OMP_NUM_THREADS when it
  // was loaded, perhaps for an earlier candidate: its ICV is set here for this one).
  if (auto set_threads = library->symbol("omp_set_num_threads")) {
    reinterpret_cast<void (*)(int)>(set_threads.value())(threads);
  }
  const RunClock clock(threads > 1);
  auto address = library->symbol(job.entry);
  if (!address) return failure(CandidateStatus::runtime_error, address.error().message);
  const auto entry = reinterpret_cast<EntryFn>(address.value());

  auto prepared = args_for(job);
  if (!prepared) return failure(CandidateStatus::runtime_error, prepared.error().message);
  ArgSet& set = *prepared.value();

  const std::vector<SealedCopy>* expected = nullptr;
  const bool has_files = std::any_of(job.args.begin(), job.args.end(),
                                     [](const BenchArg& a) { return !a.expected.empty(); });
  if (!job.reference_path.empty() || has_files) {
    auto reference = job.reference_path.empty() ? expected_from_files(job, set) : reference_for(job, set);
    if (!reference) return failure(CandidateStatus::runtime_error, reference.error().message);
    expected = reference.value();
  }

  const MeasureSettings& settings = job.settings;
  // Cold caches before every sample. Buffers smaller than the sweep have their own cache lines
  // evicted (well under a millisecond for a megabyte, where the sweep takes milliseconds: many
  // more samples in the same time, and no memory traffic disturbing the machine); larger ones,
  // or a CPU without an evict instruction, get the sweep.
  CacheCooling cooling = CacheCooling::none;
  if (settings.flush_cache) {
    cooling = k_can_evict && set.buffer_bytes() <= sweep_bytes() ? CacheCooling::evict : CacheCooling::sweep;
  }
  if (cooling == CacheCooling::sweep) {
    if (auto r = ensure_flush_buffer(); !r) {
      return failure(CandidateStatus::runtime_error, r.error().message);
    }
  }

  // The checked run is the first launch, which is never a sample; its CPU time screens the
  // candidate (Sampler::screen) and starts the warm-up.
  double check_cpu_ms = 0;
  if (auto failed = checked_run(entry, set, expected, job, clock, check_cpu_ms)) return std::move(*failed);

  Sampler sampler(settings, job.prune_above_ms, Clock::now(), job.race_above_ms);
  sampler.screen(check_cpu_ms);  // warm-up until stable, and the prune screen
  sampler.finals_bound(job.finalist_below_ms);
  // The inputs and canaries are checked again every k_integrity_interval of sampling (or less
  // often, when a check takes long) and once sampling ends (a hash of every input: well under a
  // millisecond per megabyte), before the caches are made cold, so a candidate that changes
  // them only on later runs is blamed too, and the next candidate starts from pristine inputs.
  if (auto failed = sample(entry, set, job, clock, sampler, cooling)) return std::move(*failed);
  return sampled_outcome(sampler, job);
}

HostRunner::HostRunner() : HostRunner(0) {}

HostRunner::HostRunner(std::size_t flush_bytes) : m_state(std::make_unique<State>()) {
  m_state->flush_bytes = flush_bytes;
  install_guard_fault_handler();
}

HostRunner::~HostRunner() = default;

BenchOutcome HostRunner::run(const BenchJob& job) {
  auto placement = CpuPlacement::apply(job.cpus);
  if (!placement) return failure(CandidateStatus::runtime_error, placement.error().message);
  const std::vector<int> cpus = current_cpus();
  const int threads = job.threads > 0 ? job.threads : std::max<int>(1, static_cast<int>(cpus.size()));
  // For an OpenMP runtime loaded for the first time by this candidate.
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  BenchOutcome outcome;
  try {
    outcome = m_state->run(job, threads);
  } catch (const std::bad_alloc&) {
    m_state->args.reset();
    m_state->args_key.clear();
    outcome = failure(CandidateStatus::runtime_error,
                      "out of host memory preparing " + job.kernel + " at " + job.shape);
  }
  outcome.conditions["cpus"] = cpus;
  outcome.conditions["threads"] = threads;
  if (job.oversubscribed) outcome.conditions["oversubscribed"] = true;
  return outcome;
}

} // namespace ktune
