#pragma once
// KernelSpec: the parsed form of a kernel family's kernel.toml (DESIGN.md § Kernel spec).
// Parsing is pure: the caller reads the file and passes its text and a label for messages.
#include "core/result.hpp"
#include "core/shape.hpp"
#include "core/signature.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

enum class Language { cpp, cuda };

// The metric variable holding the size in bytes of one element of the job's dtype.
inline constexpr std::string_view k_elem_bytes = "elem_bytes";
// [kernel].threads = "all": a candidate runs on every CPU the daemon may use.
inline constexpr std::string_view k_all_threads = "all";

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
  std::string init = "uniform"; // buffers: core/buffer_init.hpp (normal(0, 1), uniform(0, 4), ...)
  std::string value;        // expression (scalars)
  std::string dtype;        // element type; empty = the job's dtype. f32 f64 f16 i32 i64
  std::int64_t seed = -1;   // in/inout: this input's seed; < 0 = the daemon's
  // out/inout with [check] reference = "files": the file of this output's expected values, relative
  // to the spec's directory (the loader makes it absolute); "{shape}" stands for the canonical shape.
  std::string expected;
  double rtol = -1;         // out/inout: this output's tolerances; < 0 = [check]'s
  double atol = -1;
  int line = 0;             // line of the [[args]] entry in the spec (its dtype key when given)
};

struct LaunchSpec {          // CUDA only
  std::string grid[3] = {"1", "1", "1"};
  std::string block[3] = {"1", "1", "1"};
  std::string shared_bytes = "0";
};

enum class ReferenceKind { default_config, function, files, none };

struct CheckSpec {
  ReferenceKind reference = ReferenceKind::default_config;
  std::string source;       // function: its source, relative to the spec's directory
  std::string function;     // function: its name; its declaration is read from `source`
  int line = 0;             // line of [check].function (or of [check].reference)
  double rtol = 1e-3;
  double atol = 1e-5;
};

struct KernelSpec {
  std::string name;
  Language language = Language::cpp;
  std::string source;               // relative to the spec's directory ('..' allowed)
  std::string entry;
  // [kernel].signature: a typed declaration ("void f(const float* A, int n)"), "source" (read
  // the entry's declaration from the source at load time) or empty (entry takes void** args).
  std::string signature_text;
  int signature_line = 0;
  std::optional<Signature> signature;  // set once resolved (parse, or load_kernel for "source")
  std::vector<std::string> shape_dims;
  // Without [kernel].dtypes the family has no dtype axis: dtypes holds the element type of its
  // first output (which must then be typed by its dtype key or the signature) and no KTUNE_DTYPE
  // is defined when it compiles.
  std::vector<std::string> dtypes;
  bool dtype_axis = true;
  std::vector<ParamSpec> params;
  std::vector<std::string> constraints;
  std::optional<LaunchSpec> launch;
  std::vector<ArgSpec> args;
  std::string flops;                // expression; empty if not declared
  std::string bytes;                // expression; empty if not declared
  CheckSpec check;
  NamedValues default_config;       // the [default] table, in params order
  bool inplace = false;
  // [buffers]: host buffers' data sits `buffer_offset` bytes past a `buffer_alignment` boundary.
  std::int64_t buffer_alignment = 64;
  std::int64_t buffer_offset = 0;
  std::vector<std::string> flags;   // extra compiler flags ([kernel] flags = [...])
  std::vector<std::string> flags_remove; // fixed compiler flags to drop ([kernel] flags_remove)
  // [kernel].threads (cpp only): how many cores a candidate runs on: an expression over the
  // params and shape dims ("nthreads", "4"), "all" (every CPU the daemon may use), or empty (one:
  // the candidate is single-threaded and pinned to the bench CPU). docs/kernel-spec.md § Threads.
  std::string threads;

  [[nodiscard]] const ParamSpec* find_param(std::string_view name) const;
};

// What a family may declare; beyond it loading fails with "spec_too_large", naming the limit.
// Within them a spec parses in linear time and loads in milliseconds (docs/kernel-spec.md
// § Limits): a kernel.toml of 100k params froze ktuned for seconds per lookup.
struct SpecLimits {
  static constexpr std::size_t max_spec_bytes = 256 * 1024;      // kernel.toml
  static constexpr std::size_t max_params = 128;
  static constexpr std::size_t max_param_values = 4096;          // per param
  static constexpr std::size_t max_constraints = 1024;
  static constexpr std::size_t max_args = 256;
  static constexpr std::size_t max_expression_bytes = 4096;      // one expression
  // The files hashed for a family (its source, reference source and headers): each, and together.
  static constexpr std::uint64_t max_source_bytes = 16ull << 20;
  static constexpr std::uint64_t max_family_bytes = 64ull << 20;
  // Error messages quote at most this much of what they found (a value list, an expression).
  static constexpr std::size_t max_message_bytes = 2048;
};

// Parses and validates a kernel.toml. Every expression is compiled against the variables it may
// use (shape dims and params), so a bad expression fails here, not in the middle of a tune.
// A spec beyond SpecLimits is "spec_too_large" naming the limit. Other errors have code
// "spec_error" (messages clipped to SpecLimits::max_message_bytes) and name `file_label`, the key (e.g. "args[2].count") and, for
// expressions, the expression text: "kernels/gemm/kernel.toml: [space].constraints[1]: 'K % BK ==':
// syntax error ...". Array indices in keys count from 0. TOML syntax errors read
// "<file_label>:<line>:<column>: <reason>". Unknown tables and keys are errors naming the key.
// [params] keep their order in the file.
// A [kernel].signature given as text is parsed and applied (apply_signature) here; "source" is
// left to the loader, which reads the source. Metric expressions may also use `elem_bytes`, the
// size of one element of the job's dtype.
[[nodiscard]] Result<KernelSpec> parse_kernel_spec(std::string_view toml_text,
                                                   std::string_view file_label);

enum class SignatureUse { kernel, reference };

// Checks `signature` against spec.args, position by position: as many parameters as args, the
// same names (where the declaration names them), a pointer for each buffer and a scalar for each
// scalar arg, no const on an out or inout buffer, and the arg's dtype equal to the declared
// type's (KTUNE_DTYPE: the arg must leave dtype to the job). For SignatureUse::kernel an arg
// without a dtype takes the declared one and spec.signature is set. Errors (spec_error) read
// "<file_label>:<line>: <key>: <what the spec says> but <declared_at> declares '<param>' (<dtype>);
// fix: <what to write>".
[[nodiscard]] Result<void> apply_signature(KernelSpec& spec, const Signature& signature,
                                           std::string_view file_label,
                                           std::string_view declared_at, SignatureUse use);

} // namespace ktune
