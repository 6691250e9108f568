#include <catch2/catch.hpp>

#include "jobs/kernel_registry.hpp"
#include "jobs/source_archive.hpp"
#include "tests/support/temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {

// A family in a kernel directory that includes a header of its own and a source shared with
// other families through '..'.
void write_family(const ktune::test::TempDir& dir, const std::string& passes) {
  dir.write("kernels/sum/kernel.toml",
            "[kernel]\nname = \"sum\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
            "entry = \"sum\"\nshape = [\"N\"]\ndtypes = [\"f32\"]\n"
            "\n[params]\nU = [1, 2]\n"
            "\n[[args]]\nname = \"X\"\nkind = \"out\"\ncount = \"N\"\n"
            "\n[[args]]\nname = \"N\"\nkind = \"scalar\"\nvalue = \"N\"\n"
            "\n[default]\nU = 1\n");
  dir.write("kernels/sum/kernel.cpp",
            "#include \"passes.hpp\"\n#include \"../common/shared.hpp\"\n"
            "extern \"C\" void sum(void**) {}\n");
  dir.write("kernels/sum/passes.hpp", "#define PASSES " + passes + "\n");
  dir.write("kernels/common/shared.hpp", "// shared by the families of this directory\n");
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

} // namespace

TEST_CASE("The source archive keeps a family as it was, by its source hash", "[compiler][archive]") {
  ktune::test::TempDir dir;
  write_family(dir, "20");
  const std::string kernels = (dir.path() / "kernels").string();
  const std::string root = ktune::source_archive_dir((dir.path() / "cache").string());
  auto before = ktune::load_kernel((dir.path() / "kernels/sum/kernel.toml").string(), kernels);
  REQUIRE(before.ok());
  CHECK(before->files.size() == 4);  // spec, source, its header, the shared header

  auto wrote = ktune::archive_kernel(*before, root);
  REQUIRE(wrote.ok());
  CHECK(*wrote);
  SECTION("a second archive of the same source writes nothing") {
    auto again = ktune::archive_kernel(*before, root);
    REQUIRE(again.ok());
    CHECK_FALSE(*again);
  }
  SECTION("after the family changed, the old source loads from the archive with its hash") {
    write_family(dir, "22");
    auto after = ktune::load_kernel((dir.path() / "kernels/sum/kernel.toml").string(), kernels);
    REQUIRE(after.ok());
    REQUIRE(after->source_hash != before->source_hash);
    auto old = ktune::load_archived_kernel(root, before->source_hash);
    REQUIRE(old.ok());
    REQUIRE(old->has_value());
    CHECK((*old)->source_hash == before->source_hash);
    CHECK(read((*old)->source_path) == read((dir.path() / "kernels/sum/kernel.cpp")));
    CHECK(read(fs::path((*old)->dir) / "passes.hpp") == "#define PASSES 20\n");
    CHECK((*old)->spec.name == "sum");
  }
  SECTION("a hash the archive does not hold is no entry; nor is a name that is not a hash") {
    auto none = ktune::load_archived_kernel(root, "0123456789abcdef0123456789abcdef");
    REQUIRE(none.ok());
    CHECK_FALSE(none->has_value());
    auto escape = ktune::load_archived_kernel(root, "../../etc");
    REQUIRE(escape.ok());
    CHECK_FALSE(escape->has_value());
  }
  SECTION("an archived file changed afterwards is refused, naming the hashes") {
    std::ofstream(fs::path(root) / before->source_hash / "files/sum/passes.hpp") << "#define PASSES 99\n";
    auto tampered = ktune::load_archived_kernel(root, before->source_hash);
    REQUIRE_FALSE(tampered.ok());
    CHECK(tampered.error().code == ktune::ErrorCode::source_changed);
    CHECK_THAT(tampered.error().message, Catch::Contains(before->source_hash));
  }
}
