// The winner table under a writer that republishes as fast as it can: reader processes looking
// up through libktune_client's C API never see a torn or mixed record, and never go back to an
// older table.
#include "core/winner_table.hpp"
#include "daemon/table_publisher.hpp"
#include "ktune/client.h"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using ktune::test::TempDir;
namespace table = ktune::table;

namespace {

constexpr int k_keys = 256;
constexpr int k_readers = 4;
constexpr auto k_run = std::chrono::seconds(10);

std::string shape_of(int key) { return "M=" + std::to_string(key + 1) + ",N=64,K=64"; }

// Generation `g` of the table: key i's config is {"G":g,"K":i} and its job g, so a reader can
// tell a record made of two generations or two keys.
std::vector<std::byte> generation(std::uint64_t g) {
  table::TableContent content;
  content.generation = g;
  content.devices = {{"cpu", "0123456789abcdef0123456789abcdef", table::Family::cpp, true}};
  content.kernels = {{"gemm", table::Family::cpp, "h1", {"M", "N", "K"}, {"f32"}, true,
                      R"({"G":0,"K":0})"}};
  std::vector<table::WinnerGroup> groups(1);
  groups[0].kernel = "gemm";
  groups[0].dtype = "f32";
  groups[0].fingerprint = content.devices[0].fingerprint;
  for (int i = 0; i < k_keys; ++i) {
    groups[0].winners.push_back(table::WinnerEntry{
        shape_of(i), "h1", "{\"G\":" + std::to_string(g) + ",\"K\":" + std::to_string(i) + "}",
        static_cast<double>(g), 0, static_cast<std::int64_t>(g)});
  }
  auto bytes = table::encode(content, groups);
  REQUIRE(bytes.ok());
  return std::move(*bytes);
}

struct ReaderCounts {
  long long lookups = 0;
  long long torn = 0;          // a record whose fields disagree, or an answer not from the table
  long long backwards = 0;     // an older generation after a newer one
  long long generations = 0;   // distinct generations seen
};

// One reader process: random keys for k_run, every answer checked.
ReaderCounts read_for_a_while(const std::string& dir, const std::string& path, int seed) {
  ReaderCounts counts;
  const std::string socket = dir + "/none.sock", db = dir + "/none.db";
  ktune_options o;
  ktune_options_init(&o);
  o.socket_path = socket.c_str();
  o.db_path = db.c_str();
  o.kernel_dirs = dir.c_str();
  o.cache_ttl_ms = -1;
  ktune_client* client = nullptr;
  if (ktune_connect(&o, &client) != KTUNE_OK || ktune_set_table(client, path.c_str()) != KTUNE_OK) {
    counts.torn = -1;
    return counts;
  }
  std::vector<std::string> shapes;
  for (int i = 0; i < k_keys; ++i) shapes.push_back(shape_of(i));
  std::mt19937 rng(seed);
  std::int64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + k_run;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int n = 0; n < 64; ++n) {
      const int key = static_cast<int>(rng() % k_keys);
      ktune_answer a{};
      const ktune_status status = ktune_lookup(client, "gemm", shapes[key].c_str(), "f32", "cpu", &a);
      ++counts.lookups;
      const std::string expected_config =
          "{\"G\":" + std::to_string(a.job) + ",\"K\":" + std::to_string(key) + "}";
      const bool sound = status == KTUNE_OK && a.source == KTUNE_SOURCE_MAP &&
                         a.rung == KTUNE_RUNG_EXACT && a.param_count == 2 &&
                         std::strcmp(a.params[0].name, "G") == 0 && a.params[0].value == a.job &&
                         std::strcmp(a.params[1].name, "K") == 0 && a.params[1].value == key &&
                         a.median_ms == static_cast<double>(a.job) &&
                         expected_config == a.config_json;
      if (!sound) {
        ++counts.torn;
        continue;
      }
      if (a.job < last) ++counts.backwards;
      if (a.job > last) ++counts.generations;
      last = std::max(last, a.job);
    }
  }
  ktune_close(client);
  return counts;
}

} // namespace

TEST_CASE("winner table: a writer republishing while 4 readers look up for 10 s: no torn or "
          "mixed record", "[client][winner_table]") {
  TempDir dir;
  const std::string path = (dir.path() / "ktuned.table").string();
  ktune::daemon::TableFileWriter writer({path, 0600, static_cast<gid_t>(-1)});
  std::uint64_t g = 1;
  REQUIRE(writer.write(generation(g), g).ok());

  std::vector<pid_t> readers;
  std::vector<int> pipes;
  for (int r = 0; r < k_readers; ++r) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      const ReaderCounts counts = read_for_a_while(dir.str(), path, 100 + r);
      const bool written = ::write(fds[1], &counts, sizeof counts) == sizeof counts;
      ::_exit(written ? 0 : 1);
    }
    ::close(fds[1]);
    readers.push_back(pid);
    pipes.push_back(fds[0]);
  }
  // Republish as fast as the writer can while the readers run.
  const auto deadline = std::chrono::steady_clock::now() + k_run;
  while (std::chrono::steady_clock::now() < deadline) {
    ++g;
    REQUIRE(writer.write(generation(g), g).ok());
  }
  ReaderCounts total;
  for (int r = 0; r < k_readers; ++r) {
    ReaderCounts counts;
    REQUIRE(::read(pipes[r], &counts, sizeof counts) == sizeof counts);
    ::close(pipes[r]);
    int status = 0;
    ::waitpid(readers[r], &status, 0);
    CHECK(WIFEXITED(status));
    INFO("reader " << r << ": " << counts.lookups << " lookups, " << counts.generations
                   << " generations seen");
    CHECK(counts.torn == 0);
    CHECK(counts.backwards == 0);
    CHECK(counts.lookups > 0);
    CHECK(counts.generations > 1);   // the republishing was seen, not slept through
    total.lookups += counts.lookups;
    total.torn += counts.torn;
    total.generations += counts.generations;
  }
  WARN("winner table readers: " << total.lookups << " lookups over " << k_readers
                                << " processes while " << g << " tables were published; "
                                << total.torn << " torn or mixed records");
}
