// thread_fma: Y[i] = 64 dependent multiply-adds of X[i], on NTHREADS std::threads (the calling
// thread waits for them).
// ABI: extern "C" void thread_fma(void** args), args = {X, Y, &N} (N is int64_t).
#include <cstdint>
#include <thread>
#include <vector>

namespace {

void part(const float* __restrict x, float* __restrict y, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    float a = v;
    for (int k = 0; k < 64; ++k) a = a * 0.999f + v;
    y[i] = a;
  }
}

} // namespace

extern "C" void thread_fma(void** args) {
  const float* x = static_cast<const float*>(args[0]);
  float* y = static_cast<float*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
  std::vector<std::thread> threads;
  const std::int64_t step = (n + NTHREADS - 1) / NTHREADS;
  for (int t = 0; t < NTHREADS; ++t) {
    const std::int64_t begin = t * step;
    const std::int64_t end = begin + step < n ? begin + step : n;
    if (begin < end) threads.emplace_back(part, x, y, begin, end);
  }
  for (auto& thread : threads) thread.join();
}
