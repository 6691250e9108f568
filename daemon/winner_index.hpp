#pragma once
// WinnerIndex: every stored winner, in memory, so that a lookup never queries SQLite. Loaded from
// Store::all_winners at start and updated with one put() per finished job.
//
// LookupLadder answers a lookup from the index (docs/protocol.md § lookup):
//   exact   the winner of (kernel, current source hash, shape, dtype, device fingerprint);
//   stale   the newest winner of the same key on the same hardware under another environment
//           (another fingerprint with the device's hardware id: a compiler, driver or toolkit
//           changed; core/device_identity.hpp), with what changed (`environment_change`);
//   nearest the winner of the closest tuned shape of the same kernel, source hash, dtype and
//           device, by Euclidean distance between the logs of the shape dims (exact:false,
//           from_shape names the shape the config was tuned at);
//   default the kernel's [default] config.
// A reply below `exact` carries a reason: source_changed, shape_not_tuned, dtype_not_tuned,
// device_never_tuned or no_results_for_kernel.
//
// KernelCache keeps, per kernel, what a lookup needs from the kernel registry (current source
// hash, dims, dtypes, language, [default] as JSON text); an entry is re-read from the registry
// when it is older than `k_kernel_refresh`, so an edited kernel is seen within about a second and
// the registry (a few file reads) stays off the per-lookup path.
//
// Not thread-safe: everything runs on ktuned's io thread.
#include "jobs/kernel_registry.hpp"
#include "core/device_identity.hpp"
#include "core/result.hpp"
#include "db/store.hpp"

#include <chrono>
#include <functional>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ktune::daemon {

struct IndexedWinner {
  std::string shape;               // canonical text, the kernel's dim order
  std::vector<double> log_dims;    // log of every dim value, in the same order
  std::string source_hash;
  std::string config;              // canonical JSON object text
  double median_ms = 0;
  double gflops = 0;
  std::int64_t job_id = 0;
  std::int64_t updated_at = 0;     // unix ms the winner was stored (0: not known)
};

class WinnerIndex {
public:
  void clear();
  // Replaces the winner of the record's key (kernel, source hash, shape, dtype, fingerprint).
  void put(const WinnerRecord& record);
  [[nodiscard]] std::size_t size() const { return m_size; }
  // Called with the record of every put() from now on (the winner table's TablePublisher); one
  // observer, nullptr removes it.
  void set_observer(std::function<void(const WinnerRecord&)> observer) {
    m_observer = std::move(observer);
  }
  // Every winner, as a record (result_id and updated_at 0).
  void for_each(const std::function<void(const WinnerRecord&)>& visit) const;

  // All winners of (kernel, dtype, fingerprint), any source hash; nullptr when none.
  [[nodiscard]] const std::vector<IndexedWinner>* group(std::string_view kernel,
                                                        std::string_view dtype,
                                                        std::string_view fingerprint) const;
  [[nodiscard]] bool kernel_has_winners_on(std::string_view kernel,
                                           std::string_view fingerprint) const;
  [[nodiscard]] bool device_has_winners(std::string_view fingerprint) const;

  // Devices' identities: which fingerprints are one hardware under several environments. A
  // fingerprint without one is never stale and has no stale winners.
  void set_identity(const std::string& fingerprint, const DeviceIdentity& identity);
  [[nodiscard]] bool knows_identity(std::string_view fingerprint) const;
  // Whether another fingerprint of `fingerprint`'s hardware holds winners (the winner table
  // sends such a device's non-exact lookups to ktuned, which may answer stale).
  [[nodiscard]] bool has_stale_peers(std::string_view fingerprint) const;
  // Whether two fingerprints with known identities are one hardware (false when either is not
  // known, or they are the same fingerprint).
  [[nodiscard]] bool same_hardware(std::string_view a, std::string_view b) const;

  struct Stale {
    const IndexedWinner* winner = nullptr;
    const std::string* fingerprint = nullptr;  // the environment it was tuned under
    const std::string* change = nullptr;       // environment_change(old, new), for people
  };
  // The newest winner (updated_at, then job) of (kernel, source_hash, shape, dtype) on another
  // fingerprint of `fingerprint`'s hardware; winner nullptr when there is none.
  [[nodiscard]] Stale stale_winner(std::string_view kernel, std::string_view source_hash,
                                   std::string_view shape, std::string_view dtype,
                                   std::string_view fingerprint) const;

private:
  struct Identity {
    std::string hardware_id;
    nlohmann::json environment;
  };
  static std::string group_key(std::string_view kernel, std::string_view dtype,
                               std::string_view fingerprint);
  std::unordered_map<std::string, std::vector<IndexedWinner>> m_groups;
  std::unordered_map<std::string, int> m_kernel_device;   // "kernel\x1f fingerprint" -> count
  std::unordered_map<std::string, int> m_devices;         // fingerprint -> count
  std::unordered_map<std::string, Identity> m_identities; // fingerprint -> identity
  std::unordered_map<std::string, std::vector<std::string>> m_hardware;  // hardware id -> fps
  mutable std::unordered_map<std::string, std::string> m_changes;  // "old\x1fnew" -> text
  std::size_t m_size = 0;
  std::function<void(const WinnerRecord&)> m_observer;
};

// The log-space distance between two shapes of one kernel (same dims, same order).
[[nodiscard]] double shape_distance(const std::vector<double>& a, const std::vector<double>& b);
// Logs of the values of a canonical shape text "M=1,N=2"; empty when the text does not parse.
[[nodiscard]] std::vector<double> shape_log_dims(std::string_view shape);

struct CachedKernel {
  std::string name;
  std::string source_hash;
  std::vector<std::string> dims;
  std::vector<std::string> dtypes;
  bool dtype_axis = true;          // false: dtypes holds the family's one element type
  bool runs_on_cpu = true;         // language cpp
  std::string default_config;      // JSON object text, params order
  std::chrono::steady_clock::time_point checked_at;
  std::string spec_path;           // the family's kernel.toml
  std::vector<FileStamp> inputs;   // what it was loaded from (KernelRegistry)
  bool reloading = false;          // read again off the loop; this entry answers meanwhile
};

class KernelCache {
public:
  static constexpr auto k_kernel_refresh = std::chrono::seconds(1);

  // Reads a family again away from the event loop: runs load_kernel(spec_path, kernel_dir) on a
  // helper thread and calls `done` on the event loop with what it returned and read.
  using Done = std::function<void(Result<LoadedKernel>, std::vector<FileStamp>)>;
  using Reload = std::function<void(std::string spec_path, std::string kernel_dir, Done done)>;

  explicit KernelCache(KernelRegistry& registry) : m_registry(registry) {}
  // Without one, a changed family is read again inline (tests).
  void set_reload(Reload reload) { m_reload = std::move(reload); }

  // The cached entry of the family `name` written in `language`. Older than k_kernel_refresh,
  // its files are checked (stat only); when one changed, the family is read again through
  // `reload` while this entry keeps answering, and replaced (or dropped, when it broke) once
  // read. A family not cached yet is found through the registry inline (its limits bound that:
  // core/kernel_spec.hpp SpecLimits). Errors: the registry's (unknown_kernel, spec_error,
  // spec_too_large).
  [[nodiscard]] Result<const CachedKernel*> get(const std::string& name, Language language,
                                                std::chrono::steady_clock::time_point now);
  void invalidate() { m_kernels.clear(); }

private:
  void finish_reload(const std::string& key, const std::string& name, Language language,
                     const std::string& spec_path, Result<LoadedKernel> loaded,
                     std::vector<FileStamp> inputs);

  KernelRegistry& m_registry;
  Reload m_reload;
  std::unordered_map<std::string, CachedKernel> m_kernels; // name + language
};

// In the order the table's Rung (core/winner_table.hpp) numbers its rungs; stale only ktuned answers.
enum class Rung { exact, nearest, fallback_default, stale };

struct LadderAnswer {
  Rung rung = Rung::fallback_default;
  const std::string* config = nullptr;       // JSON object text (points into index or cache)
  const IndexedWinner* winner = nullptr;     // exact, stale and nearest
  std::string_view reason;                   // empty for exact
  WinnerIndex::Stale stale;                  // stale: where from, what changed
};

[[nodiscard]] std::string_view rung_name(Rung rung);

// Walks the ladder for an already-validated key (`shape` canonical for `kernel`).
[[nodiscard]] LadderAnswer climb_ladder(const WinnerIndex& index, const CachedKernel& kernel,
                                        std::string_view shape, std::string_view dtype,
                                        std::string_view fingerprint);

// Appends the lookup result object ({"rung":...}, docs/protocol.md) for `answer` to `out`;
// a `tune_job` adds "tune_job": the id of the tune-on-miss job for this key.
void append_lookup_result(std::string& out, const LadderAnswer& answer,
                          std::optional<std::int64_t> tune_job);

} // namespace ktune::daemon
