#pragma once
// The winner table: the file ktuned publishes so that runtimes answer lookups from a read-only
// mapping, without a round trip (docs/protocol.md § Winner table, which is the reference for
// the byte layout). Pure: encode() builds the bytes, TableView reads them; no I/O here (ktuned's
// TablePublisher writes the file, the clients map it).
//
// A table holds the devices a lookup may name, the kernel families (current source hash, dims,
// accepted dtypes, [default]), and every winner, grouped by (kernel, dtype, device fingerprint),
// with open-addressing hash indexes over devices, kernels, groups and winners. TableView::answer
// walks the same ladder as ktuned (exact, nearest, default; daemon/winner_index.hpp) and gives the
// same reply fields.
//
// TableView never trusts a byte: open() checks the header and that every section lies inside the
// bytes; every string, blob and index is bounds-checked where it is read, and every entry carries
// a check (XXH64) verified before it answers. A table that fails a check answers nothing
// (Outcome::damaged): the caller asks ktuned instead.
#include "core/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::table {

inline constexpr char k_magic[8] = {'K', 'T', 'U', 'N', 'E', 'T', 'B', 'L'};
// Bumped when a reader of the previous version would misread a table; additions that old
// readers can skip (fields appended to an entry, counted by its entry_bytes) keep the version.
inline constexpr std::uint32_t k_layout_version = 1;
inline constexpr std::size_t k_header_bytes = 256;
// Byte offset of the superseded word in the header: 0 while the file is the published table,
// else the generation that replaced it. Written in place by the publisher after the rename; the
// only bytes of a table that ever change.
inline constexpr std::size_t k_superseded_offset = 200;

enum class Family : std::uint32_t { cpp = 0, cuda = 1 };

// Header flags.
inline constexpr std::uint32_t k_flag_tune_on_miss = 1;  // ktuned tunes every non-exact lookup

// ---- encoding ----

struct DeviceEntry {
  std::string name;          // "cpu", "cuda:0", "cuda", or a fingerprint
  std::string fingerprint;
  Family family = Family::cpp;
  bool local = false;        // a device of ktuned's machine

  bool operator==(const DeviceEntry&) const = default;
};

struct KernelEntry {
  std::string name;
  Family family = Family::cpp;
  std::string source_hash;   // current
  std::vector<std::string> dims;
  std::vector<std::string> dtypes;  // the dtypes a lookup accepts, spec order
  bool dtype_axis = true;    // false: "f32" stands for dtypes.front()
  std::string default_config;       // flat JSON object of integers, params order

  bool operator==(const KernelEntry&) const = default;
};

struct WinnerEntry {
  std::string shape;         // canonical, the kernel's dim order
  std::string source_hash;
  std::string config;        // flat JSON object of integers, params order
  double median_ms = 0;
  double gflops = 0;
  std::int64_t job = 0;
};

struct WinnerGroup {
  std::string kernel, dtype, fingerprint;
  std::vector<WinnerEntry> winners;
};

struct TableContent {
  std::uint64_t generation = 0;
  std::uint64_t published_unix_ms = 0;
  std::uint32_t flags = 0;
  std::vector<DeviceEntry> devices;
  std::vector<KernelEntry> kernels;
};

// The bytes of a table. `groups` are written in the order given, each group's winners in
// theirs. Errors (code "bad_table"): a config or default that is not a flat JSON object of
// integers, a shape that does not parse, a table over 4 GiB; the message names the entry.
[[nodiscard]] Result<std::vector<std::byte>> encode(const TableContent& content,
                                                    std::span<const WinnerGroup> groups);

// The path of the table that belongs to a socket: its ".sock" suffix replaced by ".table", or
// ".table" appended when it has none ("/run/user/1000/ktune/ktuned.sock" ->
// "/run/user/1000/ktune/ktuned.table").
[[nodiscard]] std::string table_path_for_socket(const std::string& socket_path);

// ---- decoding ----

enum class Rung { exact, nearest, fallback_default };

struct Query {
  std::string_view kernel, shape, dtype, device;
};

enum class Outcome {
  answered,
  unknown_device,   // the device name is not in the table
  unknown_kernel,   // no family of the kernel for that device
  not_accepted,     // a dtype or shape the table cannot vouch for (ktuned says why)
  damaged,          // a bound or a check failed
};

struct Param {
  std::string_view name;     // NUL-terminated inside the table
  std::int64_t value = 0;
};

struct Answer {
  Rung rung = Rung::fallback_default;
  std::string_view config;   // JSON object text, NUL-terminated inside the table
  std::string_view from_shape;   // nearest: the tuned shape (NUL-terminated); else empty
  std::string_view reason;   // empty on exact; a static string otherwise
  double median_ms = 0;      // exact and nearest; NaN in the table reads as 0
  double gflops = 0;
  std::int64_t job = 0;
  std::uint32_t param_count = 0;
  const std::byte* params = nullptr;  // use TableView::param()
};

// A device and kernel family resolved in one table (pointers into it).
struct Resolved {
  std::uint32_t kernel_ref = 0, fingerprint_ref = 0, source_ref = 0;  // their string refs
  std::string_view fingerprint;
  std::uint32_t device_flags = 0;
  const std::byte* kernel = nullptr;
  std::string_view source_hash, dims, dtypes, tuned_on;
};

// Buffers reused across lookups, so that a lookup allocates nothing once they have grown, and
// the last device and kernel resolved (a runtime asks about one device and few kernels).
struct Scratch {
  std::string key;
  std::string shape;
  std::vector<double> log_dims;
  std::uint64_t resolved_in = 0;   // TableView::instance() of `resolved`; 0: none
  std::string resolved_device, resolved_kernel;
  Resolved resolved;
  bool group_valid = false;        // group_hash is that of (resolved kernel, group_dtype, device)
  std::string group_dtype;         // accepted; group_query_dtype as the lookup gave it
  std::string group_query_dtype;
  std::uint32_t dtype_ref = 0;     // a record's string ref of group_dtype; 0: none seen yet
  std::uint64_t group_hash = 0;
  // Records whose check passed in the table `verified_in`: a mapped table never changes (only
  // its superseded word does), so each record is verified once per mapping.
  std::uint64_t verified_in = 0;
  std::vector<std::uint64_t> verified;
};

class TableView {
public:
  TableView() = default;
  // Checks the header: magic, layout version, sizes, header check, sections inside `bytes`.
  // Errors: "unknown_layout" (another layout version: a newer ktuned), "bad_table" (anything
  // else), naming what is wrong. The view points into `bytes`, which must outlive it.
  [[nodiscard]] static Result<TableView> open(std::span<const std::byte> bytes);

  [[nodiscard]] std::uint64_t generation() const { return m_generation; }
  // Unique to each open() in this process (copies share it): what Scratch memos are keyed by.
  [[nodiscard]] std::uint64_t instance() const { return m_instance; }
  [[nodiscard]] std::uint32_t flags() const { return m_flags; }
  [[nodiscard]] std::uint64_t published_unix_ms() const { return m_published_unix_ms; }
  [[nodiscard]] std::size_t winner_count() const { return m_records.count; }
  // Whether the publisher marked this table as replaced. An acquire load of the superseded word
  // (a mapping sees the publisher's write without a system call).
  [[nodiscard]] bool superseded() const;

  // Walks the ladder for `query` into `answer` (valid while the bytes are).
  [[nodiscard]] Outcome answer(const Query& query, Answer& answer, Scratch& scratch) const;
  // Parameter `i` (< answer.param_count) of an answer.
  [[nodiscard]] Param param(const Answer& answer, std::uint32_t i) const;

  // Reads every entry and verifies its bounds and check; the number that fail (0 for a sound
  // table). For tests, the fuzz target and `damaged` diagnostics.
  [[nodiscard]] std::size_t verify_all() const;

  struct Section {
    std::uint64_t offset = 0;
    std::uint32_t count = 0;
    std::uint32_t entry_bytes = 0;
  };

private:
  [[nodiscard]] Outcome resolve(const Query& query, Resolved& out, Scratch& scratch) const;
  [[nodiscard]] bool string_at(std::uint32_t ref, std::string_view& out) const;
  [[nodiscard]] bool blob_at(std::uint32_t offset, std::uint64_t& bytes) const;
  // Index of the entry of `section` whose key hashes to `hash`, starting the probe after
  // `*cursor` (in/out, for keys with several entries); -1 when none is left.
  [[nodiscard]] std::int64_t probe(const Section& slots, std::uint64_t hash,
                                   std::uint64_t& cursor, std::uint32_t limit) const;
  [[nodiscard]] const std::byte* entry(const Section& section, std::uint32_t index) const;
  [[nodiscard]] bool blob_sound(std::uint32_t blob) const;
  [[nodiscard]] bool record_sound(const std::byte* record) const;
  [[nodiscard]] bool kernel_sound(const std::byte* kernel) const;
  [[nodiscard]] bool plain_sound(const std::byte* entry, const Section& section) const;
  [[nodiscard]] std::uint64_t entry_hash(const std::byte* entry, const Section& section) const;

  std::span<const std::byte> m_bytes;
  const std::byte* m_arena = nullptr;
  std::uint64_t m_arena_bytes = 0;
  std::uint64_t m_generation = 0;
  std::uint64_t m_instance = 0;
  std::uint64_t m_published_unix_ms = 0;
  std::uint32_t m_flags = 0;
  Section m_devices, m_device_slots, m_kernels, m_kernel_slots, m_groups, m_group_slots,
      m_records, m_record_slots;
};

// XXH64 of `bytes` with `seed`: the hash of every key and check in a table.
[[nodiscard]] std::uint64_t hash64(const void* bytes, std::size_t size, std::uint64_t seed = 0);

} // namespace ktune::table
