#pragma once
// AbService: the daemon op "confirm" -- a key that looks regressed or improved against history
// (or a table) measured again as an A/B: the baseline's build and the candidate's, interleaved in
// rounds in one bench worker on the key's device lane (the worker op bench_ab,
// jobs/ab_job.hpp), judged by core/ab_judge.hpp. What history says only selects what to confirm;
// the verdict is this one (docs/ARCHITECTURE.md § Regressions).
//
//   {"op":"confirm","kernel":"gemm","shape":"M=..","dtype":"f32","device":"cpu",
//    "baseline":{"result":12} | {"source_hash":"..","config":{"BM":64,..}},
//    "candidate":{...the same forms...}, "min_effect":0.05, "rounds":10}
//
// Each side's build: the kernel family as it is now when its source hash is the current one,
// else the family as it was at that hash from the source archive (jobs/source_archive.hpp);
// compiled through the compile pool, which finds the artifact in the compile cache by its key
// (the same source, config and compiler) or builds it again. The A/B runs `rounds` rounds (at
// least k_min_ab_rounds) in two passes of half of them, each in a bench worker process of its
// own (a CPU bench worker ends after its bench_ab); an ambiguous verdict gets as many rounds
// more once, again in two passes, judged on all.
// Each side's measurement in a round takes the daemon's [measure] settings with a round's share
// of min_time_s (at least 10 ms), max_time_s and the precision (as a round of the finals does).
//
// The reply: {"kernel","shape","dtype","device","fingerprint","verdict":"regressed|improved|
//   same|ambiguous","why":"..","ratio":1.1,"ratio_interval":[lo,hi],"rounds":N,
//   "slower_rounds":K,"round_ms":[[a,b],..],"baseline":{"source_hash","config","build":
//   "current|archived","cached":true,"median_ms"},"candidate":{..},"impossible":".."}
// "impossible" (only when the A/B could not run) says why: the old source is kept nowhere (the
// old artifact is gone), it no longer compiles, a side failed its measurement, the worker died;
// the verdict is then ambiguous. Errors: bad_request (a field; a result id that does not exist or
// is of another kernel), bad_shape, bad_dtype, unknown_device, no_device, unknown_kernel.
#include "core/param_space.hpp"
#include "core/protocol.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/client.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"
#include "jobs/kernel_registry.hpp"

#include <memory>
#include <optional>
#include <string>

namespace ktune::daemon {

// One side of a confirm request: a stored result, or a source hash and a config.
struct AbSideRequest {
  std::optional<std::int64_t> result;
  std::string source_hash;
  nlohmann::json config;      // an object of params (with source_hash)
};

struct ConfirmRequest {
  std::string kernel, shape, dtype = "f32", device = "cpu";
  AbSideRequest baseline, candidate;
  double min_effect = 0.05;
  int rounds = 10;
  // Errors: bad_request naming the field.
  [[nodiscard]] static Result<ConfirmRequest> from_json(const nlohmann::json& body);
};

class AbService {
public:
  AbService(asio::io_context& io, WorkerPool& pool, const Store& store, DeviceRegistry& devices,
            KernelRegistry& registry, const DaemonConfig& config);

  // Answers a confirm request on `session` once the A/B is judged (or at once on an error).
  void confirm(const std::shared_ptr<Client>& session, const protocol::Request& request);

private:
  struct Run;
  struct Side;
  [[nodiscard]] Result<Side> resolve_side(const ConfirmRequest& request, const AbSideRequest& side,
                                          const std::string& what, Language language);
  void build(const std::shared_ptr<Run>& run);
  void measure(const std::shared_ptr<Run>& run);
  void finish(const std::shared_ptr<Run>& run);

  asio::io_context& m_io;
  WorkerPool& m_pool;
  const Store& m_store;
  DeviceRegistry& m_devices;
  KernelRegistry& m_registry;
  const DaemonConfig& m_config;
};

} // namespace ktune::daemon
