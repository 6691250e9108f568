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

  // A string: u32 length, the bytes, NUL; returns the offset of the first byte.
  std::uint32_t append_string(std::string_view s) {
    align(4);
    const std::size_t at = m_bytes.size();
    m_bytes.resize(at + 4 + s.size() + 1);
    store(m_bytes.data() + at, static_cast<std::uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(m_bytes.data() + at + 4, s.data(), s.size());
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

Result<std::vector<std::byte>> encode(const TableContent& content,
                                      std::span<const WinnerGroup> groups) {
  ArenaBuilder arena;
  std::size_t winner_count = 0;
  for (const auto& group : groups) winner_count += group.winners.size();
  arena.reserve(64 * 1024 + winner_count * 64);

  // Which fingerprints have winners, and on which fingerprints each kernel name has them.
  std::unordered_map<std::string_view, bool> tuned_devices;
  std::unordered_map<std::string_view, std::vector<std::string_view>> tuned_kernels;
  for (const auto& group : groups) {
    if (group.winners.empty()) continue;
    tuned_devices[group.fingerprint] = true;
    auto& fps = tuned_kernels[group.kernel];
    if (std::find(fps.begin(), fps.end(), std::string_view(group.fingerprint)) == fps.end()) {
      fps.emplace_back(group.fingerprint);
    }
  }

  std::string key;
  // Devices.
  std::vector<std::byte> devices(content.devices.size() * k_device_bytes);
  std::vector<std::uint64_t> device_hashes;
  for (std::size_t i = 0; i < content.devices.size(); ++i) {
    const DeviceEntry& d = content.devices[i];
    std::byte* e = devices.data() + i * k_device_bytes;
    const std::uint64_t h = hash64(d.name.data(), d.name.size());
    device_hashes.push_back(h);
    store(e + 8, h);
    store(e + 16, arena.intern(d.name));
    store(e + 20, arena.intern(d.fingerprint));
    store(e + 24, static_cast<std::uint32_t>(d.family));
    std::uint32_t flags = d.local ? k_device_local : 0;
    if (tuned_devices.count(d.fingerprint) != 0) flags |= k_device_has_winners;
    store(e + 28, flags);
  }
  // Kernels.
  std::vector<std::byte> kernels(content.kernels.size() * k_kernel_bytes);
  std::vector<std::uint64_t> kernel_hashes;
  for (std::size_t i = 0; i < content.kernels.size(); ++i) {
    const KernelEntry& k = content.kernels[i];
    std::byte* e = kernels.data() + i * k_kernel_bytes;
    key.assign(k.name).push_back(k_sep);
    key.append(family_word(k.family));
    const std::uint64_t h = hash64(key.data(), key.size());
    kernel_hashes.push_back(h);
    const std::uint32_t blob = arena.config(k.default_config);
    if (blob == 0) {
      return bad_table("kernel " + k.name + ": [default] " + k.default_config +
                       " is not a flat JSON object of integers");
    }
    std::string fps;
    if (const auto it = tuned_kernels.find(k.name); it != tuned_kernels.end()) {
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
  // Groups and records.
  std::size_t group_count = 0;
  for (const auto& group : groups) group_count += group.winners.empty() ? 0 : 1;
  if (winner_count >= std::numeric_limits<std::uint32_t>::max() / 2) {
    return bad_table("too many winners for one table: " + std::to_string(winner_count));
  }
  std::vector<std::byte> group_bytes(group_count * k_group_bytes);
  std::vector<std::uint64_t> group_hashes;
  group_hashes.reserve(group_count);
  std::vector<std::byte> records(winner_count * k_record_bytes);
  std::vector<std::uint64_t> record_hashes;
  record_hashes.reserve(winner_count);
  std::vector<double> logs;
  LogMemo log_memo;
  std::size_t g = 0, r = 0;
  for (const auto& group : groups) {
    if (group.winners.empty()) continue;
    const std::uint32_t kernel = arena.intern(group.kernel);
    const std::uint32_t dtype = arena.intern(group.dtype);
    const std::uint32_t fingerprint = arena.intern(group.fingerprint);
    key.assign(group.kernel).push_back(k_sep);
    key.append(group.dtype).push_back(k_sep);
    key.append(group.fingerprint);
    const std::uint64_t gh = hash64(key.data(), key.size());
    group_hashes.push_back(gh);
    std::byte* ge = group_bytes.data() + g * k_group_bytes;
    store(ge + 8, gh);
    store(ge + 16, kernel);
    store(ge + 20, dtype);
    store(ge + 24, fingerprint);
    store(ge + 28, static_cast<std::uint32_t>(r));
    store(ge + 32, static_cast<std::uint32_t>(group.winners.size()));
    ++g;
    for (const auto& w : group.winners) {
      if (!shape_logs(w.shape, logs, &log_memo) || logs.size() > k_max_dims) {
        return bad_table("winner of " + group.kernel + " " + group.dtype + ": shape '" + w.shape +
                         "' is not a canonical shape");
      }
      const std::uint32_t blob = arena.config(w.config);
      if (blob == 0) {
        return bad_table("winner of " + group.kernel + " " + w.shape + " " + group.dtype +
                         ": config " + w.config + " is not a flat JSON object of integers");
      }
      const std::uint64_t rh = hash64(w.shape.data(), w.shape.size(), gh);
      record_hashes.push_back(rh);
      const auto [payload, payload_bytes] = arena.payload(logs, w.shape);
      std::byte* re = records.data() + r * k_record_bytes;
      store(re + 8, rh);
      store(re + 16, kernel);
      store(re + 20, dtype);
      store(re + 24, fingerprint);
      store(re + 28, arena.intern_repeated(w.source_hash));
      store(re + 32, payload);
      store(re + 36, payload_bytes);
      store(re + 40, blob);
      store(re + 44, static_cast<std::uint16_t>(logs.size()));
      store(re + 46, std::uint16_t{0});
      store(re + 48, std::isfinite(w.median_ms) ? w.median_ms : std::nan(""));
      store(re + 56, std::isfinite(w.gflops) ? w.gflops : std::nan(""));
      store(re + 64, w.job);
      ++r;
    }
  }
  arena.finish();
  if (arena.size() >= std::numeric_limits<std::uint32_t>::max()) {
    return bad_table("the table's strings need " + std::to_string(arena.size()) +
                     " bytes; a table holds at most 4 GiB");
  }

  // Checks, now that the arena is complete.
  const std::byte* a = arena.bytes().data();
  for (std::size_t i = 0; i < content.devices.size(); ++i) {
    std::byte* e = devices.data() + i * k_device_bytes;
    store(e, hash64(e + 8, k_device_bytes - 8));
  }
  for (std::size_t i = 0; i < content.kernels.size(); ++i) {
    std::byte* e = kernels.data() + i * k_kernel_bytes;
    store(e, hash64(e + 8, k_kernel_bytes - 8, load_u64(a + load_u32(e + 36))));
  }
  for (std::size_t i = 0; i < group_count; ++i) {
    std::byte* e = group_bytes.data() + i * k_group_bytes;
    store(e, hash64(e + 8, k_group_bytes - 8));
  }
  for (std::size_t i = 0; i < winner_count; ++i) {
    std::byte* e = records.data() + i * k_record_bytes;
    const std::uint64_t h1 = hash64(e + 8, k_record_bytes - 8, load_u64(a + load_u32(e + 40)));
    store(e, hash64(a + load_u32(e + 32), load_u32(e + 36), h1));
  }

  // Layout: header, then each section 8-aligned, the arena last.
  struct Planned {
    std::uint64_t offset;
    std::uint32_t count;
    std::uint32_t entry_bytes;
  };
  const std::uint32_t device_cap = slot_capacity(content.devices.size());
  const std::uint32_t kernel_cap = slot_capacity(content.kernels.size());
  const std::uint32_t group_cap = slot_capacity(group_count);
  const std::uint32_t record_cap = slot_capacity(winner_count);
  Planned plan[k_section_count] = {
      {0, static_cast<std::uint32_t>(content.devices.size()), k_device_bytes},
      {0, device_cap, k_slot_bytes},
      {0, static_cast<std::uint32_t>(content.kernels.size()), k_kernel_bytes},
      {0, kernel_cap, k_slot_bytes},
      {0, static_cast<std::uint32_t>(group_count), k_group_bytes},
      {0, group_cap, k_slot_bytes},
      {0, static_cast<std::uint32_t>(winner_count), k_record_bytes},
      {0, record_cap, k_slot_bytes},
      {0, static_cast<std::uint32_t>(arena.size()), 1}};
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

  auto copy = [&](SectionIndex s, const std::vector<std::byte>& bytes) {
    if (!bytes.empty()) std::memcpy(out.data() + plan[s].offset, bytes.data(), bytes.size());
  };
  copy(k_devices, devices);
  copy(k_kernels, kernels);
  copy(k_groups, group_bytes);
  copy(k_records, records);
  copy(k_arena, arena.bytes());
  auto fill_slots = [&](SectionIndex s, std::uint32_t cap, const std::vector<std::uint64_t>& hashes) {
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      insert_slot(out.data() + plan[s].offset, cap, hashes[i], static_cast<std::uint32_t>(i));
    }
  };
  fill_slots(k_device_slots, device_cap, device_hashes);
  fill_slots(k_kernel_slots, kernel_cap, kernel_hashes);
  fill_slots(k_group_slots, group_cap, group_hashes);
  fill_slots(k_record_slots, record_cap, record_hashes);
  return out;
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

// The shape as the kernel's canonical text: "M=1,N=2" with the kernel's dims in order. Accepts
// what Shape::parse and conform_shape accept (spaces and tabs around items, names and values;
// any order; leading zeros) or less: false sends the lookup to ktuned, which says what is wrong.
// `out` is left untouched when `shape` is canonical already (the common case): then `canonical`
// views `shape`.
bool canonical_shape(std::string_view shape, std::string_view dims, std::string& out,
                     std::string_view& canonical) {
  // Fast path: exactly "D1=v1,D2=v2,..." in the kernel's order, no leading zeros.
  {
    std::size_t i = 0;
    std::string_view rest = dims;
    bool ok = !dims.empty();
    while (ok) {
      const auto comma = rest.find(',');
      const std::string_view dim = rest.substr(0, comma);
      if (shape.compare(i, dim.size(), dim) != 0 || i + dim.size() >= shape.size() ||
          shape[i + dim.size()] != '=') {
        ok = false;
        break;
      }
      i += dim.size() + 1;
      const std::size_t begin = i;
      std::int64_t value = 0;
      while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9' && i - begin < 14) {
        value = value * 10 + (shape[i] - '0');
        ++i;
      }
      if (i == begin || shape[begin] == '0' || value > k_max_dim_value) {
        ok = false;
        break;
      }
      if (comma == std::string_view::npos) {
        ok = i == shape.size();
        break;
      }
      if (i >= shape.size() || shape[i] != ',') {
        ok = false;
        break;
      }
      ++i;
      rest.remove_prefix(comma + 1);
    }
    if (ok) {
      canonical = shape;
      return true;
    }
  }
  // General form: items in any order.
  auto trim = [](std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return t;
  };
  struct Item {
    std::string_view name;
    std::int64_t value;
  };
  Item items[k_max_dims];
  std::size_t n = 0;
  std::string_view rest = shape;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    const auto eq = item.find('=');
    if (n == k_max_dims || eq == std::string_view::npos) return false;
    const std::string_view name = trim(item.substr(0, eq));
    const std::string_view digits = trim(item.substr(eq + 1));
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
    items[n++] = Item{name, value};
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  out.clear();
  std::size_t used = 0;
  rest = dims;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view dim = rest.substr(0, comma);
    const Item* found = nullptr;
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
  if (used != n) return false;   // a dim the kernel does not declare
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

Outcome TableView::answer(const Query& q, Answer& a, Scratch& s) const {
  a = Answer{};
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
  // The record's check, once per table.
  const auto sound = [&](const std::byte* e) {
    const std::uint64_t index = static_cast<std::uint64_t>(e - entry(m_records, 0)) / m_records.entry_bytes;
    std::uint64_t& word = s.verified[index / 64];
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    if ((word & bit) != 0) return true;
    if (!record_sound(e)) return false;
    word |= bit;
    return true;
  };
  const Resolved& r = s.resolved;
  const std::byte* kernel = r.kernel;
  const std::string_view fingerprint = r.fingerprint, source_hash = r.source_hash, dims = r.dims,
                         dtypes = r.dtypes, tuned_on = r.tuned_on;
  const std::uint32_t device_flags = r.device_flags;

  // The dtype, accepted, and the group's key hash (which seeds the record's): memoized for the
  // dtype the lookup gave.
  if (!s.group_valid || s.group_query_dtype != q.dtype) {
    std::string_view dtype = q.dtype;
    if ((load_u32(kernel + 44) & k_kernel_dtype_axis) == 0 && dtype == "f32") {
      dtype = dtypes.substr(0, dtypes.find(','));
    }
    if (dtype.empty() || !any_item(dtypes, [&](std::string_view d) { return d == dtype; })) {
      return Outcome::not_accepted;
    }
    s.key.resize(q.kernel.size() + dtype.size() + fingerprint.size() + 2);
    char* k = s.key.data();
    for (const std::string_view part : {q.kernel, dtype, fingerprint}) {
      std::memcpy(k, part.data(), part.size());
      k += part.size();
      if (k != s.key.data() + s.key.size()) *k++ = k_sep;
    }
    s.group_hash = hash64(s.key.data(), s.key.size());
    s.group_dtype.assign(dtype);
    s.group_query_dtype.assign(q.dtype);
    s.dtype_ref = 0;
    s.group_valid = true;
  }
  const std::string_view dtype = s.group_dtype;

  // The shape, canonical.
  std::string_view shape;
  if (!canonical_shape(q.shape, dims, s.shape, shape)) return Outcome::not_accepted;

  // exact: every record of the key; one under the current source answers.
  bool source_changed = false;
  // Strings the table interns compare by reference first.
  const auto same = [&](std::uint32_t ref, std::uint32_t known, std::string_view wanted) {
    std::string_view text;
    return (known != 0 && ref == known) || (string_at(ref, text) && text == wanted);
  };
  const auto shape_of = [&](const std::byte* e, std::string_view& out) {
    const std::uint32_t payload = load_u32(e + 32);
    const std::uint64_t ndims = load_u16(e + 44);
    if (payload > m_arena_bytes || 8 * ndims + 4 > m_arena_bytes - payload) return false;
    return string_at(static_cast<std::uint32_t>(payload + 8 * ndims + 4), out);
  };
  const auto fill_winner = [&](const std::byte* e) {
    const std::uint32_t blob = load_u32(e + 40);
    a.param_count = load_u32(m_arena + blob + 8);
    a.params = m_arena + blob + k_blob_head;
    a.config = std::string_view(reinterpret_cast<const char*>(a.params + 16 * std::size_t{a.param_count}),
                                load_u32(m_arena + blob + 12));
    const double median = load_f64(e + 48), gflops = load_f64(e + 56);
    a.median_ms = std::isfinite(median) ? median : 0;
    a.gflops = std::isfinite(gflops) ? gflops : 0;
    a.job = load_i64(e + 64);
  };
  {
    const std::uint64_t h = hash64(shape.data(), shape.size(), s.group_hash);
    std::uint64_t cursor = 0;
    for (std::int64_t i; (i = probe(m_record_slots, h, cursor, m_records.count)) >= 0;) {
      const std::byte* e = entry(m_records, static_cast<std::uint32_t>(i));
      std::string_view sh;
      const std::uint32_t dtype_ref = load_u32(e + 20);
      if (load_u64(e + 8) != h || !same(load_u32(e + 16), r.kernel_ref, q.kernel) ||
          !same(dtype_ref, s.dtype_ref, dtype) ||
          !same(load_u32(e + 24), r.fingerprint_ref, fingerprint) || !shape_of(e, sh) ||
          sh != shape) {
        continue;
      }
      s.dtype_ref = dtype_ref;
      const std::uint32_t source_ref = load_u32(e + 28);
      std::string_view source;
      if (source_ref != r.source_ref && !string_at(source_ref, source)) return Outcome::damaged;
      if (source_ref != r.source_ref && source != source_hash) {
        source_changed = true;
        continue;
      }
      if (!sound(e)) return Outcome::damaged;
      a.rung = Rung::exact;
      fill_winner(e);
      return Outcome::answered;
    }
  }

  // nearest: the closest tuned shape of the group under the current source.
  bool group_found = false;
  {
    const std::uint64_t h = s.group_hash;
    std::uint64_t cursor = 0;
    const std::byte* group = nullptr;
    for (std::int64_t i; (i = probe(m_group_slots, h, cursor, m_groups.count)) >= 0;) {
      const std::byte* e = entry(m_groups, static_cast<std::uint32_t>(i));
      std::string_view k, d, f;
      if (load_u64(e + 8) == h && string_at(load_u32(e + 16), k) && k == q.kernel &&
          string_at(load_u32(e + 20), d) && d == dtype && string_at(load_u32(e + 24), f) &&
          f == fingerprint) {
        group = e;
        break;
      }
    }
    if (group != nullptr) {
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
        if (!string_at(load_u32(e + 28), src) || !shape_of(e, sh)) return Outcome::damaged;
        if (sh == shape) continue;              // other sources only: the exact probe saw them
        if (src != source_hash) continue;
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
      if (best != nullptr) {
        if (!sound(best)) return Outcome::damaged;
        a.rung = Rung::nearest;
        fill_winner(best);
        a.from_shape = best_shape;
        a.reason = source_changed ? k_reason_source_changed : k_reason_shape_not_tuned;
        return Outcome::answered;
      }
    }
  }

  // default: the kernel's [default].
  a.rung = Rung::fallback_default;
  const std::uint32_t blob = load_u32(kernel + 36);
  a.param_count = load_u32(m_arena + blob + 8);
  a.params = m_arena + blob + k_blob_head;
  a.config = std::string_view(reinterpret_cast<const char*>(a.params + 16 * std::size_t{a.param_count}),
                              load_u32(m_arena + blob + 12));
  if (source_changed || group_found) {
    a.reason = k_reason_source_changed;
  } else if ((device_flags & k_device_has_winners) == 0) {
    a.reason = k_reason_device_never_tuned;
  } else if (any_item(tuned_on, [&](std::string_view fp) { return fp == fingerprint; })) {
    a.reason = k_reason_dtype_not_tuned;
  } else {
    a.reason = k_reason_no_results;
  }
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
