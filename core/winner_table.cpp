#include "core/winner_table.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

namespace ktune::table {

static_assert(std::endian::native == std::endian::little,
              "the winner table is little-endian; this host needs byte swaps in load/store");

namespace {

// Sections, in the order of the header's section table.
enum SectionIndex : std::size_t {
  k_devices, k_device_slots, k_kernels, k_kernel_slots, k_groups, k_group_slots, k_records,
  k_record_slots, k_arena, k_section_count
};

// Entry sizes of this layout version (a newer writer may append fields: readers take the
// header's entry_bytes as the stride and need at least these).
constexpr std::uint32_t k_device_bytes = 32;
constexpr std::uint32_t k_kernel_bytes = 48;
constexpr std::uint32_t k_group_bytes = 40;
constexpr std::uint32_t k_record_bytes = 72;
constexpr std::uint32_t k_slot_bytes = 8;
constexpr std::uint32_t k_min_bytes[k_section_count] = {
    k_device_bytes, k_slot_bytes, k_kernel_bytes, k_slot_bytes, k_group_bytes,
    k_slot_bytes,   k_record_bytes, k_slot_bytes, 1};

constexpr std::size_t k_sections_offset = 48;
constexpr std::size_t k_header_check_offset = 192;

// Device flags.
constexpr std::uint32_t k_device_local = 1;
constexpr std::uint32_t k_device_has_winners = 2;
// Kernel flags.
constexpr std::uint32_t k_kernel_dtype_axis = 1;

constexpr char k_sep = '\x1f';
constexpr std::int64_t k_max_dim_value = std::int64_t{1} << 40;
constexpr std::size_t k_max_dims = 64;
constexpr double k_tie = 1e-9;   // as daemon/winner_index.cpp

constexpr std::string_view k_reason_source_changed = "source_changed";
constexpr std::string_view k_reason_shape_not_tuned = "shape_not_tuned";
constexpr std::string_view k_reason_dtype_not_tuned = "dtype_not_tuned";
constexpr std::string_view k_reason_device_never_tuned = "device_never_tuned";
constexpr std::string_view k_reason_no_results = "no_results_for_kernel";

std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
double load_f64(const std::byte* p) {
  double v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::int64_t load_i64(const std::byte* p) {
  std::int64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::string_view family_word(Family family) { return family == Family::cuda ? "cuda" : "cpp"; }

// A config blob: u64 check (XXH64 of the rest), u32 param count, u32 text length, {u32 name,
// u32 0, i64 value} per param, the text, NUL, zeros to a multiple of 8 bytes.
constexpr std::size_t k_blob_head = 16;

// Offset, from the blob's start, of the NUL that ends a config blob's text.
std::uint64_t blob_text_end(const std::byte* arena, std::uint32_t offset) {
  return k_blob_head + 16 * std::uint64_t{load_u32(arena + offset + 8)} +
         load_u32(arena + offset + 12);
}

// ---- encoding ----

Error bad_table(std::string message) { return make_error(ErrorCode::bad_table, std::move(message)); }

// A flat JSON object of integers, {"A":1,"B":-2} (whitespace allowed, no escapes in names).
bool parse_flat_config(std::string_view text, std::vector<std::pair<std::string_view, std::int64_t>>& out) {
  out.clear();
  std::size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  };
  skip();
  if (i >= text.size() || text[i] != '{') return false;
  ++i;
  skip();
  if (i < text.size() && text[i] == '}') {
    ++i;
    skip();
    return i == text.size();
  }
  while (true) {
    skip();
    if (i >= text.size() || text[i] != '"') return false;
    const std::size_t begin = ++i;
    while (i < text.size() && text[i] != '"') {
      if (text[i] == '\\' || static_cast<unsigned char>(text[i]) < 0x20) return false;
      ++i;
    }
    if (i >= text.size()) return false;
    const std::string_view name = text.substr(begin, i - begin);
    ++i;
    skip();
    if (i >= text.size() || text[i] != ':') return false;
    ++i;
    skip();
    const bool negative = i < text.size() && text[i] == '-';
    if (negative) ++i;
    const std::size_t digits = i;
    std::uint64_t value = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (value > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) return false;
      value = value * 10 + static_cast<std::uint64_t>(text[i] - '0');
      ++i;
    }
    if (i == digits || value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return false;
    }
    out.emplace_back(name, negative ? -static_cast<std::int64_t>(value) : static_cast<std::int64_t>(value));
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') {
      ++i;
      skip();
      return i == text.size();
    }
    return false;
  }
}

// The last value seen at each dim position and its log: shapes of one kernel share dims.
struct LogMemo {
  std::int64_t value[k_max_dims] = {};
  double log[k_max_dims] = {};
};

// Logs of the values of a canonical shape "M=1,N=2"; false when it does not parse.
bool shape_logs(std::string_view shape, std::vector<double>& out, LogMemo* memo = nullptr) {
  out.clear();
  while (!shape.empty()) {
    const auto comma = shape.find(',');
    const std::string_view item = shape.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq + 1 == item.size()) return false;
    std::int64_t value = 0;
    for (char c : item.substr(eq + 1)) {
      if (c < '0' || c > '9' || value > k_max_dim_value) return false;
      value = value * 10 + (c - '0');
    }
    if (value <= 0) return false;
    const std::size_t at = out.size();
    if (memo != nullptr && at < k_max_dims) {
      if (memo->value[at] != value) {
        memo->value[at] = value;
        memo->log[at] = std::log(static_cast<double>(value));
      }
      out.push_back(memo->log[at]);
    } else {
      out.push_back(std::log(static_cast<double>(value)));
    }
    if (comma == std::string_view::npos) break;
    shape.remove_prefix(comma + 1);
  }
  return !out.empty();
}

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class ArenaBuilder {
public:
  ArenaBuilder() { m_bytes.resize(8); }

  // A string: u32 length, the bytes, NUL; returns the offset of the first byte. A string of
  // 4 GiB or more is cut there (the table is then over its 4 GiB and refused by encode()).
  std::uint32_t append_string(std::string_view s) {
    align(4);
    const std::size_t at = m_bytes.size();
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(s.size(), std::numeric_limits<std::uint32_t>::max()));
    m_bytes.resize(at + 4 + std::size_t{n} + 1);
    store(m_bytes.data() + at, n);
    if (n != 0) std::memcpy(m_bytes.data() + at + 4, s.data(), n);
    return static_cast<std::uint32_t>(at + 4);
  }
  std::uint32_t intern(std::string_view s) {
    const auto it = m_strings.find(s);
    if (it != m_strings.end()) return it->second;
    const std::uint32_t ref = append_string(s);
    m_strings.emplace(std::string(s), ref);
    return ref;
  }
  // intern() for a string that is often the same as the last one asked for this way.
  std::uint32_t intern_repeated(std::string_view s) {
    if (m_last_ref != 0 && s == m_last_text) return m_last_ref;
    m_last_ref = intern(s);
    m_last_text = m_strings.find(s)->first;
    return m_last_ref;
  }
  // A config blob (k_blob_head), interned by text; 0 when the text is not a flat object of
  // integers.
  std::uint32_t config(std::string_view text) {
    if (m_last_config != 0 && text == m_last_config_text) return m_last_config;
    const auto it = m_configs.find(text);
    if (it != m_configs.end()) {
      m_last_config = it->second;
      m_last_config_text = it->first;
      return it->second;
    }
    if (!parse_flat_config(text, m_params)) return 0;
    std::vector<std::uint32_t> names;
    names.reserve(m_params.size());
    for (const auto& [name, value] : m_params) names.push_back(intern(name));
    align(8);
    const std::size_t at = m_bytes.size();
    const std::size_t size = (k_blob_head + 16 * m_params.size() + text.size() + 1 + 7) / 8 * 8;
    m_bytes.resize(at + size);
    std::byte* p = m_bytes.data() + at;
    store(p + 8, static_cast<std::uint32_t>(m_params.size()));
    store(p + 12, static_cast<std::uint32_t>(text.size()));
    for (std::size_t i = 0; i < m_params.size(); ++i) {
      store(p + k_blob_head + 16 * i, names[i]);
      store(p + k_blob_head + 16 * i + 4, std::uint32_t{0});
      store(p + k_blob_head + 16 * i + 8, m_params[i].second);
    }
    std::memcpy(p + k_blob_head + 16 * m_params.size(), text.data(), text.size());
    store(p, hash64(p + 8, size - 8));
    const auto [slot, added] = m_configs.emplace(std::string(text), static_cast<std::uint32_t>(at));
    m_last_config = slot->second;
    m_last_config_text = slot->first;
    return static_cast<std::uint32_t>(at);
  }
  // A record payload: f64 log dims, then the shape as a string. Returns its offset and size.
  std::pair<std::uint32_t, std::uint32_t> payload(const std::vector<double>& logs,
                                                  std::string_view shape) {
    align(8);
    const std::size_t at = m_bytes.size();
    const std::size_t bytes = (8 * logs.size() + 4 + shape.size() + 1 + 7) / 8 * 8;
    m_bytes.resize(at + bytes);
    std::byte* p = m_bytes.data() + at;
    for (std::size_t i = 0; i < logs.size(); ++i) store(p + 8 * i, logs[i]);
    store(p + 8 * logs.size(), static_cast<std::uint32_t>(shape.size()));
    std::memcpy(p + 8 * logs.size() + 4, shape.data(), shape.size());
    return {static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(bytes)};
  }
  [[nodiscard]] std::size_t size() const { return m_bytes.size(); }
  [[nodiscard]] const std::vector<std::byte>& bytes() const { return m_bytes; }
  void finish() { align(8); }
  void reserve(std::size_t n) { m_bytes.reserve(n); }

private:
  void align(std::size_t to) { m_bytes.resize((m_bytes.size() + to - 1) / to * to); }

  std::vector<std::byte> m_bytes;
  std::unordered_map<std::string, std::uint32_t, TransparentHash, std::equal_to<>> m_strings;
  std::unordered_map<std::string, std::uint32_t, TransparentHash, std::equal_to<>> m_configs;
  std::uint32_t m_last_ref = 0;           // intern_repeated's last string
  std::string_view m_last_text;
  std::uint32_t m_last_config = 0;        // the last blob asked for, and its text (in m_configs)
  std::string_view m_last_config_text;
  std::vector<std::pair<std::string_view, std::int64_t>> m_params;
};

std::uint64_t align8(std::uint64_t n) { return (n + 7) / 8 * 8; }



std::uint32_t slot_capacity(std::size_t entries) {
  if (entries == 0) return 0;
  return static_cast<std::uint32_t>(std::bit_ceil(entries * 2));
}

void insert_slot(std::byte* slots, std::uint32_t capacity, std::uint64_t hash, std::uint32_t index) {
  std::uint64_t i = hash & (capacity - 1);
  while (load_u64(slots + 8 * i) != 0) i = (i + 1) & (capacity - 1);
  store(slots + 8 * i, ((hash >> 32) << 32) | (std::uint64_t{index} + 1));
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ',';
    out += item;
  }
  return out;
}

// Splits "a,b,c" lazily.
template <class F>
bool any_item(std::string_view list, F&& f) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (f(list.substr(0, comma))) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

} // namespace

std::uint64_t hash64(const void* bytes, std::size_t size, std::uint64_t seed) {
  return XXH64(bytes, size, seed);
}

std::string table_path_for_socket(const std::string& socket_path) {
  constexpr std::string_view k_suffix = ".sock";
  if (socket_path.size() > k_suffix.size() &&
      socket_path.compare(socket_path.size() - k_suffix.size(), k_suffix.size(), k_suffix) == 0) {
    return socket_path.substr(0, socket_path.size() - k_suffix.size()) + ".table";
  }
  return socket_path + ".table";
}

namespace {

// Which fingerprints have winners, and on which fingerprints each kernel name has them.
struct Tuned {
  std::unordered_map<std::string_view, bool> devices;
  std::unordered_map<std::string_view, std::vector<std::string_view>> kernels;
};

Tuned tuned_in(std::span<const WinnerGroup> groups) {
  Tuned tuned;
  for (const auto& group : groups) {
    if (group.winners.empty()) continue;
    tuned.devices[group.fingerprint] = true;
    auto& fps = tuned.kernels[group.kernel];
    if (std::find(fps.begin(), fps.end(), std::string_view(group.fingerprint)) == fps.end()) {
      fps.emplace_back(group.fingerprint);
    }
  }
  return tuned;
}

// One section's entries (their check field, the first 8 bytes, still 0) and each entry's key
// hash, for its slot table.
struct Entries {
  std::vector<std::byte> bytes;
  std::vector<std::uint64_t> hashes;
};

Entries encode_devices(std::span<const DeviceEntry> devices, const Tuned& tuned, ArenaBuilder& arena) {
  Entries out;
  out.bytes.resize(devices.size() * k_device_bytes);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const DeviceEntry& d = devices[i];
    std::byte* e = out.bytes.data() + i * k_device_bytes;
    const std::uint64_t h = hash64(d.name.data(), d.name.size());
    out.hashes.push_back(h);
    store(e + 8, h);
    store(e + 16, arena.intern(d.name));
    store(e + 20, arena.intern(d.fingerprint));
    store(e + 24, static_cast<std::uint32_t>(d.family));
    std::uint32_t flags = d.local ? k_device_local : 0;
    if (tuned.devices.count(d.fingerprint) != 0) flags |= k_device_has_winners;
    store(e + 28, flags);
  }
  return out;
}

Result<Entries> encode_kernels(std::span<const KernelEntry> kernels, const Tuned& tuned,
                               ArenaBuilder& arena) {
  Entries out;
  out.bytes.resize(kernels.size() * k_kernel_bytes);
  std::string key;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const KernelEntry& k = kernels[i];
    std::byte* e = out.bytes.data() + i * k_kernel_bytes;
    key.assign(k.name).push_back(k_sep);
    key.append(family_word(k.family));
    const std::uint64_t h = hash64(key.data(), key.size());
    out.hashes.push_back(h);
    const std::uint32_t blob = arena.config(k.default_config);
    if (blob == 0) {
      return bad_table("kernel " + k.name + ": [default] " + k.default_config +
                       " is not a flat JSON object of integers");
    }
    std::string fps;
    if (const auto it = tuned.kernels.find(k.name); it != tuned.kernels.end()) {
      for (const auto fp : it->second) {
        if (!fps.empty()) fps += ',';
        fps += fp;
      }
    }
    store(e + 8, h);
    store(e + 16, arena.intern(k.name));
    store(e + 20, static_cast<std::uint32_t>(k.family));
    store(e + 24, arena.intern(k.source_hash));
    store(e + 28, arena.intern(join(k.dims)));
    store(e + 32, arena.intern(join(k.dtypes)));
    store(e + 36, blob);
    store(e + 40, arena.intern(fps));
    store(e + 44, k.dtype_axis ? k_kernel_dtype_axis : std::uint32_t{0});
  }
  return out;
}

// The groups that have winners, and their winners' records (each group's in one run).
struct WinnerEntries {
  Entries groups;
  Entries records;
};

// A group as its records repeat it: its key hash and its strings in the arena.
struct GroupRefs {
  std::uint64_t hash = 0;
  std::uint32_t kernel = 0, dtype = 0, fingerprint = 0;
};

// The shape logs of the record being encoded, kept across records.
struct ShapeScratch {
  std::vector<double> logs;
  LogMemo memo;
};

// One winner's record at `re`, its key hash (the shape's, seeded with its group's) into `hash`;
// false with `error` set when the shape or config is not one a table holds.
bool encode_record(std::byte* re, const WinnerGroup& group, const WinnerEntry& w, const GroupRefs& refs,
                   ArenaBuilder& arena, ShapeScratch& scratch, std::uint64_t& hash, Error& error) {
  std::vector<double>& logs = scratch.logs;
  if (!shape_logs(w.shape, logs, &scratch.memo) || logs.size() > k_max_dims) {
    error = bad_table("winner of " + group.kernel + " " + group.dtype + ": shape '" + w.shape +
                      "' is not a canonical shape");
    return false;
  }
  const std::uint32_t blob = arena.config(w.config);
  if (blob == 0) {
    error = bad_table("winner of " + group.kernel + " " + w.shape + " " + group.dtype +
                      ": config " + w.config + " is not a flat JSON object of integers");
    return false;
  }
  const std::uint64_t rh = hash64(w.shape.data(), w.shape.size(), refs.hash);
  const auto [payload, payload_bytes] = arena.payload(logs, w.shape);
  store(re + 8, rh);
  store(re + 16, refs.kernel);
  store(re + 20, refs.dtype);
  store(re + 24, refs.fingerprint);
  store(re + 28, arena.intern_repeated(w.source_hash));
  store(re + 32, payload);
  store(re + 36, payload_bytes);
  store(re + 40, blob);
  store(re + 44, static_cast<std::uint16_t>(logs.size()));
  store(re + 46, std::uint16_t{0});
  store(re + 48, std::isfinite(w.median_ms) ? w.median_ms : std::nan(""));
  store(re + 56, std::isfinite(w.gflops) ? w.gflops : std::nan(""));
  store(re + 64, w.job);
  hash = rh;
  return true;
}

Result<WinnerEntries> encode_winners(std::span<const WinnerGroup> groups, std::size_t winner_count,
                                     ArenaBuilder& arena) {
  std::size_t group_count = 0;
  for (const auto& group : groups) group_count += group.winners.empty() ? 0 : 1;
  if (winner_count >= std::numeric_limits<std::uint32_t>::max() / 2) {
    return bad_table("too many winners for one table: " + std::to_string(winner_count));
  }
  WinnerEntries out;
  out.groups.bytes.resize(group_count * k_group_bytes);
  out.groups.hashes.reserve(group_count);
  out.records.bytes.resize(winner_count * k_record_bytes);
  out.records.hashes.reserve(winner_count);
  ShapeScratch scratch;
  Error error;
  std::string key;
  std::size_t g = 0, r = 0;
  for (const auto& group : groups) {
    if (group.winners.empty()) continue;
    GroupRefs refs;
    refs.kernel = arena.intern(group.kernel);
    refs.dtype = arena.intern(group.dtype);
    refs.fingerprint = arena.intern(group.fingerprint);
    key.assign(group.kernel).push_back(k_sep);
    key.append(group.dtype).push_back(k_sep);
    key.append(group.fingerprint);
    refs.hash = hash64(key.data(), key.size());
    out.groups.hashes.push_back(refs.hash);
    std::byte* ge = out.groups.bytes.data() + g * k_group_bytes;
    store(ge + 8, refs.hash);
    store(ge + 16, refs.kernel);
    store(ge + 20, refs.dtype);
    store(ge + 24, refs.fingerprint);
    store(ge + 28, static_cast<std::uint32_t>(r));
    store(ge + 32, static_cast<std::uint32_t>(group.winners.size()));
    ++g;
    for (const auto& w : group.winners) {
      std::uint64_t rh = 0;
      if (!encode_record(out.records.bytes.data() + r * k_record_bytes, group, w, refs, arena, scratch,
                         rh, error)) {
        return error;
      }
      out.records.hashes.push_back(rh);
      ++r;
    }
  }
  return out;
}

// Each entry's check (its first 8 bytes), now that the arena is complete: a hash of the entry,
// seeded for kernels and records with their config blob's hash, and for records chained over
// their payload.
void seal(Entries& devices, Entries& kernels, WinnerEntries& winners, const std::byte* a) {
  for (std::size_t at = 0; at < devices.bytes.size(); at += k_device_bytes) {
    std::byte* e = devices.bytes.data() + at;
    store(e, hash64(e + 8, k_device_bytes - 8));
  }
  for (std::size_t at = 0; at < kernels.bytes.size(); at += k_kernel_bytes) {
    std::byte* e = kernels.bytes.data() + at;
    store(e, hash64(e + 8, k_kernel_bytes - 8, load_u64(a + load_u32(e + 36))));
  }
  for (std::size_t at = 0; at < winners.groups.bytes.size(); at += k_group_bytes) {
    std::byte* e = winners.groups.bytes.data() + at;
    store(e, hash64(e + 8, k_group_bytes - 8));
  }
  for (std::size_t at = 0; at < winners.records.bytes.size(); at += k_record_bytes) {
    std::byte* e = winners.records.bytes.data() + at;
    const std::uint64_t h1 = hash64(e + 8, k_record_bytes - 8, load_u64(a + load_u32(e + 40)));
    store(e, hash64(a + load_u32(e + 32), load_u32(e + 36), h1));
  }
}

// Where a section lies in the file.
struct Planned {
  std::uint64_t offset = 0;
  std::uint32_t count = 0;
  std::uint32_t entry_bytes = 0;
};

// The file: header, then each section 8-aligned in SectionIndex order, the arena last; every
// slot table filled from its section's hashes.
std::vector<std::byte> assemble(const TableContent& content, const Entries& devices,
                                const Entries& kernels, const WinnerEntries& winners,
                                const ArenaBuilder& arena) {
  const Entries* with_slots[] = {&devices, &kernels, &winners.groups, &winners.records};
  const std::uint32_t entry_bytes[] = {k_device_bytes, k_kernel_bytes, k_group_bytes, k_record_bytes};
  Planned plan[k_section_count];
  for (std::size_t i = 0; i < 4; ++i) {
    const std::size_t count = with_slots[i]->hashes.size();
    plan[2 * i] = {0, static_cast<std::uint32_t>(count), entry_bytes[i]};
    plan[2 * i + 1] = {0, slot_capacity(count), k_slot_bytes};
  }
  plan[k_arena] = {0, static_cast<std::uint32_t>(arena.size()), 1};
  std::uint64_t at = k_header_bytes;
  for (auto& s : plan) {
    at = (at + 7) / 8 * 8;
    s.offset = at;
    at += std::uint64_t{s.count} * s.entry_bytes;
  }
  const std::uint64_t file_bytes = (at + 7) / 8 * 8;

  std::vector<std::byte> out(file_bytes);
  std::byte* h = out.data();
  std::memcpy(h, k_magic, sizeof k_magic);
  store(h + 8, k_layout_version);
  store(h + 12, static_cast<std::uint32_t>(k_header_bytes));
  store(h + 16, content.generation);
  store(h + 24, file_bytes);
  store(h + 32, content.published_unix_ms);
  store(h + 40, content.flags);
  store(h + 44, static_cast<std::uint32_t>(k_section_count));
  for (std::size_t s = 0; s < k_section_count; ++s) {
    store(h + k_sections_offset + 16 * s, plan[s].offset);
    store(h + k_sections_offset + 16 * s + 8, plan[s].count);
    store(h + k_sections_offset + 16 * s + 12, plan[s].entry_bytes);
  }
  store(h + k_header_check_offset, hash64(h, k_header_check_offset));

  for (std::size_t i = 0; i < 4; ++i) {
    const Entries& section = *with_slots[i];
    if (!section.bytes.empty()) {
      std::memcpy(out.data() + plan[2 * i].offset, section.bytes.data(), section.bytes.size());
    }
  }
  if (arena.size() != 0) std::memcpy(out.data() + plan[k_arena].offset, arena.bytes().data(), arena.size());
  for (std::size_t i = 0; i < 4; ++i) {
    const Entries& section = *with_slots[i];
    const Planned& slots = plan[2 * i + 1];
    for (std::size_t e = 0; e < section.hashes.size(); ++e) {
      insert_slot(out.data() + slots.offset, slots.count, section.hashes[e], static_cast<std::uint32_t>(e));
    }
  }
  return out;
}

} // namespace

Result<std::vector<std::byte>> encode(const TableContent& content,
                                      std::span<const WinnerGroup> groups) {
  ArenaBuilder arena;
  std::size_t winner_count = 0;
  for (const auto& group : groups) winner_count += group.winners.size();
  arena.reserve(64 * 1024 + winner_count * 64);
  const Tuned tuned = tuned_in(groups);
  Entries devices = encode_devices(content.devices, tuned, arena);
  auto kernels = encode_kernels(content.kernels, tuned, arena);
  if (!kernels) return kernels.error();
  auto winners = encode_winners(groups, winner_count, arena);
  if (!winners) return winners.error();
  arena.finish();
  if (arena.size() >= std::numeric_limits<std::uint32_t>::max()) {
    return bad_table("the table's strings need " + std::to_string(arena.size()) +
                     " bytes; a table holds at most 4 GiB");
  }
  seal(devices, *kernels, *winners, arena.bytes().data());
  return assemble(content, devices, *kernels, *winners, arena);
}

// ---- decoding ----

Result<TableView> TableView::open(std::span<const std::byte> bytes) {
  const std::byte* h = bytes.data();
  if (bytes.size() < k_header_bytes) {
    return bad_table("winner table of " + std::to_string(bytes.size()) +
                     " bytes: shorter than its header (" + std::to_string(k_header_bytes) + ")");
  }
  if (std::memcmp(h, k_magic, sizeof k_magic) != 0) return bad_table("not a winner table (magic)");
  const std::uint32_t version = load_u32(h + 8);
  if (version != k_layout_version) {
    return make_error(ErrorCode::unknown_layout, "winner table layout version " + std::to_string(version) +
                                            "; this reader knows version " +
                                            std::to_string(k_layout_version));
  }
  const std::uint32_t header_bytes = load_u32(h + 12);
  const std::uint64_t file_bytes = load_u64(h + 24);
  if (header_bytes < k_header_bytes || header_bytes > bytes.size()) {
    return bad_table("winner table header of " + std::to_string(header_bytes) + " bytes");
  }
  if (file_bytes != bytes.size()) {
    return bad_table("winner table of " + std::to_string(bytes.size()) + " bytes, header says " +
                     std::to_string(file_bytes));
  }
  if (load_u64(h + k_header_check_offset) != hash64(h, k_header_check_offset)) {
    return bad_table("winner table header check failed");
  }
  const std::uint32_t sections = load_u32(h + 44);
  if (sections < k_section_count || k_sections_offset + 16 * std::uint64_t{sections} > k_header_check_offset) {
    return bad_table("winner table with " + std::to_string(sections) + " sections");
  }
  Section s[k_section_count];
  for (std::size_t i = 0; i < k_section_count; ++i) {
    const std::byte* e = h + k_sections_offset + 16 * i;
    s[i] = Section{load_u64(e), load_u32(e + 8), load_u32(e + 12)};
    const bool slots = k_min_bytes[i] == k_slot_bytes;
    if (s[i].entry_bytes < k_min_bytes[i] || (slots && s[i].entry_bytes != k_slot_bytes) ||
        (i == k_arena && s[i].entry_bytes != 1) || (slots && !std::has_single_bit(s[i].count) &&
                                                      s[i].count != 0)) {
      return bad_table("winner table section " + std::to_string(i) + ": entries of " +
                       std::to_string(s[i].entry_bytes) + " bytes, " +
                       std::to_string(s[i].count) + " entries");
    }
    if (s[i].offset < header_bytes || s[i].offset > bytes.size() ||
        std::uint64_t{s[i].count} * s[i].entry_bytes > bytes.size() - s[i].offset) {
      return bad_table("winner table section " + std::to_string(i) + " lies outside the file");
    }
  }
  static std::atomic<std::uint64_t> instances{0};
  TableView view;
  view.m_instance = ++instances;
  view.m_bytes = bytes;
  view.m_generation = load_u64(h + 16);
  view.m_published_unix_ms = load_u64(h + 32);
  view.m_flags = load_u32(h + 40);
  view.m_devices = s[k_devices];
  view.m_device_slots = s[k_device_slots];
  view.m_kernels = s[k_kernels];
  view.m_kernel_slots = s[k_kernel_slots];
  view.m_groups = s[k_groups];
  view.m_group_slots = s[k_group_slots];
  view.m_records = s[k_records];
  view.m_record_slots = s[k_record_slots];
  view.m_arena = h + s[k_arena].offset;
  view.m_arena_bytes = s[k_arena].count;
  return view;
}

bool TableView::superseded() const {
  if (m_bytes.size() < k_header_bytes) return false;
  const std::byte* p = m_bytes.data() + k_superseded_offset;
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::uint64_t) == 0) {
    return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(p), __ATOMIC_ACQUIRE) != 0;
  }
  return load_u64(p) != 0;
}

bool TableView::string_at(std::uint32_t ref, std::string_view& out) const {
  if (ref < 4 || ref >= m_arena_bytes) return false;
  const std::uint32_t len = load_u32(m_arena + ref - 4);
  if (std::uint64_t{len} >= m_arena_bytes - ref) return false;   // room for the NUL
  if (m_arena[ref + len] != std::byte{0}) return false;
  out = std::string_view(reinterpret_cast<const char*>(m_arena + ref), len);
  return true;
}

bool TableView::blob_at(std::uint32_t offset, std::uint64_t& bytes) const {
  if (offset > m_arena_bytes || m_arena_bytes - offset < k_blob_head) return false;
  const std::uint64_t nul = blob_text_end(m_arena, offset);
  bytes = align8(nul + 1);
  if (bytes > m_arena_bytes - offset) return false;
  return m_arena[offset + nul] == std::byte{0};
}

const std::byte* TableView::entry(const Section& section, std::uint32_t index) const {
  if (index >= section.count) return nullptr;
  return m_bytes.data() + section.offset + std::uint64_t{index} * section.entry_bytes;
}

std::int64_t TableView::probe(const Section& slots, std::uint64_t hash, std::uint64_t& cursor,
                              std::uint32_t limit) const {
  if (slots.count == 0) return -1;
  const std::uint64_t mask = slots.count - 1;
  const std::byte* base = m_bytes.data() + slots.offset;
  // cursor: slots visited so far for this key.
  for (; cursor < slots.count; ++cursor) {
    const std::uint64_t slot = load_u64(base + 8 * ((hash + cursor) & mask));
    const auto index = static_cast<std::uint32_t>(slot);
    if (index == 0) {
      cursor = slots.count;
      return -1;
    }
    if ((slot >> 32) == (hash >> 32) && index - 1 < limit) {
      ++cursor;
      return index - 1;
    }
  }
  return -1;
}

std::uint64_t TableView::entry_hash(const std::byte* e, const Section& section) const {
  return hash64(e + 8, section.entry_bytes - 8);
}

bool TableView::plain_sound(const std::byte* e, const Section& section) const {
  return load_u64(e) == entry_hash(e, section);
}

bool TableView::blob_sound(std::uint32_t blob) const {
  std::uint64_t bytes = 0;
  return blob_at(blob, bytes) && load_u64(m_arena + blob) == hash64(m_arena + blob + 8, bytes - 8);
}

bool TableView::kernel_sound(const std::byte* e) const {
  const std::uint32_t blob = load_u32(e + 36);
  return blob_sound(blob) &&
         load_u64(e) == hash64(e + 8, m_kernels.entry_bytes - 8, load_u64(m_arena + blob));
}

bool TableView::record_sound(const std::byte* e) const {
  const std::uint32_t payload = load_u32(e + 32);
  const std::uint32_t payload_bytes = load_u32(e + 36);
  const std::uint32_t blob = load_u32(e + 40);
  if (payload > m_arena_bytes || payload_bytes > m_arena_bytes - payload || !blob_sound(blob)) {
    return false;
  }
  const std::uint64_t h1 = hash64(e + 8, m_records.entry_bytes - 8, load_u64(m_arena + blob));
  return load_u64(e) == hash64(m_arena + payload, payload_bytes, h1);
}

Param TableView::param(const Answer& answer, std::uint32_t i) const {
  Param out;
  if (i >= answer.param_count || answer.params == nullptr) return out;
  const std::byte* p = answer.params + 16 * std::size_t{i};
  if (!string_at(load_u32(p), out.name)) out.name = {};
  out.value = load_i64(p + 8);
  return out;
}

namespace {

// Whether `shape` is exactly "D1=v1,D2=v2,..." in the kernel's dim order, no blanks, no leading
// zeros, values up to 2^40 (the fast path of canonical_shape).
bool canonical_already(std::string_view shape, std::string_view dims) {
  if (dims.empty()) return false;
  std::size_t i = 0;
  std::string_view rest = dims;
  for (;;) {
    const auto comma = rest.find(',');
    const std::string_view dim = rest.substr(0, comma);
    if (shape.compare(i, dim.size(), dim) != 0 || i + dim.size() >= shape.size() ||
        shape[i + dim.size()] != '=') {
      return false;
    }
    i += dim.size() + 1;
    const std::size_t begin = i;
    std::int64_t value = 0;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9' && i - begin < 14) {
      value = value * 10 + (shape[i] - '0');
      ++i;
    }
    if (i == begin || shape[begin] == '0' || value > k_max_dim_value) return false;
    if (comma == std::string_view::npos) return i == shape.size();
    if (i >= shape.size() || shape[i] != ',') return false;
    ++i;
    rest.remove_prefix(comma + 1);
  }
}

std::string_view trim_blanks(std::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return t;
}

struct ShapeItem {
  std::string_view name;
  std::int64_t value;
};

// "name=value" items in any order, blanks around each part, each name once, values 1..2^40;
// false for anything else (or more than k_max_dims items).
bool parse_shape_items(std::string_view shape, ShapeItem (&items)[k_max_dims], std::size_t& n) {
  n = 0;
  std::string_view rest = shape;
  for (;;) {
    const auto comma = rest.find(',');
    const std::string_view item = trim_blanks(rest.substr(0, comma));
    const auto eq = item.find('=');
    if (n == k_max_dims || eq == std::string_view::npos) return false;
    const std::string_view name = trim_blanks(item.substr(0, eq));
    const std::string_view digits = trim_blanks(item.substr(eq + 1));
    if (name.empty() || digits.empty() || digits.size() > 20) return false;
    std::int64_t value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
      if (value > k_max_dim_value) return false;
    }
    if (value <= 0) return false;
    for (std::size_t j = 0; j < n; ++j) {
      if (items[j].name == name) return false;
    }
    items[n++] = ShapeItem{name, value};
    if (comma == std::string_view::npos) return true;
    rest.remove_prefix(comma + 1);
  }
}

// The items written in the kernel's dim order into `out`; false when a dim is missing or an
// item names a dim the kernel does not declare.
bool write_in_dim_order(const ShapeItem* items, std::size_t n, std::string_view dims, std::string& out) {
  out.clear();
  std::size_t used = 0;
  std::string_view rest = dims;
  for (;;) {
    const auto comma = rest.find(',');
    const std::string_view dim = rest.substr(0, comma);
    const ShapeItem* found = nullptr;
    for (std::size_t j = 0; j < n; ++j) {
      if (items[j].name == dim) found = &items[j];
    }
    if (found == nullptr) return false;
    ++used;
    if (!out.empty()) out += ',';
    out += dim;
    out += '=';
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, found->value);
    out.append(buf, r.ptr);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return used == n;
}

// The shape as the kernel's canonical text: "M=1,N=2" with the kernel's dims in order. Accepts
// what Shape::parse and conform_shape accept (spaces and tabs around items, names and values;
// any order; leading zeros) or less: false sends the lookup to ktuned, which says what is wrong.
// `out` is left untouched when `shape` is canonical already (the common case): then `canonical`
// views `shape`.
bool canonical_shape(std::string_view shape, std::string_view dims, std::string& out,
                     std::string_view& canonical) {
  if (canonical_already(shape, dims)) {
    canonical = shape;
    return true;
  }
  ShapeItem items[k_max_dims];
  std::size_t n = 0;
  if (!parse_shape_items(shape, items, n) || !write_in_dim_order(items, n, dims, out)) return false;
  canonical = out;
  return true;
}

} // namespace

Outcome TableView::resolve(const Query& q, Resolved& r, Scratch& s) const {
  // The device.
  const std::byte* device = nullptr;
  {
    const std::uint64_t h = hash64(q.device.data(), q.device.size());
    std::uint64_t cursor = 0;
    std::string_view name;
    for (std::int64_t i; (i = probe(m_device_slots, h, cursor, m_devices.count)) >= 0;) {
      const std::byte* e = entry(m_devices, static_cast<std::uint32_t>(i));
      if (load_u64(e + 8) == h && string_at(load_u32(e + 16), name) && name == q.device) {
        device = e;
        break;
      }
    }
  }
  if (device == nullptr) return Outcome::unknown_device;
  if (!plain_sound(device, m_devices)) return Outcome::damaged;
  r.fingerprint_ref = load_u32(device + 20);
  if (!string_at(r.fingerprint_ref, r.fingerprint)) return Outcome::damaged;
  r.device_flags = load_u32(device + 28);
  auto family = static_cast<Family>(load_u32(device + 24));

  // The kernel family of the device's kind; a device of another machine falls back to the
  // family that exists (as ktuned).
  const std::byte* kernel = nullptr;
  for (int attempt = 0; attempt < 2 && kernel == nullptr; ++attempt) {
    if (attempt == 1) {
      if ((r.device_flags & k_device_local) != 0 || family != Family::cuda) break;
      family = Family::cpp;
    }
    s.key.assign(q.kernel).push_back(k_sep);
    s.key.append(family_word(family));
    const std::uint64_t h = hash64(s.key.data(), s.key.size());
    std::uint64_t cursor = 0;
    std::string_view name;
    for (std::int64_t i; (i = probe(m_kernel_slots, h, cursor, m_kernels.count)) >= 0;) {
      const std::byte* e = entry(m_kernels, static_cast<std::uint32_t>(i));
      if (load_u64(e + 8) == h && load_u32(e + 20) == static_cast<std::uint32_t>(family) &&
          string_at(load_u32(e + 16), name) && name == q.kernel) {
        kernel = e;
        break;
      }
    }
  }
  if (kernel == nullptr) return Outcome::unknown_kernel;
  if (!kernel_sound(kernel)) return Outcome::damaged;
  if (!string_at(load_u32(kernel + 24), r.source_hash) || !string_at(load_u32(kernel + 28), r.dims) ||
      !string_at(load_u32(kernel + 32), r.dtypes) || !string_at(load_u32(kernel + 40), r.tuned_on)) {
    return Outcome::damaged;
  }
  r.kernel = kernel;
  r.kernel_ref = load_u32(kernel + 16);
  r.source_ref = load_u32(kernel + 24);
  return Outcome::answered;
}

namespace {

// A config blob's params and text into `a`.
void fill_config(Answer& a, const std::byte* arena, std::uint32_t blob) {
  a.param_count = load_u32(arena + blob + 8);
  a.params = arena + blob + k_blob_head;
  a.config = std::string_view(reinterpret_cast<const char*>(a.params + 16 * std::size_t{a.param_count}),
                              load_u32(arena + blob + 12));
}

// A record's config, time and job into `a`.
void fill_winner(Answer& a, const std::byte* arena, const std::byte* e) {
  fill_config(a, arena, load_u32(e + 40));
  const double median = load_f64(e + 48), gflops = load_f64(e + 56);
  a.median_ms = std::isfinite(median) ? median : 0;
  a.gflops = std::isfinite(gflops) ? gflops : 0;
  a.job = load_i64(e + 64);
}

} // namespace

Outcome TableView::prepare(const Query& q, Scratch& s) const {
  if (s.resolved_in != m_instance || s.resolved_device != q.device || s.resolved_kernel != q.kernel) {
    s.resolved_in = 0;
    s.group_valid = false;
    if (const Outcome outcome = resolve(q, s.resolved, s); outcome != Outcome::answered) {
      return outcome;
    }
    s.resolved_in = m_instance;
    s.resolved_device.assign(q.device);
    s.resolved_kernel.assign(q.kernel);
  }
  if (s.verified_in != m_instance) {
    s.verified.assign((m_records.count + 63) / 64, 0);
    s.verified_in = m_instance;
  }
  if (s.group_valid && s.group_query_dtype == q.dtype) return Outcome::answered;
  const Resolved& r = s.resolved;
  std::string_view dtype = q.dtype;
  if ((load_u32(r.kernel + 44) & k_kernel_dtype_axis) == 0 && dtype == "f32") {
    dtype = r.dtypes.substr(0, r.dtypes.find(','));
  }
  if (dtype.empty() || !any_item(r.dtypes, [&](std::string_view d) { return d == dtype; })) {
    return Outcome::not_accepted;
  }
  s.key.resize(q.kernel.size() + dtype.size() + r.fingerprint.size() + 2);
  char* k = s.key.data();
  for (const std::string_view part : {q.kernel, dtype, r.fingerprint}) {
    std::memcpy(k, part.data(), part.size());
    k += part.size();
    if (k != s.key.data() + s.key.size()) *k++ = k_sep;
  }
  s.group_hash = hash64(s.key.data(), s.key.size());
  s.group_dtype.assign(dtype);
  s.group_query_dtype.assign(q.dtype);
  s.dtype_ref = 0;
  s.group_valid = true;
  return Outcome::answered;
}

bool TableView::record_checked(const std::byte* e, Scratch& s) const {
  const std::uint64_t index = static_cast<std::uint64_t>(e - entry(m_records, 0)) / m_records.entry_bytes;
  std::uint64_t& word = s.verified[index / 64];
  const std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if ((word & bit) != 0) return true;
  if (!record_sound(e)) return false;
  word |= bit;
  return true;
}

bool TableView::same_string(std::uint32_t ref, std::uint32_t known, std::string_view wanted) const {
  std::string_view text;
  return (known != 0 && ref == known) || (string_at(ref, text) && text == wanted);
}

bool TableView::record_shape(const std::byte* e, std::string_view& out) const {
  const std::uint32_t payload = load_u32(e + 32);
  const std::uint64_t ndims = load_u16(e + 44);
  if (payload > m_arena_bytes || 8 * ndims + 4 > m_arena_bytes - payload) return false;
  return string_at(static_cast<std::uint32_t>(payload + 8 * ndims + 4), out);
}

std::optional<Outcome> TableView::find_exact(const Query& q, std::string_view shape, Scratch& s,
                                             Answer& a, bool& source_changed) const {
  const Resolved& r = s.resolved;
  const std::string_view dtype = s.group_dtype;
  const std::uint64_t h = hash64(shape.data(), shape.size(), s.group_hash);
  std::uint64_t cursor = 0;
  for (std::int64_t i; (i = probe(m_record_slots, h, cursor, m_records.count)) >= 0;) {
    const std::byte* e = entry(m_records, static_cast<std::uint32_t>(i));
    std::string_view sh;
    const std::uint32_t dtype_ref = load_u32(e + 20);
    if (load_u64(e + 8) != h || !same_string(load_u32(e + 16), r.kernel_ref, q.kernel) ||
        !same_string(dtype_ref, s.dtype_ref, dtype) ||
        !same_string(load_u32(e + 24), r.fingerprint_ref, r.fingerprint) || !record_shape(e, sh) ||
        sh != shape) {
      continue;
    }
    s.dtype_ref = dtype_ref;
    const std::uint32_t source_ref = load_u32(e + 28);
    std::string_view source;
    if (source_ref != r.source_ref && !string_at(source_ref, source)) return Outcome::damaged;
    if (source_ref != r.source_ref && source != r.source_hash) {
      source_changed = true;
      continue;
    }
    if (!record_checked(e, s)) return Outcome::damaged;
    a.rung = Rung::exact;
    fill_winner(a, m_arena, e);
    return Outcome::answered;
  }
  return std::nullopt;
}

const std::byte* TableView::find_group(const Query& q, const Scratch& s) const {
  const std::uint64_t h = s.group_hash;
  std::uint64_t cursor = 0;
  for (std::int64_t i; (i = probe(m_group_slots, h, cursor, m_groups.count)) >= 0;) {
    const std::byte* e = entry(m_groups, static_cast<std::uint32_t>(i));
    std::string_view k, d, f;
    if (load_u64(e + 8) == h && string_at(load_u32(e + 16), k) && k == q.kernel &&
        string_at(load_u32(e + 20), d) && d == s.group_dtype && string_at(load_u32(e + 24), f) &&
        f == s.resolved.fingerprint) {
      return e;
    }
  }
  return nullptr;
}

std::optional<Outcome> TableView::find_nearest(const Query& q, std::string_view shape, Scratch& s,
                                               Answer& a, bool source_changed, bool& group_found) const {
  const std::byte* group = find_group(q, s);
  if (group == nullptr) return std::nullopt;
  if (!plain_sound(group, m_groups)) return Outcome::damaged;
  const std::uint32_t first = load_u32(group + 28), count = load_u32(group + 32);
  if (first > m_records.count || count > m_records.count - first) return Outcome::damaged;
  group_found = count > 0;
  if (!shape_logs(shape, s.log_dims)) return Outcome::damaged;
  const std::byte* best = nullptr;
  std::string_view best_shape;
  double best_distance = std::numeric_limits<double>::infinity();
  for (std::uint32_t r = first; r < first + count; ++r) {
    const std::byte* e = entry(m_records, r);
    std::string_view src, sh;
    if (!string_at(load_u32(e + 28), src) || !record_shape(e, sh)) return Outcome::damaged;
    if (sh == shape) continue;              // other sources only: the exact probe saw them
    if (src != s.resolved.source_hash) continue;
    const std::size_t ndims = load_u16(e + 44);
    if (ndims != s.log_dims.size()) continue;
    const std::byte* logs = m_arena + load_u32(e + 32);
    double sum = 0;
    for (std::size_t j = 0; j < ndims; ++j) {
      const double diff = s.log_dims[j] - load_f64(logs + 8 * j);
      sum += diff * diff;
    }
    const double distance = std::sqrt(sum);
    const bool tie = best != nullptr && std::abs(distance - best_distance) <= k_tie;
    if ((!tie && distance < best_distance) || (tie && sh < best_shape)) {
      best = e;
      best_shape = sh;
      best_distance = distance;
    }
  }
  if (best == nullptr) return std::nullopt;
  if (!record_checked(best, s)) return Outcome::damaged;
  a.rung = Rung::nearest;
  fill_winner(a, m_arena, best);
  a.from_shape = best_shape;
  a.reason = source_changed ? k_reason_source_changed : k_reason_shape_not_tuned;
  return Outcome::answered;
}

void TableView::fill_default(const Resolved& r, Answer& a, bool source_changed, bool group_found) const {
  a.rung = Rung::fallback_default;
  fill_config(a, m_arena, load_u32(r.kernel + 36));
  if (source_changed || group_found) {
    a.reason = k_reason_source_changed;
  } else if ((r.device_flags & k_device_has_winners) == 0) {
    a.reason = k_reason_device_never_tuned;
  } else if (any_item(r.tuned_on, [&](std::string_view fp) { return fp == r.fingerprint; })) {
    a.reason = k_reason_dtype_not_tuned;
  } else {
    a.reason = k_reason_no_results;
  }
}

Outcome TableView::answer(const Query& q, Answer& a, Scratch& s) const {
  a = Answer{};
  if (const Outcome prepared = prepare(q, s); prepared != Outcome::answered) return prepared;
  std::string_view shape;
  if (!canonical_shape(q.shape, s.resolved.dims, s.shape, shape)) return Outcome::not_accepted;
  bool source_changed = false;
  if (auto exact = find_exact(q, shape, s, a, source_changed)) return *exact;
  bool group_found = false;
  if (auto nearest = find_nearest(q, shape, s, a, source_changed, group_found)) return *nearest;
  fill_default(s.resolved, a, source_changed, group_found);
  return Outcome::answered;
}

std::size_t TableView::verify_all() const {
  std::size_t bad = 0;
  std::string_view text;
  for (std::uint32_t i = 0; i < m_devices.count; ++i) {
    const std::byte* e = entry(m_devices, i);
    if (!plain_sound(e, m_devices) || !string_at(load_u32(e + 16), text) ||
        !string_at(load_u32(e + 20), text)) {
      ++bad;
    }
  }
  for (std::uint32_t i = 0; i < m_kernels.count; ++i) {
    const std::byte* e = entry(m_kernels, i);
    bool ok = kernel_sound(e);
    for (std::size_t off : {16, 24, 28, 32, 40}) ok = ok && string_at(load_u32(e + off), text);
    if (!ok) ++bad;
  }
  for (std::uint32_t i = 0; i < m_groups.count; ++i) {
    const std::byte* e = entry(m_groups, i);
    const std::uint32_t first = load_u32(e + 28), count = load_u32(e + 32);
    if (!plain_sound(e, m_groups) || first > m_records.count || count > m_records.count - first) ++bad;
  }
  for (std::uint32_t i = 0; i < m_records.count; ++i) {
    const std::byte* e = entry(m_records, i);
    bool ok = record_sound(e);
    for (std::size_t off : {16, 20, 24, 28}) ok = ok && string_at(load_u32(e + off), text);
    if (ok) {
      const std::uint32_t payload = load_u32(e + 32);
      const std::uint64_t ndims = load_u16(e + 44);
      ok = 8 * ndims + 4 <= m_arena_bytes - payload &&
           string_at(static_cast<std::uint32_t>(payload + 8 * ndims + 4), text) &&
           align8(8 * ndims + 4 + text.size() + 1) == load_u32(e + 36);
    }
    if (!ok) ++bad;
  }
  return bad;
}

} // namespace ktune::table
