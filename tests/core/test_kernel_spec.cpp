#include "core/kernel_spec.hpp"

#include <catch2/catch.hpp>

#include <string>

using ktune::parse_kernel_spec;

namespace {

const std::string k_gemm = R"toml(
[kernel]
name = "gemm"
language = "cuda"
source = "kernel.cu"
entry = "gemm"
shape = ["M", "N", "K"]
dtypes = ["f32", "f16"]
flags = ["-use_fast_math"]

[params]
BLOCK_N = [32, 64, 128]
BLOCK_M = [32, 64, 128]
BLOCK_K = [8, 16, 32]

[space]
constraints = ["BLOCK_M * BLOCK_N / 256 <= 64", "K % BLOCK_K == 0"]

[launch]
grid = ["ceil_div(N, BLOCK_N)", "ceil_div(M, BLOCK_M)", "1"]
block = ["256", "1", "1"]
shared_bytes = "(BLOCK_M + BLOCK_N) * BLOCK_K * 4"

[[args]]
name = "A"
kind = "in"
count = "M * K"
init = "uniform"

[[args]]
name = "B"
kind = "in"
count = "K * N"
dtype = "f32"

[[args]]
name = "C"
kind = "out"
count = "M * N"
init = "zero"

[[args]]
name = "m"
kind = "scalar"
value = "M"

[metrics]
flops = "2 * M * N * K"
bytes = "4 * (M * K + K * N + M * N)"

[check]
reference = "default"
rtol = 1e-3
atol = 0

[default]
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 16
)toml";

const std::string k_minimal_cpp = R"toml(
[kernel]
name = "scale"
language = "cpp"
source = "src/kernel.cpp"
entry = "scale"
shape = ["N"]
dtypes = ["f64"]

[params]
UNROLL = [1, 2, 4]

[[args]]
name = "x"
kind = "inout"
count = "N"

[default]
UNROLL = 2
)toml";

// Replaces the first occurrence of `from` in `text` (which must be there).
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

std::string error_of(const std::string& text) {
  auto spec = parse_kernel_spec(text, "kernels/gemm/kernel.toml");
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.error().code == ktune::ErrorCode::spec_error);
  CHECK_THAT(spec.error().message, Catch::StartsWith("kernels/gemm/kernel.toml"));
  return spec.error().message;
}

} // namespace

TEST_CASE("core/kernel_spec: a full spec", "[core][kernel_spec]") {
  auto parsed = parse_kernel_spec(k_gemm, "kernels/gemm/kernel.toml");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  const ktune::KernelSpec& spec = *parsed;
  CHECK(spec.name == "gemm");
  CHECK(spec.language == ktune::Language::cuda);
  CHECK(spec.source == "kernel.cu");
  CHECK(spec.entry == "gemm");
  CHECK(spec.shape_dims == std::vector<std::string>{"M", "N", "K"});
  CHECK(spec.dtypes == std::vector<std::string>{"f32", "f16"});
  CHECK(spec.flags == std::vector<std::string>{"-use_fast_math"});
  CHECK_FALSE(spec.inplace);

  SECTION("params keep file order") {
    REQUIRE(spec.params.size() == 3);
    CHECK(spec.params[0].name == "BLOCK_N");
    CHECK(spec.params[1].name == "BLOCK_M");
    CHECK(spec.params[2].name == "BLOCK_K");
    CHECK(spec.params[2].values == std::vector<std::int64_t>{8, 16, 32});
    REQUIRE(spec.find_param("BLOCK_M") != nullptr);
    CHECK(spec.find_param("BLOCK_M")->values.size() == 3);
    CHECK(spec.find_param("M") == nullptr);
  }
  SECTION("default config in params order") {
    CHECK(spec.default_config == ktune::NamedValues{{"BLOCK_N", 64}, {"BLOCK_M", 64}, {"BLOCK_K", 16}});
  }
  SECTION("expressions") {
    CHECK(spec.constraints.size() == 2);
    CHECK(spec.constraints[1] == "K % BLOCK_K == 0");
    REQUIRE(spec.launch.has_value());
    CHECK(spec.launch->grid[0] == "ceil_div(N, BLOCK_N)");
    CHECK(spec.launch->block[0] == "256");
    CHECK(spec.launch->shared_bytes == "(BLOCK_M + BLOCK_N) * BLOCK_K * 4");
    CHECK(spec.flops == "2 * M * N * K");
    CHECK(spec.bytes == "4 * (M * K + K * N + M * N)");
  }
  SECTION("args") {
    REQUIRE(spec.args.size() == 4);
    CHECK(spec.args[0].name == "A");
    CHECK(spec.args[0].kind == ktune::ArgKind::in);
    CHECK(spec.args[0].count == "M * K");
    CHECK(spec.args[1].init == "uniform");
    CHECK(spec.args[1].dtype == "f32");
    CHECK(spec.args[2].kind == ktune::ArgKind::out);
    CHECK(spec.args[2].init == "zero");
    CHECK(spec.args[2].dtype.empty());
    CHECK(spec.args[3].kind == ktune::ArgKind::scalar);
    CHECK(spec.args[3].value == "M");
  }
  SECTION("check") {
    CHECK(spec.check.reference == ktune::ReferenceKind::default_config);
    CHECK(spec.check.rtol == Approx(1e-3));
    CHECK(spec.check.atol == 0);
  }
}

TEST_CASE("core/kernel_spec: a minimal cpp spec takes the defaults", "[core][kernel_spec]") {
  auto spec = parse_kernel_spec(k_minimal_cpp, "scale.toml");
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec.ok());
  CHECK(spec->language == ktune::Language::cpp);
  CHECK(spec->source == "src/kernel.cpp");
  CHECK_FALSE(spec->launch.has_value());
  CHECK(spec->constraints.empty());
  CHECK(spec->flops.empty());
  CHECK(spec->check.rtol == Approx(1e-3));
  CHECK(spec->check.atol == Approx(1e-5));
  CHECK(spec->args[0].init == "uniform");
  CHECK(spec->default_config == ktune::NamedValues{{"UNROLL", 2}});

  SECTION("inplace, integer tolerances and a launch table on cpp") {
    auto more = parse_kernel_spec(edit(k_minimal_cpp, "dtypes = [\"f64\"]",
                                       "dtypes = [\"f64\"]\ninplace = true\n[check]\nrtol = 1\natol = 0\n"
                                       "[launch]\nblock = [\"UNROLL\", 1, \"1\"]"),
                                  "scale.toml");
    INFO((more ? std::string() : more.error().message));
    REQUIRE(more.ok());
    CHECK(more->inplace);
    CHECK(more->check.rtol == 1.0);
    REQUIRE(more->launch.has_value());
    CHECK(more->launch->block[0] == "UNROLL");
    CHECK(more->launch->block[1] == "1");
    CHECK(more->launch->grid[0] == "1");
  }
}

TEST_CASE("core/kernel_spec: errors name file, key and expression", "[core][kernel_spec]") {
  SECTION("TOML syntax error with line and column") {
    const auto msg = error_of("[kernel]\nname = \"gemm\nlanguage = \"cuda\"\n");
    CHECK_THAT(msg, Catch::StartsWith("kernels/gemm/kernel.toml:2:"));
  }
  SECTION("bad constraint expression") {
    const auto msg = error_of(edit(k_gemm, "\"K % BLOCK_K == 0\"", "\"K % BLOCK_K ==\""));
    CHECK_THAT(msg, Catch::Contains("[space].constraints[1]") && Catch::Contains("'K % BLOCK_K =='"));
  }
  SECTION("unknown variable in an arg count") {
    const auto msg = error_of(edit(k_gemm, "count = \"K * N\"", "count = \"K * Q\""));
    CHECK_THAT(msg, Catch::Contains("args[1].count") && Catch::Contains("'Q'") && Catch::Contains("K * Q"));
  }
  SECTION("bad launch, metrics and scalar expressions") {
    CHECK_THAT(error_of(edit(k_gemm, "\"ceil_div(M, BLOCK_M)\"", "\"ceil_div(M BLOCK_M)\"")),
               Catch::Contains("[launch].grid[1]"));
    CHECK_THAT(error_of(edit(k_gemm, "shared_bytes = \"(BLOCK_M", "shared_bytes = \"(BLOCK_X")),
               Catch::Contains("[launch].shared_bytes"));
    CHECK_THAT(error_of(edit(k_gemm, "flops = \"2 * M", "flops = \"2 * * M")), Catch::Contains("[metrics].flops"));
    CHECK_THAT(error_of(edit(k_gemm, "value = \"M\"", "value = \"\"")), Catch::Contains("args[3].value"));
  }
  SECTION("launch required for cuda, and needs three entries") {
    const auto no_launch = edit(k_gemm, "[launch]\ngrid = [\"ceil_div(N, BLOCK_N)\", \"ceil_div(M, BLOCK_M)\", \"1\"]\n"
                                        "block = [\"256\", \"1\", \"1\"]\nshared_bytes = \"(BLOCK_M + BLOCK_N) * BLOCK_K * 4\"\n",
                                "");
    CHECK_THAT(error_of(no_launch), Catch::Contains("[launch]") && Catch::Contains("cuda"));
    CHECK_THAT(error_of(edit(k_gemm, "block = [\"256\", \"1\", \"1\"]", "block = [\"256\", \"1\"]")),
               Catch::Contains("[launch].block") && Catch::Contains("3"));
    CHECK_THAT(error_of(edit(k_gemm, "block = [\"256\", \"1\", \"1\"]\n", "")), Catch::Contains("[launch].block"));
  }
  SECTION("unknown tables and keys are errors") {
    CHECK_THAT(error_of(k_gemm + "\n[lunch]\nx = 1\n"), Catch::Contains("[lunch]"));
    CHECK_THAT(error_of(edit(k_gemm, "entry = \"gemm\"", "entry = \"gemm\"\nentyr = \"x\"")),
               Catch::Contains("[kernel].entyr"));
    CHECK_THAT(error_of(edit(k_gemm, "init = \"zero\"", "init = \"zero\"\ncuont = \"1\"")),
               Catch::Contains("args[2].cuont"));
    CHECK_THAT(error_of(edit(k_gemm, "atol = 0", "atol = 0\nreltol = 1")), Catch::Contains("[check].reltol"));
    CHECK_THAT(error_of(edit(k_gemm, "[space]\n", "[space]\nconstraint = [\"1\"]\n")),
               Catch::Contains("[space].constraint"));
    CHECK_THAT(error_of(edit(k_gemm, "\nbytes = ", "\ntime = \"1\"\nbytes = ")), Catch::Contains("[metrics].time"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = 16", "BLOCK_K = 16\nBLOCK_Z = 1")),
               Catch::Contains("[default].BLOCK_Z"));
  }
  SECTION("kernel table") {
    CHECK_THAT(error_of(edit(k_gemm, "name = \"gemm\"\n", "")), Catch::Contains("[kernel].name"));
    CHECK_THAT(error_of(edit(k_gemm, "language = \"cuda\"", "language = \"rust\"")),
               Catch::Contains("[kernel].language") && Catch::Contains("rust"));
    // '..' parses: whether the file lies inside the kernel directory is the loader's question.
    CHECK(parse_kernel_spec(edit(k_gemm, "source = \"kernel.cu\"", "source = \"../x/kernel.cu\""),
                            "k.toml")
              .ok());
    CHECK_THAT(error_of(edit(k_gemm, "source = \"kernel.cu\"", "source = \"/etc/kernel.cu\"")),
               Catch::Contains("[kernel].source"));
    CHECK_THAT(error_of(edit(k_gemm, "entry = \"gemm\"", "entry = 3")),
               Catch::Contains("[kernel].entry") && Catch::Contains("integer"));
    CHECK_THAT(error_of(edit(k_gemm, "\"f32\", \"f16\"", "\"f32\", \"bf16\"")),
               Catch::Contains("[kernel].dtypes[1]") && Catch::Contains("bf16"));
    CHECK_THAT(error_of(edit(k_gemm, "\"f32\", \"f16\"", "\"f32\", \"f32\"")), Catch::Contains("duplicate"));
    CHECK_THAT(error_of(edit(k_gemm, "[\"M\", \"N\", \"K\"]", "[\"M\", \"N\", \"M\"]")),
               Catch::Contains("[kernel].shape[2]"));
    CHECK_THAT(error_of(edit(k_gemm, "flags = [\"-use_fast_math\"]", "flags = \"-O3\"")),
               Catch::Contains("[kernel].flags"));
    CHECK_THAT(error_of(edit(k_gemm, "flags = [\"-use_fast_math\"]", "inplace = \"yes\"")),
               Catch::Contains("[kernel].inplace"));
  }
  SECTION("params") {
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = [8, 16, 32]", "BLOCK_K = []\nK = [1]")),
               Catch::Contains("[params].BLOCK_K"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = [8, 16, 32]", "BLOCK_K = [8, 16, 32]\nK = [1]")),
               Catch::Contains("[params].K") && Catch::Contains("clash"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = [8, 16, 32]", "BLOCK_K = [8, 16, 8]")),
               Catch::Contains("[params].BLOCK_K[2]") && Catch::Contains("duplicate"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = [8, 16, 32]", "BLOCK_K = [8, 16.5, 32]")),
               Catch::Contains("[params].BLOCK_K[1]"));
  }
  SECTION("args") {
    CHECK_THAT(error_of(edit(k_gemm, "name = \"B\"", "name = \"A\"")), Catch::Contains("args[1].name"));
    CHECK_THAT(error_of(edit(k_gemm, "kind = \"out\"", "kind = \"in\"")), Catch::Contains("out or inout"));
    CHECK_THAT(error_of(edit(k_gemm, "kind = \"out\"", "kind = \"output\"")), Catch::Contains("args[2].kind"));
    CHECK_THAT(error_of(edit(k_gemm, "count = \"M * N\"\n", "")), Catch::Contains("args[2].count"));
    CHECK_THAT(error_of(edit(k_gemm, "value = \"M\"", "count = \"M\"")), Catch::Contains("args[3]"));
    CHECK_THAT(error_of(edit(k_gemm, "init = \"zero\"", "init = \"random\"")), Catch::Contains("args[2].init"));
    CHECK_THAT(error_of(edit(k_gemm, "dtype = \"f32\"", "dtype = \"f8\"")), Catch::Contains("args[1].dtype"));
  }
  SECTION("check and default") {
    CHECK_THAT(error_of(edit(k_gemm, "reference = \"default\"", "reference = \"ref_gemm\"")),
               Catch::Contains("[check].reference"));
    CHECK_THAT(error_of(edit(k_gemm, "rtol = 1e-3", "rtol = \"small\"")), Catch::Contains("[check].rtol"));
    CHECK_THAT(error_of(edit(k_gemm, "rtol = 1e-3", "rtol = -1.0")), Catch::Contains("[check].rtol"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = 16", "BLOCK_K = 17")),
               Catch::Contains("[default].BLOCK_K") && Catch::Contains("17"));
    CHECK_THAT(error_of(edit(k_gemm, "BLOCK_K = 16\n", "")), Catch::Contains("[default].BLOCK_K"));
    CHECK_THAT(error_of(edit(k_gemm, "[default]\nBLOCK_M = 64\nBLOCK_N = 64\nBLOCK_K = 16\n", "")),
               Catch::Contains("[default]"));
  }
}

TEST_CASE("core/kernel_spec: enum names", "[core][kernel_spec]") {
  CHECK(ktune::to_string(ktune::Language::cpp) == "cpp");
  CHECK(ktune::to_string(ktune::Language::cuda) == "cuda");
  CHECK(ktune::to_string(ktune::ArgKind::inout) == "inout");
  CHECK(ktune::to_string(ktune::ArgKind::scalar) == "scalar");
}

namespace {

// The blocked SGEMM of tests/kernels/gemm_blocked, typed by its declaration.
const std::string k_typed = R"toml([kernel]
name = "gemm_blocked"
language = "cpp"
source = "gemm_blocked.cpp"
entry = "gemm_blocked"
signature = "void gemm_blocked(const float* A, const float* B, float* C, int M, int N, int K)"
shape = ["M", "N", "K"]

[params]
BM = [16, 32]
BK = [16, 32]

[[args]]
name = "A"
kind = "in"
count = "M * K"

[[args]]
name = "B"
kind = "in"
count = "K * N"

[[args]]
name = "C"
kind = "out"
count = "M * N"
rtol = 1e-4

[[args]]
name = "M"
kind = "scalar"
value = "M"

[[args]]
name = "N"
kind = "scalar"
value = "N"

[[args]]
name = "K"
kind = "scalar"
value = "K"

[metrics]
bytes = "elem_bytes * (M * K + K * N + M * N)"

[check]
reference = "function"
source = "reference.cpp"
function = "gemm_reference"

[default]
BM = 32
BK = 16
)toml";

} // namespace

TEST_CASE("core/kernel_spec: a typed signature types the args, no dtypes, no adapter",
          "[core][kernel_spec][signature]") {
  auto parsed = parse_kernel_spec(k_typed, "tests/kernels/gemm_blocked/kernel.toml");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  const ktune::KernelSpec& spec = *parsed;
  REQUIRE(spec.signature.has_value());
  CHECK(spec.signature->name == "gemm_blocked");
  CHECK(spec.args[0].dtype == "f32");
  CHECK(spec.args[2].dtype == "f32");
  CHECK(spec.args[3].dtype == "i32");  // int M: not the i64 an untyped scalar gets
  CHECK_FALSE(spec.dtype_axis);
  CHECK(spec.dtypes == std::vector<std::string>{"f32"});  // the first output's element type
  CHECK(spec.args[2].rtol == Approx(1e-4));
  CHECK(spec.args[2].atol < 0);  // [check]'s
  CHECK(spec.check.reference == ktune::ReferenceKind::function);
  CHECK(spec.check.source == "reference.cpp");
  CHECK(spec.check.function == "gemm_reference");
  CHECK(spec.bytes == "elem_bytes * (M * K + K * N + M * N)");

  SECTION("\"source\" leaves the declaration to the loader") {
    auto deferred = parse_kernel_spec(
        edit(k_typed, "signature = \"void gemm_blocked(const float* A, const float* B, float* C, "
                      "int M, int N, int K)\"",
             "signature = \"source\""),
        "k.toml");
    INFO((deferred ? std::string() : deferred.error().message));
    REQUIRE(deferred.ok());
    CHECK_FALSE(deferred->signature.has_value());
    CHECK(deferred->args[3].dtype.empty());
  }
}

TEST_CASE("core/kernel_spec: a spec that disagrees with the declaration is a load error naming "
          "the file, the line, both types and the fix",
          "[core][kernel_spec][signature]") {
  SECTION("wrong scalar type") {
    const auto msg = error_of(edit(k_typed, "name = \"M\"\nkind = \"scalar\"",
                                   "name = \"M\"\nkind = \"scalar\"\ndtype = \"i64\""));
    CHECK_THAT(msg, Catch::StartsWith("kernels/gemm/kernel.toml:32: args[3] 'M'"));
    CHECK_THAT(msg, Catch::Contains("dtype = \"i64\"") && Catch::Contains("'int M' (i32)") &&
                        Catch::Contains("fix: write dtype = \"i32\""));
  }
  SECTION("wrong buffer type") {
    const auto msg = error_of(edit(k_typed, "count = \"K * N\"", "count = \"K * N\"\ndtype = \"f64\""));
    CHECK_THAT(msg, Catch::Contains("args[1] 'B'") && Catch::Contains("'const float* B' (f32)") &&
                        Catch::Contains("f64"));
  }
  SECTION("order, kind, const and count") {
    CHECK_THAT(error_of(edit(k_typed, "name = \"N\"", "name = \"Q\"")),
               Catch::Contains("named 'N'") && Catch::Contains("declaration's order"));
    CHECK_THAT(error_of(edit(k_typed, "name = \"M\"\nkind = \"scalar\"\nvalue = \"M\"",
                             "name = \"M\"\nkind = \"in\"\ncount = \"1\"")),
               Catch::Contains("is a buffer but") && Catch::Contains("'int M', a scalar"));
    CHECK_THAT(error_of(edit(k_typed, "name = \"B\"\nkind = \"in\"", "name = \"B\"\nkind = \"inout\"")),
               Catch::Contains("cannot write"));
    CHECK_THAT(error_of(edit(k_typed, ", int K)\"", ")\"")),
               Catch::Contains("6 [[args]]") && Catch::Contains("5 parameters"));
    CHECK_THAT(error_of(edit(k_typed, "void gemm_blocked(", "void gemm(")),
               Catch::Contains("entry is 'gemm_blocked'"));
    CHECK_THAT(error_of(edit(k_typed, "int N, int K", "short N, int K")),
               Catch::StartsWith("kernels/gemm/kernel.toml:6: [kernel].signature") &&
                   Catch::Contains("'short'"));
  }
  SECTION("missing reference, bad tolerance key") {
    const auto missing = error_of(edit(k_typed, "function = \"gemm_reference\"\n", ""));
    CHECK_THAT(missing, Catch::StartsWith("kernels/gemm/kernel.toml:48: [check].function"));
    CHECK_THAT(missing, Catch::Contains("fix: add function ="));
    CHECK_THAT(error_of(edit(k_typed, "source = \"reference.cpp\"\n", "")),
               Catch::Contains("[check].source") && Catch::Contains("fix"));
    const auto bad_key = error_of(edit(k_typed, "function = \"gemm_reference\"",
                                       "function = \"gemm_reference\"\ntolerance = 1e-3"));
    CHECK_THAT(bad_key, Catch::StartsWith("kernels/gemm/kernel.toml:51: [check].tolerance"));
    CHECK_THAT(bad_key, Catch::Contains("expected one of: reference, source, function, rtol, atol; "
                                        "fix: rename it to one of these or remove it"));
    CHECK_THAT(error_of(edit(k_typed, "rtol = 1e-4", "rtl = 1e-4")),
               Catch::StartsWith("kernels/gemm/kernel.toml:27: args[2].rtl"));
    CHECK_THAT(error_of(edit(k_typed, "count = \"M * K\"", "count = \"M * K\"\natol = 0.1")),
               Catch::Contains("args[0].atol") && Catch::Contains("out or inout"));
    CHECK_THAT(error_of(edit(k_typed, "reference = \"function\"", "reference = \"ref\"")),
               Catch::Contains("\"function\""));
  }
  SECTION("no dtypes needs typed buffers") {
    const auto untyped =
        edit(k_typed, "signature = \"void gemm_blocked(const float* A, const float* B, float* C, "
                      "int M, int N, int K)\"\n", "");
    CHECK_THAT(error_of(edit(untyped, "[check]\nreference = \"function\"\nsource = \"reference.cpp\"\n"
                                      "function = \"gemm_reference\"\n", "")),
               Catch::Contains("args[2].dtype") && Catch::Contains("without [kernel].dtypes"));
  }
  SECTION("flags_remove takes the fixed flags only") {
    auto ok = parse_kernel_spec(edit(k_typed, "shape = [", "flags_remove = [\"-march=native\"]\nshape = ["), "k.toml");
    REQUIRE(ok.ok());
    CHECK(ok->flags_remove == std::vector<std::string>{"-march=native"});
    CHECK_THAT(error_of(edit(k_typed, "shape = [", "flags_remove = [\"-fPIC\"]\nshape = [")),
               Catch::Contains("[kernel].flags_remove[0]"));
  }
}

TEST_CASE("core/kernel_spec: inputs (distributions, seeds) and buffer placement",
          "[core][kernel_spec]") {
  auto parsed = parse_kernel_spec(
      edit(edit(k_typed, "count = \"M * K\"", "count = \"M * K\"\ninit = \"normal(0, 0.5)\"\nseed = 3"),
           "[default]", "[buffers]\nalignment = 16\noffset = 4\n\n[default]"),
      "k.toml");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  CHECK(parsed->args[0].init == "normal(0, 0.5)");
  CHECK(parsed->args[0].seed == 3);
  CHECK(parsed->args[1].seed == -1);
  CHECK(parsed->buffer_alignment == 16);
  CHECK(parsed->buffer_offset == 4);

  CHECK_THAT(error_of(edit(k_typed, "count = \"M * K\"", "count = \"M * K\"\ninit = \"normal(0, -1)\"")),
             Catch::StartsWith("kernels/gemm/kernel.toml:17: args[0].init") &&
                 Catch::Contains("normal(mean, std)"));
  CHECK_THAT(error_of(edit(k_typed, "count = \"M * N\"", "count = \"M * N\"\nseed = 1")),
             Catch::Contains("args[2].seed") && Catch::Contains("not filled"));
  CHECK_THAT(error_of(edit(k_typed, "[default]", "[buffers]\nalignment = 48\n[default]")),
             Catch::Contains("[buffers].alignment") && Catch::Contains("power of two"));
  CHECK_THAT(error_of(edit(k_typed, "[default]", "[buffers]\noffset = 64\n[default]")),
             Catch::Contains("[buffers].offset"));
  CHECK_THAT(error_of(edit(k_typed, "[default]", "[buffers]\nalign = 64\n[default]")),
             Catch::Contains("[buffers].align") && Catch::Contains("alignment, offset"));
}

TEST_CASE("core/kernel_spec: a CUDA declaration is checked the same way and types the scalars",
          "[core][kernel_spec][signature]") {
  const std::string with_signature = edit(
      k_gemm, "entry = \"gemm\"",
      "entry = \"gemm\"\nsignature = \"extern \\\"C\\\" __global__ void gemm(const KTUNE_DTYPE* A, "
      "const float* __restrict__ B, KTUNE_DTYPE* C, int m)\"");
  auto parsed = parse_kernel_spec(with_signature, "kernels/gemm/kernel.toml");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  CHECK(parsed->args[0].dtype.empty());  // KTUNE_DTYPE: the job's dtype
  CHECK(parsed->args[1].dtype == "f32");
  CHECK(parsed->args[3].dtype == "i32");  // int m: 4 bytes in the driver's parameter array

  CHECK_THAT(error_of(edit(with_signature, "const float* __restrict__ B", "const double* B")),
             Catch::Contains("args[1] 'B': dtype = \"f32\"") &&
                 Catch::Contains("'const double* B' (f64)"));
}

TEST_CASE("core/kernel_spec: reference = \"files\" needs an expected file for every output",
          "[core][kernel_spec]") {
  const std::string files = edit(k_typed, "reference = \"function\"\nsource = \"reference.cpp\"\n"
                                          "function = \"gemm_reference\"",
                                 "reference = \"files\"");
  CHECK_THAT(error_of(files), Catch::Contains("args[2].expected") && Catch::Contains("fix: add expected"));
  auto parsed = parse_kernel_spec(edit(files, "rtol = 1e-4", "expected = \"C_{shape}.bin\""), "k.toml");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed.ok());
  CHECK(parsed->check.reference == ktune::ReferenceKind::files);
  CHECK(parsed->args[2].expected == "C_{shape}.bin");
  CHECK_THAT(error_of(edit(k_typed, "rtol = 1e-4", "expected = \"C.bin\"")),
             Catch::Contains("args[2].expected") && Catch::Contains("reference = \"files\""));
}
