#pragma once
// FUZZ_CHECK(cond, what): a property every input must satisfy. A violation prints what was
// expected and aborts, so libFuzzer records the input as a crash.
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                            \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: property violated: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   what);                                                                 \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <limits>
#include <string>

namespace ktune::fuzz {

// Thread CPU time in ns: preemption by the rest of the machine does not count.
inline std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

template <class Run>
std::int64_t best_cpu_ns(int rounds, Run&& run) {
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  for (int r = 0; r < rounds; ++r) {
    const std::int64_t start = thread_cpu_ns();
    run();
    best = std::min(best, thread_cpu_ns() - start);
  }
  return best;
}

// The size-linear check: parsing `many` (built from `copies` copies of `one`) must cost at most
// k_linear_slack times what `copies` parses of `one` cost, both the best of 5 in thread CPU
// time. The two sides read the same number of bytes, so a linear parser gives a ratio near 1
// (a log factor for sorted containers) and a quadratic one a ratio near `copies`: with 64
// copies, 16 separates them with room for noise. Times under 20 µs are below what the clock
// can compare and are not judged.
inline constexpr double k_linear_slack = 16.0;

template <class Parse>
void check_linear(const std::string& one, const std::string& many, int copies, Parse&& parse) {
  const std::int64_t small_ns = best_cpu_ns(5, [&] {
    for (int c = 0; c < copies; ++c) parse(one);
  });
  const std::int64_t big_ns = best_cpu_ns(5, [&] { parse(many); });
  if (big_ns < 20'000) return;
  if (static_cast<double>(big_ns) > k_linear_slack * static_cast<double>(std::max<std::int64_t>(small_ns, 1))) {
    std::fprintf(stderr,
                 "property violated: parsing is linear in the input's size: %d copies in one "
                 "input (%zu bytes) took %lld ns, %d parses of one copy (%zu bytes) %lld ns\n",
                 copies, many.size(), static_cast<long long>(big_ns), copies, one.size(),
                 static_cast<long long>(small_ns));
    std::abort();
  }
}

// Whether this input is one of the few the (slower) linear check runs on: about 1 in 32,
// chosen by the input's bytes, so a run of libFuzzer judges thousands and replays the same ones.
inline bool sampled_for_linear_check(const std::uint8_t* data, std::size_t size) {
  std::uint32_t h = 2166136261u;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  return size >= 4 && (h & 31u) == 0;
}

} // namespace ktune::fuzz
