// ktune new-kernel and check-kernel, in process and without a daemon: the skeleton passes the
// check (compiled with the real host compiler), and a spec that disagrees with its declaration
// fails it naming the file, the line, both types and the fix.
#include "cli/kernel_commands.hpp"
#include "tests/support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

using ktune::test::TempDir;

namespace {

struct Captured {
  std::ostringstream out, err;
  ktune::cli::Output io{out, err};
};

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("ktune new-kernel writes a skeleton that ktune check-kernel accepts",
          "[cli][kernel_commands]") {
  TempDir dir;
  Captured made;
  REQUIRE(ktune::cli::new_kernel("scale", "cpp", dir.str(), made.io) == ktune::cli::k_exit_ok);
  CHECK_THAT(made.out.str(), Catch::Contains("next: ktune check-kernel"));
  for (const char* file : {"kernel.toml", "scale.cpp", "reference.cpp"}) {
    CHECK(std::filesystem::is_regular_file(dir.path() / "scale" / file));
  }

  Captured checked;
  const int code = ktune::cli::check_kernel((dir.path() / "scale").string(), "N=5000", checked.io);
  INFO(checked.out.str() << checked.err.str());
  CHECK(code == ktune::cli::k_exit_ok);
  CHECK_THAT(checked.out.str(), Catch::Contains("n: scalar i32 = N"));
  CHECK_THAT(checked.out.str(), Catch::Contains("params: UNROLL(4), CHUNK(3); space: 12 configs"));
  CHECK_THAT(checked.out.str(), Catch::Contains("at N=5000: 12 admitted configs"));
  CHECK_THAT(checked.out.str(), Catch::Contains("compiled the reference scale_reference"));
  CHECK_THAT(checked.out.str(), Catch::Contains("ok: scale is ready to tune"));

  SECTION("it refuses to overwrite, and a name must be a C identifier") {
    Captured again;
    CHECK(ktune::cli::new_kernel("scale", "cpp", dir.str(), again.io) == ktune::cli::k_exit_error);
    CHECK_THAT(again.err.str(), Catch::Contains("already exists"));
    Captured bad;
    CHECK(ktune::cli::new_kernel("my-kernel", "cpp", dir.str(), bad.io) == ktune::cli::k_exit_usage);
  }
  SECTION("a wrong scalar type fails the check at its line, naming both types and the fix") {
    const auto spec = dir.path() / "scale" / "kernel.toml";
    std::string text = read(spec);
    const auto at = text.find("value = \"N\"");
    REQUIRE(at != std::string::npos);
    text.insert(at + 11, "\ndtype = \"i64\"");
    dir.write("scale/kernel.toml", text);
    Captured broken;
    CHECK(ktune::cli::check_kernel((dir.path() / "scale").string(), "", broken.io) ==
          ktune::cli::k_exit_error);
    CHECK_THAT(broken.err.str(), Catch::Contains(spec.string() + ":"));
    CHECK_THAT(broken.err.str(), Catch::Contains("args[2] 'n': dtype = \"i64\"") &&
                                     Catch::Contains("'int n' (i32)") &&
                                     Catch::Contains("fix: write dtype = \"i32\""));
  }
  SECTION("a candidate that does not compile fails the check with the compiler's words") {
    dir.write("scale/scale.cpp", "void scale(const float* x, float* y, int n, float a) { oops }\n");
    Captured broken;
    CHECK(ktune::cli::check_kernel((dir.path() / "scale").string(), "", broken.io) ==
          ktune::cli::k_exit_error);
    CHECK_THAT(broken.err.str(), Catch::Contains("the [default] config does not compile") &&
                                     Catch::Contains("oops"));
  }
}

TEST_CASE("ktune new-kernel --lang cuda writes a typed __global__ skeleton that loads",
          "[cli][kernel_commands]") {
  TempDir dir;
  Captured made;
  REQUIRE(ktune::cli::new_kernel("cscale", "cuda", dir.str(), made.io) == ktune::cli::k_exit_ok);
  CHECK(std::filesystem::is_regular_file(dir.path() / "cscale" / "cscale.cu"));
  Captured checked;
  const int code = ktune::cli::check_kernel((dir.path() / "cscale").string(), "N=100000", checked.io);
  INFO(checked.out.str() << checked.err.str());
  CHECK(code == ktune::cli::k_exit_ok);
  CHECK_THAT(checked.out.str(), Catch::Contains("entry: cscale (typed: 4 parameters"));
  CHECK_THAT(checked.out.str(), Catch::Contains("n: scalar i32 = N"));
  CHECK_THAT(checked.out.str(), Catch::Contains("at N=100000: 12 admitted configs"));
  CHECK_THAT(checked.out.str(), Catch::Contains("ktune compile-check cscale"));
}

TEST_CASE("ktune --json new-kernel and check-kernel print one JSON document, errors too",
          "[cli][kernel_commands]") {
  TempDir dir;
  Captured made;
  made.io.json = true;
  REQUIRE(ktune::cli::new_kernel("scale", "cpp", dir.str(), made.io) == ktune::cli::k_exit_ok);
  INFO(made.out.str());
  const auto written = nlohmann::json::parse(made.out.str());
  CHECK(written["kernel"] == "scale");
  CHECK(written["files"].size() == 3);
  CHECK(written["files"][0] == (dir.path() / "scale" / "kernel.toml").string());
  CHECK(written["next"] == "ktune check-kernel " + (dir.path() / "scale").string());

  Captured checked;
  checked.io.json = true;
  CHECK(ktune::cli::check_kernel((dir.path() / "scale").string(), "N=5000", checked.io) ==
        ktune::cli::k_exit_ok);
  INFO(checked.out.str());
  CHECK(checked.err.str().empty());
  const auto report = nlohmann::json::parse(checked.out.str());
  CHECK(report["kernel"] == "scale");
  CHECK(report["language"] == "cpp");
  CHECK(report["ready"] == true);
  CHECK(report["space"] == 12);
  CHECK(report["params"][0]["name"] == "UNROLL");
  CHECK(report["params"][0]["values"] == nlohmann::json::array({1, 2, 4, 8}));
  CHECK(report["args"][2]["name"] == "n");
  CHECK(report["args"][2]["dtype"] == "i32");
  CHECK(report["at_shape"]["shape"] == "N=5000");
  CHECK(report["at_shape"]["admitted"] == 12);
  CHECK(report["compiled"].size() == 2);

  SECTION("a candidate that does not compile is an error object with the compiler's words") {
    dir.write("scale/scale.cpp", "void scale(const float* x, float* y, int n, float a) { oops }\n");
    Captured broken;
    broken.io.json = true;
    CHECK(ktune::cli::check_kernel((dir.path() / "scale").string(), "", broken.io) ==
          ktune::cli::k_exit_error);
    INFO(broken.out.str());
    const auto error = nlohmann::json::parse(broken.out.str());
    CHECK(error["error"]["code"] == "compile_error");
    CHECK_THAT(error["error"]["message"].get<std::string>(),
               Catch::Contains("the [default] config does not compile") && Catch::Contains("oops"));
    CHECK(broken.err.str().empty());
  }
  SECTION("new-kernel's refusal is an error object") {
    Captured again;
    again.io.json = true;
    CHECK(ktune::cli::new_kernel("scale", "cpp", dir.str(), again.io) == ktune::cli::k_exit_error);
    CHECK(nlohmann::json::parse(again.out.str())["error"]["code"] == "io_error");
  }
}
