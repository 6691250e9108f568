#pragma once
// KernelSpec: the parsed form of a kernel family's kernel.toml (DESIGN.md § Kernel spec).
// Parsing is pure: the caller reads the file and passes its text and a label for messages.
#include "core/result.hpp"
#include "core/shape.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

enum class Language { cpp, cuda };
enum class ArgKind { in, out, inout, scalar };

[[nodiscard]] std::string_view to_string(Language language);
[[nodiscard]] std::string_view to_string(ArgKind kind);

struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> values; // in declaration order
};

struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::in;
  std::string count;        // expression: element count (buffers)
  std::string init = "uniform"; // uniform | zero | ones | index   (buffers)
  std::string value;        // expression (scalars)
  std::string dtype;        // element type; empty = the job's dtype. f32 f64 f16 i32 i64
};

struct LaunchSpec {          // CUDA only
  std::string grid[3] = {"1", "1", "1"};
  std::string block[3] = {"1", "1", "1"};
  std::string shared_bytes = "0";
};

struct CheckSpec {
  std::string reference = "default"; // the [default] config
  double rtol = 1e-3;
  double atol = 1e-5;
};

struct KernelSpec {
  std::string name;
  Language language = Language::cpp;
  std::string source;               // relative to the spec's directory
  std::string entry;
  std::vector<std::string> shape_dims;
  std::vector<std::string> dtypes;
  std::vector<ParamSpec> params;
  std::vector<std::string> constraints;
  std::optional<LaunchSpec> launch;
  std::vector<ArgSpec> args;
  std::string flops;                // expression; empty if not declared
  std::string bytes;                // expression; empty if not declared
  CheckSpec check;
  NamedValues default_config;       // the [default] table, in params order
  bool inplace = false;
  std::vector<std::string> flags;   // extra compiler flags ([kernel] flags = [...])

  [[nodiscard]] const ParamSpec* find_param(std::string_view name) const;
};

// Parses and validates a kernel.toml. Every expression is compiled against the variables it may
// use (shape dims and params), so a bad expression fails here, not in the middle of a tune.
// Errors have code "spec_error" and name `file_label`, the key (e.g. "args[2].count") and, for
// expressions, the expression text: "kernels/gemm/kernel.toml: [space].constraints[1]: 'K % BK ==':
// syntax error ...". Array indices in keys count from 0. TOML syntax errors read
// "<file_label>:<line>:<column>: <reason>". Unknown tables and keys are errors naming the key.
// [params] keep their order in the file.
[[nodiscard]] Result<KernelSpec> parse_kernel_spec(std::string_view toml_text,
                                                   std::string_view file_label);

} // namespace ktune
