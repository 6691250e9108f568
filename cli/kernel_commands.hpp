#pragma once
// Commands for writing a kernel family, no daemon needed:
//   ktune check-kernel DIR [--shape M=..,N=..]
//     loads DIR/kernel.toml as ktuned would (types against the signature, the reference, every
//     expression), prints what it found (entry, args and their dtypes, params in order, space
//     size, reference) and, for a cpp family, compiles the [default] config and the reference
//     function once with the host compiler into a temporary cache. With --shape it also counts
//     the admitted configs and evaluates every arg and metric expression there.
//     Exit codes: 0 the family is ready to tune; 1 it is not (the error names file and line);
//     2 usage.
//   ktune new-kernel NAME [--lang cpp|cuda] [--dir DIR]
//     writes DIR/NAME/{kernel.toml,NAME.cpp,reference.cpp}: a commented spec and a typed kernel
//     with two tunables and a float64 reference, which check-kernel accepts and ktuned tunes as
//     it is; --lang cuda writes kernel.toml and a typed __global__ NAME.cu checked against the
//     [default] config. Refuses to overwrite an existing DIR/NAME.
// With --json (io.json) each prints one JSON document on io.out instead of text: check-kernel
// {kernel, language, spec, entry, typed_from, args, dtypes, dtype_axis, params, space,
// reference, at_shape: {shape, admitted, flops, bytes} with --shape, compiled: [{what,
// compile_ms}], ready: true}; new-kernel {kernel, language, files, next}; an error is
// {"error": {code, message}} (a compile error's message carries the compiler's log).
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct KernelCommands {
  CLI::App* check = nullptr;
  CLI::App* create = nullptr;
  std::string check_dir;
  std::string check_shape;
  std::string new_name;
  std::string new_lang = "cpp";
  std::string new_dir = ".";
};

// Registers check-kernel and new-kernel on `app`; `commands` must outlive the parse.
void add_kernel_commands(CLI::App& app, KernelCommands& commands);
// Runs the one that was parsed; nullopt when neither was.
[[nodiscard]] std::optional<int> run_kernel_commands(const KernelCommands& commands, const GlobalOptions& global,
                                               Output& io);

[[nodiscard]] int check_kernel(const std::string& dir, const std::string& shape, Output& io);
[[nodiscard]] int new_kernel(const std::string& name, const std::string& lang,
                             const std::string& dir, Output& io);

} // namespace ktune::cli
