#include "cli/lookup_commands.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "cli/table.hpp"
#include "core/protocol.hpp"

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;

json op(const char* name) { return json{{"op", name}}; }

// The `kernels` text of a kernels reply: the table, then what did not load.
void print_kernels(std::ostream& out, const json& result) {
  const json& kernels = field(result, "kernels");
  if (!kernels.is_array() || kernels.empty()) {
    out << "no kernels found\n";
  } else {
    Table table({{"NAME"}, {"LANGUAGE"}, {"SHAPE"}, {"DTYPES"}, {"PARAMS"}, {"SPACE", Align::right}});
    for (const auto& k : kernels) {
      std::string params;
      const json& p = field(k, "params");
      if (p.is_object()) {
        // In the spec's order ("param_names"), else as the object lists them.
        json names = field(k, "param_names");
        if (!names.is_array()) {
          names = json::array();
          for (auto it = p.begin(); it != p.end(); ++it) names.push_back(it.key());
        }
        for (const auto& name : names) {
          if (!name.is_string() || !p.contains(name.get<std::string>())) continue;
          const json& values = p.at(name.get<std::string>());
          if (!params.empty()) params += ',';
          params += name.get<std::string>() + "(" +
                    std::to_string(values.is_array() ? values.size() : 1) + ")";
        }
      }
      table.add_row({as_text(field(k, "name")), as_text(field(k, "language")),
                     as_text(field(k, "shape")), as_text(field(k, "dtypes")),
                     params.empty() ? "-" : params, as_text(field(k, "space_size"))});
    }
    table.print(out);
  }
  if (const json& cuda = field(result, "cuda_backend"); cuda.is_boolean() && !cuda.get<bool>())
    out << "\nCUDA backend: compiled out (ktune was built without a CUDA toolkit)\n";
  const json& missing = field(result, "missing_dirs");
  if (missing.is_array()) {
    for (const auto& dir : missing) {
      out << "\nwarning: kernel directory " << as_text(dir) << " does not exist\n";
    }
  }
  const json& broken = field(result, "broken");
  if (broken.is_array() && !broken.empty()) {
    out << "\nbroken kernel specs (not loaded):\n";
    for (const auto& b : broken)
      out << "  " << as_text(field(b, "path")) << ": " << as_text(field(b, "error")) << '\n';
  }
}

} // namespace

int list_kernels(const GlobalOptions& global, Output& io) {
  return ask_daemon(global, op("kernels"), io, [&](const json& result) {
    print_kernels(io.out, result);
    return k_exit_ok;
  });
}

int query(const GlobalOptions& global, const QueryOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  protocol::LookupRequest request;
  request.kernel = options.kernel;
  request.shape = options.shape;
  request.dtype = options.dtype;
  request.device = options.device;
  json body = request.to_json();
  body["op"] = "lookup";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);

  const json& r = *result;
  const json& exact_field = field(r, "exact");
  const bool exact = exact_field.is_boolean() ? exact_field.get<bool>()
                                              : as_text(field(r, "rung")) == "exact";
  if (global.json) {
    print_json(io, r);
    return exact ? k_exit_ok : k_exit_not_tuned;
  }
  const std::string config = format_config(field(r, "config"), " ");
  if (exact) {
    io.out << config << "  (median " << format_ms(as_double(field(r, "median_ms"))) << " ms, "
           << format_gflops(as_double(field(r, "gflops"))) << " GFLOP/s";
    if (!field(r, "job").is_null()) io.out << ", job " << as_text(field(r, "job"));
    io.out << ")\n";
    return k_exit_ok;
  }
  const std::string rung = as_text(field(r, "rung"));
  if (rung == "stale") {
    io.out << config << "  (stale: tuned on this hardware under another environment, "
           << as_text(field(r, "change")) << "; median then "
           << format_ms(as_double(field(r, "median_ms"))) << " ms";
    if (!field(r, "tune_job").is_null()) io.out << "; revalidation job " << as_text(field(r, "tune_job"));
    io.out << ")\n";
    return k_exit_not_tuned;
  }
  const json& reason = field(r, "reason");
  io.out << "no tuned winner for " << options.kernel << ' ' << options.shape << ", "
         << options.dtype << ", " << options.device << " ("
         << (reason.is_string() ? reason.get<std::string>() : std::string("not_tuned")) << "); "
         << (rung == "default" ? std::string("the kernel's default") : "fallback (" + rung + ")")
         << ": " << config << '\n';
  return k_exit_not_tuned;
}

void add_revalidate_command(CLI::App& app, RevalidateCommand& command) {
  command.revalidate = app.add_subcommand(
      "revalidate", "Measure stale winners again under this machine's current environment");
  command.revalidate->add_option("--kernel", command.kernel, "only this kernel family");
  command.revalidate->add_option("--device", command.device,
                                 "only this device: cpu or cuda:N (default: every local device)");
  command.revalidate->footer(
      "A winner is stale when its key was tuned on this hardware under another environment (a\n"
      "host compiler, CUDA driver or toolkit changed since) and not under this one: lookups\n"
      "answer it with rung `stale` and what changed. A stale lookup revalidates its own key;\n"
      "this command queues the revalidation of every stale key at once, at the lowest\n"
      "priority: the old winner, the old key's configs within 5% of it and the default are\n"
      "measured again (a full search follows only where the old winner moved more than 5%).\n"
      "Lists the keys and their jobs; `ktune jobs` follows them.\n\n"
      "Examples:\n  ktune revalidate\n  ktune revalidate --kernel gemm --device cpu\n"
      "  ktune --json revalidate" + k_exit_codes_help);
}

std::optional<int> run_revalidate_command(const RevalidateCommand& command,
                                          const GlobalOptions& global, Output& io) {
  if (!command.revalidate->parsed()) return std::nullopt;
  json request = op("revalidate");
  if (!command.kernel.empty()) request["kernel"] = command.kernel;
  if (!command.device.empty()) request["device"] = command.device;
  return ask_daemon(global, std::move(request), io, [&](const json& result) {
    const json& keys = field(result, "revalidations");
    if (!keys.is_array() || keys.empty()) {
      io.out << "no stale winners: every key tuned on this hardware is tuned under this environment\n";
      return k_exit_ok;
    }
    Table table({{"KERNEL"}, {"SHAPE"}, {"DTYPE"}, {"DEVICE"}, {"JOB", Align::right}, {"CHANGED"}});
    for (const auto& k : keys) {
      table.add_row({as_text(field(k, "kernel")), as_text(field(k, "shape")), as_text(field(k, "dtype")),
                     as_text(field(k, "device")),
                     field(k, "job").is_null() ? std::string("planning") : as_text(field(k, "job")),
                     as_text(field(k, "change"))});
    }
    table.print(io.out);
    io.out << keys.size() << " stale key(s) queued for revalidation\n";
    return k_exit_ok;
  });
}

void add_kernels_command(CLI::App& app, KernelsCommand& command) {
  command.kernels = app.add_subcommand("kernels", "List the kernel families ktuned loaded");
  command.kernels->footer(
      "Columns: NAME, LANGUAGE (cuda or cpp), SHAPE (dimension names), DTYPES, PARAMS (each\n"
      "tunable with its number of values) and SPACE (configs admitted by the constraints).\n"
      "Specs that failed to load follow, with their errors.\n\nExample:\n  ktune kernels" +
      k_exit_codes_help);
}

std::optional<int> run_kernels_command(const KernelsCommand& command, const GlobalOptions& global,
                                       Output& io) {
  if (!command.kernels->parsed()) return std::nullopt;
  return list_kernels(global, io);
}

void add_query_command(CLI::App& app, QueryCommand& command) {
  QueryOptions& query_options = command.options;
  command.query = app.add_subcommand("query", "Look up the tuned winner for a kernel and shape");
  command.query->add_option("kernel", query_options.kernel, "kernel family, e.g. gemm")->required();
  command.query->add_option("--shape", query_options.shape,
                        "problem shape as NAME=value pairs, e.g. M=256,N=256,K=256")
      ->required();
  command.query->add_option("--dtype", query_options.dtype, "element type");
  command.query->add_option("--device", query_options.device,
                        "device: cpu, cuda:N, or a device fingerprint (as `ktune devices` and "
                        "exported tables show it; a table imported from another machine answers)");
  command.query->footer(
      "Prints the winner's config (\"BM=64 BN=64 ...\") with its median time and GFLOP/s.\n"
      "When nothing is tuned for this key, prints the fallback ktuned hands a runtime (the\n"
      "kernel's default config) and exits 3.\n\n"
      "Examples:\n  ktune query gemm --shape M=256,N=256,K=256 --device cpu\n"
      "  ktune --json query gemm --shape M=256,N=256,K=256" + k_exit_codes_help);
}

std::optional<int> run_query_command(const QueryCommand& command, const GlobalOptions& global,
                                     Output& io) {
  if (!command.query->parsed()) return std::nullopt;
  return query(global, command.options, io);
}

} // namespace ktune::cli
