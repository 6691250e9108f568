// bench_lookup: the runtime lookup path, measured through libktune_client's C API.
//
// Starts ktuned (--bin-dir) with a private KTUNE_HOME, tunes gemm at M=N=K=32 with tiny measurement
// settings so that lookups hit an exact winner, then measures over the socket (the winner table
// turned off in those clients, ktune_set_table(h, "")):
//   - single-client round trips, back to back, cache off: p50 and p99;
//   - throughput with 1, 8 and 64 client processes (one connection each, cache off) for --seconds;
//   - an in-process cache hit (ns per lookup);
//   - the database fallback with ktuned stopped (median us per lookup, cache off);
// and from the mapped winner table (docs/protocol.md § Winner table), with k_mapped_keys gemm
// winners imported:
//   - mapped_p50_ns / mapped_p99_ns: each key's first lookup in a handle (no repeat), timed one
//     by one (the clock read, ~20 ns, included);
//   - mapped_qps_8: lookups per second over 8 client processes cycling through the keys, and
//     mapped_cpu_ns_8, their CPU time per lookup (the cores here are shared);
//   - mapped_visible_ms: from sending an import of one new winner to the mapped client seeing it
//     (an upper bound of commit to visible), median of k_visible_rounds;
//   - publish_ms_100k: ktuned's own time to publish the table (stats.table.publish_ms) when a
//     winner arrives while it holds 100,000 more, and publish_cpu_ms_100k, the publishing
//     thread's CPU time in it (stats.table.publish_cpu_ms);
//   - a Redis GET baseline over a Unix socket when redis-server is on PATH (same 200-byte value
//     shape as the ANCHORS.md figures), in the same run.
// Prints one table, then one JSON line.
#include "ktune/client.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const char* const k_kernel = "gemm";
const char* const k_shape = "M=32,N=32,K=32";
constexpr int k_mapped_keys = 1000;   // a runtime's thousand shapes (the issue's case)
constexpr int k_mapped_rounds = 20;
constexpr int k_visible_rounds = 20;
constexpr int k_publish_rows = 100'000;

pid_t g_daemon = -1;   // stopped by die()

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "bench_lookup: %s\n", message.c_str());
  if (g_daemon > 0) ::kill(g_daemon, SIGTERM);
  std::exit(1);
}

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// A client of the ktuned in `home`; `table`: whether it answers from the winner table first.
ktune_client* open_client(const std::string& home, int cache_ttl_ms, int timeout_us,
                          bool table = false) {
  const std::string socket = home + "/ktuned.sock";
  const std::string db = home + "/ktune.db";
  ktune_options o;
  ktune_options_init(&o);
  o.socket_path = socket.c_str();
  o.db_path = db.c_str();
  o.cache_ttl_ms = cache_ttl_ms;
  o.timeout_us = timeout_us;
  ktune_client* client = nullptr;
  if (ktune_connect(&o, &client) != KTUNE_OK) die("ktune_connect failed");
  if (!table && ktune_set_table(client, "") != KTUNE_OK) die("ktune_set_table failed");
  return client;
}

int connect_unix(const std::string& socket_path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) die("short write");
    done += static_cast<std::size_t>(n);
  }
}

// Sends one request over a fresh connection; the connection, for read_reply.
int send_request(const std::string& socket_path, const std::string& line) {
  const int fd = connect_unix(socket_path);
  if (fd < 0) die("cannot connect to " + socket_path + ": " + std::strerror(errno));
  write_all(fd, line + "\n");
  return fd;
}

// Waits for the reply line without an event field and closes the connection.
std::string read_reply(int fd) {
  std::string buffer;
  char chunk[4096];
  while (true) {
    const auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string reply = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (reply.find("\"event\"") == std::string::npos) {
        ::close(fd);
        return reply;
      }
      continue;
    }
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) die("ktuned closed the connection");
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

// One request over a fresh connection, waiting for the reply line without an event field.
std::string raw_request(const std::string& socket_path, const std::string& line) {
  return read_reply(send_request(socket_path, line));
}

nlohmann::json ok_result(const std::string& socket_path, const std::string& line) {
  const std::string reply = raw_request(socket_path, line);
  const auto parsed = nlohmann::json::parse(reply, nullptr, false);
  if (parsed.is_discarded() || !parsed.value("ok", false)) {
    die("request failed: " + line.substr(0, 200) + " -> " + reply.substr(0, 300));
  }
  return parsed.at("result");
}

// An import request of `rows` winners of a kernel this ktuned does not have (so that the
// database fallback below still sees gemm as tuned here) on a made-up GPU.
std::string import_request(int rows) {
  std::string out = R"({"op":"import","policy":"newer","table":{"format":"ktune-table",)"
                    R"("schema_version":1,"host":"bench","rows":[)";
  for (int i = 0; i < rows; ++i) {
    if (i > 0) out += ',';
    out += R"({"kernel":"imported","shape":"M=)" + std::to_string(64 + i) +
           R"(,N=64,K=64","dtype":"f32","fingerprint":"00ff00ff00ff00ff00ff00ff00ff00ff",)"
           R"("source_hash":"bench","config":{"BM":32,"BN":32,"BK":32,"UNROLL":1,"VEC":1},)"
           R"("median_ms":)" + std::to_string(1.0 + i * 1e-6) + R"(,"time_ms":)" +
           std::to_string(1700000000000LL + i) +
           R"(,"device":{"name":"cuda:0","details":{"kind":"cuda"}}})";
  }
  out += "]}}";
  return out;
}

// The "job" number of a reply line ("...\"job\":12,...").
std::string job_id_of(const std::string& reply) {
  const auto at = reply.find("\"job\":");
  if (at == std::string::npos) die("no job in " + reply);
  std::size_t end = at + 6;
  while (end < reply.size() && reply[end] >= '0' && reply[end] <= '9') ++end;
  return reply.substr(at + 6, end - at - 6);
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The shape of mapped key `i`.
std::string mapped_shape(int i) {
  return "M=" + std::to_string(64 + i) + ",N=64,K=64";
}

// An import request of gemm winners on this machine's CPU at the shapes of keys [first,
// first + rows), under the family's current source hash, each with `config`.
std::string gemm_import(int first, int rows, const std::string& fingerprint,
                        const std::string& source_hash, const std::string& config) {
  std::string out = R"({"op":"import","policy":"newer","table":{"format":"ktune-table",)"
                    R"("schema_version":1,"host":"bench","rows":[)";
  for (int i = first; i < first + rows; ++i) {
    if (i > first) out += ',';
    out += R"({"kernel":"gemm","shape":")" + mapped_shape(i) +
           R"(","dtype":"f32","fingerprint":")" + fingerprint + R"(","source_hash":")" +
           source_hash + R"(","config":)" + config + R"(,"median_ms":)" +
           std::to_string(1.0 + i * 1e-6) + R"(,"time_ms":)" + std::to_string(1700000000000LL + i) +
           R"(,"device":{"name":"cpu","details":{"kind":"cpu"}}})";
  }
  out += "]}}";
  return out;
}

// Imports winners [first, first + rows) (gemm_import); dies unless every row is stored.
void import_gemm(const std::string& socket, int first, int rows, const std::string& fingerprint,
                 const std::string& source_hash, const std::string& config) {
  const nlohmann::json result =
      ok_result(socket, gemm_import(first, rows, fingerprint, source_hash, config));
  if (result.value("imported", -1) != rows) {
    die("an import of " + std::to_string(rows) + " rows stored " + result.dump().substr(0, 400));
  }
}

// The table's winner count and last publish time as ktuned reports them (stats.table).
std::pair<std::size_t, double> table_status(const std::string& socket) {
  const nlohmann::json table = ok_result(socket, R"({"op":"stats"})").at("table");
  return {table.at("winners").get<std::size_t>(), table.at("publish_ms").get<double>()};
}

// Polls stats until the table holds at least `winners`; ktuned's publish time of that table.
double wait_for_table(const std::string& socket, std::size_t winners) {
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  while (Clock::now() < deadline) {
    const auto [count, publish_ms] = table_status(socket);
    if (count >= winners) return publish_ms;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  die("the winner table never reached " + std::to_string(winners) + " winners");
}

// Runs `work(p)` in `processes` child processes at once, each returning a count (negative: it
// failed) through a pipe; dies naming `what` when one failed. The total, the children's CPU
// time (user and system, from their rusage) and the wall time from the last fork to the last
// child reaped.
struct FanOut {
  long long total = 0;
  double cpu_s = 0;
  double elapsed_s = 0;
};
template <class Work>
FanOut fan_out(int processes, const char* what, Work work) {
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) die("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      const long long count = work(p);
      if (::write(fds[1], &count, sizeof count) != sizeof count) ::_exit(1);
      ::_exit(0);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  const auto start = Clock::now();
  FanOut out;
  for (std::size_t i = 0; i < children.size(); ++i) {
    long long count = 0;
    if (::read(pipes[i], &count, sizeof count) != sizeof count || count < 0) die(what);
    out.total += count;
    ::close(pipes[i]);
    rusage usage{};
    int status = 0;
    ::wait4(children[i], &status, 0, &usage);
    out.cpu_s += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                 1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  }
  out.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

// Lookups per second through the winner table over `processes` processes, each cycling through
// `shapes` (every answer checked: exact, from the table), and the CPU time (user and system, from
// the processes' rusage) per lookup: what the lookups cost when the cores are shared.
struct MappedThroughput {
  double qps = 0;
  double cpu_ns = 0;
};
MappedThroughput mapped_throughput(const std::string& home, int processes, double seconds,
                                   const std::vector<std::string>& shapes) {
  const FanOut run = fan_out(processes, "a mapped client process failed its lookups", [&](int p) {
    ktune_client* client = open_client(home, -1, 1'000'000, true);
    ktune_answer a;
    long long count = 0;
    std::size_t next = static_cast<std::size_t>(p) * 97 % shapes.size();
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (count >= 0) {
      for (int i = 0; i < 256; ++i) {
        if (ktune_lookup(client, k_kernel, shapes[next].c_str(), "f32", "cpu", &a) != KTUNE_OK ||
            a.source != KTUNE_SOURCE_MAP || a.rung != KTUNE_RUNG_EXACT) {
          count = -1;
          break;
        }
        next = next + 1 == shapes.size() ? 0 : next + 1;
        ++count;
      }
      if (Clock::now() >= deadline) break;
    }
    ktune_close(client);
    return count;
  });
  return {static_cast<double>(run.total) / std::max(run.elapsed_s, seconds),
          run.total > 0 ? run.cpu_s * 1e9 / static_cast<double>(run.total) : 0};
}

// Redis GET of a 200-byte value over a Unix socket, hand-written RESP client: p50 and p99 of
// back-to-back GETs (us) and GETs per second over 8 client processes. Nothing when
// redis-server is not on PATH.
struct RedisFigures {
  double p50_us = 0, p99_us = 0, qps_8 = 0;
};
// One RESP exchange: sends `request`, reads `reply_bytes` back; false when the server closed.
bool redis_exchange(int conn, const std::string& request, std::size_t reply_bytes) {
  write_all(conn, request);
  char buf[512];
  std::size_t got = 0;
  while (got < reply_bytes) {
    const ssize_t n = ::read(conn, buf, sizeof buf);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// redis-server on the Unix socket `sock` (no port, no persistence) and a connection to it;
// -1 (server stopped) when it does not answer within 5 s.
int start_redis(const std::string& home, const std::string& sock, pid_t& server) {
  server = ::fork();
  if (server == 0) {
    const int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock.c_str(),
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", home.c_str(),
             static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int fd = -1;
  for (int i = 0; i < 500 && fd < 0; ++i) {
    fd = connect_unix(sock);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (fd < 0) {
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
  }
  return fd;
}

std::optional<RedisFigures> redis_baseline(const std::string& home, double seconds) {
  if (std::system("command -v redis-server >/dev/null 2>&1") != 0) return std::nullopt;
  const std::string sock = home + "/redis.sock";
  pid_t server = -1;
  const int fd = start_redis(home, sock, server);
  if (fd < 0) {
    std::fprintf(stderr, "bench_lookup: redis-server did not start; no Redis baseline\n");
    return std::nullopt;
  }
  const std::string value(200, 'x');
  const std::string set = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$200\r\n" + value + "\r\n";
  const std::string get = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  const std::size_t get_reply = 6 + 200 + 2;   // "$200\r\n" value "\r\n"
  RedisFigures out;
  if (!redis_exchange(fd, set, 5)) die("redis SET failed");
  std::vector<double> samples;
  for (int i = 0; i < 2000; ++i) redis_exchange(fd, get, get_reply);
  for (int i = 0; i < 50'000; ++i) {
    const auto t = Clock::now();
    if (!redis_exchange(fd, get, get_reply)) die("redis GET failed");
    samples.push_back(us_since(t));
  }
  ::close(fd);
  out.p50_us = percentile(samples, 0.50);
  out.p99_us = percentile(samples, 0.99);
  const FanOut run = fan_out(8, "a redis client process failed", [&](int) {
    const int conn = connect_unix(sock);
    long long count = conn < 0 ? -1 : 0;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (count >= 0 && Clock::now() < deadline) {
      for (int i = 0; i < 64; ++i) {
        if (!redis_exchange(conn, get, get_reply)) {
          count = -1;
          break;
        }
        ++count;
      }
    }
    return count;
  });
  out.qps_8 = static_cast<double>(run.total) / seconds;
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  return out;
}

// Lookups per second over `processes` client processes for `seconds`.
double throughput(const std::string& home, int processes, double seconds) {
  const FanOut run = fan_out(processes, "a client process failed its lookups", [&](int) {
    ktune_client* client = open_client(home, -1, 1'000'000);
    ktune_answer a;
    long long count = 0;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      for (int i = 0; i < 64; ++i) {
        if (ktune_lookup(client, k_kernel, k_shape, "f32", "cpu", &a) != KTUNE_OK ||
            a.source != KTUNE_SOURCE_DAEMON) {
          count = -1;
          break;
        }
        ++count;
      }
      if (count < 0 || Clock::now() >= deadline) break;
    }
    ktune_close(client);
    return count;
  });
  return static_cast<double>(run.total) / std::max(run.elapsed_s, seconds);
}

// Starts ktuned with KTUNE_HOME=`home` and waits for its readiness line.
pid_t start_daemon(const std::string& bin_dir, const std::string& home, const std::string& kernel_dir) {
  int ready[2];
  if (::pipe(ready) != 0) die("pipe failed");
  const pid_t daemon = ::fork();
  if (daemon == 0) {
    ::close(ready[0]);
    ::setenv("KTUNE_HOME", home.c_str(), 1);
    const std::string ktuned = bin_dir + "/ktuned";
    const std::string fd = std::to_string(ready[1]);
    const std::string config = home + "/ktuned.toml";
    ::execl(ktuned.c_str(), ktuned.c_str(), "--config", config.c_str(), "--kernel-dir",
            kernel_dir.c_str(), "--log-level", "warn", "--ready-fd", fd.c_str(),
            static_cast<char*>(nullptr));
    std::perror("exec ktuned");
    ::_exit(127);
  }
  ::close(ready[1]);
  g_daemon = daemon;
  char line[64] = {};
  if (::read(ready[0], line, sizeof line - 1) <= 0) die("ktuned did not start");
  ::close(ready[0]);
  return daemon;
}

// Everything the table and the JSON line report.
struct Figures {
  double p50 = 0, p99 = 0;                                   // back to back, idle
  double p50_loaded = 0, p99_loaded = 0, max_loaded = 0;     // while a tune and an import write
  std::size_t loaded_lookups = 0;
  double qps_1 = 0, qps_8 = 0, qps_64 = 0;
  double cache_hit_ns = 0;
  double db_us = 0;
  double mapped_p50_ns = 0, mapped_p99_ns = 0;
  MappedThroughput mapped_8;
  double mapped_visible_ms = 0, mapped_visible_max_ms = 0, commit_visible_ms = 0;
  double publish_ms_100k = 0, publish_cpu_ms_100k = 0;
  std::size_t table_winners = 0;
  std::optional<RedisFigures> redis;
};

// The ktuned under measurement: its home, socket and process, and the tune reply of the key.
struct Bench {
  std::string bin_dir, kernel_dir, home, socket, tuned;
  double seconds = 10;
  pid_t daemon = -1;
};

// The command line, a private home and config, ktuned started and gemm tuned at k_shape.
Bench start_bench(int argc, char** argv) {
  Bench b;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bin-dir" && i + 1 < argc) b.bin_dir = argv[++i];
    else if (arg == "--kernel-dir" && i + 1 < argc) b.kernel_dir = argv[++i];
    else if (arg == "--seconds" && i + 1 < argc) b.seconds = std::atof(argv[++i]);
    else die("usage: bench_lookup --bin-dir DIR --kernel-dir DIR [--seconds S]");
  }
  if (b.bin_dir.empty() || b.kernel_dir.empty() || b.seconds <= 0) {
    die("usage: bench_lookup --bin-dir DIR --kernel-dir DIR [--seconds S]");
  }
  char home_template[] = "/tmp/ktune-bench-lookup-XXXXXX";
  if (!::mkdtemp(home_template)) die("mkdtemp failed");
  b.home = home_template;
  std::ofstream(b.home + "/ktuned.toml") << "[daemon]\nmax_message_bytes = 67108864\n"
                                            "[measure]\nmin_samples = 3\nmax_samples = 10\n"
                                            "max_time_s = 0.01\nmin_time_s = 0\nwarmup_ms = 1\n"
                                            "flush_cache = false\n";
  b.daemon = start_daemon(b.bin_dir, b.home, b.kernel_dir);
  b.socket = b.home + "/ktuned.sock";
  b.tuned = raw_request(b.socket, std::string(R"({"op":"tune","kernel":"gemm","shape":")") + k_shape +
                                      R"(","wait":true})");
  if (b.tuned.find("\"ok\":true") == std::string::npos) die("tune failed: " + b.tuned);
  return b;
}

// Single client, back to back, over the socket.
void measure_idle(ktune_client* client, Figures& f) {
  ktune_answer a;
  for (int i = 0; i < 2000; ++i) ktune_lookup(client, k_kernel, k_shape, "f32", "cpu", &a);
  if (a.rung != KTUNE_RUNG_EXACT || a.source != KTUNE_SOURCE_DAEMON) {
    die(std::string("warm-up lookup did not hit an exact winner over the socket: ") +
        ktune_last_error(client));
  }
  std::vector<double> samples;
  const int k_samples = 50'000;
  samples.reserve(k_samples);
  for (int i = 0; i < k_samples; ++i) {
    const auto t = Clock::now();
    ktune_lookup(client, k_kernel, k_shape, "f32", "cpu", &a);
    samples.push_back(us_since(t));
  }
  f.p50 = percentile(samples, 0.50);
  f.p99 = percentile(samples, 0.99);
}

// The same lookups while ktuned writes: a tune storing a result per candidate, and a client
// importing a 10,000-row table (one request) -- measured over `loaded_s` from the moment the
// import is sent.
void measure_under_writes(const Bench& b, ktune_client* client, Figures& f) {
  const std::string table = import_request(10'000);
  const std::string started = raw_request(
      b.socket, R"({"op":"tune","kernel":"gemm","shape":"M=96,N=96,K=96","remeasure":true})");
  if (started.find("\"ok\":true") == std::string::npos) die("tune failed: " + started);
  std::this_thread::sleep_for(std::chrono::milliseconds(500)); // candidates are being stored
  const pid_t importer = ::fork();
  if (importer == 0) {
    const std::string reply = raw_request(b.socket, table);
    if (reply.find("\"ok\":true") == std::string::npos) {
      std::fprintf(stderr, "bench_lookup: import failed: %.300s\n", reply.c_str());
      ::_exit(1);
    }
    ::_exit(0);
  }
  const double loaded_s = 3.0;
  std::vector<double> loaded;
  loaded.reserve(1'000'000);
  ktune_answer a;
  const auto loaded_start = Clock::now();
  while (us_since(loaded_start) < loaded_s * 1e6) {
    const auto t = Clock::now();
    ktune_lookup(client, k_kernel, k_shape, "f32", "cpu", &a);
    loaded.push_back(us_since(t));
  }
  int import_status = 0;
  ::waitpid(importer, &import_status, 0);
  if (!WIFEXITED(import_status) || WEXITSTATUS(import_status) != 0) die("the import failed");
  raw_request(b.socket, R"({"op":"cancel","job":)" + job_id_of(started) + "}");
  f.p50_loaded = percentile(loaded, 0.50);
  f.p99_loaded = percentile(loaded, 0.99);
  f.max_loaded = percentile(loaded, 1.0);
  f.loaded_lookups = loaded.size();
}

// In-process cache hits.
void measure_cache_hit(const Bench& b, Figures& f) {
  ktune_client* cached = open_client(b.home, 60'000, 1'000'000);
  ktune_answer a;
  ktune_lookup(cached, k_kernel, k_shape, "f32", "cpu", &a);
  const long k_hits = 10'000'000;
  const auto hit_start = Clock::now();
  std::int64_t sink = 0;
  for (long i = 0; i < k_hits; ++i) {
    ktune_lookup(cached, k_kernel, k_shape, "f32", "cpu", &a);
    sink += a.param_count;
  }
  f.cache_hit_ns = us_since(hit_start) * 1000.0 / static_cast<double>(k_hits);
  if (a.source != KTUNE_SOURCE_CACHE || sink == 0) die("cache lookups did not hit the cache");
  ktune_close(cached);
}

// ktuned stopped: the database fallback; then ktuned again, for the winner table.
void measure_db_fallback(Bench& b, Figures& f) {
  raw_request(b.socket, R"({"op":"shutdown"})");
  int status = 0;
  ::waitpid(b.daemon, &status, 0);
  g_daemon = -1;
  ktune_client* offline = open_client(b.home, -1, 5000);
  ktune_answer a;
  ktune_lookup(offline, k_kernel, k_shape, "f32", "cpu", &a); // opens the database
  if (a.source != KTUNE_SOURCE_DATABASE || a.rung != KTUNE_RUNG_EXACT) {
    die(std::string("database fallback did not answer the winner: ") + ktune_last_error(offline));
  }
  std::vector<double> db_samples;
  for (int i = 0; i < 5000; ++i) {
    const auto t = Clock::now();
    ktune_lookup(offline, k_kernel, k_shape, "f32", "cpu", &a);
    db_samples.push_back(us_since(t));
  }
  ktune_close(offline);
  f.db_us = percentile(db_samples, 0.50);
  b.daemon = start_daemon(b.bin_dir, b.home, b.kernel_dir);
}

// The keys of the winner table: gemm winners on this CPU under the family's current source.
struct MappedKeys {
  std::string source_hash, fingerprint, config;
  std::vector<std::string> shapes;
};

// Imports k_mapped_keys winners and waits until a mapped client answers each of them exactly.
MappedKeys import_mapped_keys(const Bench& b) {
  MappedKeys keys;
  const nlohmann::json kernels = ok_result(b.socket, R"({"op":"kernels"})");
  for (const auto& k : kernels.at("kernels")) {
    if (k.at("name") == k_kernel && k.at("language") == "cpp") {
      keys.source_hash = k.at("source_hash").get<std::string>();
    }
  }
  keys.fingerprint =
      ok_result(b.socket, R"({"op":"stats"})").at("device").at("fingerprint").get<std::string>();
  keys.config = nlohmann::ordered_json::parse(b.tuned).at("result").at("winner").at("config").dump();
  if (keys.source_hash.empty() || keys.fingerprint.empty()) die("no source hash or CPU fingerprint for gemm");
  // The restarted daemon's first table (its winners from the database), then the new ones.
  const auto first_deadline = Clock::now() + std::chrono::seconds(60);
  while (ok_result(b.socket, R"({"op":"stats"})").at("table").at("generation") == 0) {
    if (Clock::now() > first_deadline) die("ktuned published no winner table");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t before_keys = table_status(b.socket).first;
  import_gemm(b.socket, 0, k_mapped_keys, keys.fingerprint, keys.source_hash, keys.config);
  wait_for_table(b.socket, before_keys + k_mapped_keys);
  for (int i = 0; i < k_mapped_keys; ++i) keys.shapes.push_back(mapped_shape(i));
  ktune_client* probe = open_client(b.home, -1, 1'000'000, true);
  ktune_answer a;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (const auto& shape : keys.shapes) {
    while (ktune_lookup(probe, k_kernel, shape.c_str(), "f32", "cpu", &a) != KTUNE_OK ||
           a.source != KTUNE_SOURCE_MAP || a.rung != KTUNE_RUNG_EXACT) {
      if (Clock::now() > deadline) {
        die("the imported winner " + shape + " never reached the table: " + ktune_last_error(probe));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ktune_close(probe);
  return keys;
}

// First lookups of each key (a fresh handle per round, keys in a shuffled order), timed one by one.
void measure_mapped_first_lookups(const Bench& b, const MappedKeys& keys, Figures& f) {
  std::vector<double> mapped_ns;
  mapped_ns.reserve(static_cast<std::size_t>(k_mapped_rounds) * k_mapped_keys);
  std::vector<int> order(k_mapped_keys);
  for (int i = 0; i < k_mapped_keys; ++i) order[i] = i;
  std::mt19937 shuffle_rng(37);
  ktune_answer a;
  for (int round = 0; round < k_mapped_rounds; ++round) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    ktune_client* mapped = open_client(b.home, -1, 1'000'000, true);
    // The first call maps the table (not timed).
    if (ktune_lookup(mapped, k_kernel, k_shape, "f32", "cpu", &a) != KTUNE_OK ||
        a.source != KTUNE_SOURCE_MAP) {
      die(std::string("the winner table did not answer: ") + ktune_last_error(mapped));
    }
    for (const int i : order) {
      const auto t = Clock::now();
      const ktune_status st = ktune_lookup(mapped, k_kernel, keys.shapes[i].c_str(), "f32", "cpu", &a);
      const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t).count();
      if (st != KTUNE_OK || a.source != KTUNE_SOURCE_MAP || a.rung != KTUNE_RUNG_EXACT) {
        die("a mapped lookup of " + keys.shapes[i] + " did not answer the exact winner: status " +
            std::to_string(st) + ", source " + ktune_source_string(a.source) + ", rung " +
            ktune_rung_string(a.rung) + ", " + ktune_last_error(mapped));
      }
      mapped_ns.push_back(ns);
    }
    ktune_close(mapped);
  }
  f.mapped_p50_ns = percentile(mapped_ns, 0.50);
  f.mapped_p99_ns = percentile(mapped_ns, 0.99);
}

// Commit to visible: an import of one new winner sent, a mapped client polling its key. Returns
// the next unused key.
int measure_visible(const Bench& b, const MappedKeys& keys, Figures& f) {
  std::vector<double> visible_ms, committed_ms;
  int next_key = k_mapped_keys;
  ktune_client* watcher = open_client(b.home, -1, 1'000'000, true);
  ktune_answer a;
  for (int r = 0; r < k_visible_rounds; ++r, ++next_key) {
    const std::string shape = mapped_shape(next_key);
    ktune_lookup(watcher, k_kernel, shape.c_str(), "f32", "cpu", &a);
    if (a.source != KTUNE_SOURCE_MAP || a.rung == KTUNE_RUNG_EXACT) die("a visible-round key is not new");
    const auto t0 = Clock::now();
    const int fd = send_request(b.socket, gemm_import(next_key, 1, keys.fingerprint, keys.source_hash, keys.config));
    while (ktune_lookup(watcher, k_kernel, shape.c_str(), "f32", "cpu", &a) != KTUNE_OK ||
           a.rung != KTUNE_RUNG_EXACT) {
      if (Clock::now() - t0 > std::chrono::seconds(10)) die("a new winner never reached the table");
      const timespec pause{0, 20'000};
      ::nanosleep(&pause, nullptr);
    }
    visible_ms.push_back(us_since(t0) / 1000.0);
    if (read_reply(fd).find("\"ok\":true") == std::string::npos) die("an import failed");
    committed_ms.push_back(ok_result(b.socket, R"({"op":"stats"})").at("table").at("visible_ms").get<double>());
  }
  ktune_close(watcher);
  f.mapped_visible_ms = percentile(visible_ms, 0.50);
  f.mapped_visible_max_ms = percentile(visible_ms, 1.0);
  f.commit_visible_ms = percentile(committed_ms, 0.50);
  return next_key;
}

// Publishing with 100,000 more winners in the table: ktuned's own time for one more winner.
void measure_publish(const Bench& b, const MappedKeys& keys, int next_key, Figures& f) {
  std::size_t winners = table_status(b.socket).first;
  import_gemm(b.socket, next_key, k_publish_rows, keys.fingerprint, keys.source_hash, keys.config);
  next_key += k_publish_rows;
  wait_for_table(b.socket, winners + k_publish_rows);
  std::vector<double> publish_ms, publish_cpu_ms;
  for (int r = 0; r < 3; ++r, ++next_key) {
    winners = table_status(b.socket).first;
    import_gemm(b.socket, next_key, 1, keys.fingerprint, keys.source_hash, keys.config);
    publish_ms.push_back(wait_for_table(b.socket, winners + 1));
    publish_cpu_ms.push_back(
        ok_result(b.socket, R"({"op":"stats"})").at("table").at("publish_cpu_ms").get<double>());
  }
  f.publish_ms_100k = percentile(publish_ms, 0.50);
  f.publish_cpu_ms_100k = percentile(publish_cpu_ms, 0.50);
  f.table_winners = table_status(b.socket).first;
}

void print_table(const Figures& f, double seconds) {
  const std::string s = std::to_string(int(seconds)) + " s";
  std::printf("%-44s %12s\n", "lookup (gemm M=N=K=32, exact winner)", "value");
  std::printf("%-44s %12.2f us\n", "1 client, back to back, p50", f.p50);
  std::printf("%-44s %12.2f us\n", "1 client, back to back, p99", f.p99);
  std::printf("%-44s %12.2f us\n", "p50 while a tune and imports write", f.p50_loaded);
  std::printf("%-44s %12.2f us\n", "p99 while a tune and imports write", f.p99_loaded);
  std::printf("%-44s %12.2f us\n", "max while a tune and imports write", f.max_loaded);
  std::printf("%-44s %12.2f\n", "p99 under writes / idle p99", f.p99_loaded / f.p99);
  std::printf("%-44s %12zu\n", "  lookups in those 3 s", f.loaded_lookups);
  std::printf("%-44s %12.0f /s\n", ("1 client process, " + s).c_str(), f.qps_1);
  std::printf("%-44s %12.0f /s\n", ("8 client processes, " + s).c_str(), f.qps_8);
  std::printf("%-44s %12.0f /s\n", ("64 client processes, " + s).c_str(), f.qps_64);
  std::printf("%-44s %12.1f ns\n", "in-process cache hit", f.cache_hit_ns);
  std::printf("%-44s %12.2f us\n", "database fallback (ktuned stopped), p50", f.db_us);
  std::printf("%-44s %12.0f ns\n", "mapped table, first lookup of a key, p50", f.mapped_p50_ns);
  std::printf("%-44s %12.0f ns\n", "mapped table, first lookup of a key, p99", f.mapped_p99_ns);
  std::printf("%-44s %12.0f /s\n", ("mapped table, 8 processes, " + s).c_str(), f.mapped_8.qps);
  std::printf("%-44s %12.1f ns\n", "  their CPU time per lookup", f.mapped_8.cpu_ns);
  std::printf("%-44s %12.2f ms\n", "import sent to visible in the map, median", f.mapped_visible_ms);
  std::printf("%-44s %12.2f ms\n", "import sent to visible in the map, max", f.mapped_visible_max_ms);
  std::printf("%-44s %12.2f ms\n", "ktuned: winner stored to table renamed, median", f.commit_visible_ms);
  std::printf("%-44s %12.1f ms\n", ("publish, table of " + std::to_string(f.table_winners) + " winners").c_str(), f.publish_ms_100k);
  std::printf("%-44s %12.1f ms\n", "  the publishing thread's CPU time in it", f.publish_cpu_ms_100k);
  if (f.redis) {
    std::printf("%-44s %12.2f us\n", "Redis GET, 1 client, p50 (same run)", f.redis->p50_us);
    std::printf("%-44s %12.2f us\n", "Redis GET, 1 client, p99 (same run)", f.redis->p99_us);
    std::printf("%-44s %12.0f /s\n", "Redis GET, 8 client processes (same run)", f.redis->qps_8);
  } else {
    std::printf("%-44s %12s\n", "Redis GET baseline", "redis-server not installed");
    std::printf("%-44s %12s\n", "anchor: Redis GET over a Unix socket", "10.7 / 26.5 us, 81.7k/s (8)");
  }
}

void print_json(const Figures& f) {
  auto or_null = [&](double v) { return f.redis ? std::to_string(v) : std::string("null"); };
  std::printf("{\"bench\":\"lookup\",\"p50_us\":%.2f,\"p99_us\":%.2f,\"p99_us_under_writes\":%.2f,"
              "\"p99_ratio_under_writes\":%.2f,\"max_us_under_writes\":%.0f,\"qps_1\":%.0f,\"qps_8\":%.0f,"
              "\"qps_64\":%.0f,\"cache_hit_ns\":%.1f,\"db_fallback_us\":%.2f,"
              "\"mapped_p50_ns\":%.0f,\"mapped_p99_ns\":%.0f,\"mapped_qps_8\":%.0f,\"mapped_cpu_ns_8\":%.1f,"
              "\"mapped_visible_ms\":%.2f,\"mapped_visible_max_ms\":%.2f,\"commit_visible_ms\":%.2f,"
              "\"publish_ms_100k\":%.1f,\"publish_cpu_ms_100k\":%.1f,"
              "\"table_winners\":%zu,\"redis_p50_us\":%s,\"redis_p99_us\":%s,\"redis_qps_8\":%s}\n",
              f.p50, f.p99, f.p99_loaded, f.p99_loaded / f.p99, f.max_loaded, f.qps_1, f.qps_8, f.qps_64,
              f.cache_hit_ns, f.db_us, f.mapped_p50_ns, f.mapped_p99_ns, f.mapped_8.qps, f.mapped_8.cpu_ns,
              f.mapped_visible_ms, f.mapped_visible_max_ms, f.commit_visible_ms, f.publish_ms_100k,
              f.publish_cpu_ms_100k, f.table_winners, or_null(f.redis ? f.redis->p50_us : 0).c_str(),
              or_null(f.redis ? f.redis->p99_us : 0).c_str(), or_null(f.redis ? f.redis->qps_8 : 0).c_str());
}

} // namespace

int main(int argc, char** argv) {
  Bench b = start_bench(argc, argv);
  Figures f;
  ktune_client* client = open_client(b.home, -1, 1'000'000);
  measure_idle(client, f);
  measure_under_writes(b, client, f);
  ktune_close(client);
  f.qps_1 = throughput(b.home, 1, b.seconds);
  f.qps_8 = throughput(b.home, 8, b.seconds);
  f.qps_64 = throughput(b.home, 64, b.seconds);
  measure_cache_hit(b, f);
  measure_db_fallback(b, f);
  const MappedKeys keys = import_mapped_keys(b);
  measure_mapped_first_lookups(b, keys, f);
  f.mapped_8 = mapped_throughput(b.home, 8, b.seconds, keys.shapes);
  const int next_key = measure_visible(b, keys, f);
  measure_publish(b, keys, next_key, f);
  f.redis = redis_baseline(b.home, b.seconds);
  raw_request(b.socket, R"({"op":"shutdown"})");
  int status = 0;
  ::waitpid(b.daemon, &status, 0);
  g_daemon = -1;
  std::filesystem::remove_all(b.home);
  print_table(f, b.seconds);
  print_json(f);
  return 0;
}
