#pragma once
// BatchSizer: how many configs of a job the scheduler sends a compile worker in one request
// (compile_batch), chosen from the compile times the job measured.
//
// The rule: a config's compile time in a batch of B is modelled as t(B) = a / B + b (a: what a
// compiler run costs whatever it compiles -- start-up, the headers; b: each config's own code),
// fitted by least squares to the mean time per config measured at each batch size. The size is
// the largest B of 2, 4, 8 whose t(B) is at least 5% below t(B / 2) -- every doubling up to it
// pays -- while one batch, a + b B, stays within `max_batch_ms` (about 1 s: the bench worker
// never waits long for a batch); else 1. Nothing measured: 1. One size measured: the other end
// (2 after single compiles, the probe that measures a batch; 1 after batches). Once stopped (a
// source that does not batch): 1 for good.
// Not thread-safe (the scheduler's io thread).
#include <cstddef>
#include <map>

namespace ktune::daemon {

class BatchSizer {
public:
  static constexpr std::size_t k_max_size = 8;
  static constexpr double k_min_gain = 0.05;  // per doubling of the batch

  explicit BatchSizer(double max_batch_ms = 1000) : m_max_batch_ms(max_batch_ms) {}

  // A config compiled by a compiler run that built `configs` configs, `per_config_ms` each
  // (CompileOutcome's batch_size and compile_ms).
  void observe(std::size_t configs, double per_config_ms);
  void stop() { m_stopped = true; }
  [[nodiscard]] bool stopped() const { return m_stopped; }
  [[nodiscard]] std::size_t size() const;
  // The mean time per config measured at each batch size (configs per run -> ms).
  [[nodiscard]] std::map<std::size_t, double> measured_ms() const;

private:
  struct Fit {
    double a = 0, b = 0;
  };
  [[nodiscard]] bool fitted(Fit& fit) const;

  struct Sum {
    double ms = 0;
    std::size_t count = 0;
  };
  std::map<std::size_t, Sum> m_times;  // configs per run -> per-config times
  double m_max_batch_ms;
  bool m_stopped = false;
};

} // namespace ktune::daemon
