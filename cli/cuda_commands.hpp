#pragma once
// The CUDA commands of `ktune` (cli/commands.hpp for exit codes and output conventions):
//
//   ktune devices
//       the CPU device and every CUDA device the workers see, or why there is none
//   ktune compile-check KERNEL --arch sm_80,sm_90 [--shape M=..,N=..] [--dtype f32]
//       compiles every admitted config of the CUDA family KERNEL for each arch through ktuned's
//       compile workers (no GPU needed) and prints one row per (config, arch): status, registers,
//       spill bytes, compile time and, for a compile_error, the first line of the log. Exit 1 when
//       any admitted config fails to compile.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct CompileCheckOptions {
  std::string kernel;
  std::vector<std::string> archs;
  std::string shape;   // "" = the daemon's default (4096 for every dim)
  std::string dtype;   // "" = the family's first
  bool errors_only = false;
};

// The subcommands after add_cuda_commands() registered them on the app.
struct CudaCommands {
  CLI::App* devices = nullptr;
  CLI::App* compile_check = nullptr;
  CompileCheckOptions compile_check_options;
};

// Registers `devices` and `compile-check` on `app`. `commands` must outlive the parse.
void add_cuda_commands(CLI::App& app, CudaCommands& commands);
// Runs whichever of them was parsed; nullopt when neither was.
[[nodiscard]] std::optional<int> run_cuda_commands(const CudaCommands& commands,
                                                   const GlobalOptions& global, Output& io);

[[nodiscard]] int list_devices(const GlobalOptions& global, Output& io);
[[nodiscard]] int compile_check(const GlobalOptions& global, const CompileCheckOptions& options,
                                Output& io);

// The table compile-check prints for a compile_check reply, and its exit code (1 when "errors"
// is not 0). Exposed for tests.
[[nodiscard]] int print_compile_check(const nlohmann::ordered_json& result, bool errors_only,
                                      std::ostream& out);

} // namespace ktune::cli
