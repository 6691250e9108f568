#pragma once
// Header-only C++ wrapper of the C API (ktune/client.h): ktune::Client owns a handle (move-only,
// closed by the destructor); lookup() returns the answer as owned values or the error text.
// One Client per thread, like the handle it wraps.
#include "ktune/client.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ktune {

struct LookupAnswer {
  ktune_rung rung = KTUNE_RUNG_DEFAULT;
  bool exact = false;
  ktune_source source = KTUNE_SOURCE_DAEMON;
  std::string config_json;
  std::vector<std::pair<std::string, std::int64_t>> params;
  std::string from_shape;
  std::string reason;
  double median_ms = 0;
  std::int64_t job = 0;
  std::int64_t tune_job = 0;

  // The value of one param, or nothing when the config has no such param.
  [[nodiscard]] std::optional<std::int64_t> param(const std::string& name) const {
    for (const auto& [n, v] : params) {
      if (n == name) return v;
    }
    return std::nullopt;
  }
};

struct LookupError {
  ktune_status status = KTUNE_OK;
  std::string message;
};

class Client {
public:
  // Options as for ktune_connect; the default-constructed options are the C defaults.
  struct Options {
    std::string socket_path;   // empty: ktuned's default
    std::string db_path;       // empty: ktuned's default
    std::string kernel_dirs;   // ':'-separated; empty: $KTUNE_KERNEL_DIRS; then the shipped ones
    int timeout_us = 5000;
    int connect_timeout_us = 100000;  // extra for the first request on a new connection
    int cache_ttl_ms = 1000;   // < 0: no cache
    bool tune_on_miss = false;
    bool use_table = true;     // false: no winner table (ktune_set_table(h, ""))
    std::string table_path = {};  // empty: the table next to the socket
  };

  Client() : Client(Options{}) {}
  explicit Client(const Options& options) {
    ktune_options o;
    ktune_options_init(&o);
    o.socket_path = options.socket_path.empty() ? nullptr : options.socket_path.c_str();
    o.db_path = options.db_path.empty() ? nullptr : options.db_path.c_str();
    o.kernel_dirs = options.kernel_dirs.empty() ? nullptr : options.kernel_dirs.c_str();
    o.timeout_us = options.timeout_us;
    o.connect_timeout_us = options.connect_timeout_us;
    o.cache_ttl_ms = options.cache_ttl_ms;
    o.tune_on_miss = options.tune_on_miss ? 1 : 0;
    m_status = ktune_connect(&o, &m_handle);
    if (m_handle && (!options.use_table || !options.table_path.empty())) {
      m_status = ktune_set_table(m_handle, options.use_table ? options.table_path.c_str() : "");
    }
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&& other) noexcept : m_handle(std::exchange(other.m_handle, nullptr)),
                                    m_status(other.m_status) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      ktune_close(m_handle);
      m_handle = std::exchange(other.m_handle, nullptr);
      m_status = other.m_status;
    }
    return *this;
  }
  ~Client() { ktune_close(m_handle); }

  [[nodiscard]] bool valid() const { return m_handle != nullptr; }
  [[nodiscard]] ktune_client* handle() const { return m_handle; }

  // The raw answer, valid until the next call (no copies: the cheapest form).
  [[nodiscard]] ktune_status lookup_raw(const char* kernel, const char* shape, const char* dtype,
                                        const char* device, ktune_answer& out) {
    if (!m_handle) return m_status == KTUNE_OK ? KTUNE_E_INVALID_ARGUMENT : m_status;
    return ktune_lookup(m_handle, kernel, shape, dtype, device, &out);
  }

  // Fills `answer` and returns true, or fills `error` and returns false.
  bool lookup(const std::string& kernel, const std::string& shape, LookupAnswer& answer,
              LookupError* error = nullptr, const std::string& dtype = "f32",
              const std::string& device = "cpu") {
    ktune_answer raw{};
    const ktune_status status =
        lookup_raw(kernel.c_str(), shape.c_str(), dtype.c_str(), device.c_str(), raw);
    if (status != KTUNE_OK) {
      if (error) {
        error->status = status;
        error->message = std::string(ktune_status_string(status)) +
                         (m_handle ? std::string(": ") + ktune_last_error(m_handle) : "");
      }
      return false;
    }
    answer.rung = raw.rung;
    answer.exact = raw.exact != 0;
    answer.source = raw.source;
    answer.config_json = raw.config_json;
    answer.params.clear();
    for (std::size_t i = 0; i < raw.param_count; ++i) {
      answer.params.emplace_back(raw.params[i].name, raw.params[i].value);
    }
    answer.from_shape = raw.from_shape;
    answer.reason = raw.reason;
    answer.median_ms = raw.median_ms;
    answer.job = raw.job;
    answer.tune_job = raw.tune_job;
    return true;
  }

  void clear_cache() { ktune_clear_cache(m_handle); }

private:
  ktune_client* m_handle = nullptr;
  ktune_status m_status = KTUNE_OK;
};

} // namespace ktune
