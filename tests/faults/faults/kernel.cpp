// faults: OUT[i] = 2 * X[i], broken on purpose according to FAULT (see kernel.toml).
//
// ABI: extern "C" void faults(void** args), args = {X, OUT, &N} (N is int64_t).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#ifndef KTUNE_DTYPE
#error "KTUNE_DTYPE (the element type) must be defined"
#endif
#if !defined(FAULT) || !defined(REP)
#error "the tunables FAULT and REP must be defined"
#endif

#if FAULT == 5
#error "faults: FAULT=5 is a compile error on purpose"
#endif

#if FAULT == 6
// Every Hang<K> runs a constant evaluation that exhausts g++'s operation limit (seconds each) and
// instantiates Hang<K + 1>, up to the template depth limit: about an hour of compiler time.
namespace {
constexpr long spin(long k) {
  long s = 0;
  for (long i = 0; i < 100000; ++i)
    for (long j = 0; j < 100000; ++j) s += (i ^ j) + k;
  return s;
}
template <long K> struct Hang {
  static_assert(spin(K) != 1, "never decided");
  static constexpr long next = Hang<K + 1>::next;
};
constexpr long k_hang = Hang<0>::next;
} // namespace
#endif

namespace {
using T = KTUNE_DTYPE;
} // namespace

extern "C" void faults(void** args) {
  const T* x = static_cast<const T*>(args[0]);
  T* out = static_cast<T*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);

#if FAULT == 1
  volatile int* null_pointer = nullptr;
  *null_pointer = 1;
#elif FAULT == 2
  std::fputs("faults: FAULT=2 aborts on purpose\n", stderr);
  std::fflush(stderr);
  std::abort();
#elif FAULT == 3
  for (volatile std::int64_t spin = 0;; spin = spin + 1) {
  }
#elif FAULT == 7
  const std::size_t huge = std::size_t{64} << 30;
  auto* block = static_cast<volatile char*>(std::malloc(huge));
  if (block == nullptr) throw std::bad_alloc();
  block[0] = 1;
  block[huge - 1] = 1;
  std::free(const_cast<char*>(block));
#elif FAULT == 8
  if (n > 1) std::exit(0);
#endif

  for (std::int64_t i = 0; i < n; ++i) out[i] = T(2) * x[i];

#if FAULT == 4
  out[n / 2] += T(1);
#elif FAULT == 9
  out[n] = T(1);
#endif
}
