#pragma once
// HostRunner: dlopens the candidate's shared object and calls
//   extern "C" void <entry>(void** args)
// with one pointer per spec arg (buffers: the buffer; scalars: a pointer to the value), the
// array shape cuLaunchKernel takes. Buffers are allocated once per (shape, args) and reused;
// inputs are filled deterministically from the seed; outputs are reset before every checked run.
// Reference outputs are computed once per (reference artifact, shape) and kept.
// Not thread-safe: one runner per bench worker.
#include "bench/runner.hpp"

#include <map>
#include <memory>

namespace ktune {

class HostRunner final : public Runner {
public:
  HostRunner();
  ~HostRunner() override;
  [[nodiscard]] BenchOutcome run(const BenchJob& job) override;

private:
  struct State;
  std::unique_ptr<State> m_state;
};

} // namespace ktune
