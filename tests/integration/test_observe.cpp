// Seeing inside a running ktuned (docs/operations.md): /metrics scraped over real HTTP during a
// CPU tune, its text checked against the exposition format, the endpoint's answers to other
// requests, and `ktune top` driven in a real terminal under tmux.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <array>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 30s;

std::unique_ptr<DaemonProcess> start(const TempDir& home, const std::string& daemon_table = {},
                                     const std::vector<std::string>& more_kernel_dirs = {}) {
  home.write("ktuned.toml",
             "[daemon]\n" + daemon_table +
                 "\n[measure]\nmin_samples = 3\nmax_samples = 20\nmax_time_s = 0.02\n"
                 "min_time_s = 0\nwarmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  std::vector<std::string> args = {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/kernels_src"),
                                    "--log-level", "info"};
  for (const auto& dir : more_kernel_dirs) args.insert(args.end(), {"--kernel-dir", dir});
  auto daemon = std::make_unique<DaemonProcess>(home.str(), args);
  REQUIRE(daemon->wait_ready(k_start_timeout));
  return daemon;
}

Connection connect(const DaemonProcess& daemon) {
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());
  return std::move(*c);
}

json ok_result(Connection& c, json request) {
  auto reply = c.request(std::move(request), {}, k_reply_timeout);
  INFO((reply ? std::string() : reply.error().message));
  REQUIRE(reply.ok());
  INFO(reply->dump());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

// A tune of gemm on the CPU long enough to be scraped while it runs.
std::int64_t start_tune(Connection& c, int budget) {
  const json queued = ok_result(c, {{"op", "tune"},
                                    {"kernel", "gemm"},
                                    {"shape", "M=128,N=128,K=128"},
                                    {"device", "cpu"},
                                    {"budget", budget}});
  return queued.at("job").get<std::int64_t>();
}

struct HttpAnswer {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// `raw` sent as is to host:port; `responses` responses read with Beast.
std::vector<HttpAnswer> http_exchange_all(const std::string& address, const std::string& raw,
                                     int responses) {
  const auto colon = address.rfind(':');
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address(address.substr(0, colon)),
                  static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))});
  asio::write(socket, asio::buffer(raw));
  beast::flat_buffer buffer;
  std::vector<HttpAnswer> out;
  for (int i = 0; i < responses; ++i) {
    http::response_parser<http::string_body> parser;
    parser.skip(raw.rfind("HEAD ", 0) == 0);
    http::read(socket, buffer, parser);
    const auto& response = parser.get();
    out.push_back({response.result_int(), std::string(response[http::field::content_type]),
                   response.body()});
  }
  return out;
}

// GET /metrics over the Unix socket at `path`.
HttpAnswer unix_get_metrics(const std::string& path) {
  asio::io_context io;
  asio::local::stream_protocol::socket socket(io);
  socket.connect(asio::local::stream_protocol::endpoint(path));
  const std::string raw = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  asio::write(socket, asio::buffer(raw));
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  return {response.result_int(), std::string(response[http::field::content_type]),
          response.body()};
}

HttpAnswer http_exchange(const std::string& address, const std::string& raw) {
  return http_exchange_all(address, raw, 1).front();
}

HttpAnswer get(const std::string& address, const std::string& target,
               const std::string& method = "GET") {
  return http_exchange(address, method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n"
                                                   "Connection: close\r\n\r\n");
}

std::string scrape(const std::string& address) {
  const HttpAnswer answer = get(address, "/metrics");
  REQUIRE(answer.status == 200);
  CHECK(answer.content_type.rfind("text/plain; version=0.0.4", 0) == 0);
  return answer.body;
}

// One sample line: name, labels in order, value.
struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  [[nodiscard]] std::string label(const std::string& key) const {
    for (const auto& [k, v] : labels) {
      if (k == key) return v;
    }
    return {};
  }
  // The labels but `le`, as one key.
  [[nodiscard]] std::string series() const {
    std::string key;
    for (const auto& [k, v] : labels) {
      if (k != "le") key += k + "=" + v + ",";
    }
    return key;
  }
};

// The exposition text parsed and checked against the 0.0.4 format: every sample's metric has a
// TYPE (a histogram's _bucket, _sum and _count its family's), counters end in _total, and every
// histogram series has ascending `le` bounds with cumulative counts ending at +Inf == _count.
struct Exposition {
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;

  [[nodiscard]] std::vector<Sample> of(const std::string& name) const {
    std::vector<Sample> out;
    for (const auto& s : samples) {
      if (s.name == name) out.push_back(s);
    }
    return out;
  }
  [[nodiscard]] double value(const std::string& name,
                             const std::map<std::string, std::string>& labels) const {
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) match = match && s.label(k) == v;
      if (match) return s.value;
    }
    FAIL("no sample " << name);
    return 0;
  }
};

// A sample line: name, optional {key="value",...} (backslash escapes), a space, the value.
Sample parse_sample_line(const std::string& line) {
  Sample sample;
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') sample.name += line[i++];
  REQUIRE(!sample.name.empty());
  if (line[i] == '{') {
    ++i;
    while (line.at(i) != '}') {
      std::string key, value;
      while (line.at(i) != '=') key += line[i++];
      REQUIRE(line.at(++i) == '"');
      ++i;
      while (line.at(i) != '"') {
        if (line[i] == '\\') ++i;
        value += line.at(i++);
      }
      ++i;
      if (line.at(i) == ',') ++i;
      sample.labels.emplace_back(key, value);
    }
    ++i;
  }
  REQUIRE(line.at(i) == ' ');
  const std::string value = line.substr(i + 1);
  sample.value = value == "+Inf" ? HUGE_VAL : std::stod(value);
  return sample;
}

// Every sample belongs to a family with a TYPE (and a HELP); a histogram's samples are its
// _bucket, _sum and _count.
void check_families(const Exposition& out, const std::set<std::string>& helped) {
  for (const auto& s : out.samples) {
    INFO(s.name);
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (family.size() > sfx.size() && family.substr(family.size() - sfx.size()) == sfx &&
          out.types.count(family.substr(0, family.size() - sfx.size())) != 0 &&
          out.types.at(family.substr(0, family.size() - sfx.size())) == "histogram") {
        family.resize(family.size() - sfx.size());
      }
    }
    REQUIRE(out.types.count(family) == 1);
    CHECK(helped.count(family) == 1);
    if (out.types.at(family) == "histogram") CHECK(s.name != family);
  }
}

// Histograms: cumulative buckets ending with +Inf, which equals _count; each series has a _sum.
void check_histograms(const Exposition& out) {
  for (const auto& [name, type] : out.types) {
    if (type != "histogram") continue;
    INFO(name);
    std::map<std::string, std::vector<Sample>> series;
    for (const auto& s : out.of(name + "_bucket")) series[s.series()].push_back(s);
    REQUIRE(!series.empty());
    for (const auto& [key, buckets] : series) {
      double last_le = -HUGE_VAL, last_count = 0;
      for (const auto& b : buckets) {
        const std::string le = b.label("le");
        REQUIRE(!le.empty());
        const double bound = le == "+Inf" ? HUGE_VAL : std::stod(le);
        CHECK(bound > last_le);
        CHECK(b.value >= last_count);
        last_le = bound;
        last_count = b.value;
      }
      CHECK(buckets.back().label("le") == "+Inf");
      double count = -1;
      for (const auto& c : out.of(name + "_count")) {
        if (c.series() == key) count = c.value;
      }
      CHECK(count == last_count);
      bool has_sum = false;
      for (const auto& c : out.of(name + "_sum")) has_sum = has_sum || c.series() == key;
      CHECK(has_sum);
    }
  }
}

Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  while (std::getline(in, line)) {
    INFO(line);
    REQUIRE(!line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      CHECK(helped.insert(name).second);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      CHECK((type == "counter" || type == "gauge" || type == "histogram"));
      CHECK(out.types.emplace(name, type).second);
      if (type == "counter") CHECK(name.size() > 6);
      if (type == "counter") CHECK(name.substr(name.size() - 6) == "_total");
      continue;
    }
    REQUIRE(line[0] != '#');
    out.samples.push_back(parse_sample_line(line));
  }
  check_families(out, helped);
  check_histograms(out);
  return out;
}

std::string run_output(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  ::pclose(pipe);
  return out;
}

bool have_program(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

} // namespace

TEST_CASE("/metrics scraped during a CPU tune shows compile and bench seconds, and lookups in "
          "its histogram",
          "[integration][metrics]") {
  TempDir home;
  auto daemon = start(home, "metrics = \"127.0.0.1:0\"\n");
  auto c = connect(*daemon);
  const json stats = ok_result(c, {{"op", "stats"}});
  REQUIRE(stats.at("metrics").is_string());
  const std::string address = stats.at("metrics").get<std::string>();
  CHECK(address.rfind("127.0.0.1:", 0) == 0);

  // Before any work: a valid text, nothing measured, no lookup.
  const Exposition idle = parse_exposition(scrape(address));
  CHECK(idle.value("ktune_lookup_duration_seconds_count", {}) == 0);
  CHECK(idle.value("ktune_jobs", {{"state", "running"}}) == 0);

  const std::int64_t job = start_tune(c, 60);
  // Scraped while the job runs until both the compile pool and the cpu lane's bench worker
  // have booked time for it.
  bool seen = false;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    text = scrape(address);
    const Exposition e = parse_exposition(text);
    const json view = ok_result(c, {{"op", "top"}});
    bool running = false;
    for (const auto& j : view.at("jobs")) {
      running = running || (j.at("job") == job && j.at("state") == "running");
    }
    REQUIRE(running); // the scrape before this `top` was taken during the tune
    seen = e.value("ktune_lane_seconds_total", {{"lane", "cpu"}, {"activity", "compile"}}) > 0 &&
           e.value("ktune_lane_seconds_total", {{"lane", "cpu"}, {"activity", "bench"}}) > 0;
    if (seen) {
      CHECK(e.value("ktune_jobs", {{"state", "running"}}) == 1);
      CHECK(e.value("ktune_worker_seconds_total",
                    {{"lane", "compile"}, {"worker", "0"}, {"activity", "compile"}}) > 0);
      CHECK(e.value("ktune_worker_seconds_total",
                    {{"lane", "cpu"}, {"worker", "0"}, {"activity", "bench"}}) > 0);
      CHECK(e.value("ktune_compile_cache_misses_total", {}) > 0);
      CHECK(e.value("ktune_store_write_duration_seconds_count", {}) > 0);
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  INFO(text);
  REQUIRE(seen);

  // Lookups of every rung but nearest: the histogram counts each one.
  for (int i = 0; i < 5; ++i) {
    const json answer = ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"},
                                      {"shape", "M=64,N=64,K=64"}, {"device", "cpu"}});
    CHECK(answer.at("rung") == "default");
  }
  auto bad = c.request({{"op", "lookup"}, {"kernel", "no_such_kernel"}, {"shape", "M=1"}}, {},
                       k_reply_timeout);
  REQUIRE(bad.ok());
  CHECK(bad->value("ok", true) == false);
  const Exposition after = parse_exposition(scrape(address));
  CHECK(after.value("ktune_lookup_duration_seconds_count", {}) == 6);
  CHECK(after.value("ktune_lookup_duration_seconds_bucket", {{"le", "+Inf"}}) == 6);
  CHECK(after.value("ktune_lookup_duration_seconds_sum", {}) > 0);
  CHECK(after.value("ktune_lookups_total", {{"rung", "default"}}) == 5);
  CHECK(after.value("ktune_lookups_total", {{"rung", "miss"}}) == 1);
  CHECK(after.value("ktune_lookups_total", {{"rung", "exact"}}) == 0);

  // promtool, when Debian's prometheus package is installed, agrees that the text is valid.
  if (have_program("promtool")) {
    const auto file = home.write("scrape.txt", scrape(address));
    const std::string lint = run_output("promtool check metrics < " + file.string() + " 2>&1; echo rc=$?");
    INFO(lint);
    CHECK(lint.find("rc=0") != std::string::npos);
  } else {
    WARN("promtool not installed (Debian package prometheus): only the test's own format check ran");
  }
  CHECK(ok_result(c, {{"op", "cancel"}, {"job", job}}).at("job") == job);
}

TEST_CASE("/metrics answers 404 elsewhere, 405 to other methods, 400 to what is not HTTP, and "
          "stays off by default",
          "[integration][metrics]") {
  TempDir home;
  {
    auto daemon = start(home);
    auto c = connect(*daemon);
    CHECK(ok_result(c, {{"op", "stats"}}).at("metrics").is_null());
  }
  TempDir home2;
  auto daemon = start(home2, "metrics = \"localhost:0\"\n");
  auto c = connect(*daemon);
  const std::string address = ok_result(c, {{"op", "stats"}}).at("metrics").get<std::string>();
  CHECK(get(address, "/metrics?x=1").status == 200);
  CHECK(get(address, "/").status == 404);
  CHECK(get(address, "/metrics/other").status == 404);
  CHECK(get(address, "/metrics", "POST").status == 405);
  const HttpAnswer head = get(address, "/metrics", "HEAD");
  CHECK(head.status == 200);
  CHECK(http_exchange(address, "THIS IS NOT HTTP\r\n\r\n").status == 400);
  // A request head larger than the limit.
  CHECK(http_exchange(address, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') +
                              "\r\n\r\n").status == 400);
  // Two requests on one kept-alive connection.
  const auto both = http_exchange_all(
      address, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      2);
  CHECK(both[0].status == 404);
  CHECK(both[1].status == 200);
  CHECK(both[1].body.find("# TYPE ktune_lookups_total counter") != std::string::npos);
  // The daemon still serves its clients.
  CHECK(ok_result(c, {{"op", "stats"}}).at("pid").get<int>() == daemon->pid());
}

TEST_CASE("/metrics is served on a Unix socket path", "[integration][metrics]") {
  TempDir home;
  const std::string path = (home.path() / "metrics.sock").string();
  auto daemon = start(home, "metrics = \"" + path + "\"\n");
  auto c = connect(*daemon);
  CHECK(ok_result(c, {{"op", "stats"}}).at("metrics") == path);
  const HttpAnswer answer = unix_get_metrics(path);
  CHECK(answer.status == 200);
  const Exposition e = parse_exposition(answer.body);
  CHECK(e.value("ktune_jobs", {{"state", "queued"}}) == 0);
  daemon->signal(SIGTERM);
  CHECK(daemon->wait_exit(30s) == 0);
  CHECK_FALSE(std::filesystem::exists(path)); // removed at the stop
}

TEST_CASE("ktuned refuses a metrics address that is not on this machine",
          "[integration][metrics]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\nmetrics = \"0.0.0.0:9464\"\n");
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string()},
                       (home.path() / "stderr.txt").string());
  CHECK_FALSE(daemon.wait_ready(k_start_timeout));
  std::ifstream in(home.path() / "stderr.txt");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(log.find("not a loopback address") != std::string::npos);
}

TEST_CASE("ktune top shows the running job in a terminal and q quits it", "[integration][top]") {
  if (!have_program("tmux")) {
    std::printf("SKIPPED: tmux is not installed\n");
    return;
  }
  TempDir home;
  auto daemon = start(home);
  auto c = connect(*daemon);
  const std::int64_t job = start_tune(c, 60);
  const std::string session = "ktune-top-" + std::to_string(::getpid());
  const std::string ktune = ktune::test::bin_path("/ktune");
  // The shell in the pane prints ktune's exit status once it returns.
  REQUIRE(std::system(("tmux new-session -d -x 120 -y 40 -s " + session + " -e KTUNE_HOME=" +
                       home.str() + " 'sh -c \"" + ktune +
                       " top --interval 0.2; echo top-exited=\\$?; sleep 30\"'")
                          .c_str()) == 0);
  struct KillSession {
    std::string name;
    ~KillSession() { std::system(("tmux kill-session -t " + name + " 2>/dev/null").c_str()); }
  } kill_session{session};

  auto capture = [&] { return run_output("tmux capture-pane -p -t " + session); };
  std::string screen;
  const std::string job_cell = std::to_string(job);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool shown = false;
  while (!shown && std::chrono::steady_clock::now() < deadline) {
    screen = capture();
    shown = screen.find("JOBS (1)") != std::string::npos &&
            screen.find("running") != std::string::npos &&
            screen.find("gemm") != std::string::npos &&
            screen.find("M=128,N=128,K=128") != std::string::npos;
    if (!shown) std::this_thread::sleep_for(100ms);
  }
  INFO(screen);
  REQUIRE(shown);
  CHECK(screen.find("LANES") != std::string::npos);
  CHECK(screen.find("WORKERS") != std::string::npos);
  CHECK(screen.find("RECENT FAILURES") != std::string::npos);

  REQUIRE(std::system(("tmux send-keys -t " + session + " q").c_str()) == 0);
  bool exited = false;
  const auto quit_deadline = std::chrono::steady_clock::now() + 20s;
  while (!exited && std::chrono::steady_clock::now() < quit_deadline) {
    screen = capture();
    exited = screen.find("top-exited=0") != std::string::npos;
    if (!exited) std::this_thread::sleep_for(100ms);
  }
  INFO(screen);
  CHECK(exited);
  // The alternate screen is gone: the view no longer fills the pane.
  CHECK(screen.find("RECENT FAILURES") == std::string::npos);
  CHECK(ok_result(c, {{"op", "cancel"}, {"job", job}}).at("job") == job);
}

TEST_CASE("ktune top --once and --json print one frame, and without ktuned it says so",
          "[integration][top]") {
  TempDir home;
  const std::string ktune = "KTUNE_HOME=" + home.str() + " " + ktune::test::bin_path("/ktune");
  const std::string none = run_output(ktune + " top --once 2>&1; echo rc=$?");
  INFO(none);
  CHECK(none.find("not running") != std::string::npos);
  CHECK(none.find("rc=1") != std::string::npos);

  auto daemon = start(home);
  const std::string once = run_output(ktune + " top --once; echo rc=$?");
  INFO(once);
  CHECK(once.find("JOBS (0)") != std::string::npos);
  CHECK(once.find("\x1b[") == std::string::npos);
  CHECK(once.find("rc=0") != std::string::npos);
  const std::string text = run_output(ktune + " --json top");
  const json view = json::parse(text);
  CHECK(view.at("jobs").empty());
  CHECK(view.contains("lanes"));
  CHECK(view.contains("workers"));
  CHECK(view.contains("failures"));
}

namespace {

// The sum of every sample of a counter family (a histogram: its _count), 0 when it has none.
double family_total(const Exposition& e, const std::string& family) {
  const auto type = e.types.find(family);
  if (type == e.types.end()) return 0;
  double total = 0;
  for (const auto& s : e.of(type->second == "histogram" ? family + "_count" : family)) total += s.value;
  return total;
}

double value_or_zero(const Exposition& e, const std::string& name,
                     const std::map<std::string, std::string>& labels) {
  for (const auto& s : e.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match = match && s.label(k) == v;
    if (match) return s.value;
  }
  return 0;
}

// Another process's exclusive hold on the database, as a careless sqlite3 shell takes it.
class ForeignLock {
public:
  explicit ForeignLock(const std::string& path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(m_db, 10'000);  // waits out one of ktuned's own short transactions
    REQUIRE(sqlite3_exec(m_db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  ~ForeignLock() {
    sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(m_db);
  }
  ForeignLock(const ForeignLock&) = delete;
  ForeignLock& operator=(const ForeignLock&) = delete;

private:
  sqlite3* m_db = nullptr;
};

} // namespace

TEST_CASE("every counter family moves with the work that moves it: jobs of each end state, "
          "candidates, compiles, restarts, lookups, store writes",
          "[integration][metrics]") {
  ::setenv("ASAN_OPTIONS", "handle_segv=0:handle_abort=0:detect_leaks=0", 1);
  TempDir home, kernels;
  // A family whose reference does not compile: its job ends `failed`.
  kernels.write("broken/kernel.toml", R"([kernel]
name = "broken"
language = "cpp"
source = "kernel.cpp"
entry = "broken"
shape = ["N"]
dtypes = ["f32"]
[params]
P = [1, 2]
[[args]]
name = "OUT"
kind = "out"
count = "N"
[default]
P = 1
)");
  kernels.write("broken/kernel.cpp", "#error \"broken on purpose\"\n");
  auto daemon = start(home, "metrics = \"127.0.0.1:0\"\n[limits]\nbench_timeout_min_s = 1\n"
                            "bench_timeout_max_s = 3\n",
                      {ktune::test::source_path("/tests/faults"), kernels.str()});
  auto c = connect(*daemon);
  const std::string address = ok_result(c, {{"op", "stats"}}).at("metrics").get<std::string>();
  const Exposition before = parse_exposition(scrape(address));

  const auto tune = [&](json request) {
    request["op"] = "tune";
    request["wait"] = true;
    auto reply = c.request(std::move(request), {}, 300s);
    INFO((reply ? reply->dump() : reply.error().message));
    REQUIRE(reply.ok());
    REQUIRE(reply->value("ok", false));
    return reply->at("result");
  };
  const json gemm = {{"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"}, {"budget", 6}};
  // done, compiling in batches (compile cache misses, compile batches)
  CHECK(tune(gemm).at("job").at("state") == "done");
  // done again, every compile a cache hit
  json again = gemm;
  again["remeasure"] = true;
  CHECK(tune(again).at("job").at("state") == "done");
  // a candidate that crashes the bench worker (a restart) and one that mismatches
  const json faults = tune({{"kernel", "faults"}, {"shape", "N=1024"}, {"budget", 6}});
  CHECK(faults.at("job").at("state") == "done");
  // failed: the reference does not compile
  CHECK(tune({{"kernel", "broken"}, {"shape", "N=64"}}).at("job").at("state") == "failed");
  // cancelled while it runs or waits
  {
    const json queued = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                      {"shape", "M=96,N=96,K=96"}, {"budget", 20}});
    const auto id = queued.at("job").get<std::int64_t>();
    ok_result(c, {{"op", "cancel"}, {"job", id}});
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    std::string state;
    while (std::chrono::steady_clock::now() < deadline) {
      state = ok_result(c, {{"op", "job"}, {"job", id}}).at("job").at("state").get<std::string>();
      if (state != "queued" && state != "running") break;
      std::this_thread::sleep_for(50ms);
    }
    CHECK(state == "cancelled");
  }
  // store writes that fail while another process holds the database, and are retried
  {
    const json queued = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                      {"shape", "M=48,N=48,K=48"}, {"budget", 4}});
    const auto id = queued.at("job").get<std::int64_t>();
    {
      ForeignLock lock(home.str() + "/ktune.db");
      std::this_thread::sleep_for(1500ms);
    }
    const auto deadline = std::chrono::steady_clock::now() + 300s;
    std::string state;
    while (std::chrono::steady_clock::now() < deadline) {
      state = ok_result(c, {{"op", "job"}, {"job", id}}).at("job").at("state").get<std::string>();
      if (state != "queued" && state != "running") break;
      std::this_thread::sleep_for(100ms);
    }
    CHECK(state == "done");
  }
  // lookups
  CHECK(ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"},
                      {"device", "cpu"}}).at("rung") == "exact");

  const std::string text = scrape(address);
  const Exposition after = parse_exposition(text);
  INFO(text);
  // Every counter and histogram family ktuned serves is one this test moves: a family added
  // without a case here fails.
  const std::set<std::string> moved_by_this_test = {
      "ktune_jobs_ended_total",          "ktune_candidates_total",
      "ktune_compile_cache_hits_total",  "ktune_compile_cache_misses_total",
      "ktune_compile_batches_total",     "ktune_worker_seconds_total",
      "ktune_lane_seconds_total",        "ktune_worker_restarts_total",
      "ktune_lookups_total",             "ktune_lookup_duration_seconds",
      "ktune_store_write_duration_seconds", "ktune_store_write_failures_total",
      "process_cpu_seconds_total"};
  for (const auto& [family, type] : after.types) {
    if (type == "gauge") continue;
    INFO(family << " (" << type << ")");
    CHECK(moved_by_this_test.count(family) == 1);
    CHECK(family_total(after, family) > family_total(before, family));
  }
  for (const auto& family : moved_by_this_test) {
    INFO(family);
    CHECK(after.types.count(family) == 1);
  }
  // Per state and status: each end state this test produced counts its jobs. (`interrupted`
  // is counted as ktuned stops: no scrape of the same process sees it.)
  const auto ended = [&](const Exposition& e, const char* state) {
    return value_or_zero(e, "ktune_jobs_ended_total", {{"state", state}});
  };
  CHECK(ended(after, "done") - ended(before, "done") == 4);
  CHECK(ended(after, "failed") - ended(before, "failed") == 1);
  CHECK(ended(after, "cancelled") - ended(before, "cancelled") == 1);
  CHECK(ended(after, "interrupted") == ended(before, "interrupted"));
  for (const char* status : {"ok", "crash", "mismatch"}) {
    INFO(status);
    CHECK(value_or_zero(after, "ktune_candidates_total", {{"status", status}}) >
          value_or_zero(before, "ktune_candidates_total", {{"status", status}}));
  }
  // Gauges of the process and the build.
  CHECK(after.value("ktune_build_info", {}) == 1);
  bool versioned = false;
  for (const auto& s : after.of("ktune_build_info")) versioned = !s.label("version").empty();
  CHECK(versioned);
  CHECK(after.value("process_resident_memory_bytes", {}) > 1 << 20);
  CHECK(after.value("process_open_fds", {}) > 3);
  CHECK(after.value("process_max_fds", {}) >= after.value("process_open_fds", {}));
  const double now_s = std::chrono::duration<double>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  const double started = after.value("process_start_time_seconds", {});
  CHECK(started <= now_s + 1);
  CHECK(started >= now_s - 3600);
  CHECK(after.value("process_cpu_seconds_total", {}) > 0);
}
TEST_CASE("/metrics: 32 dribbling connections do not keep a scrape out", "[integration][metrics]") {
  TempDir home;
  const std::string path = (home.path() / "metrics.sock").string();
  auto daemon = start(home, "metrics = \"" + path + "\"\n");
  asio::io_context io;
  std::vector<asio::local::stream_protocol::socket> dribblers;
  for (int i = 0; i < 40; ++i) {
    dribblers.emplace_back(io);
    dribblers.back().connect(asio::local::stream_protocol::endpoint(path));
    asio::write(dribblers.back(), asio::buffer(std::string("GET /metr")));
  }
  std::this_thread::sleep_for(200ms);  // accepted, every slot held by a request never finished
  for (int attempt = 0; attempt < 3; ++attempt) {
    const HttpAnswer answer = unix_get_metrics(path);
    CHECK(answer.status == 200);
    CHECK(answer.body.find("ktune_lookups_total") != std::string::npos);
  }
}
