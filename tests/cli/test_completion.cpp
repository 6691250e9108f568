// What the real `ktune` binary generates from its CLI definition and what it finds in its shipped
// data: the bash completion run in bash as a shell runs it (COMP_WORDS, COMP_CWORD, _ktune), the
// zsh and fish scripts' rules, the man pages, and a shipped sweep named from outside a checkout.
#include "tests/support/paths.hpp"
#include "cli/shipped_data.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

namespace {

namespace fs = std::filesystem;

const std::string k_ktune = ktune::test::bin_dir() + "/ktune";

struct Shell {
  int code = -1;
  std::string out;
};

// Runs `command` with sh; stdout (stderr too with 2>&1 in the command).
Shell sh(const std::string& command) {
  Shell r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.out += buffer.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What bash's completion offers for the words typed so far (the last one is being completed).
std::vector<std::string> complete(const fs::path& script, const fs::path& home,
                                  const std::vector<std::string>& words) {
  std::string array;
  for (const auto& w : words) array += " '" + w + "'";
  const std::string body = "source '" + script.string() + "'; COMP_WORDS=(ktune" + array +
                           "); COMP_CWORD=" + std::to_string(words.size()) +
                           "; _ktune; printf '%s\\n' \"${COMPREPLY[@]}\"";
  // The script calls `ktune` for kernel names: the built one, in an instance of this test's own.
  const Shell r = sh("PATH='" + ktune::test::bin_dir() + "':\"$PATH\" KTUNE_HOME='" +
                     home.string() + "' bash -c \"$(cat <<'EOF'\n" + body + "\nEOF\n)\"");
  REQUIRE(r.code == 0);
  std::vector<std::string> offered;
  for (auto& line : lines_of(r.out)) {
    if (!line.empty()) offered.push_back(line);
  }
  return offered;
}

// The longest prefix all offered words share: what bash inserts at once.
std::string common_prefix(const std::vector<std::string>& words) {
  if (words.empty()) return {};
  std::string prefix = words.front();
  for (const auto& w : words) {
    while (w.rfind(prefix, 0) != 0) prefix.pop_back();
  }
  return prefix;
}

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

} // namespace

TEST_CASE("bash completion offers what belongs where the cursor is, never a bare '-'",
          "[cli][completion]") {
  if (sh("command -v bash >/dev/null").code != 0) {
    WARN("SKIPPED: bash is not installed");
    return;
  }
  ktune::test::TempDir dir;
  const fs::path script = dir.path() / "ktune.bash";
  REQUIRE(sh("'" + k_ktune + "' completion bash > '" + script.string() + "'").code == 0);
  const fs::path home = dir.path() / "home";   // no ktuned answers there

  SECTION("subcommands where a command is expected") {
    CHECK(complete(script, home, {"da"}) == std::vector<std::string>{"daemon"});
    const auto daemon = complete(script, home, {"daemon", ""});
    CHECK(contains(daemon, "start"));
    CHECK(contains(daemon, "stop"));
    CHECK_FALSE(contains(daemon, "--help"));
  }
  SECTION("where a kernel family or a value is expected: no options, so no '-' inserted") {
    for (const auto& words : std::vector<std::vector<std::string>>{
             {"tune", ""},
             {"tune", "gemm", "--shape", ""},
             {"query", "gemm", "--device", ""},
             {"job", ""}}) {
      const auto offered = complete(script, home, words);
      INFO("ktune " << words[0] << " ... offers " << offered.size() << " words");
      CHECK(common_prefix(offered).rfind('-', 0) == std::string::npos);
      for (const auto& w : offered) CHECK(w.rfind('-', 0) == std::string::npos);
    }
  }
  SECTION("where a kernel family is expected: the running ktuned's families, each once") {
    const std::string env = "KTUNE_HOME='" + home.string() + "' '" + k_ktune + "' ";
    REQUIRE(sh(env + "daemon start >/dev/null 2>&1").code == 0);
    const auto all = complete(script, home, {"tune", ""});
    const auto g = complete(script, home, {"query", "g"});
    const auto after_shape = complete(script, home, {"tune", "gemm", "--shape", ""});
    CHECK(sh(env + "daemon stop >/dev/null 2>&1").code == 0);
    CHECK(contains(all, "gemm"));
    CHECK(contains(all, "reduce_sum"));
    CHECK(std::count(all.begin(), all.end(), "gemm") == 1);
    CHECK(g == std::vector<std::string>{"gemm"});
    CHECK(after_shape.empty());
  }
  SECTION("options once '-' is typed, with those that fall through from ktune") {
    const auto options = complete(script, home, {"tune", "gemm", "--"});
    CHECK(contains(options, "--shape"));
    CHECK(contains(options, "--wait"));
    CHECK(contains(options, "--json"));
    CHECK(complete(script, home, {"tune", "gemm", "--sh"}) == std::vector<std::string>{"--shape"});
  }
  SECTION("an option's choices after it") {
    CHECK(complete(script, home, {"job", "3", "--sort", ""}) ==
          std::vector<std::string>{"config", "median", "status"});
    CHECK(complete(script, home, {"new-kernel", "scale", "--lang", "c"}) ==
          std::vector<std::string>{"cpp", "cuda"});
  }
}

TEST_CASE("zsh and fish completion follow the same rules", "[cli][completion]") {
  const Shell zsh = sh("'" + k_ktune + "' completion zsh");
  REQUIRE(zsh.code == 0);
  // Options are offered only for a word that starts with '-'; a value option's choices after it.
  CHECK_THAT(zsh.out, Catch::Contains("elif [[ \"$cur\" == -* ]]; then\n    compadd -- \"${opts[@]}\""));
  CHECK_THAT(zsh.out, Catch::Contains("[[ \"$prev\" == (--sort) ]] && choices=(config median status)"));
  const Shell fish = sh("'" + k_ktune + "' completion fish");
  REQUIRE(fish.code == 0);
  CHECK_THAT(fish.out, Catch::Contains("-l shape -r -d"));
  CHECK_THAT(fish.out, Catch::Contains("-l sort -x -a 'config median status'"));
  CHECK_THAT(fish.out, Catch::Contains("-a '(__ktune_kernels)'"));
}

TEST_CASE("ktune man-pages writes ktune(1) and a page per command group", "[cli][man]") {
  ktune::test::TempDir dir;
  const Shell r = sh("'" + k_ktune + "' man-pages '" + dir.str() + "/man' 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const fs::path man = dir.path() / "man";
  const std::string top = read_file(man / "ktune.1");
  CHECK_THAT(top, Catch::StartsWith(".TH KTUNE 1") && Catch::Contains(".SH NAME\nktune \\- "));
  // Every command ktune --help lists has its page, named in ktune(1).
  for (const char* command : {"daemon", "tune", "query", "sweep", "fleet", "export", "new-kernel",
                              "check-kernel", "completion", "replay"}) {
    INFO(command);
    CHECK(fs::is_regular_file(man / ("ktune-" + std::string(command) + ".1")));
    std::string escaped;  // roff: every '-' a minus sign
    for (const char c : std::string(command)) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
    CHECK_THAT(top, Catch::Contains("\\fBktune\\-" + escaped + "\\fR(1)"));
  }
  CHECK_FALSE(fs::exists(man / "ktune-man-pages.1"));  // hidden: the build's own
  const std::string daemon = read_file(man / "ktune-daemon.1");
  CHECK_THAT(daemon, Catch::Contains(".SH NAME\nktune\\-daemon \\- start, stop or inspect"));
  CHECK_THAT(daemon, Catch::Contains(".SS \"ktune daemon start\"") &&
                         Catch::Contains("\\fB\\-\\-kernel\\-dir\\fR") &&
                         Catch::Contains(".SS \"ktune daemon log\""));
  const std::string tune = read_file(man / "ktune-tune.1");
  CHECK_THAT(tune, Catch::Contains("\\fIkernel\\fR") && Catch::Contains("\\fB\\-\\-shape\\fR") &&
                       Catch::Contains("(required)") &&
                       Catch::Contains("ktune tune gemm \\-\\-shape M=256,N=256,K=256"));
  if (sh("command -v groff >/dev/null").code == 0) {
    for (const auto& entry : fs::directory_iterator(man)) {
      const Shell warnings =
          sh("groff -man -Tutf8 -ww -z '" + entry.path().string() + "' 2>&1");
      INFO(entry.path().filename().string() << ": " << warnings.out);
      CHECK(warnings.out.empty());
    }
  }
}

TEST_CASE("a sweep named as the README names it is found outside a checkout",
          "[cli][sweep]") {
  ktune::test::TempDir dir;
  const std::string sweeps = (fs::path(ktune::test::source_dir()) / "configs" / "sweeps").string();

  SECTION("resolve_sweep_file: as given, else the shipped file of that name") {
    const auto here = dir.write("mine.toml", "[sweep]\n");
    CHECK(*ktune::cli::resolve_sweep_file(here.string(), sweeps) == here.string());
    for (const char* given : {"configs/sweeps/cpu.toml", "cpu.toml", "cpu", "sweeps/cpu.toml"}) {
      auto found = ktune::cli::resolve_sweep_file(given, sweeps);
      REQUIRE(found);
      CHECK(*found == sweeps + "/cpu.toml");
    }
    auto missing = ktune::cli::resolve_sweep_file("configs/sweeps/gpu.toml", sweeps);
    REQUIRE_FALSE(missing);
    CHECK_THAT(missing.error().message,
               Catch::Contains("sweep file 'configs/sweeps/gpu.toml' not found") &&
                   Catch::Contains("the shipped sweeps in " + sweeps + " are: cpu, nightly"));
    auto elsewhere = ktune::cli::resolve_sweep_file("/nowhere/cpu.toml", sweeps);
    REQUIRE_FALSE(elsewhere);
  }
  SECTION("the binary, run from a directory that is not a checkout") {
    const Shell r = sh("cd '" + dir.str() + "' && KTUNE_HOME='" + dir.str() + "/home' '" + k_ktune +
                       "' sweep configs/sweeps/cpu.toml --dry-run 2>&1");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("using the shipped sweep ") &&
                          Catch::Contains("sweep cpu: ") && Catch::Contains("reduce_sum"));
    const Shell missing = sh("cd '" + dir.str() + "' && '" + k_ktune +
                             "' sweep configs/sweeps/gpu.toml --dry-run 2>&1");
    CHECK(missing.code == 2);
    CHECK_THAT(missing.out, Catch::Contains("not found (relative to " + dir.str() + ")") &&
                                Catch::Contains("cpu, nightly"));
  }
}
