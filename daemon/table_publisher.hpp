#pragma once
// TablePublisher: keeps the winner table file (core/winner_table.hpp, docs/protocol.md § Winner
// table) that runtimes map, in step with a WinnerIndex.
//
// Handed the index, it takes the winners already there and is told of every winner put() stores
// afterwards (job end, import, resume) through the index's observer; the kernel families
// (current source hash, dims, dtypes, [default]) and the devices a lookup may name come from
// TableSources, read on the io thread when the first table is made, when a winner names a
// device not seen yet, and every k_refresh after that (an edited kernel reaches the table within
// about a second, like ktuned's own lookups). Nothing is published before the devices are
// probed.
//
// Publishing runs on a thread of its own, never on the io thread, at nice k_publisher_nice (on a
// busy machine the io thread's lookups and the workers come first; the table follows): the
// changes of the last k_coalesce (after a publish that took longer: of twice as long as it
// took, so a stream of changes costs at most a third of a core) are taken together, the
// table is encoded, written to <path>.new (mode and group from TableFile) and renamed over
// <path>; then the superseded word of the table it replaced (also one an earlier ktuned left)
// is set to the new generation, in place, so that a mapped reader notices with one load per
// lookup and no system call. A reader still holding the old
// file keeps a consistent old answer. Generations count up from the one found in the file.
// No fsync: the table is derived from the database and rewritten at every start, and a reader
// checks every byte it uses, so a table torn by a power cut is refused (the clients ask ktuned
// or the database), never misread; an fsync would only add its latency to every publish.
//
// io thread: the constructor, the destructor, winner_changed(); status() from any thread.
#include "core/unique_fd.hpp"
#include "core/winner_table.hpp"
#include "daemon/config.hpp"
#include "daemon/devices.hpp"
#include "daemon/winner_index.hpp"
#include "jobs/kernel_registry.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ktune::daemon {

namespace asio = boost::asio;

// Where the table goes and who may read it: next to the socket (table_path_for_socket), 0600
// unless [access] admits others. With exactly one group in allow_gids and no uids, the file
// belongs to that group and is 0640; any other [access] makes it 0644 (a file cannot check
// credentials as the socket does: whoever can reach the directory reads the winners).
struct TableFile {
  std::string path;
  mode_t mode = 0600;
  gid_t group = static_cast<gid_t>(-1);  // -1: the daemon's
};
[[nodiscard]] TableFile table_file_for(const DaemonConfig& config);

// Writes successive tables to one path: <path>.new (mode and group of the TableFile), renamed
// over <path>, then the superseded word of the table it replaced set to the new generation, in
// place. Any thread, one at a time.
class TableFileWriter {
public:
  explicit TableFileWriter(TableFile file) : m_file(std::move(file)) {}
  // Takes over the table an earlier writer left at the path (a regular file of ours with the
  // table magic), so that the next write marks it superseded; its generation, 0 when none.
  [[nodiscard]] std::uint64_t adopt_existing();
  // Errors: io_error naming the file and the failed step; the published table stays as it was.
  [[nodiscard]] Result<void> write(std::span<const std::byte> bytes, std::uint64_t generation);
  [[nodiscard]] const TableFile& file() const { return m_file; }

private:
  TableFile m_file;
  UniqueFd m_current;   // the published file, for its superseded mark
};

// What the table says besides the winners; read on the io thread. References outlive the
// publisher.
struct TableSources {
  KernelRegistry& registry;           // the families (families())
  KernelCache& kernels;               // each family's current source hash, dims, [default]
  const DeviceRegistry& devices;
  const bool& tune_on_miss_everywhere;  // KTUNE_TUNE_ON_MISS=1: non-exact lookups go to ktuned
};

class TablePublisher {
public:
  static constexpr auto k_coalesce = std::chrono::milliseconds(1);
  static constexpr int k_publisher_nice = 10;
  static constexpr auto k_refresh = std::chrono::seconds(1);
  static constexpr auto k_probe_poll = std::chrono::milliseconds(10);

  // Takes the index's winners and becomes its observer until destroyed.
  TablePublisher(asio::io_context& io, TableFile file, TableSources sources, WinnerIndex& index);
  ~TablePublisher();
  TablePublisher(const TablePublisher&) = delete;
  TablePublisher& operator=(const TablePublisher&) = delete;

  // The hook: `record` is now the winner of its key.
  void winner_changed(const WinnerRecord& record);

  struct Status {
    std::uint64_t generation = 0;      // of the last table published; 0 before the first
    std::size_t winners = 0;
    double publish_ms = 0;             // the last publish: encode, write, rename
    double publish_cpu_ms = 0;         // the publishing thread's CPU time in it
    double visible_ms = 0;             // its oldest winner: from winner_changed() to the rename
    std::string path;
  };
  [[nodiscard]] Status status() const;

private:
  struct Meta {
    std::vector<table::DeviceEntry> devices;
    std::vector<table::KernelEntry> kernels;
    std::uint32_t flags = 0;

    bool operator==(const Meta&) const = default;
  };
  [[nodiscard]] Meta gather() const;
  void schedule_refresh(std::chrono::steady_clock::duration after);
  void refresh();
  void run();                          // the publishing thread
  void apply(std::vector<WinnerRecord>& changes);
  // `since`: when the oldest change it includes arrived (none: a refresh of the kernels).
  void publish(const Meta& meta, std::optional<std::chrono::steady_clock::time_point> since);

  asio::io_context& m_io;
  TableSources m_sources;
  WinnerIndex& m_index;
  asio::steady_timer m_timer;
  std::set<std::string> m_fingerprints;   // io thread: devices named by winners
  std::optional<Meta> m_last_meta;        // io thread: the last Meta sent
  bool m_started = false;                 // io thread: the devices were probed

  // Handed from the io thread to the publishing thread.
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::vector<WinnerRecord> m_pending;
  std::chrono::steady_clock::time_point m_pending_since;   // of m_pending's first record
  std::optional<Meta> m_pending_meta;
  bool m_stop = false;

  // The publishing thread's own state.
  std::vector<table::WinnerGroup> m_groups;
  std::unordered_map<std::string, std::size_t> m_group_of;        // kernel, dtype, fingerprint
  std::unordered_map<std::string, std::size_t> m_winner_of;       // full winner key -> position
  std::size_t m_winner_count = 0;
  std::optional<Meta> m_meta;
  TableFileWriter m_writer;
  std::uint64_t m_generation = 0;
  std::chrono::steady_clock::time_point m_last_publish_end{};
  std::chrono::steady_clock::duration m_last_publish_took{};
  bool m_adopted = false;                 // the table an earlier ktuned left was looked at

  std::atomic<std::uint64_t> m_published_generation{0};
  std::atomic<std::size_t> m_published_winners{0};
  std::atomic<double> m_publish_ms{0};
  std::atomic<double> m_publish_cpu_ms{0};
  std::atomic<double> m_visible_ms{0};

  std::thread m_thread;                   // last: started once everything above exists
};

// {"path":..,"generation":..,"winners":..,"publish_ms":..,"publish_cpu_ms":..,"visible_ms":..}:
// the `table` of the stats reply.
[[nodiscard]] nlohmann::json table_status_json(const TablePublisher::Status& status);

} // namespace ktune::daemon
