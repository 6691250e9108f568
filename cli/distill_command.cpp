#include "cli/distill_command.hpp"

#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"
#include "core/paths.hpp"
#include "core/safe_fs.hpp"
#include "db/store.hpp"
#include "tableio/distill_input.hpp"
#include "tableio/rule_formats.hpp"
#include "tableio/table.hpp"

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

namespace ktune::cli {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Rounds of measuring: a measured config may join a shape's fastest, which brings its cells at
// the other shapes into the pool; a few rounds settle it.
constexpr int k_measure_rounds = 3;

struct Built {
  tableio::DistillKey key;
  tableio::LoadedDistillInput loaded;
  tableio::Distilled distilled;
};

Result<Built> build(const std::string& db, const DistillCommandOptions& options,
                    const tableio::DistillOptions& settings) {
  auto store = Store::open(db, OpenMode::read_only);
  if (!store) return store.error();
  auto key = tableio::resolve_distill_key(*store, options.kernel, options.dtype, options.device);
  if (!key) return key.error();
  auto loaded = tableio::load_distill_input(*store, *key);
  if (!loaded) return loaded.error();
  auto distilled = tableio::distill(loaded->input, settings);
  if (!distilled) return distilled.error();
  return Built{std::move(*key), std::move(*loaded), std::move(*distilled)};
}

std::string text_of(const Json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

// The device name ktuned gives the fingerprint, and whether its family of the kernel has the
// source hash the results were measured with: else nothing can be measured for them.
Result<std::string> measurable_on(Connection& conn, const tableio::DistillKey& key) {
  auto devices = call(conn, json{{"op", "devices"}}, k_request_timeout);
  if (!devices) return devices.error();
  std::string name;
  for (const auto& d : devices->value("devices", Json::array())) {
    if (d.value("fingerprint", std::string()) == key.fingerprint) name = d.value("name", std::string());
  }
  if (name.empty()) {
    return make_error(ErrorCode::no_device, "the results of " + key.kernel + " were measured on device " +
                                       key.fingerprint.substr(0, 12) + " (" + key.device_name +
                                       "), which this ktuned does not have: nothing missing can be "
                                       "measured here (--no-measure distils from what is stored)");
  }
  auto kernels = call(conn, json{{"op", "kernels"}}, k_request_timeout);
  if (!kernels) return kernels.error();
  const std::string language = name == "cpu" ? "cpp" : "cuda";
  for (const auto& k : kernels->value("kernels", Json::array())) {
    if (k.value("name", std::string()) != key.kernel || k.value("language", std::string()) != language) continue;
    const std::string hash = k.value("source_hash", std::string());
    if (hash == key.source_hash) return name;
    return make_error(ErrorCode::source_changed, "kernel " + key.kernel + " changed since its shapes were tuned "
                                        "(source " + key.source_hash.substr(0, 12) + ", now " +
                                        hash.substr(0, 12) + "): tune its shapes again, or distil "
                                        "what is stored with --no-measure");
  }
  return make_error(ErrorCode::unknown_kernel, "ktuned has no " + language + " family named " + key.kernel);
}

// Measures the missing cells: one tune of exactly those configs per shape.
Result<void> measure(const GlobalOptions& global, const Built& built, Output& io) {
  const std::string socket = socket_path(global);
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return conn.error();
  auto device = measurable_on(*conn, built.key);
  if (!device) return device.error();
  std::map<std::size_t, std::vector<std::size_t>> by_shape;
  for (const auto& [s, c] : built.distilled.missing) by_shape[s].push_back(c);
  std::size_t done = 0;
  for (const auto& [s, configs] : by_shape) {
    const std::string& shape = built.loaded.input.shapes[s].text;
    json list = json::array();
    for (std::size_t c : configs) list.push_back(json::parse(built.loaded.config_text(c)));
    io.err << "measuring " << configs.size() << " config(s) at " << shape << " (shape "
           << ++done << " of " << by_shape.size() << ")\n";
    json request{{"op", "tune"},   {"kernel", built.key.kernel}, {"shape", shape},
                 {"dtype", built.key.dtype}, {"device", *device}, {"configs", list},
                 {"wait", true}};
    auto reply = call(*conn, std::move(request), milliseconds(0));
    if (!reply) return reply.error();
    const Json& job = reply->value("job", Json::object());
    if (job.value("state", std::string()) != "done") {
      return make_error(ErrorCode::job_failed, "the measuring job " + text_of(job.value("id", Json())) + " at " +
                                          shape + " ended " + job.value("state", std::string("?")) +
                                          ": " + job.value("error", std::string()));
    }
  }
  return {};
}

Result<std::string> store_rule(const std::string& db, const tableio::RuleDocument& doc) {
  const std::filesystem::path path(db);
  auto name = tableio::rule_file_name(doc.key);
  if (!name) return name.error();
  auto parent = SafeDir::open(path.parent_path().empty() ? "." : path.parent_path().string(), DirCreate::no);
  if (!parent) return parent.error();
  auto dir = parent->subdir(tableio::rules_dir_name(path.filename().string()), DirCreate::yes);
  if (!dir) return dir.error();
  if (auto written = dir->write_atomic(*name, tableio::write_rule_json(doc)); !written) return written.error();
  return dir->file_path(*name);
}

std::string fixed(double value, int digits = 3) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string summary_text(const tableio::MethodSummary& m) {
  const auto& r = m.regret;
  if (r.shapes == 0) return "-";
  std::string text = "geomean " + fixed(r.geomean) + "  p95 " + fixed(r.p95) + "  worst " +
                     fixed(r.worst) + "  (" + std::to_string(r.shapes) + " shapes";
  if (r.failures) text += ", " + std::to_string(r.failures) + " failed";
  if (r.unknown) text += ", " + std::to_string(r.unknown) + " not measured";
  if (r.no_choice) text += ", " + std::to_string(r.no_choice) + " with no admitted choice";
  if (m.substituted) text += ", " + std::to_string(m.substituted) + " second resort";
  return text + ")";
}

std::string config_line(const nlohmann::ordered_json& config) {
  std::string out;
  for (auto it = config.begin(); it != config.end(); ++it) {
    out += (out.empty() ? "" : " ") + it.key() + "=" + it.value().dump();
  }
  return out;
}

void print_text(const tableio::RuleDocument& doc, const Built& built, const std::string& stored,
                Output& io) {
  io.out << "rule for " << doc.key.kernel << ' ' << doc.key.dtype << " on " << doc.key.device_name
         << " (" << doc.key.fingerprint.substr(0, 12) << "), from " << doc.shapes.size()
         << " tuned shapes: " << doc.rule.configs.size() << " configs, " << doc.rule.leaves()
         << " leaves\n";
  for (std::size_t c = 0; c < doc.rule.configs.size(); ++c) {
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    for (std::size_t p = 0; p < doc.rule.params.size(); ++p) config[doc.rule.params[p]] = doc.rule.configs[c][p];
    io.out << "  [" << c << "] " << config_line(config) << '\n';
  }
  io.out << "regret (time / the shape's best):\n"
         << "  rule, leave one shape out  " << summary_text(doc.loso) << '\n'
         << "  nearest shape's winner     " << summary_text(doc.nearest) << '\n'
         << "  rule, in sample            " << summary_text(doc.in_sample) << '\n';
  if (doc.max_regret) {
    io.out << (doc.regret_met ? "max regret " : "max regret NOT reached: ") << fixed(*doc.max_regret)
           << " (in sample, worst)\n";
  }
  if (!built.distilled.missing.empty()) {
    io.out << built.distilled.missing.size()
           << " (shape, config) pairs are not measured; the figures leave them out:\n";
    std::size_t shown = 0;
    for (const auto& [s, c] : built.distilled.missing) {
      if (++shown > 10) {
        io.out << "  ...\n";
        break;
      }
      io.out << "  " << built.loaded.input.shapes[s].text << "  "
             << config_line(nlohmann::ordered_json::parse(built.loaded.config_text(c))) << '\n';
    }
  }
  if (!stored.empty()) io.out << "stored as " << stored << '\n';
}

} // namespace

void add_distill_command(CLI::App& app, DistillCommand& command) {
  DistillCommandOptions& o = command.options;
  command.command = app.add_subcommand(
      "distill", "A few configs and a rule from shape to config, with its measured regret");
  CLI::App* cmd = command.command;
  cmd->add_option("kernel", o.kernel, "kernel family, e.g. gemm")->required();
  cmd->add_option("--device", o.device, "cpu, cuda:N or a device fingerprint (prefix)")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "element type")->capture_default_str();
  cmd->add_option("--max-configs", o.max_configs, "the rule uses at most this many configs")->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-regret", o.max_regret,
                  "use the fewest configs (up to --max-configs) whose rule is at most this much "
                  "slower than each tuned shape's best (e.g. 1.05)")
      ->check(CLI::Range(1.0, 1e9));
  cmd->add_option("--pool", o.pool, "each shape's fastest configs the rule may choose from")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--no-measure", o.no_measure,
                "measure nothing: distil from what is stored, leaving out what is not");
  cmd->add_option("--format", o.format, "of -o: json, cpp-header or python")->capture_default_str()
      ->check(CLI::IsMember({"json", "cpp-header", "python"}));
  cmd->add_option("-o,--output", o.output, "write the rule to this file too");
  cmd->add_option("--db", o.db,
                  "the database to read (default: the instance's, as ktuned uses); the rule is "
                  "stored beside it");
  cmd->footer(
      "\nReads the store read-only. From the shapes of KERNEL tuned on the device (those with a\n"
      "winner), picks at most --max-configs configs and a decision tree over the shape dims that\n"
      "ranks them, and measures its regret by leave one shape out: for each tuned shape, the rule\n"
      "built without it, its choice's time over that shape's best (geomean, p95, worst), beside\n"
      "the nearest tuned shape's winner (the lookup's `nearest` rung). Configs it needs at a\n"
      "shape that were never measured there are measured first, by ktuned (a tune of exactly those\n"
      "configs). The rule is stored beside the database (<db>-rules/) and with -o written as\n"
      "JSON, a C++ header (constexpr rank()/choose()) or a Python module.\n"
      "docs/ARCHITECTURE.md § Distilled rules.\n\n"
      "Exit codes: 0 built; 1 an error, or --max-regret not reached; 2 usage.\n\n"
      "Examples:\n  ktune distill gemm --device cpu\n"
      "  ktune distill gemm --device cpu --max-configs 4 --format cpp-header -o gemm_rule.hpp");
}

std::optional<int> run_distill_command(const DistillCommand& command, const GlobalOptions& global,
                                       Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  return run_distill(global, command.options, io);
}

int run_distill(const GlobalOptions& global, const DistillCommandOptions& options, Output& io) {
  const std::string db =
      options.db.empty() ? resolve_paths(path_env_from_process()).db : options.db;
  if (!std::filesystem::exists(db)) {
    return report_error(io, ErrorCode::db_error, "no database at " + db + " (tune something first, or pass --db PATH)");
  }
  tableio::DistillOptions settings;
  settings.max_configs = options.max_configs;
  settings.max_regret = options.max_regret;
  settings.pool_per_shape = options.pool;

  auto built = build(db, options, settings);
  if (!built) return report_error(io, built.error().code, built.error().message);
  for (int round = 0; round < k_measure_rounds && !options.no_measure && !built->distilled.complete(); ++round) {
    if (auto measured = measure(global, *built, io); !measured) {
      return report(io, measured.error(), socket_path(global));
    }
    built = build(db, options, settings);
    if (!built) return report_error(io, built.error().code, built.error().message);
  }
  if (!options.no_measure && !built->distilled.complete()) {
    io.err << "ktune: " << built->distilled.missing.size()
           << " (shape, config) pairs are still not measured after " << k_measure_rounds
           << " rounds; the figures leave them out\n";
  }

  tableio::RuleDocument doc = tableio::make_rule_document(built->loaded, built->distilled, settings);
  doc.key = built->key;
  doc.made_at_ms = std::chrono::duration_cast<milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  doc.host = tableio::local_host_name();

  auto stored = store_rule(db, doc);
  if (!stored) {
    io.err << "ktune: the rule was not stored beside the database: " << stored.error().message << '\n';
  }
  if (!options.output.empty()) {
    Result<std::string> text = options.format == "cpp-header" ? tableio::write_rule_cpp_header(doc)
                               : options.format == "python"   ? tableio::write_rule_python(doc)
                                                              : Result<std::string>(tableio::write_rule_json(doc));
    if (!text) return report_error(io, text.error().code, text.error().message);
    if (auto written = write_file_atomic(options.output, *text); !written) {
      return report_error(io, written.error().code, written.error().message);
    }
  }
  if (global.json) {
    nlohmann::ordered_json out = tableio::rule_to_json(doc);
    out["stored"] = stored ? json(*stored) : json(nullptr);
    nlohmann::ordered_json missing = nlohmann::ordered_json::array();
    for (const auto& [s, c] : built->distilled.missing) {
      missing.push_back({{"shape", built->loaded.input.shapes[s].text},
                         {"config", nlohmann::ordered_json::parse(built->loaded.config_text(c))}});
    }
    out["missing"] = missing;
    print_json(io, out);
  } else {
    print_text(doc, *built, stored ? *stored : std::string(), io);
  }
  if (!stored) return k_exit_error;
  return doc.regret_met ? k_exit_ok : k_exit_error;
}

} // namespace ktune::cli
