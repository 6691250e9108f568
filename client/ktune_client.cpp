// libktune_client: the C API of client/include/ktune/client.h.
#include "ktune/client.h"
#include "core/file_io.hpp"
#include "db/client_query.hpp"

#include "client/mapped_table.hpp"
#include "core/paths.hpp"
#include "core/winner_table.hpp"

#include <nlohmann/json.hpp>
#include <sqlite3.h>
#include <toml++/toml.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#ifndef KTUNE_DATA_DIR_FROM_LIB
#error "KTUNE_DATA_DIR_FROM_LIB must be defined by the build"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using ktune_time = Clock::time_point;

constexpr int k_default_timeout_us = 5000;
constexpr int k_default_connect_timeout_us = 100000;
constexpr int k_default_cache_ttl_ms = 1000;
constexpr auto k_backoff_min = std::chrono::milliseconds(10);
constexpr auto k_backoff_max = std::chrono::milliseconds(1000);

// One answer, owning every string the ktune_answer points to.
struct Entry {
  ktune_rung rung = KTUNE_RUNG_DEFAULT;
  ktune_source source = KTUNE_SOURCE_DAEMON;
  std::string config_json;
  std::vector<std::string> names;
  std::vector<ktune_param> params;
  std::string from_shape;
  std::string reason;
  double median_ms = 0;
  std::int64_t job = 0;
  std::int64_t tune_job = 0;
  ktune_time expires;

  // Sets config_json and params from an object of integers; false when it is not one.
  bool set_config(const nlohmann::ordered_json& config) {
    if (!config.is_object()) return false;
    names.clear();
    params.clear();
    std::vector<std::pair<std::string, std::int64_t>> ordered;
    for (const auto& [name, value] : config.items()) {
      if (!value.is_number_integer()) return false;
      ordered.emplace_back(name, value.get<std::int64_t>());
    }
    return set_params(std::move(ordered), config.dump());
  }
  bool set_params(std::vector<std::pair<std::string, std::int64_t>> ordered, std::string json) {
    names.clear();
    params.clear();
    names.reserve(ordered.size());
    for (auto& [name, value] : ordered) names.push_back(std::move(name));
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      params.push_back(ktune_param{names[i].c_str(), ordered[i].second});
    }
    config_json = std::move(json);
    return true;
  }
  void fill(ktune_answer* out, ktune_source as) const {
    out->rung = rung;
    out->exact = rung == KTUNE_RUNG_EXACT ? 1 : 0;
    out->source = as;
    out->config_json = config_json.c_str();
    out->params = params.data();
    out->param_count = params.size();
    out->from_shape = from_shape.c_str();
    out->reason = reason.c_str();
    out->median_ms = median_ms;
    out->job = job;
    out->tune_job = tune_job;
  }
};

// Parses the values of a "M=1,N=2" shape into name -> value; empty when it does not parse.
std::map<std::string, std::int64_t> shape_map(std::string_view shape) {
  std::map<std::string, std::int64_t> dims;
  std::stringstream items{std::string(shape)};
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    if (b == std::string::npos) return {};
    item = item.substr(b, e - b + 1);
    const auto eq = item.find('=');
    if (eq == std::string::npos) return {};
    std::string name = item.substr(0, eq);
    name.erase(name.find_last_not_of(" \t") + 1);
    char* end = nullptr;
    const std::string digits = item.substr(eq + 1);
    const long long value = std::strtoll(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || value <= 0) return {};
    dims[name] = value;
  }
  return dims;
}

// The [default] table of a kernel.toml, in file order, read with toml++ (as ktuned reads it):
// false when the text is not TOML, has no [default] table, or a value is not an integer.
bool parse_default_table(const std::string& spec_text,
                         std::vector<std::pair<std::string, std::int64_t>>& out) {
  toml::table root;
  try {
    root = toml::parse(spec_text);
  } catch (const toml::parse_error&) {
    return false;
  }
  const toml::table* table = root["default"].as_table();
  if (table == nullptr) return false;
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [key, node] : *table) entries.emplace_back(&key, &node);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.second->source().begin;
    const auto& pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  for (const auto& [key, node] : entries) {
    const auto value = node->value<std::int64_t>();
    if (!node->is_integer() || !value) return false;
    out.emplace_back(std::string(key->str()), *value);
  }
  return true;
}

// <dir of this library (or of the program it is linked into)>/<KTUNE_DATA_DIR_FROM_LIB>/kernels,
// else <that dir>/../share/ktune/kernels; "" when neither exists.
std::string shipped_kernels_dir() {
  namespace fs = std::filesystem;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&ktune_options_init), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  const fs::path self = fs::canonical(info.dli_fname, ec);
  if (ec) return {};
  for (const char* rel : {KTUNE_DATA_DIR_FROM_LIB, "../share/ktune"}) {
    const fs::path dir = (self.parent_path() / rel / "kernels").lexically_normal();
    if (fs::is_directory(dir, ec)) return dir.string();
  }
  return {};
}

std::string config_text(const std::vector<std::pair<std::string, std::int64_t>>& config) {
  std::string out = "{";
  for (const auto& [name, value] : config) {
    if (out.size() > 1) out += ',';
    out += nlohmann::json(name).dump() + ":" + std::to_string(value);
  }
  return out + "}";
}

class Sqlite {
public:
  Sqlite() = default;
  Sqlite(const Sqlite&) = delete;
  Sqlite& operator=(const Sqlite&) = delete;
  ~Sqlite() { close(); }
  void close() {
    for (auto* s : {m_winners, m_spec}) sqlite3_finalize(s);
    m_winners = m_spec = nullptr;
    if (m_db) sqlite3_close(m_db);
    m_db = nullptr;
  }
  // Opens `path` read-only (never creating it) and prepares the two queries.
  bool open(const std::string& path, std::string& error) {
    close();
    if (::access(path.c_str(), R_OK) != 0) {
      error = "database " + path + ": " + std::strerror(errno);
      return false;
    }
    if (sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK) {
      error = "database " + path + ": " + (m_db ? sqlite3_errmsg(m_db) : "cannot open");
      close();
      return false;
    }
    sqlite3_busy_timeout(m_db, 2);
    // The store is read only through db/client_query.hpp's queries, on a schema they know.
    const std::string refusal = ktune::db::client_query_refusal(pragma("application_id"), pragma("user_version"));
    if (!refusal.empty()) {
      error = "database " + path + ": " + refusal;
      close();
      return false;
    }
    // The source hash and fingerprint ktuned recorded with the kernel's newest job stand for the
    // kernel's current source and this machine.
    const char* k_winners = ktune::db::k_client_winners_query;
    const char* k_spec = ktune::db::k_client_spec_query;
    if (sqlite3_prepare_v2(m_db, k_winners, -1, &m_winners, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(m_db, k_spec, -1, &m_spec, nullptr) != SQLITE_OK) {
      error = "database " + path + " is not a ktune database: " + sqlite3_errmsg(m_db);
      close();
      return false;
    }
    return true;
  }
  [[nodiscard]] bool is_open() const { return m_db != nullptr; }

  // An integer PRAGMA of the open database; -1 when it cannot be read.
  std::int64_t pragma(const char* name) {
    sqlite3_stmt* statement = nullptr;
    const std::string sql = std::string("PRAGMA ") + name;
    std::int64_t value = -1;
    if (sqlite3_prepare_v2(m_db, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
        sqlite3_step(statement) == SQLITE_ROW) {
      value = sqlite3_column_int64(statement, 0);
    }
    sqlite3_finalize(statement);
    return value;
  }

  // The exact winner for the key, into `entry`.
  bool find_winner(const std::string& kernel, const std::string& shape, const std::string& dtype,
                   const std::string& device, Entry& entry) {
    const auto wanted = shape_map(shape);
    if (wanted.empty()) return false;
    sqlite3_reset(m_winners);
    sqlite3_bind_text(m_winners, 1, kernel.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(m_winners, 2, dtype.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(m_winners, 3, device.c_str(), -1, SQLITE_TRANSIENT);
    bool found = false;
    while (sqlite3_step(m_winners) == SQLITE_ROW) {
      const auto* row_shape = reinterpret_cast<const char*>(sqlite3_column_text(m_winners, 0));
      if (!row_shape || shape_map(row_shape) != wanted) continue;
      const auto* config = reinterpret_cast<const char*>(sqlite3_column_text(m_winners, 1));
      const auto parsed = nlohmann::ordered_json::parse(config ? config : "", nullptr, false);
      if (parsed.is_discarded() || !entry.set_config(parsed)) continue;
      entry.config_json = config;
      entry.rung = KTUNE_RUNG_EXACT;
      entry.median_ms = sqlite3_column_double(m_winners, 2);
      entry.job = sqlite3_column_int64(m_winners, 3);
      found = true;
      break;
    }
    sqlite3_reset(m_winners);
    return found;
  }

  std::string spec_text(const std::string& kernel) {
    sqlite3_reset(m_spec);
    sqlite3_bind_text(m_spec, 1, kernel.c_str(), -1, SQLITE_TRANSIENT);
    std::string text;
    if (sqlite3_step(m_spec) == SQLITE_ROW) {
      if (const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(m_spec, 0))) text = t;
    }
    sqlite3_reset(m_spec);
    return text;
  }

private:
  sqlite3* m_db = nullptr;
  sqlite3_stmt* m_winners = nullptr;
  sqlite3_stmt* m_spec = nullptr;
};


// Reads a JSON string without escapes at text[i] (the opening quote); false for anything else.
bool plain_string(std::string_view text, std::size_t& i, std::string_view& out) {
  if (i >= text.size() || text[i] != '"') return false;
  const std::size_t begin = ++i;
  while (i < text.size() && text[i] != '"') {
    if (text[i] == '\\') return false;
    ++i;
  }
  if (i >= text.size()) return false;
  out = text.substr(begin, i - begin);
  ++i;
  return true;
}

// Reads a scalar (number, true, false, null) at text[i].
std::string_view scalar(std::string_view text, std::size_t& i) {
  const std::size_t begin = i;
  while (i < text.size() && text[i] != ',' && text[i] != '}') ++i;
  return text.substr(begin, i - begin);
}

bool to_int(std::string_view text, std::int64_t& out) {
  if (text.empty()) return false;
  std::int64_t v = 0;
  std::size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  out = text[0] == '-' ? -v : v;
  return true;
}

// The reply ktuned writes for a lookup, {"v":1,"id":N,"ok":true,"result":{...}} with a result of
// plain strings, numbers, booleans and one flat "config" object of integers (no spaces, as
// ktuned writes it). False when the line has any other form: the caller parses it in full then.
bool parse_lookup_reply_fast(std::string_view line, Entry& entry) {
  constexpr std::string_view k_ok = ",\"ok\":true,\"result\":{";
  const auto at = line.find(k_ok);
  if (at == std::string_view::npos || line.substr(0, 12) != "{\"v\":1,\"id\":") return false;
  std::size_t i = at + k_ok.size();
  bool has_config = false;
  entry.rung = KTUNE_RUNG_DEFAULT;
  entry.from_shape.clear();
  entry.reason.clear();
  entry.median_ms = 0;
  entry.job = 0;
  entry.tune_job = 0;
  while (i < line.size() && line[i] != '}') {
    std::string_view key;
    if (!plain_string(line, i, key) || i >= line.size() || line[i] != ':') return false;
    ++i;
    if (key == "config") {
      if (i >= line.size() || line[i] != '{') return false;
      const std::size_t begin = i++;
      std::vector<std::pair<std::string, std::int64_t>> config;
      while (i < line.size() && line[i] != '}') {
        std::string_view name;
        std::int64_t value = 0;
        if (!plain_string(line, i, name) || i >= line.size() || line[i] != ':') return false;
        ++i;
        if (!to_int(scalar(line, i), value)) return false;
        config.emplace_back(std::string(name), value);
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return false;
      ++i;
      entry.set_params(std::move(config), std::string(line.substr(begin, i - begin)));
      has_config = true;
    } else if (i < line.size() && line[i] == '"') {
      std::string_view value;
      if (!plain_string(line, i, value)) return false;
      if (key == "rung") {
        entry.rung = value == "exact"     ? KTUNE_RUNG_EXACT
                     : value == "nearest" ? KTUNE_RUNG_NEAREST
                     : value == "stale"   ? KTUNE_RUNG_STALE
                                          : KTUNE_RUNG_DEFAULT;
      } else if (key == "from_shape") {
        entry.from_shape = value;
      } else if (key == "reason") {
        entry.reason = value;
      }
    } else {
      const std::string_view value = scalar(line, i);
      if (key == "job" && !to_int(value, entry.job)) return false;
      if (key == "tune_job" && !to_int(value, entry.tune_job)) return false;
      if (key == "median_ms") entry.median_ms = value == "null" ? 0 : std::strtod(std::string(value).c_str(), nullptr);
    }
    if (i < line.size() && line[i] == ',') ++i;
  }
  return has_config && i + 2 == line.size() && line[i] == '}' && line[i + 1] == '}';
}

// The numeric id at the start of a line ktuned wrote ({"v":1,"id":N,...}); -1 when none, and
// -2 for an event line.
std::int64_t reply_id(std::string_view line) {
  constexpr std::string_view k_prefix = "{\"v\":1,\"id\":";
  if (line.substr(0, k_prefix.size()) != k_prefix) return -1;
  std::size_t i = k_prefix.size();
  const std::size_t begin = i;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
  std::int64_t id = -1;
  if (i == begin || !to_int(line.substr(begin, i - begin), id)) return -1;
  if (line.substr(i, 9) == ",\"event\":") return -2;
  return id;
}

bool plain_ascii(const char* text) {
  for (; *text; ++text) {
    const auto c = static_cast<unsigned char>(*text);
    if (c == '"' || c == '\\' || c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

} // namespace

struct ktune_client {
  std::string socket_path;
  std::string db_path;
  std::vector<std::string> kernel_dirs;
  std::chrono::microseconds timeout{k_default_timeout_us};
  std::chrono::microseconds connect_timeout{k_default_connect_timeout_us};
  std::chrono::milliseconds cache_ttl{k_default_cache_ttl_ms};
  bool cache_enabled = true;
  bool tune_on_miss = false;

  int fd = -1;
  std::string in;            // bytes read past the last reply
  std::int64_t next_id = 1;
  ktune_time retry_at{};     // no connect attempt before this
  std::chrono::milliseconds backoff{0};
  Sqlite db;
  ktune_time db_retry_at{};

  std::unordered_map<std::string, Entry> cache;
  std::string key;           // reused for every lookup: no allocation on a cache hit
  Entry scratch;             // the answer when the cache is off
  Entry* last_entry = nullptr;  // the cache entry of the previous lookup, and its key
  std::string last_kernel, last_shape, last_dtype, last_device;
  std::string request_line;  // reused buffers of the socket path
  std::string reply_line;
  std::string error;

  // The winner table (docs/protocol.md § Winner table), asked before anything else.
  ktune::client::MappedTable table;
  ktune::table::Scratch table_scratch;
  std::vector<ktune_param> table_params;   // the last table answer's params (names in the map)
  // The previous table answer and its key: a repeated key is answered without a probe while the
  // same table is mapped.
  ktune_answer table_last{};
  std::uint64_t table_last_epoch = 0;      // 0: none
  std::string table_last_key;              // kernel, shape, dtype, device, each NUL-ended
  const std::byte* table_params_of = nullptr;  // the config blob table_params was made from

  ~ktune_client() { disconnect(); }

  enum class TableAnswer { answered, ask_daemon, not_answered };

  // The answer of the mapped table into `out` (source KTUNE_SOURCE_MAP). ask_daemon: answered,
  // but not exactly, and ktuned should see the miss (tune-on-miss, by this handle or by ktuned's
  // policy); not_answered: the table cannot answer (no table, a key it lacks, a damaged entry).
  TableAnswer from_table(const char* kernel, const char* shape, const char* dtype,
                         const char* device, ktune_answer* out) {
    const ktune::table::TableView* view = table.view();
    if (view == nullptr) return TableAnswer::not_answered;
    const std::string_view parts[4] = {kernel, shape, dtype, device};
    if (table_last_epoch == table.epoch()) {
      std::size_t at = 0;
      bool same = true;
      for (const std::string_view part : parts) {
        if (table_last_key.size() - at < part.size() + 1 ||
            std::memcmp(table_last_key.data() + at, part.data(), part.size() + 1) != 0) {
          same = false;
          break;
        }
        at += part.size() + 1;
      }
      if (same && at == table_last_key.size()) {
        *out = table_last;
        return tune_on_miss_applies(*view, out->rung) ? TableAnswer::ask_daemon : TableAnswer::answered;
      }
    }
    ktune::table::Answer a;
    const auto outcome =
        view->answer(ktune::table::Query{parts[0], parts[1], parts[2], parts[3]}, a, table_scratch);
    if (outcome != ktune::table::Outcome::answered) {
      if (outcome == ktune::table::Outcome::damaged) {
        error = "winner table " + table.path() + ": a damaged entry (a check failed); asking ktuned";
      }
      return TableAnswer::not_answered;
    }
    // Configs are shared by many winners: the params of the last one are kept.
    if (a.params != table_params_of || table_last_epoch != table.epoch()) {
      table_params.resize(a.param_count);
      for (std::uint32_t i = 0; i < a.param_count; ++i) {
        const ktune::table::Param p = view->param(a, i);
        table_params[i] = ktune_param{p.name.data() != nullptr ? p.name.data() : "", p.value};
      }
      table_params_of = a.params;
    }
    out->rung = a.rung == ktune::table::Rung::exact     ? KTUNE_RUNG_EXACT
                : a.rung == ktune::table::Rung::nearest ? KTUNE_RUNG_NEAREST
                                                        : KTUNE_RUNG_DEFAULT;
    out->exact = a.rung == ktune::table::Rung::exact ? 1 : 0;
    out->source = KTUNE_SOURCE_MAP;
    out->config_json = a.config.data();
    out->params = table_params.data();
    out->param_count = table_params.size();
    out->from_shape = a.from_shape.empty() ? "" : a.from_shape.data();
    out->reason = a.reason.empty() ? "" : a.reason.data();
    out->median_ms = a.median_ms;
    out->job = a.job;
    out->tune_job = 0;
    table_last = *out;
    table_last_epoch = table.epoch();
    std::size_t size = 0;
    for (const std::string_view part : parts) size += part.size() + 1;
    table_last_key.resize(size);
    char* at = table_last_key.data();
    for (const std::string_view part : parts) {
      std::memcpy(at, part.data(), part.size() + 1);
      at += part.size() + 1;
    }
    return tune_on_miss_applies(*view, out->rung) ? TableAnswer::ask_daemon : TableAnswer::answered;
  }

  // A non-exact answer of the map is asked of ktuned too when it should see the miss
  // (tune-on-miss) or may know better (the device's hardware has winners under another
  // environment: ktuned answers `stale`).
  [[nodiscard]] bool tune_on_miss_applies(const ktune::table::TableView& view, ktune_rung rung) const {
    return rung != KTUNE_RUNG_EXACT &&
           (tune_on_miss || (view.flags() & ktune::table::k_flag_tune_on_miss) != 0 ||
            (table_scratch.resolved.device_flags & ktune::table::k_device_stale_peers) != 0);
  }

  void remember(Entry* entry, const char* kernel, const char* shape, const char* dtype,
                const char* device) {
    last_entry = entry;
    last_kernel = kernel;
    last_shape = shape;
    last_dtype = dtype;
    last_device = device;
  }

  void disconnect() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    in.clear();
  }

  void connection_failed(ktune_time now) {
    disconnect();
    backoff = backoff.count() == 0 ? k_backoff_min : std::min(backoff * 2, k_backoff_max);
    retry_at = now + backoff;
  }

  // Opens the connection; a connect() that fails (no daemon: ENOENT, ECONNREFUSED) starts or
  // extends the backoff. A listen queue that is full (EAGAIN) is retried until `connect_timeout`.
  bool connect(ktune_time now) {
    if (fd >= 0) return true;
    if (now < retry_at) {
      error = "ktuned unreachable at " + socket_path + " (next attempt after backoff)";
      return false;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof addr.sun_path) {
      error = "socket path " + socket_path + " is too long for a Unix socket";
      connection_failed(now);
      return false;
    }
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const ktune_time deadline = now + connect_timeout;
    while (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if ((errno == EAGAIN || errno == EINTR) && Clock::now() < deadline) {
        const timespec pause{0, 200'000};
        ::nanosleep(&pause, nullptr);
        continue;
      }
      error = "cannot connect to ktuned at " + socket_path + ": " + std::strerror(errno);
      connection_failed(now);
      return false;
    }
    if (fd < 0) {
      error = "cannot create a socket: " + std::string(std::strerror(errno));
      connection_failed(now);
      return false;
    }
    backoff = std::chrono::milliseconds(0);
    return true;
  }

  // Sends one request line and reads the reply line carrying its id into `reply`. False on
  // timeout or I/O error (the caller drops the connection: a late reply must not answer the next
  // request).
  bool round_trip(const std::string& line, std::int64_t id, ktune_time deadline,
                  std::string& reply) {
    std::size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT, deadline)) continue;
      error = "cannot send to ktuned: " + std::string(n < 0 ? std::strerror(errno) : "closed");
      return false;
    }
    std::size_t scanned = 0;
    while (true) {
      const auto newline = in.find('\n', scanned);
      if (newline != std::string::npos) {
        const std::string_view candidate(in.data(), newline);
        if (reply_id(candidate) == id) {
          reply.assign(candidate);
          in.erase(0, newline + 1);
          return true;
        }
        in.erase(0, newline + 1); // an event or a stray reply: not ours
        scanned = 0;
        continue;
      }
      scanned = in.size();
      // The reply is never there the moment the request is sent: wait first, then read (one
      // system call fewer than a read that fails with EAGAIN).
      if (!wait_for(POLLIN, deadline)) {
        error = "ktuned did not answer within " + std::to_string(timeout.count()) + " us";
        return false;
      }
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        in.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      error = "connection to ktuned lost: " + std::string(n < 0 ? std::strerror(errno) : "closed");
      return false;
    }
  }

  bool wait_for(short events, ktune_time deadline) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      timespec ts{static_cast<time_t>(left.count() / 1000000),
                  static_cast<long>(left.count() % 1000000) * 1000};
      pollfd p{fd, events, 0};
      const int n = ::ppoll(&p, 1, &ts, nullptr);
      if (n > 0) return true;
      if (n == 0) return false;
      if (errno != EINTR) return false;
    }
  }

  // Asks ktuned. 1 = answered, 0 = not reachable or no answer in time, -1 = rejected.
  // A fresh connection's first request may take `connect_timeout` more than `timeout` (ktuned
  // accepts it and sets up its session); a fresh connection that still gets no answer is made
  // once more before the caller falls back. A kept connection that ktuned closed meanwhile
  // (idle_timeout, a restart) is replaced at once. Only a failed connect() starts the backoff:
  // a daemon that is up but slow is asked again at the next lookup.
  int ask_daemon(const char* kernel, const char* shape, const char* dtype, const char* device,
                 ktune_time now, Entry& entry) {
    const std::int64_t id = next_id++;
    std::string& line = request_line;
    line.assign("{\"v\":1,\"id\":").append(std::to_string(id)).append(",\"op\":\"lookup\"");
    const std::pair<const char*, const char*> fields[] = {
        {"kernel", kernel}, {"shape", shape}, {"dtype", dtype}, {"device", device}};
    for (const auto& [name, value] : fields) {
      line.append(",\"").append(name).append("\":");
      if (plain_ascii(value)) {
        line.append("\"").append(value).append("\"");
      } else {
        line.append(nlohmann::json(std::string(value)).dump(-1, ' ', false,
                                                            nlohmann::json::error_handler_t::replace));
      }
    }
    if (tune_on_miss) line.append(",\"tune_on_miss\":true");
    line.append("}\n");
    int fresh_attempts = 0;
    while (true) {
      const bool kept = fd >= 0;
      if (!connect(kept ? now : Clock::now())) return 0;
      if (!kept) ++fresh_attempts;
      const ktune_time deadline = kept ? now + timeout : Clock::now() + connect_timeout + timeout;
      if (round_trip(line, id, deadline, reply_line)) break;
      disconnect();
      if (fresh_attempts >= 2) return 0;
    }
    error.clear();
    entry.source = KTUNE_SOURCE_DAEMON;
    if (parse_lookup_reply_fast(reply_line, entry)) return 1;

    const auto reply = nlohmann::ordered_json::parse(reply_line, nullptr, false);
    if (reply.is_discarded() || !reply.is_object()) {
      error = "ktuned sent a line that is not a JSON object";
      disconnect();
      return 0;
    }
    if (reply.value("ok", false) != true) {
      const auto& e = reply.value("error", nlohmann::ordered_json::object());
      error = e.value("code", std::string("error")) + ": " + e.value("message", std::string());
      return -1;
    }
    const auto& r = reply["result"];
    const std::string rung = r.value("rung", std::string());
    entry.rung = rung == "exact"     ? KTUNE_RUNG_EXACT
                 : rung == "nearest" ? KTUNE_RUNG_NEAREST
                 : rung == "stale"   ? KTUNE_RUNG_STALE
                                     : KTUNE_RUNG_DEFAULT;
    if (!entry.set_config(r.value("config", nlohmann::ordered_json()))) {
      error = "ktuned answered a config that is not an object of integers";
      return 0;
    }
    entry.from_shape = r.value("from_shape", std::string());
    entry.reason = r.value("reason", std::string());
    const auto median = r.find("median_ms");
    entry.median_ms = median != r.end() && median->is_number() ? median->get<double>() : 0;
    entry.job = r.value("job", std::int64_t{0});
    entry.tune_job = r.value("tune_job", std::int64_t{0});
    return 1;
  }

  bool from_database(const std::string& kernel, const std::string& shape, const std::string& dtype,
                     const std::string& device, ktune_time now, Entry& entry) {
    if (!db.is_open()) {
      if (now < db_retry_at) return false;
      std::string db_error;
      if (!db.open(db_path, db_error)) {
        db_retry_at = now + k_backoff_max;
        error += "; " + db_error;
        return false;
      }
    }
    if (!db.find_winner(kernel, shape, dtype, device, entry)) return false;
    entry.source = KTUNE_SOURCE_DATABASE;
    entry.from_shape.clear();
    entry.tune_job = 0;
    entry.reason.clear();
    return true;
  }

  bool from_spec(const std::string& kernel, Entry& entry) {
    std::string text = db.is_open() ? db.spec_text(kernel) : std::string();
    ktune_source source = KTUNE_SOURCE_DATABASE;
    if (text.empty()) {
      source = KTUNE_SOURCE_SPEC;
      for (const auto& dir : kernel_dirs) {
        text = ktune::read_file(dir + "/" + kernel + "/kernel.toml").value_or(std::string());
        if (!text.empty()) break;
      }
    }
    std::vector<std::pair<std::string, std::int64_t>> config;
    if (text.empty() || !parse_default_table(text, config)) return false;
    entry.set_params(config, config_text(config));
    entry.rung = KTUNE_RUNG_DEFAULT;
    entry.source = source;
    entry.from_shape.clear();
    entry.reason = "daemon_unreachable";
    entry.median_ms = 0;
    entry.job = 0;
    entry.tune_job = 0;
    return true;
  }
};

namespace {

std::vector<std::string> split_dirs(const char* text) {
  std::vector<std::string> dirs;
  if (!text) return dirs;
  std::stringstream items{std::string(text)};
  std::string dir;
  while (std::getline(items, dir, ':')) {
    if (!dir.empty()) dirs.push_back(dir);
  }
  return dirs;
}

} // namespace

extern "C" {

void ktune_options_init(ktune_options* options) {
  if (!options) return;
  *options = ktune_options{};
  options->timeout_us = k_default_timeout_us;
  options->connect_timeout_us = k_default_connect_timeout_us;
  options->cache_ttl_ms = k_default_cache_ttl_ms;
}

ktune_status ktune_connect(const ktune_options* options, ktune_client** out) {
  if (!out) return KTUNE_E_INVALID_ARGUMENT;
  *out = nullptr;
  ktune_options defaults;
  ktune_options_init(&defaults);
  const ktune_options& o = options ? *options : defaults;
  try {
    auto client = std::make_unique<ktune_client>();
    const ktune::InstancePaths paths = ktune::resolve_paths(ktune::path_env_from_process());
    client->socket_path = o.socket_path && *o.socket_path ? o.socket_path : paths.socket;
    client->db_path = o.db_path && *o.db_path ? o.db_path : paths.db;
    client->kernel_dirs = split_dirs(o.kernel_dirs ? o.kernel_dirs : std::getenv("KTUNE_KERNEL_DIRS"));
    if (std::string shipped = shipped_kernels_dir(); !shipped.empty()) {
      client->kernel_dirs.push_back(std::move(shipped));
    }
    client->timeout = std::chrono::microseconds(o.timeout_us > 0 ? o.timeout_us : k_default_timeout_us);
    client->connect_timeout = std::chrono::microseconds(
        o.connect_timeout_us > 0 ? o.connect_timeout_us : k_default_connect_timeout_us);
    client->cache_enabled = o.cache_ttl_ms >= 0;
    client->cache_ttl = std::chrono::milliseconds(o.cache_ttl_ms > 0 ? o.cache_ttl_ms
                                                                    : k_default_cache_ttl_ms);
    client->tune_on_miss = o.tune_on_miss != 0;
    client->table.set_path(ktune::table::table_path_for_socket(client->socket_path));
    *out = client.release();
    return KTUNE_OK;
  } catch (const std::bad_alloc&) {
    return KTUNE_E_NO_MEMORY;
  }
}

ktune_status ktune_lookup(ktune_client* client, const char* kernel, const char* shape,
                          const char* dtype, const char* device, ktune_answer* out) {
  if (!client || !kernel || !*kernel || !shape || !*shape || !out) {
    if (client) client->error = "ktune_lookup needs a handle, a kernel, a shape and an answer";
    return KTUNE_E_INVALID_ARGUMENT;
  }
  if (!dtype || !*dtype) dtype = "f32";
  if (!device || !*device) device = "cpu";
  try {
    const auto mapped = client->from_table(kernel, shape, dtype, device, out);
    if (mapped == ktune_client::TableAnswer::answered) return KTUNE_OK;
    if (mapped == ktune_client::TableAnswer::ask_daemon) {
      // The miss goes to ktuned (which queues the tune); its answer carries tune_job. Without
      // ktuned the table's answer stands.
      const ktune_answer from_map = *out;
      Entry& entry = client->scratch;
      const int asked = client->ask_daemon(kernel, shape, dtype, device, Clock::now(), entry);
      if (asked < 0) return KTUNE_E_REJECTED;
      if (asked == 0) {
        *out = from_map;
        return KTUNE_OK;
      }
      entry.fill(out, KTUNE_SOURCE_DAEMON);
      return KTUNE_OK;
    }
    const ktune_time now = Clock::now();
    // The same key as the previous lookup (the common case in a runtime's loop): no hashing.
    if (Entry* last = client->last_entry;
        last && now < last->expires && std::strcmp(kernel, client->last_kernel.c_str()) == 0 &&
        std::strcmp(shape, client->last_shape.c_str()) == 0 &&
        std::strcmp(dtype, client->last_dtype.c_str()) == 0 &&
        std::strcmp(device, client->last_device.c_str()) == 0) {
      last->fill(out, KTUNE_SOURCE_CACHE);
      return KTUNE_OK;
    }
    client->last_entry = nullptr;
    std::string& key = client->key;
    key.clear();
    key.append(kernel).push_back('\0');
    key.append(shape).push_back('\0');
    key.append(dtype).push_back('\0');
    key.append(device);
    Entry* entry = &client->scratch;
    if (client->cache_enabled) {
      const auto it = client->cache.find(key);
      if (it != client->cache.end() && now < it->second.expires) {
        it->second.fill(out, KTUNE_SOURCE_CACHE);
        client->remember(&it->second, kernel, shape, dtype, device);
        return KTUNE_OK;
      }
      entry = &client->cache[key];
    }
    client->error.clear();
    const int asked = client->ask_daemon(kernel, shape, dtype, device, now, *entry);
    if (asked < 0) {
      if (client->cache_enabled) client->cache.erase(key);
      return KTUNE_E_REJECTED;
    }
    bool ok = asked > 0;
    const std::string k(kernel);
    if (!ok) {
      const std::string s(shape), d(dtype), dev(device);
      ok = client->from_database(k, s, d, dev, now, *entry) || client->from_spec(k, *entry);
    }
    if (!ok) {
      if (client->cache_enabled) client->cache.erase(key);
      client->error += "; no winner in the database and no [default] for kernel '" + k + "'";
      return KTUNE_E_NO_ANSWER;
    }
    entry->expires = now + client->cache_ttl;
    entry->fill(out, entry->source);
    if (client->cache_enabled) client->remember(entry, kernel, shape, dtype, device);
    return KTUNE_OK;
  } catch (const std::bad_alloc&) {
    return KTUNE_E_NO_MEMORY;
  }
}

ktune_status ktune_set_table(ktune_client* client, const char* path) {
  if (!client) return KTUNE_E_INVALID_ARGUMENT;
  try {
    client->table.set_path(path ? std::string(path)
                                : ktune::table::table_path_for_socket(client->socket_path));
    client->table_last_epoch = 0;
    return KTUNE_OK;
  } catch (const std::bad_alloc&) {
    return KTUNE_E_NO_MEMORY;
  }
}

void ktune_clear_cache(ktune_client* client) {
  if (!client) return;
  client->last_entry = nullptr;
  client->cache.clear();
}

void ktune_close(ktune_client* client) { delete client; }

const char* ktune_status_string(ktune_status status) {
  switch (status) {
  case KTUNE_OK: return "ok";
  case KTUNE_E_INVALID_ARGUMENT: return "invalid argument";
  case KTUNE_E_REJECTED: return "rejected by ktuned";
  case KTUNE_E_NO_ANSWER: return "no answer (no daemon, no database winner, no [default])";
  case KTUNE_E_NO_MEMORY: return "out of memory";
  }
  return "unknown status";
}

const char* ktune_rung_string(ktune_rung rung) {
  switch (rung) {
  case KTUNE_RUNG_EXACT: return "exact";
  case KTUNE_RUNG_NEAREST: return "nearest";
  case KTUNE_RUNG_STALE: return "stale";
  case KTUNE_RUNG_DEFAULT: return "default";
  }
  return "unknown";
}

const char* ktune_source_string(ktune_source source) {
  switch (source) {
  case KTUNE_SOURCE_DAEMON: return "daemon";
  case KTUNE_SOURCE_CACHE: return "cache";
  case KTUNE_SOURCE_DATABASE: return "database";
  case KTUNE_SOURCE_SPEC: return "spec";
  case KTUNE_SOURCE_MAP: return "map";
  }
  return "unknown";
}

const char* ktune_last_error(const ktune_client* client) {
  return client ? client->error.c_str() : "";
}

} // extern "C"
