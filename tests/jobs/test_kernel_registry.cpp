#include "tests/support/paths.hpp"
#include <catch2/catch.hpp>

#include "jobs/kernel_registry.hpp"
#include "tests/support/temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <utility>

namespace fs = std::filesystem;
using ktune::KernelRegistry;

namespace {

const std::string k_kernels_dir = ktune::test::source_dir() + "/kernels_src";

// A minimal valid spec for a family named `name` whose source is `source`.
std::string spec_text(const std::string& name, const std::string& source = "kernel.cpp",
                      const std::string& extra_kernel_keys = "") {
  return "[kernel]\n"
         "name = \"" + name + "\"\n"
         "language = \"cpp\"\n"
         "source = \"" + source + "\"\n"
         "entry = \"" + name + "\"\n"
         "shape = [\"N\"]\n"
         "dtypes = [\"f32\", \"f64\"]\n" +
         extra_kernel_keys +
         "\n[params]\nU = [1, 2]\n"
         "\n[[args]]\nname = \"X\"\nkind = \"out\"\ncount = \"N\"\n"
         "\n[[args]]\nname = \"N\"\nkind = \"scalar\"\nvalue = \"N\"\n"
         "\n[default]\nU = 1\n";
}

// Writes a family <dir>/<subdir>/{kernel.toml,kernel.cpp}.
void write_family(const ktune::test::TempDir& dir, const std::string& subdir,
                  const std::string& name,
                  const std::string& source_text = "extern \"C\" void f(void**) {}\n") {
  dir.write(subdir + "/kernel.toml", spec_text(name));
  dir.write(subdir + "/kernel.cpp", source_text);
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

} // namespace

TEST_CASE("KernelRegistry loads the shipped kernel families", "[compiler]") {
  KernelRegistry registry;
  registry.load({k_kernels_dir});
  for (const auto& broken : registry.broken())
    FAIL(broken.spec_path << ": " << broken.error.message);
  const auto names = registry.names();
  CHECK(contains(names, "gemm"));
  CHECK(contains(names, "reduce_sum"));

  auto gemm = registry.find("gemm");
  REQUIRE(gemm.ok());
  CHECK(gemm->spec.name == "gemm");
  CHECK(gemm->spec.language == ktune::Language::cpp);
  CHECK(gemm->dir == fs::path(k_kernels_dir + "/gemm").lexically_normal().string());
  CHECK(gemm->spec_path == gemm->dir + "/kernel.toml");
  CHECK(gemm->source_path == gemm->dir + "/kernel.cpp");
  CHECK(gemm->source_hash.size() == 32);

  auto again = registry.find("gemm");
  REQUIRE(again.ok());
  CHECK(again->source_hash == gemm->source_hash);
  auto reduce = registry.find("reduce_sum");
  REQUIRE(reduce.ok());
  CHECK(reduce->source_hash != gemm->source_hash);
}

TEST_CASE("KernelRegistry names unknown kernels and the directories searched", "[compiler]") {
  ktune::test::TempDir dir;
  KernelRegistry registry;
  registry.load({k_kernels_dir, dir.str(), dir.str() + "/missing"});

  auto found = registry.find("no_such_kernel");
  REQUIRE_FALSE(found.ok());
  CHECK(found.error().code == ktune::ErrorCode::unknown_kernel);
  CHECK_THAT(found.error().message, Catch::Contains("no_such_kernel") &&
                                        Catch::Contains(k_kernels_dir) &&
                                        Catch::Contains(dir.str()));

  SECTION("names that are not directory names are unknown, never paths") {
    dir.write("outside/kernel.toml", spec_text("outside"));
    dir.write("outside/kernel.cpp", "");
    for (const char* name : {"../outside", "..", "", "a/b"}) {
      auto result = registry.find(name);
      REQUIRE_FALSE(result.ok());
      CHECK(result.error().code == ktune::ErrorCode::unknown_kernel);
    }
  }

  SECTION("no directories configured") {
    KernelRegistry empty;
    empty.load({});
    auto result = empty.find("gemm");
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == ktune::ErrorCode::unknown_kernel);
  }
}

TEST_CASE("KernelRegistry keeps broken specs with their reason", "[compiler]") {
  ktune::test::TempDir dir;
  write_family(dir, "good", "good");
  dir.write("bad/kernel.toml", "[kernel]\nname = \"bad\"\nlanguage = \"cpp\"\n");
  dir.write("syntax/kernel.toml", "[kernel\n");
  dir.write("nosource/kernel.toml", spec_text("nosource", "missing.cpp"));
  dir.write("not_a_family/readme.txt", "no spec here");

  KernelRegistry registry;
  registry.load({dir.str()});
  const auto names = registry.names();
  CHECK(contains(names, "good"));
  CHECK(contains(names, "bad"));
  CHECK(contains(names, "syntax"));
  CHECK(contains(names, "nosource"));
  CHECK_FALSE(contains(names, "not_a_family"));
  CHECK(registry.broken().size() == 3);
  for (const auto& broken : registry.broken()) CHECK(broken.error.code == ktune::ErrorCode::spec_error);

  SECTION("find answers a broken family with its spec error") {
    auto bad = registry.find("bad");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(bad.error().message, Catch::Contains((dir.path() / "bad/kernel.toml").string()));
  }

  SECTION("a missing source names the spec and the source key") {
    auto nosource = registry.find("nosource");
    REQUIRE_FALSE(nosource.ok());
    CHECK(nosource.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(nosource.error().message,
               Catch::Contains((dir.path() / "nosource/kernel.toml").string()) &&
                   Catch::Contains("source") && Catch::Contains("missing.cpp"));
  }

  SECTION("a repaired family is found again") {
    dir.write("nosource/missing.cpp", "extern \"C\" void nosource(void**) {}\n");
    auto repaired = registry.find("nosource");
    REQUIRE(repaired.ok());
    CHECK(registry.broken().size() == 2);
  }

  SECTION("a family broken after load is reported broken") {
    dir.write("good/kernel.toml", "[kernel]\n");
    auto good = registry.find("good");
    REQUIRE_FALSE(good.ok());
    CHECK(good.error().code == ktune::ErrorCode::spec_error);
  }
}

TEST_CASE("KernelRegistry re-reads families on every find", "[compiler]") {
  ktune::test::TempDir dir;
  KernelRegistry registry;
  registry.load({dir.str()});

  SECTION("a family added after load is found") {
    CHECK_FALSE(registry.find("late").ok());
    write_family(dir, "late", "late");
    auto late = registry.find("late");
    REQUIRE(late.ok());
    CHECK(contains(registry.names(), "late"));
  }

  SECTION("an edited source changes the hash") {
    write_family(dir, "edit", "edit");
    auto before = registry.find("edit");
    REQUIRE(before.ok());
    dir.write("edit/kernel.cpp", "extern \"C\" void f(void**) { /* faster */ }\n");
    auto after = registry.find("edit");
    REQUIRE(after.ok());
    CHECK(after->source_hash != before->source_hash);
  }

  SECTION("a family whose directory has another name is found by its spec name") {
    write_family(dir, "some_dir", "renamed");
    registry.load({dir.str()});
    auto renamed = registry.find("renamed");
    REQUIRE(renamed.ok());
    CHECK(renamed->spec.name == "renamed");
    CHECK_FALSE(registry.find("some_dir").ok());
  }

  SECTION("the first directory wins; a duplicate is listed as broken") {
    ktune::test::TempDir second;
    write_family(dir, "dup", "dup", "// first\n");
    write_family(second, "dup", "dup", "// second\n");
    registry.load({dir.str(), second.str()});
    auto dup = registry.find("dup");
    REQUIRE(dup.ok());
    CHECK(dup->dir == (dir.path() / "dup").string());
    REQUIRE(registry.broken().size() == 1);
    CHECK_THAT(registry.broken()[0].error.message, Catch::Contains("already defined"));
  }
}

TEST_CASE("The source hash covers the spec, the source and its quoted includes", "[compiler]") {
  ktune::test::TempDir dir;
  dir.write("k/kernel.toml", spec_text("k"));
  dir.write("k/kernel.cpp",
            "#include \"inc/helper.hpp\"\n#include <vector>\n  #  include \"missing.hpp\"\n");
  dir.write("k/inc/helper.hpp",
            "#pragma once\n#include \"nested.hpp\"\n#include \"../kernel.cpp\"\n");
  dir.write("k/inc/nested.hpp", "#define NESTED 1\n#include \"helper.hpp\"\n");
  dir.write("k/unrelated.hpp", "#define UNRELATED 1\n");
  const std::string spec_path = (dir.path() / "k/kernel.toml").string();

  auto hash = [&] {
    auto kernel = ktune::load_kernel(spec_path);
    REQUIRE(kernel.ok());
    return kernel->source_hash;
  };
  const std::string original = hash();
  CHECK(hash() == original);

  SECTION("a directly included header") {
    dir.write("k/inc/helper.hpp", "#pragma once\n#include \"nested.hpp\"\n// changed\n");
    CHECK(hash() != original);
  }

  SECTION("a header included by a header") {
    dir.write("k/inc/nested.hpp", "#define NESTED 2\n#include \"helper.hpp\"\n");
    CHECK(hash() != original);
  }

  SECTION("the spec text") {
    dir.write("k/kernel.toml", spec_text("k") + "# a comment\n");
    CHECK(hash() != original);
  }

  SECTION("a file nobody includes does not count") {
    dir.write("k/unrelated.hpp", "#define UNRELATED 2\n");
    CHECK(hash() == original);
  }

  SECTION("a header that appears later is picked up") {
    dir.write("k/missing.hpp", "#define NOW_PRESENT 1\n");
    CHECK(hash() != original);
  }
}

TEST_CASE("make_compile_job builds the job for one config", "[compiler]") {
  ktune::test::TempDir dir;
  dir.write("k/kernel.toml", spec_text("k", "kernel.cpp", "flags = [\"-ffast-math\"]\n"));
  dir.write("k/kernel.cpp", "");
  auto kernel = ktune::load_kernel((dir.path() / "k/kernel.toml").string());
  REQUIRE(kernel.ok());

  SECTION("fields") {
    auto job = ktune::make_compile_job(*kernel, {{"U", 2}}, "f64", "/cache");
    REQUIRE(job.ok());
    CHECK(job->kernel == "k");
    CHECK(job->language == "cpp");
    CHECK(job->source_path == kernel->source_path);
    CHECK(job->include_dirs == std::vector<std::string>{kernel->dir});
    CHECK(job->defines == ktune::NamedValues{{"U", 2}});
    CHECK(job->dtype == "f64");
    CHECK(job->extra_flags == std::vector<std::string>{"-ffast-math"});
    CHECK(job->source_hash == kernel->source_hash);
    CHECK(job->cache_dir == "/cache");
  }

  SECTION("a dtype the family does not declare") {
    auto job = ktune::make_compile_job(*kernel, {{"U", 2}}, "i32", "/cache");
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_dtype);
    CHECK_THAT(job.error().message, Catch::Contains("'k'") && Catch::Contains("'i32'") &&
                                        Catch::Contains("f32, f64"));
  }
}

TEST_CASE("KernelRegistry keys families by name and language", "[compiler]") {
  SECTION("the shipped CUDA families sit in a group next to the C++ ones") {
    KernelRegistry registry;
    registry.load({k_kernels_dir});
    for (const auto& broken : registry.broken())
      FAIL(broken.spec_path << ": " << broken.error.message);
    const auto families = registry.families();
    for (const char* name : {"gemm", "reduce_sum", "softmax", "transpose"}) {
      INFO(name);
      CHECK(std::count(families.begin(), families.end(),
                       std::pair{std::string(name), ktune::Language::cuda}) == 1);
    }
    auto cpp = registry.find("gemm", ktune::Language::cpp);
    auto cuda = registry.find("gemm", ktune::Language::cuda);
    REQUIRE(cpp.ok());
    REQUIRE(cuda.ok());
    CHECK(cpp->spec.language == ktune::Language::cpp);
    CHECK(cuda->spec.language == ktune::Language::cuda);
    CHECK(cuda->dir == fs::path(k_kernels_dir + "/cuda/gemm").lexically_normal().string());
    CHECK(registry.find("gemm")->spec.language == ktune::Language::cpp); // own families first

    auto softmax_cpp = registry.find("softmax", ktune::Language::cpp);
    REQUIRE_FALSE(softmax_cpp.ok());
    CHECK(softmax_cpp.error().code == ktune::ErrorCode::unknown_kernel);
    CHECK(softmax_cpp.error().message.find("written in cpp") != std::string::npos);
    CHECK(registry.find("softmax").ok());
  }

  SECTION("one name in one language twice is a duplicate; in two languages it is not") {
    ktune::test::TempDir dir;
    write_family(dir, "fam", "fam");
    write_family(dir, "group/fam", "fam");
    std::string cuda_spec = spec_text("fam", "kernel.cu");
    cuda_spec.replace(cuda_spec.find("\"cpp\""), 5, "\"cuda\"");
    cuda_spec += "\n[launch]\ngrid = [\"1\", \"1\", \"1\"]\nblock = [\"32\", \"1\", \"1\"]\n"
                 "shared_bytes = \"0\"\n";
    dir.write("cuda/fam/kernel.toml", cuda_spec);
    dir.write("cuda/fam/kernel.cu", "extern \"C\" __global__ void fam(float*, long long) {}\n");
    KernelRegistry registry;
    registry.load({dir.str()});
    REQUIRE(registry.broken().size() == 1);
    CHECK(registry.broken()[0].spec_path.find("group/fam") != std::string::npos);
    CHECK(registry.broken()[0].error.message.find("already defined") != std::string::npos);
    CHECK(registry.find("fam", ktune::Language::cuda).ok());
    CHECK(registry.find("fam", ktune::Language::cpp)->dir ==
          fs::path(dir.str() + "/fam").lexically_normal().string());
  }

  SECTION("language_for_device") {
    CHECK(ktune::language_for_device("cpu") == ktune::Language::cpp);
    CHECK(ktune::language_for_device("cuda:1") == ktune::Language::cuda);
    CHECK(ktune::language_for_device("cuda") == ktune::Language::cuda);
  }
}

TEST_CASE("Families of one kernel directory may share a source through '..', nothing outside it",
          "[compiler]") {
  ktune::test::TempDir dir;
  dir.write("kernels/common/scale.cpp", "#include \"scale.hpp\"\nextern \"C\" void a(void**) {}\n");
  dir.write("kernels/common/scale.hpp", "#define SCALE 2\n");
  dir.write("outside/secret.cpp", "extern \"C\" void b(void**) {}\n");
  dir.write("kernels/a/kernel.toml", spec_text("a", "../common/scale.cpp"));
  dir.write("kernels/b/kernel.toml", spec_text("b", "../../outside/secret.cpp"));
  const std::string kernels = (dir.path() / "kernels").string();

  KernelRegistry registry;
  registry.load({kernels});
  auto a = registry.find("a");
  INFO((a ? std::string() : a.error().message));
  REQUIRE(a.ok());
  CHECK(a->source_path == (dir.path() / "kernels/common/scale.cpp").string());
  auto b = registry.find("b");
  REQUIRE_FALSE(b.ok());
  CHECK_THAT(b.error().message, Catch::Contains("[kernel].source") &&
                                    Catch::Contains("outside the kernel directory " + kernels));

  SECTION("the shared header is part of the source hash") {
    const std::string before = a->source_hash;
    dir.write("kernels/common/scale.hpp", "#define SCALE 3\n");
    auto again = registry.find("a");
    REQUIRE(again.ok());
    CHECK(again->source_hash != before);
  }
  SECTION("loaded on its own, a family reads only its own directory") {
    auto alone = ktune::load_kernel(kernels + "/a/kernel.toml");
    REQUIRE_FALSE(alone.ok());
    CHECK_THAT(alone.error().message, Catch::Contains("outside the family directory"));
  }
}
