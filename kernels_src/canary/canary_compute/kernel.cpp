// canary_compute: OUT[0] = the sum of CHAINS recurrences x <- x * 0.999999 + 1e-6 run N steps
// each, from 1, 1.001, ...: a fixed amount of dependent floating-point work, no memory traffic.
#include <cstdint>

extern "C" void canary_compute(void** args) {
  double* out = static_cast<double*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  double x[CHAINS];
  for (int c = 0; c < CHAINS; ++c) x[c] = 1.0 + 0.001 * c;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < CHAINS; ++c) x[c] = x[c] * 0.999999 + 1e-6;
  }
  double total = 0;
  for (int c = 0; c < CHAINS; ++c) total += x[c];
  out[0] = total;
}
