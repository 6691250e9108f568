// placement_probe: see kernel.toml. ABI: extern "C" void placement_probe(void** args),
// args = {Y, &N} (N is int64_t).
#include <omp.h>
#include <sched.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

int cpus_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  return CPU_COUNT(&set);
}

} // namespace

extern "C" void placement_probe(void** args) {
  float* y = static_cast<float*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  int misplaced = 0;
  int team = 0;
#pragma omp parallel num_threads(NTHREADS) reduction(+ : misplaced)
  {
    const int cpus = cpus_of_this_thread();
    if (NTHREADS > 1 && cpus < 2) misplaced += 1;
#pragma omp single
    team = omp_get_num_threads();
  }
  if (misplaced != 0 || team != NTHREADS) {
    std::fprintf(stderr, "placement_probe: %d of %d thread(s) misplaced, a team of %d\n", misplaced,
                 NTHREADS, team);
    std::abort();
  }
  for (std::int64_t i = 0; i < n; ++i) y[i] = 1.0f;
}
