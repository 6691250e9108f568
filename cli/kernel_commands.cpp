#include "cli/kernel_commands.hpp"

#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"
#include "compiler/host_compiler.hpp"
#include "core/param_space.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/kernel_registry.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace ktune::cli {
namespace {

namespace fs = std::filesystem;

// A temporary directory removed when it goes out of scope (the compile cache of one check).
class ScratchDir {
public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/ktune-check-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) m_path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!m_path.empty()) fs::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

std::string describe_arg(const ArgSpec& arg, const KernelSpec& spec) {
  const std::string dtype = !arg.dtype.empty() ? arg.dtype
                            : arg.kind == ArgKind::scalar ? std::string("i64")
                                                          : "the job's dtype (" + spec.dtypes.front() + ", ...)";
  if (arg.kind == ArgKind::scalar) return arg.name + ": scalar " + dtype + " = " + arg.value;
  return arg.name + ": " + std::string(to_string(arg.kind)) + " " + dtype + "[" + arg.count + "]" +
         (arg.kind == ArgKind::out ? std::string() : ", init " + arg.init);
}

std::string describe_reference(const LoadedKernel& kernel) {
  const CheckSpec& check = kernel.spec.check;
  switch (check.reference) {
    case ReferenceKind::function:
      return "function " + check.function + " in " + kernel.reference_path;
    case ReferenceKind::none:
      return "none (outputs are not checked)";
    case ReferenceKind::files:
      return "expected files per output ({shape} is the shape being tuned)";
    case ReferenceKind::default_config:
      break;
  }
  if (kernel.spec.default_config.empty()) return "none ([default] is empty: outputs are not checked)";
  return "the [default] config " + config_to_string(kernel.spec.default_config);
}

// Compiles `job`; on success appends {what, compile_ms} to `compiled` (and says so in text);
// false when it fails, reported as a compile_error with the compiler's log.
bool compile_once(HostCompiler& compiler, const CompileJob& job, const std::string& what,
                  Json& compiled, Output& io) {
  const CompileOutcome outcome = compiler.compile(job);
  if (outcome.status == CandidateStatus::ok) {
    const auto ms = static_cast<long>(outcome.compile_ms);
    if (!io.json) io.out << "compiled " << what << " in " << ms << " ms\n";
    compiled.push_back(Json{{"what", what}, {"compile_ms", ms}});
    return true;
  }
  (void)report_error(io, ErrorCode::compile_error,
                     what + " does not compile" +
                         (outcome.infra.empty() ? "" : " (" + outcome.infra + ")") + ":\n" +
                         outcome.log);
  return false;
}

// Shape-dependent checks: the admitted configs and every expression of the default config;
// what they found goes to `found` (shape, admitted, flops, bytes).
int check_shape(const LoadedKernel& kernel, const std::string& shape_text, Json& found, Output& io) {
  auto shape = Shape::parse(shape_text);
  if (!shape) return report_error(io, shape.error().code, shape.error().message);
  auto conformed = conform_shape(*shape, kernel.spec.shape_dims, kernel.spec.name);
  if (!conformed) return report_error(io, conformed.error().code, conformed.error().message);
  auto space = ParamSpace::create(kernel.spec, *conformed);
  if (!space) return report_error(io, space.error().code, space.error().message);
  auto configs = space->enumerate();
  if (!configs) return report_error(io, configs.error().code, configs.error().message);
  auto job = make_bench_job(kernel.spec, *conformed, kernel.spec.default_config,
                            kernel.spec.dtypes.front(), "", "", MeasureSettings{});
  if (!job) return report_error(io, job.error().code, job.error().message);
  found = Json{{"shape", conformed->to_string()}, {"admitted", configs->size()},
               {"flops", job->flops}, {"bytes", job->bytes}};
  if (!io.json) {
    io.out << "at " << conformed->to_string() << ": " << configs->size() << " admitted configs";
    if (job->flops > 0) io.out << ", " << job->flops << " flops";
    if (job->bytes > 0) io.out << ", " << job->bytes << " bytes";
    io.out << " per run\n";
  }
  if (configs->empty()) {
    return report_error(io, ErrorCode::spec_error,
                        kernel.spec_path + ": [space].constraints admit no config at " +
                            conformed->to_string());
  }
  return k_exit_ok;
}

std::string spec_template(const std::string& name) {
  return R"k(# Kernel family ")k" + name + R"k(": y = a * x over N elements.
# The full format: docs/kernel-spec.md. Check it with `ktune check-kernel <this directory>`,
# tune it with `ktune tune )k" + name + R"k( --shape N=1000000 --wait`.

[kernel]
name = ")k" + name + R"k("
language = "cpp"
source = ")k" + name + R"k(.cpp"        # relative to this file
entry = ")k" + name + R"k("
# The typed declaration: ktune calls the function as declared (no void** adapter) and takes
# every argument's type from it. "source" reads it from the source instead.
signature = "void )k" + name + R"k((const float* x, float* y, int n, float a)"
shape = ["N"]                  # the problem's dimensions, given at tune time: --shape N=...
# dtypes = ["f32", "f64"]      # a dtype axis: compiles get -DKTUNE_DTYPE=float|double

[params]                       # tunables, passed as -DNAME=value; kept in this order
UNROLL = [1, 2, 4, 8]          # elements per inner step
CHUNK = [256, 1024, 4096]      # elements per outer block

[space]                        # which combinations to try: expressions over params and dims
constraints = ["CHUNK % UNROLL == 0"]

[[args]]                       # one per parameter, in the declaration's order
name = "x"
kind = "in"                    # in | out | inout | scalar
count = "N"                    # elements, an expression over dims and params
init = "uniform"               # uniform (in [-1, 1)) | zero | ones | index

[[args]]
name = "y"
kind = "out"
count = "N"

[[args]]
name = "n"
kind = "scalar"
value = "N"

[[args]]
name = "a"
kind = "scalar"
value = "3"

[metrics]                      # per run; elem_bytes is the size of one element
flops = "N"
bytes = "2 * elem_bytes * N"

[check]                        # outputs are compared with this reference's
reference = "function"         # or "default" (the [default] config) or "none"
source = "reference.cpp"
function = ")k" + name + R"k(_reference"
rtol = 1e-6
atol = 1e-6

[default]                      # what a runtime gets before anything is tuned
UNROLL = 1
CHUNK = 1024
)k";
}

std::string source_template(const std::string& name) {
  return R"k(// Kernel family ")k" + name + R"k(": y = a * x. The tunables arrive as -DUNROLL=.. -DCHUNK=..;
// the defaults below let the file compile on its own too.
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef CHUNK
#define CHUNK 1024
#endif

void )k" + name + R"k((const float* x, float* y, int n, float a) {
  for (int start = 0; start < n; start += CHUNK) {
    const int end = start + CHUNK < n ? start + CHUNK : n;
    int i = start;
    for (; i + UNROLL <= end; i += UNROLL) {
      for (int u = 0; u < UNROLL; ++u) y[i + u] = a * x[i + u];
    }
    for (; i < end; ++i) y[i] = a * x[i];
  }
}
)k";
}

std::string reference_template(const std::string& name) {
  return R"k(// The reference every candidate of ")k" + name + R"k(" is checked against: the same
// parameters as the kernel, computed plainly in double. Compiled once, without tunables.
void )k" + name + R"k(_reference(const float* x, float* y, int n, float a) {
  for (int i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(a) * x[i]);
}
)k";
}

std::string cuda_spec_template(const std::string& name) {
  return R"k(# Kernel family ")k" + name + R"k(" on the GPU: y = a * x over N elements.
# The full format: docs/kernel-spec.md. Check it with `ktune check-kernel <this directory>` and
# `ktune compile-check )k" + name + R"k(`; tune it with
# `ktune tune )k" + name + R"k( --shape N=10000000 --device cuda:0 --wait`.

[kernel]
name = ")k" + name + R"k("
language = "cuda"
source = ")k" + name + R"k(.cu"         # relative to this file; compiled by nvrtc
entry = ")k" + name + R"k("
# The typed declaration: checked against [[args]] and types every argument (int n is passed as
# 4 bytes in the driver's parameter array). "source" reads it from the source instead.
signature = 'extern "C" __global__ void )k" + name + R"k((const float* x, float* y, int n, float a)'
shape = ["N"]

[params]                       # tunables, passed as -DNAME=value; kept in this order
BLOCK = [64, 128, 256, 512]    # threads per block
ITEMS = [1, 2, 4]              # elements per thread

[launch]                       # expressions over dims and params
grid = ["ceil_div(N, BLOCK * ITEMS)", "1", "1"]
block = ["BLOCK", "1", "1"]

[[args]]                       # one per parameter, in the declaration's order
name = "x"
kind = "in"
count = "N"
init = "uniform"

[[args]]
name = "y"
kind = "out"
count = "N"

[[args]]
name = "n"
kind = "scalar"
value = "N"

[[args]]
name = "a"
kind = "scalar"
value = "3"

[metrics]                      # per run; elem_bytes is the size of one element
flops = "N"
bytes = "2 * elem_bytes * N"

[check]                        # every candidate's output against the [default] config's
reference = "default"
rtol = 1e-6
atol = 1e-6

[default]
BLOCK = 256
ITEMS = 1
)k";
}

std::string cuda_source_template(const std::string& name) {
  return R"k(// Kernel family ")k" + name + R"k(" on the GPU: y = a * x. The tunables arrive as -DBLOCK=..
// -DITEMS=..; the defaults below let the file compile on its own too.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 1
#endif

extern "C" __global__ void )k" + name + R"k((const float* x, float* y, int n, float a) {
  const int first = (blockIdx.x * BLOCK * ITEMS) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = first + k * BLOCK;
    if (i < n) y[i] = a * x[i];
  }
}
)k";
}

bool is_identifier(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

} // namespace

void add_kernel_commands(CLI::App& app, KernelCommands& commands) {
  commands.check = app.add_subcommand(
      "check-kernel", "Check a kernel family's spec and compile its default config (no daemon)");
  commands.check->add_option("dir", commands.check_dir, "the family's directory (or its kernel.toml)")
      ->required();
  commands.check->add_option("--shape", commands.check_shape,
                             "also count the admitted configs and evaluate every expression at "
                             "this shape (e.g. M=512,N=512,K=512)");
  commands.check->footer(
      "\nLoads the spec as ktuned does (the signature against [[args]], the reference, every\n"
      "expression), prints what it found and compiles the [default] config and the reference\n"
      "function of a cpp family once. Errors name the file and the line.\n\n"
      "Exit codes: 0 ready to tune; 1 not; 2 usage.\n\n"
      "Example:\n  ktune check-kernel mykernels/gemm_blocked --shape M=256,N=256,K=256");

  commands.create = app.add_subcommand(
      "new-kernel", "Write a commented kernel.toml and a typed source skeleton that tunes as is");
  commands.create->add_option("name", commands.new_name, "the family and function name")->required();
  commands.create->add_option("--lang", commands.new_lang, "cpp (host compiler, default) or cuda (nvrtc)")
      ->check(CLI::IsMember({"cpp", "cuda"}));
  commands.create->add_option("--dir", commands.new_dir, "where to create NAME/ (default .)");
  commands.create->footer(
      "\nWrites DIR/NAME/kernel.toml, NAME.cpp and reference.cpp (cuda: kernel.toml and NAME.cu);\n"
      "refuses to overwrite.\n\n"
      "Example:\n  ktune new-kernel scale --dir mykernels && ktune check-kernel mykernels/scale");
}

std::optional<int> run_kernel_commands(const KernelCommands& commands, const GlobalOptions& /*global*/,
                                 Output& io) {
  if (commands.check != nullptr && commands.check->parsed()) {
    return check_kernel(commands.check_dir, commands.check_shape, io);
  }
  if (commands.create != nullptr && commands.create->parsed()) {
    return new_kernel(commands.new_name, commands.new_lang, commands.new_dir, io);
  }
  return std::nullopt;
}

namespace {

// Where the family's entry point's parameter types come from: its source, its [kernel].signature,
// or "" when untyped.
std::string typed_from(const LoadedKernel& kernel) {
  const KernelSpec& spec = kernel.spec;
  if (!spec.signature) return {};
  return spec.signature_text == "source" ? kernel.source_path : std::string("[kernel].signature");
}

// check-kernel's JSON report of the spec: entry, args, dtypes, params, space and reference.
Json spec_report(const LoadedKernel& kernel) {
  const KernelSpec& spec = kernel.spec;
  Json args = Json::array();
  for (const auto& arg : spec.args) {
    Json a{{"name", arg.name}, {"kind", to_string(arg.kind)},
           {"dtype", !arg.dtype.empty() ? arg.dtype
                     : arg.kind == ArgKind::scalar ? std::string("i64") : std::string()}};
    if (arg.kind == ArgKind::scalar) {
      a["value"] = arg.value;
    } else {
      a["count"] = arg.count;
      if (arg.kind != ArgKind::out) a["init"] = arg.init;
    }
    args.push_back(std::move(a));
  }
  Json params = Json::array();
  std::uint64_t size = 1;
  for (const auto& p : spec.params) {
    size *= p.values.size();
    params.push_back(Json{{"name", p.name}, {"values", p.values}});
  }
  const std::string typed = typed_from(kernel);
  return Json{{"kernel", spec.name}, {"language", to_string(spec.language)},
              {"spec", kernel.spec_path}, {"entry", spec.entry},
              {"typed_from", typed.empty() ? Json() : Json(typed)}, {"args", args},
              {"dtypes", spec.dtypes}, {"dtype_axis", spec.dtype_axis}, {"params", params},
              {"space", size}, {"reference", describe_reference(kernel)}};
}

// The same as text.
void print_spec(const LoadedKernel& kernel, std::ostream& out) {
  const KernelSpec& spec = kernel.spec;
  out << spec.name << " (" << to_string(spec.language) << "): " << kernel.spec_path << '\n';
  out << "entry: " << spec.entry
      << (spec.signature ? " (typed: " + std::to_string(spec.signature->params.size()) +
                               " parameters from " + typed_from(kernel) + ")"
          : spec.language == Language::cpp
              ? std::string(" (extern \"C\" void " + spec.entry + "(void** args))")
              : std::string(" (parameters as [[args]] type them)"))
      << '\n';
  for (const auto& arg : spec.args) out << "  " << describe_arg(arg, spec) << '\n';
  std::string dtypes;
  for (const auto& d : spec.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;
  out << "dtypes: " << dtypes << (spec.dtype_axis ? "" : " (no dtype axis)") << '\n';
  std::string names;
  std::uint64_t size = 1;
  for (const auto& p : spec.params) {
    size *= p.values.size();
    names += (names.empty() ? "" : ", ") + p.name + "(" + std::to_string(p.values.size()) + ")";
  }
  out << "params: " << (names.empty() ? "-" : names) << "; space: " << size
      << " configs before constraints\n";
  out << "reference: " << describe_reference(kernel) << '\n';
}

// A cpp family's default config, and its reference function when it has one, compiled with the
// host compiler into a scratch cache; each compile recorded in `compiled`. k_exit_ok, or the
// exit code of the failure (reported on io).
int compile_default(const LoadedKernel& kernel, Json& compiled, Output& io) {
  const KernelSpec& spec = kernel.spec;
  ScratchDir cache;
  if (cache.path().empty()) return report_error(io, ErrorCode::io_error, "cannot create a temporary compile cache");
  HostCompiler compiler;
  auto job = make_compile_job(kernel, spec.default_config, spec.dtypes.front(), cache.path());
  if (!job) return report_error(io, job.error().code, job.error().message);
  if (!compile_once(compiler, *job, "the [default] config", compiled, io)) return k_exit_error;
  if (spec.check.reference == ReferenceKind::function) {
    auto reference = make_reference_compile_job(kernel, spec.dtypes.front(), cache.path());
    if (!reference) return report_error(io, reference.error().code, reference.error().message);
    if (!compile_once(compiler, *reference, "the reference " + spec.check.function, compiled, io)) {
      return k_exit_error;
    }
  }
  return k_exit_ok;
}

} // namespace

int check_kernel(const std::string& dir, const std::string& shape, Output& io) {
  std::error_code ec;
  const std::string spec_path =
      fs::is_directory(dir, ec) ? (fs::path(dir) / "kernel.toml").string() : dir;
  // As ktuned with the family's parent as a kernel directory: sources may be shared through '..'.
  auto kernel = load_kernel(spec_path,
                            fs::absolute(spec_path).lexically_normal().parent_path().parent_path().string());
  if (!kernel) return report_error(io, kernel.error().code, kernel.error().message);
  const KernelSpec& spec = kernel->spec;
  Json report = spec_report(*kernel);
  if (!io.json) print_spec(*kernel, io.out);

  if (!shape.empty()) {
    Json found;
    if (const int code = check_shape(*kernel, shape, found, io); code != k_exit_ok) return code;
    report["at_shape"] = std::move(found);
  }
  Json compiled = Json::array();
  if (spec.language != Language::cpp) {
    if (!io.json) {
      io.out << "not compiled: `ktune compile-check " << spec.name
             << "` compiles CUDA families with nvrtc\n";
    }
  } else if (const int code = compile_default(*kernel, compiled, io); code != k_exit_ok) {
    return code;
  }
  report["compiled"] = std::move(compiled);
  report["ready"] = true;
  if (io.json) print_json(io, report);
  else io.out << "ok: " << spec.name << " is ready to tune\n";
  return k_exit_ok;
}

int new_kernel(const std::string& name, const std::string& lang, const std::string& dir,
               Output& io) {
  if (lang != "cpp" && lang != "cuda") {
    return report_error(io, ErrorCode::bad_request, "--lang " + lang + ": expected cpp or cuda", k_exit_usage);
  }
  if (!is_identifier(name)) {
    return report_error(io, ErrorCode::bad_request,
                        "'" + name + "': expected a C identifier (it names the function too)",
                        k_exit_usage);
  }
  const fs::path family = fs::path(dir) / name;
  std::error_code ec;
  if (fs::exists(family, ec)) {
    return report_error(io, ErrorCode::io_error, family.string() + " already exists; nothing written");
  }
  fs::create_directories(family, ec);
  if (ec) return report_error(io, ErrorCode::io_error, "cannot create " + family.string() + ": " + ec.message());
  const std::vector<std::pair<std::string, std::string>> files =
      lang == "cuda" ? std::vector<std::pair<std::string, std::string>>{
                           {"kernel.toml", cuda_spec_template(name)},
                           {name + ".cu", cuda_source_template(name)}}
                     : std::vector<std::pair<std::string, std::string>>{
                           {"kernel.toml", spec_template(name)},
                           {name + ".cpp", source_template(name)},
                           {"reference.cpp", reference_template(name)}};
  Json written = Json::array();
  for (const auto& [file, text] : files) {
    if (auto w = write_file_atomic((family / file).string(), text); !w) {
      return report_error(io, w.error().code, w.error().message);
    }
    written.push_back((family / file).string());
    if (!io.json) io.out << "wrote " << (family / file).string() << '\n';
  }
  const std::string next = "ktune check-kernel " + family.string();
  if (io.json) {
    print_json(io, Json{{"kernel", name}, {"language", lang}, {"files", written}, {"next", next}});
  } else {
    io.out << "next: " << next << "\n";
  }
  return k_exit_ok;
}

} // namespace ktune::cli
