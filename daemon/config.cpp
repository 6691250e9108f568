#include "daemon/config.hpp"

#include "core/file_io.hpp"

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>

#ifndef KTUNE_DATA_DIR_FROM_BIN
#error "KTUNE_DATA_DIR_FROM_BIN must be defined by the build"
#endif
#ifndef KTUNE_VERSION
#error "KTUNE_VERSION must be defined by the build"
#endif

namespace fs = std::filesystem;

namespace ktune::daemon {

namespace {

constexpr const char* k_worker_name = "ktune-worker";

std::string absolute_path(const std::string& path, const std::string& base_dir) {
  fs::path p(path);
  if (p.is_relative()) p = fs::path(base_dir) / p;
  return p.lexically_normal().string();
}

std::string current_dir() {
  std::error_code ec;
  auto cwd = fs::current_path(ec);
  return ec ? std::string("/") : cwd.string();
}

std::string describe(const toml::node& node) {
  switch (node.type()) {
  case toml::node_type::table: return "a table";
  case toml::node_type::array: return "an array";
  case toml::node_type::string: return "a string";
  case toml::node_type::integer: return "an integer";
  case toml::node_type::floating_point: return "a number";
  case toml::node_type::boolean: return "a boolean";
  case toml::node_type::date: return "a date";
  case toml::node_type::time: return "a time";
  case toml::node_type::date_time: return "a date-time";
  case toml::node_type::none: break;
  }
  return "nothing";
}

// Reads typed values out of one file, naming the file and key in every error.
class FileReader {
public:
  FileReader(const std::string& label, const std::string& base_dir)
      : m_label(label), m_base_dir(base_dir) {}

  [[nodiscard]] Error error(const std::string& key, const std::string& message) const {
    return make_error(ErrorCode::config_error, m_label + ": " + key + ": " + message);
  }

  [[nodiscard]] Result<std::string> path(const toml::node& node, const std::string& key) const {
    const auto* s = node.as_string();
    if (s == nullptr) return error(key, "expected a path string, found " + describe(node));
    if (s->get().empty()) return error(key, "expected a path, found an empty string");
    return absolute_path(s->get(), m_base_dir);
  }

  [[nodiscard]] Result<std::vector<std::string>> paths(const toml::node& node,
                                                       const std::string& key) const {
    const auto* array = node.as_array();
    if (array == nullptr) return error(key, "expected an array of paths, found " + describe(node));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < array->size(); ++i) {
      auto p = path(*array->get(i), key + "[" + std::to_string(i) + "]");
      if (!p) return p.error();
      out.push_back(std::move(*p));
    }
    return out;
  }

  [[nodiscard]] Result<std::int64_t> integer(const toml::node& node, const std::string& key,
                                             std::int64_t min, std::int64_t max) const {
    const auto* i = node.as_integer();
    if (i == nullptr) return error(key, "expected an integer, found " + describe(node));
    const std::int64_t v = i->get();
    if (v < min || v > max) {
      return error(key, "expected an integer in [" + std::to_string(min) + ", " +
                            std::to_string(max) + "], found " + std::to_string(v));
    }
    return v;
  }

  [[nodiscard]] Result<double> number(const toml::node& node, const std::string& key,
                                      double min) const {
    double v = 0;
    if (const auto* f = node.as_floating_point()) v = f->get();
    else if (const auto* i = node.as_integer()) v = static_cast<double>(i->get());
    else return error(key, "expected a number, found " + describe(node));
    if (!(v >= min) || v > 1e12) {
      std::ostringstream msg;
      msg << "expected a number >= " << min << ", found " << v;
      return error(key, msg.str());
    }
    return v;
  }

  [[nodiscard]] Result<std::vector<std::int64_t>> ids(const toml::node& node,
                                                      const std::string& key) const {
    const auto* array = node.as_array();
    if (array == nullptr) return error(key, "expected an array of ids, found " + describe(node));
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < array->size(); ++i) {
      auto id = integer(*array->get(i), key + "[" + std::to_string(i) + "]", 0, 4294967294LL);
      if (!id) return id.error();
      out.push_back(*id);
    }
    return out;
  }

  [[nodiscard]] Result<bool> boolean(const toml::node& node, const std::string& key) const {
    const auto* b = node.as_boolean();
    if (b == nullptr) return error(key, "expected true or false, found " + describe(node));
    return b->get();
  }

private:
  std::string m_label;
  std::string m_base_dir;
};

// Assigns `result` to `target` or returns its error from the enclosing function.
#define KTUNE_CONFIG_SET(target, expression)   \
  do {                                         \
    auto result_ = (expression);               \
    if (!result_) return result_.error();      \
    target = std::move(*result_);              \
  } while (false)

Result<void> apply_daemon_table(const toml::table& table, const FileReader& reader,
                                DaemonConfig& config) {
  for (const auto& [key_node, node] : table) {
    const std::string key(key_node.str());
    const std::string name = "[daemon]." + key;
    if (key == "socket") {
      KTUNE_CONFIG_SET(config.socket, reader.path(node, name));
    } else if (key == "db") {
      KTUNE_CONFIG_SET(config.db, reader.path(node, name));
    } else if (key == "cache_dir") {
      KTUNE_CONFIG_SET(config.cache_dir, reader.path(node, name));
    } else if (key == "kernel_dirs") {
      KTUNE_CONFIG_SET(config.kernel_dirs, reader.paths(node, name));
    } else if (key == "table_dirs") {
      KTUNE_CONFIG_SET(config.table_dirs, reader.paths(node, name));
    } else if (key == "table_policy") {
      const auto* text = node.as_string();
      const auto policy = text ? tableio::parse_policy(text->get()) : std::nullopt;
      if (!policy) {
        return reader.error(name, "expected \"faster\", \"newer\" or \"keep\", found " +
                                      (text ? "\"" + text->get() + "\"" : describe(node)));
      }
      config.table_policy = *policy;
    } else if (key == "compile_workers") {
      KTUNE_CONFIG_SET(config.compile_workers, reader.integer(node, name, 0, 1024));
    } else if (key == "max_message_bytes") {
      KTUNE_CONFIG_SET(config.max_message_bytes, reader.integer(node, name, 1024, 1 << 30));
    } else if (key == "idle_s") {
      KTUNE_CONFIG_SET(config.idle_s, reader.number(node, name, 0.0));
    } else if (key == "worker_idle_s") {
      KTUNE_CONFIG_SET(config.worker_idle_s, reader.number(node, name, 0.0));
    } else if (key == "stop_grace_s") {
      KTUNE_CONFIG_SET(config.stop_grace_s, reader.number(node, name, 0.0));
    } else if (key == "compile_ahead") {
      KTUNE_CONFIG_SET(config.compile_ahead, reader.integer(node, name, 0, 1 << 20));
    } else if (key == "serial") {
      KTUNE_CONFIG_SET(config.serial, reader.boolean(node, name));
    } else if (key == "search_batch") {
      KTUNE_CONFIG_SET(config.search_batch, reader.integer(node, name, 1, 1 << 20));
    } else if (key == "lock_dir") {
      KTUNE_CONFIG_SET(config.lock_dir, reader.path(node, name));
    } else if (key == "log_max_mb") {
      KTUNE_CONFIG_SET(config.log_max_mb, reader.number(node, name, 0.0));
    } else if (key == "log_keep") {
      KTUNE_CONFIG_SET(config.log_keep, reader.integer(node, name, 0, 100));
    } else if (key == "canary_interval_s") {
      KTUNE_CONFIG_SET(config.canary_interval_s, reader.number(node, name, 0.0));
    } else if (key == "metrics") {
      // A path (it has a '/') is resolved like every path; host:port is checked when it binds.
      const auto* text = node.as_string();
      if (text == nullptr) {
        return reader.error(name, "expected a string (\"127.0.0.1:9464\" or a socket path), "
                                  "found " + describe(node));
      }
      if (text->get().find('/') != std::string::npos) {
        KTUNE_CONFIG_SET(config.metrics, reader.path(node, name));
      } else {
        config.metrics = text->get();
      }
    } else {
      return reader.error(name, "unknown key (expected socket, db, cache_dir, kernel_dirs, "
                                "table_dirs, table_policy, compile_workers, compile_ahead, "
                                "search_batch, serial, max_message_bytes, idle_s, worker_idle_s, "
                                "stop_grace_s, log_max_mb, log_keep, lock_dir, metrics or "
                                "canary_interval_s)");
    }
  }
  return {};
}

Result<void> apply_limits_table(const toml::table& table, const FileReader& reader,
                                DaemonConfig& config) {
  for (const auto& [key_node, node] : table) {
    const std::string key(key_node.str());
    const std::string name = "[limits]." + key;
    if (key == "compile_timeout_s") {
      KTUNE_CONFIG_SET(config.compile_timeout_s, reader.number(node, name, 0.001));
    } else if (key == "bench_timeout_s") {
      KTUNE_CONFIG_SET(config.bench_timeout_s, reader.number(node, name, 0.0));
    } else if (key == "bench_timeout_min_s") {
      KTUNE_CONFIG_SET(config.bench_timeout_min_s, reader.number(node, name, 0.001));
    } else if (key == "bench_timeout_max_s") {
      KTUNE_CONFIG_SET(config.bench_timeout_max_s, reader.number(node, name, 0.001));
    } else if (key == "worker_memory_mb") {
      KTUNE_CONFIG_SET(config.worker_memory_mb, reader.integer(node, name, 0, 1 << 30));
    } else if (key == "compile_memory_mb") {
      KTUNE_CONFIG_SET(config.compile_memory_mb, reader.integer(node, name, 0, 1 << 30));
    } else if (key == "max_connections") {
      KTUNE_CONFIG_SET(config.max_connections, reader.integer(node, name, 1, 1 << 20));
      config.max_connections_set = true;
    } else if (key == "message_timeout_s") {
      KTUNE_CONFIG_SET(config.message_timeout_s, reader.number(node, name, 0.0));
    } else if (key == "connection_idle_s") {
      KTUNE_CONFIG_SET(config.connection_idle_s, reader.number(node, name, 0.0));
    } else if (key == "max_queued_jobs_per_client") {
      KTUNE_CONFIG_SET(config.max_queued_jobs_per_client, reader.integer(node, name, 1, 1 << 30));
    } else {
      return reader.error(name, "unknown key (expected compile_timeout_s, bench_timeout_s, "
                                "bench_timeout_min_s, bench_timeout_max_s, worker_memory_mb, compile_memory_mb, "
                                "max_connections, message_timeout_s, connection_idle_s or "
                                "max_queued_jobs_per_client)");
    }
  }
  return {};
}

Result<void> apply_access_table(const toml::table& table, const FileReader& reader,
                                DaemonConfig& config) {
  for (const auto& [key_node, node] : table) {
    const std::string key(key_node.str());
    const std::string name = "[access]." + key;
    if (key == "allow_uids") {
      KTUNE_CONFIG_SET(config.allow_uids, reader.ids(node, name));
    } else if (key == "allow_gids") {
      KTUNE_CONFIG_SET(config.allow_gids, reader.ids(node, name));
    } else if (key == "allow_root") {
      KTUNE_CONFIG_SET(config.allow_root, reader.boolean(node, name));
    } else {
      return reader.error(name, "unknown key (expected allow_uids, allow_gids or allow_root)");
    }
  }
  return {};
}

Result<void> apply_measure_table(const toml::table& table, const FileReader& reader,
                                 MeasureSettings& measure) {
  for (const auto& [key_node, node] : table) {
    const std::string key(key_node.str());
    const std::string name = "[measure]." + key;
    if (key == "min_samples") {
      KTUNE_CONFIG_SET(measure.min_samples, reader.integer(node, name, 1, 1'000'000));
    } else if (key == "max_samples") {
      KTUNE_CONFIG_SET(measure.max_samples, reader.integer(node, name, 1, 100'000'000));
    } else if (key == "target_rsd") {
      KTUNE_CONFIG_SET(measure.target_rsd, reader.number(node, name, 0.0));
    } else if (key == "target_error") {
      KTUNE_CONFIG_SET(measure.target_error, reader.number(node, name, 0.0));
    } else if (key == "min_time_s") {
      KTUNE_CONFIG_SET(measure.min_time_s, reader.number(node, name, 0.0));
    } else if (key == "max_time_s") {
      KTUNE_CONFIG_SET(measure.max_time_s, reader.number(node, name, 0.0));
    } else if (key == "warmup_ms") {
      KTUNE_CONFIG_SET(measure.warmup_ms, reader.number(node, name, 0.0));
    } else if (key == "flush_cache") {
      KTUNE_CONFIG_SET(measure.flush_cache, reader.boolean(node, name));
    } else if (key == "seed") {
      KTUNE_CONFIG_SET(measure.seed,
                       reader.integer(node, name, 0, std::numeric_limits<std::int64_t>::max()));
    } else if (key == "prune_factor") {
      KTUNE_CONFIG_SET(measure.prune_factor, reader.number(node, name, 0.0));
    } else if (key == "race_margin") {
      KTUNE_CONFIG_SET(measure.race_margin, reader.number(node, name, 0.0));
    } else if (key == "prune_after") {
      KTUNE_CONFIG_SET(measure.prune_after, reader.integer(node, name, 1, 1'000'000));
    } else if (key == "finalists") {
      KTUNE_CONFIG_SET(measure.finalists, reader.integer(node, name, 0, 1'000));
    } else if (key == "final_margin") {
      KTUNE_CONFIG_SET(measure.final_margin, reader.number(node, name, 0.0));
    } else if (key == "final_rounds") {
      KTUNE_CONFIG_SET(measure.final_rounds, reader.integer(node, name, 1, 1'000));
    } else if (key == "tie_margin") {
      KTUNE_CONFIG_SET(measure.tie_margin, reader.number(node, name, 0.0));
    } else {
      return reader.error(name, "unknown key (expected min_samples, max_samples, target_rsd, "
                                "target_error, min_time_s, max_time_s, warmup_ms, flush_cache, seed, "
                                "prune_factor, prune_after, race_margin, finalists, final_margin, "
                                "final_rounds or "
                                "tie_margin)");
    }
  }
  return {};
}

#undef KTUNE_CONFIG_SET

Result<std::string> read_config_text(const std::string& path) {
  auto text = ktune::read_file(path);
  if (!text) return make_error(ErrorCode::config_error, "config file: " + text.error().message);
  return text;
}

// Appends `dir` unless the list already names the same directory (a symbolic link to it counts).
void add_kernel_dir(std::vector<std::string>& dirs, const std::string& dir) {
  std::error_code ec;
  const auto canonical = fs::weakly_canonical(dir, ec);
  for (const auto& existing : dirs) {
    std::error_code ec2;
    if (existing == dir || (!ec && fs::weakly_canonical(existing, ec2) == canonical && !ec2)) return;
  }
  dirs.push_back(dir);
}

int online_cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(std::min<long>(n, INT_MAX)) : 1;
}

Result<void> check_consistency(const DaemonConfig& config) {
  const std::string where = config.config_path.empty() ? "settings" : config.config_path;
  if (config.measure.max_samples < config.measure.min_samples) {
    return make_error(ErrorCode::config_error,
                      where + ": [measure].max_samples (" +
                          std::to_string(config.measure.max_samples) +
                          ") must be at least min_samples (" +
                          std::to_string(config.measure.min_samples) + ")");
  }
  if (config.measure.max_time_s <= 0 || config.measure.max_time_s < config.measure.min_time_s) {
    std::ostringstream msg;
    msg << where << ": [measure].max_time_s (" << config.measure.max_time_s
        << ") must be positive and at least min_time_s (" << config.measure.min_time_s << ")";
    return make_error(ErrorCode::config_error, msg.str());
  }
  if (config.bench_timeout_max_s < config.bench_timeout_min_s) {
    std::ostringstream msg;
    msg << where << ": [limits].bench_timeout_max_s (" << config.bench_timeout_max_s
        << ") must be at least bench_timeout_min_s (" << config.bench_timeout_min_s << ")";
    return make_error(ErrorCode::config_error, msg.str());
  }
  if (config.kernel_dirs.empty()) {
    return make_error(ErrorCode::config_error, where + ": [daemon].kernel_dirs is empty; ktuned needs at "
                                              "least one kernel directory");
  }
  return {};
}

} // namespace

std::variant<CommandLine, int> parse_command_line(int argc, char** argv) {
  CommandLine cl;
  CLI::App app{"ktuned: the ktune autotuning daemon (docs/protocol.md)", "ktuned"};
  app.set_version_flag("--version", KTUNE_VERSION);
  std::string log_level;
  app.add_option("--config", cl.config,
                 "TOML settings file (default: <prefix>/share/ktune/ktuned.toml when it exists, "
                 "<prefix> being the directory above ktuned's bin/; without a file ktuned runs "
                 "on its built-in defaults)");
  app.add_option("--socket", cl.socket, "Unix socket to listen on");
  app.add_option("--db", cl.db, "SQLite database");
  app.add_option("--cache-dir", cl.cache_dir, "compile cache directory");
  app.add_option("--kernel-dir", cl.kernel_dirs,
                 "kernel family directory added to [daemon].kernel_dirs (the shipped families by "
                 "default); repeat for several")
      ->take_all();
  app.add_option("--only-kernel-dir", cl.only_kernel_dirs,
                 "kernel family directory that replaces [daemon].kernel_dirs; repeat for several")
      ->take_all();
  app.add_option("--compile-workers", cl.compile_workers, "compile worker processes (0 = cores - 1)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--worker", cl.worker, "the ktune-worker executable (default: next to ktuned)");
  app.add_option("--ready-fd", cl.ready_fd,
                 "after listening, write 'ready <pid>\\n' to this descriptor and close it")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  app.add_option("--idle-s", cl.idle_s,
                 "exit after this many seconds without clients or jobs (0 = never; overrides "
                 "[daemon].idle_s)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--foreground", cl.foreground, "stay in the foreground (always the case)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!log_level.empty()) cl.log_level = log::parse_level(log_level);
  return cl;
}

Result<void> apply_config_text(std::string_view toml_text, const std::string& label,
                               const std::string& base_dir, DaemonConfig& config) {
  toml::table root;
  try {
    root = toml::parse(toml_text, label);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << label << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    return make_error(ErrorCode::config_error, msg.str());
  }
  const FileReader reader(label, base_dir);
  for (const auto& [key_node, node] : root) {
    const std::string key(key_node.str());
    const auto* table = node.as_table();
    if (key == "daemon" && table != nullptr) {
      if (auto r = apply_daemon_table(*table, reader, config); !r) return r;
    } else if (key == "measure" && table != nullptr) {
      if (auto r = apply_measure_table(*table, reader, config.measure); !r) return r;
    } else if (key == "limits" && table != nullptr) {
      if (auto r = apply_limits_table(*table, reader, config); !r) return r;
    } else if (key == "access" && table != nullptr) {
      if (auto r = apply_access_table(*table, reader, config); !r) return r;
    } else if (key == "daemon" || key == "measure" || key == "limits" || key == "access") {
      return reader.error("[" + key + "]", "expected a table, found " + describe(node));
    } else {
      return reader.error(key, "unknown key (expected the tables [daemon], [limits], [access] "
                               "and [measure])");
    }
  }
  return {};
}

Result<DaemonConfig> resolve_config(const CommandLine& command_line, const PathEnv& env,
                                    const std::string& exe_dir) {
  DaemonConfig config;
  config.paths = resolve_paths(env);
  config.socket = config.paths.socket;
  config.db = config.paths.db;
  config.cache_dir = config.paths.cache_dir;
  config.kernel_dirs = {shipped_kernels_dir(exe_dir)};
  config.lock_dir = ::access("/run/lock", W_OK) == 0 ? "/run/lock"
                    : !env.xdg_runtime_dir.empty()     ? env.xdg_runtime_dir
                                                       : "/tmp";

  const std::string cwd = current_dir();
  std::string config_path;
  if (command_line.config) {
    config_path = absolute_path(*command_line.config, cwd);
  } else if (std::error_code ec; fs::exists(default_config_path(exe_dir), ec)) {
    config_path = default_config_path(exe_dir);
  }
  if (!config_path.empty()) {
    auto text = read_config_text(config_path);
    if (!text) return text.error();
    config.config_path = config_path;
    const std::string base_dir = fs::path(config_path).parent_path().string();
    if (auto r = apply_config_text(*text, config_path, base_dir, config); !r) return r.error();
  }

  if (command_line.socket) config.socket = absolute_path(*command_line.socket, cwd);
  if (command_line.db) config.db = absolute_path(*command_line.db, cwd);
  if (command_line.cache_dir) config.cache_dir = absolute_path(*command_line.cache_dir, cwd);
  if (!command_line.only_kernel_dirs.empty()) {
    config.kernel_dirs.clear();
    for (const auto& dir : command_line.only_kernel_dirs) add_kernel_dir(config.kernel_dirs, absolute_path(dir, cwd));
  }
  for (const auto& dir : command_line.kernel_dirs) add_kernel_dir(config.kernel_dirs, absolute_path(dir, cwd));
  if (command_line.compile_workers) config.compile_workers = *command_line.compile_workers;
  if (command_line.log_level) config.log_level = *command_line.log_level;
  if (command_line.idle_s) config.idle_s = *command_line.idle_s;
  config.ready_fd = command_line.ready_fd;
  config.worker_path = command_line.worker ? absolute_path(*command_line.worker, cwd)
                                           : (fs::path(exe_dir) / k_worker_name).string();

  if (config.compile_workers == 0) config.compile_workers = std::max(1, online_cores() - 1);
  if (auto r = check_consistency(config); !r) return r.error();
  return config;
}

std::string executable_dir() {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string data_dir(const std::string& exe_dir) {
  return (fs::path(exe_dir) / KTUNE_DATA_DIR_FROM_BIN).lexically_normal().string();
}

std::string shipped_kernels_dir(const std::string& exe_dir) {
  return (fs::path(data_dir(exe_dir)) / "kernels").string();
}

std::string default_config_path(const std::string& exe_dir) {
  return (fs::path(data_dir(exe_dir)) / "ktuned.toml").string();
}

} // namespace ktune::daemon
