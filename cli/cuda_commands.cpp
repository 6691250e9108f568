#include "cli/cuda_commands.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/table.hpp"
#include "client/client.hpp"
#include "core/paths.hpp"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using std::chrono::milliseconds;

constexpr milliseconds k_devices_timeout{60'000};

std::string text_of(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "-";
  return j.dump();
}

std::string int_or_dash(const json& j) {
  return j.is_number_integer() && j.get<long long>() >= 0 ? std::to_string(j.get<long long>()) : "-";
}

std::string config_text(const json& config) {
  std::string out;
  if (!config.is_object()) return text_of(config);
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!out.empty()) out += ' ';
    out += it.key() + "=" + text_of(it.value());
  }
  return out.empty() ? "-" : out;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// The `devices` table, then why there is no CUDA device where there is none.
void print_devices(std::ostream& out, const json& result) {
  Table table({{"DEVICE"}, {"MODEL"}, {"ARCH"}, {"SMS", Align::right}, {"MEMORY", Align::right},
               {"L2", Align::right}, {"DRIVER"}, {"NVRTC"}, {"FINGERPRINT"}});
  for (const auto& d : result.value("devices", json::array())) {
    const json details = d.value("details", json::object());
    const bool cuda = details.value("kind", std::string()) == "cuda";
    table.add_row({text_of(d.value("name", json())),
                   text_of(details.value(cuda ? "name" : "model", json())),
                   cuda ? text_of(details.value("arch", json())) : "-",
                   cuda ? text_of(details.value("sm_count", json())) : text_of(details.value("cores", json())),
                   cuda ? gib(details.value("memory_bytes", 0.0)) : "-",
                   cuda ? std::to_string(details.value("l2_bytes", 0LL) / 1024) + " KiB" : "-",
                   cuda ? text_of(details.value("driver_version", json())) : "-",
                   cuda ? text_of(details.value("nvrtc_version", json())) : "-",
                   text_of(d.value("fingerprint", json())).substr(0, 16)});
  }
  table.print(out);
  const json cuda = result.value("cuda", json::object());
  if (!cuda.value("available", false)) {
    out << "\nno CUDA device: " << cuda.value("reason", std::string("unknown reason")) << '\n';
  }
}

} // namespace

void add_cuda_commands(CLI::App& app, CudaCommands& commands) {
  commands.devices = app.add_subcommand(
      "devices", "List the devices ktuned can tune on: the CPU and the CUDA devices its workers see");
  commands.devices->footer("\nA CUDA device is missing when the workers cannot load libcuda.so.1, "
                           "load a stub driver,\nor see no device; the reason is printed."
                           "\n\nExample:\n  ktune devices");

  auto& o = commands.compile_check_options;
  commands.compile_check = app.add_subcommand(
      "compile-check", "Compile every admitted config of a CUDA family for some architectures");
  commands.compile_check->add_option("kernel", o.kernel, "CUDA kernel family")->required();
  commands.compile_check
      ->add_option("--arch", o.archs, "target architectures, comma separated (sm_80,sm_90)")
      ->delimiter(',')
      ->required();
  commands.compile_check->add_option("--shape", o.shape,
                                     "shape whose admitted configs are compiled (default: 4096 "
                                     "for every dim)");
  commands.compile_check->add_option("--dtype", o.dtype, "dtype (default: the family's first)");
  commands.compile_check->add_flag("--errors-only", o.errors_only,
                                   "print only the rows that failed");
  commands.compile_check->footer(
      "\nNo GPU is needed: nvrtc compiles in ktuned's compile workers. Exit 1 when any admitted "
      "config\nfails to compile.\n\nExample:\n  ktune compile-check gemm --arch sm_80,sm_90");
}

std::optional<int> run_cuda_commands(const CudaCommands& commands, const GlobalOptions& global,
                                     Output& io) {
  if (commands.devices && commands.devices->parsed()) return list_devices(global, io);
  if (commands.compile_check && commands.compile_check->parsed()) {
    return compile_check(global, commands.compile_check_options, io);
  }
  return std::nullopt;
}

int list_devices(const GlobalOptions& global, Output& io) {
  return ask_daemon(global, json{{"op", "devices"}}, io, [&](const Json& result) {
    print_devices(io.out, result);
    return k_exit_ok;
  }, k_devices_timeout);
}

int print_compile_check(const json& result, bool errors_only, std::ostream& out) {
  Table table({{"CONFIG"}, {"ARCH"}, {"STATUS"}, {"REGS", Align::right}, {"SPILL", Align::right},
               {"MS", Align::right}, {"LOG"}});
  std::map<std::string, int> by_status;
  double total_ms = 0;
  for (const auto& row : result.value("rows", json::array())) {
    const std::string status = row.value("status", std::string("?"));
    ++by_status[status];
    const double ms = row.value("compile_ms", 0.0);
    total_ms += ms;
    if (errors_only && status == "ok") continue;
    char ms_text[32];
    std::snprintf(ms_text, sizeof ms_text, "%.0f", ms);
    table.add_row({config_text(row.value("config", json())), row.value("arch", std::string()),
                   status, int_or_dash(row.value("registers", json())),
                   int_or_dash(row.value("spills", json())),
                   row.value("cached", false) ? std::string("cached") : std::string(ms_text),
                   row.value("message", std::string())});
  }
  if (table.rows() > 0) table.print(out);
  const long long errors = result.value("errors", 0LL);
  std::ostringstream summary;
  summary << result.value("kernel", std::string()) << " at " << result.value("shape", std::string())
          << " (" << result.value("dtype", std::string()) << "): "
          << result.value("configs", 0LL) << " admitted configs x "
          << result.value("arch", json::array()).size() << " arch = "
          << result.value("compiled", 0LL) << " compiles, ";
  bool first = true;
  for (const auto& [status, n] : by_status) {
    summary << (first ? "" : ", ") << n << ' ' << status;
    first = false;
  }
  char total[48];
  std::snprintf(total, sizeof total, "; %.1f s of compile time", total_ms / 1000.0);
  out << (table.rows() > 0 ? "\n" : "") << summary.str() << total << '\n';
  return errors == 0 ? k_exit_ok : k_exit_error;
}

int compile_check(const GlobalOptions& global, const CompileCheckOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  json request{{"op", "compile_check"}, {"kernel", options.kernel}, {"arch", options.archs}};
  if (!options.shape.empty()) request["shape"] = options.shape;
  if (!options.dtype.empty()) request["dtype"] = options.dtype;
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return report(io, conn.error(), socket);
  // Progress on stderr: in place on a terminal, every tenth otherwise.
  std::int64_t last_tenth = -1;
  bool open_line = false;
  auto result = call(*conn, std::move(request), milliseconds(0), [&](const Json& event) {
    const Json data = event.value("data", Json::object());
    const std::int64_t done = data.value("done", std::int64_t{0});
    const std::int64_t total = std::max<std::int64_t>(1, data.value("total", std::int64_t{1}));
    const std::string line = "compile-check job " + std::to_string(data.value("job", 0LL)) +
                             ": " + std::to_string(done) + "/" + std::to_string(total) +
                             " compiled, " + std::to_string(data.value("errors", 0LL)) +
                             " error(s)";
    if (io.err_is_tty) {
      io.err << '\r' << line << std::flush;
      open_line = true;
    } else if (const std::int64_t tenth = done * 10 / total; tenth != last_tenth) {
      last_tenth = tenth;
      io.err << line << '\n';
    }
  });
  if (open_line) io.err << '\n';
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return result->value("errors", 0LL) == 0 ? k_exit_ok : k_exit_error;
  }
  const int code = print_compile_check(*result, options.errors_only, io.out);
  if (code != k_exit_ok) {
    io.err << "ktune: compile_error: " << result->value("errors", 0LL)
           << " admitted config(s) of " << options.kernel << " failed to compile\n";
  }
  return code;
}

} // namespace ktune::cli
