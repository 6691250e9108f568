// jobs/artifact_cache: artifacts published with the content hash recorded with their key, and
// checked before use; HostCompiler compiles a damaged cached artifact again.
#include "tests/support/paths.hpp"
#include "compiler/host_compiler.hpp"
#include "jobs/artifact_cache.hpp"
#include "jobs/kernel_registry.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using ktune::ArtifactState;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

TEST_CASE("a stored artifact verifies, truncated, emptied, replaced or unrecorded it does not",
          "[artifact_cache]") {
  ktune::test::TempDir tmp;
  const std::string path = ktune::artifact_path(tmp.str(), "abcdef0123", ".so");
  CHECK(path == (tmp.path() / "ab" / "abcdef0123.so").string());
  CHECK(ktune::verify_artifact(path).state == ArtifactState::missing);
  const std::string bytes(10000, 'x');
  REQUIRE(ktune::store_artifact(path, bytes).ok());
  std::string read;
  const auto ok = ktune::verify_artifact(path, &read);
  INFO(ok.reason);
  CHECK(ok.ok());
  CHECK(read == bytes);

  SECTION("truncated") {
    write_bytes(path, bytes.substr(0, 5000));
    const auto check = ktune::verify_artifact(path);
    CHECK(check.state == ArtifactState::mismatch);
    CHECK_THAT(check.reason, Catch::Contains("it has 5000 bytes, 10000 were recorded"));
  }
  SECTION("emptied") {
    write_bytes(path, "");
    CHECK(ktune::verify_artifact(path).state == ArtifactState::mismatch);
  }
  SECTION("replaced by other bytes of the same size") {
    write_bytes(path, std::string(10000, 'y'));
    const auto check = ktune::verify_artifact(path);
    CHECK(check.state == ArtifactState::mismatch);
    CHECK_THAT(check.reason, Catch::Contains("content hash differs"));
  }
  SECTION("without its record") {
    fs::remove(path + ".sum");
    CHECK(ktune::verify_artifact(path).state == ArtifactState::unrecorded);
  }
  SECTION("a link in its place") {
    fs::remove(path);
    fs::create_symlink(tmp.path() / "elsewhere", path);
    write_bytes(tmp.path() / "elsewhere", bytes);
    CHECK(ktune::verify_artifact(path).state == ArtifactState::unreadable);
  }
  SECTION("published again, it replaces what was there") {
    write_bytes(path, "junk");
    REQUIRE(ktune::store_artifact(path, bytes).ok());
    CHECK(ktune::verify_artifact(path).ok());
  }
  SECTION("scan_cache sees the damage") {
    write_bytes(path, "");
    write_bytes(tmp.path() / "ab" / "ffff.so.sum", "xxh3-128 0 0\n");
    auto scan = ktune::scan_cache(tmp.str());
    REQUIRE(scan.ok());
    REQUIRE(scan->entries.size() == 2);
    for (const auto& entry : scan->entries) CHECK_FALSE(entry.check.ok());
  }
}

TEST_CASE("HostCompiler compiles a damaged cached artifact again and says why", "[artifact_cache]") {
  ktune::test::TempDir cache;
  auto kernel =
      ktune::load_kernel(ktune::test::source_dir() + "/kernels_src/reduce_sum/kernel.toml");
  REQUIRE(kernel.ok());
  auto job = ktune::make_compile_job(*kernel, kernel->spec.default_config, "f32", cache.str());
  REQUIRE(job.ok());
  ktune::HostCompiler compiler;
  const auto first = compiler.compile(*job);
  INFO(first.log);
  REQUIRE(first.status == ktune::CandidateStatus::ok);
  CHECK_FALSE(first.cached);
  CHECK(ktune::verify_artifact(first.artifact_path).ok());
  const std::string good = read_bytes(first.artifact_path);

  const auto hit = compiler.compile(*job);
  CHECK(hit.cached);
  CHECK(hit.repaired.empty());

  write_bytes(first.artifact_path, good.substr(0, good.size() / 3));
  const auto repaired = compiler.compile(*job);
  INFO(repaired.log);
  CHECK(repaired.status == ktune::CandidateStatus::ok);
  CHECK_FALSE(repaired.cached);
  CHECK_THAT(repaired.repaired, Catch::Contains("is not what was compiled"));
  CHECK(repaired.infra.empty());
  CHECK(ktune::verify_artifact(repaired.artifact_path).ok());
}
