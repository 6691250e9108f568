// bench_lookup: the runtime lookup path, measured through libktune_client's C API.
//
// Starts ktuned (--bin-dir) with a private KTUNE_HOME, tunes gemm at M=N=K=32 with tiny measurement
// settings so that lookups hit an exact winner, then measures:
//   - single-client round trips, back to back, cache off: p50 and p99;
//   - throughput with 1, 8 and 64 client processes (one connection each, cache off) for --seconds;
//   - an in-process cache hit (ns per lookup);
//   - the database fallback with ktuned stopped (median us per lookup, cache off).
// Prints one table, then one JSON line.
#include "ktune/client.h"

#include <fcntl.h>
#include <signal.h>
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
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const char* const k_kernel = "gemm";
const char* const k_shape = "M=32,N=32,K=32";

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "bench_lookup: %s\n", message.c_str());
  std::exit(1);
}

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

ktune_client* open_client(const std::string& home, int cache_ttl_ms, int timeout_us) {
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
  return client;
}

// One request over a fresh connection, waiting for the reply line without an event field.
std::string raw_request(const std::string& socket_path, const std::string& line) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    die("cannot connect to " + socket_path + ": " + std::strerror(errno));
  }
  const std::string out = line + "\n";
  if (::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) die("short write");
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

// Lookups per second over `processes` client processes for `seconds`.
double throughput(const std::string& home, int processes, double seconds) {
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) die("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
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
      if (::write(fds[1], &count, sizeof count) != sizeof count) ::_exit(1);
      ::_exit(0);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  const auto start = Clock::now();
  long long total = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    long long count = 0;
    if (::read(pipes[i], &count, sizeof count) != sizeof count || count < 0) {
      die("a client process failed its lookups");
    }
    total += count;
    ::close(pipes[i]);
    ::waitpid(children[i], nullptr, 0);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(total) / std::max(elapsed, seconds);
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

} // namespace

int main(int argc, char** argv) {
  std::string bin_dir, kernel_dir;
  double seconds = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bin-dir" && i + 1 < argc) bin_dir = argv[++i];
    else if (arg == "--kernel-dir" && i + 1 < argc) kernel_dir = argv[++i];
    else if (arg == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else die("usage: bench_lookup --bin-dir DIR --kernel-dir DIR [--seconds S]");
  }
  if (bin_dir.empty() || kernel_dir.empty() || seconds <= 0) {
    die("usage: bench_lookup --bin-dir DIR --kernel-dir DIR [--seconds S]");
  }
  char home_template[] = "/tmp/ktune-bench-lookup-XXXXXX";
  if (!::mkdtemp(home_template)) die("mkdtemp failed");
  const std::string home = home_template;
  std::ofstream(home + "/ktuned.toml") << "[daemon]\nmax_message_bytes = 67108864\n"
                                          "[measure]\nmin_samples = 3\nmax_samples = 10\n"
                                          "max_time_s = 0.01\nmin_time_s = 0\nwarmup_ms = 1\n"
                                          "flush_cache = false\n";
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
  char line[64] = {};
  if (::read(ready[0], line, sizeof line - 1) <= 0) die("ktuned did not start");
  ::close(ready[0]);
  const std::string socket = home + "/ktuned.sock";
  const std::string tuned = raw_request(
      socket, std::string(R"({"op":"tune","kernel":"gemm","shape":")") + k_shape +
                  R"(","wait":true})");
  if (tuned.find("\"ok\":true") == std::string::npos) die("tune failed: " + tuned);

  // Single client, back to back.
  ktune_client* client = open_client(home, -1, 1'000'000);
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
  const double p50 = percentile(samples, 0.50), p99 = percentile(samples, 0.99);

  // The same lookups while ktuned writes: a tune storing a result per candidate, and a client
  // importing a 10,000-row table (one request) -- measured over `loaded_s` from the moment the
  // import is sent.
  const std::string table = import_request(10'000);
  const std::string started = raw_request(
      socket, R"({"op":"tune","kernel":"gemm","shape":"M=96,N=96,K=96","remeasure":true})");
  if (started.find("\"ok\":true") == std::string::npos) die("tune failed: " + started);
  std::this_thread::sleep_for(std::chrono::milliseconds(500)); // candidates are being stored
  const pid_t importer = ::fork();
  if (importer == 0) {
    const std::string reply = raw_request(socket, table);
    if (reply.find("\"ok\":true") == std::string::npos) {
      std::fprintf(stderr, "bench_lookup: import failed: %.300s\n", reply.c_str());
      ::_exit(1);
    }
    ::_exit(0);
  }
  const double loaded_s = 3.0;
  std::vector<double> loaded;
  loaded.reserve(1'000'000);
  const auto loaded_start = Clock::now();
  while (us_since(loaded_start) < loaded_s * 1e6) {
    const auto t = Clock::now();
    ktune_lookup(client, k_kernel, k_shape, "f32", "cpu", &a);
    loaded.push_back(us_since(t));
  }
  int import_status = 0;
  ::waitpid(importer, &import_status, 0);
  if (!WIFEXITED(import_status) || WEXITSTATUS(import_status) != 0) die("the import failed");
  raw_request(socket, R"({"op":"cancel","job":)" + job_id_of(started) + "}");
  ktune_close(client);
  const double p50_loaded = percentile(loaded, 0.50), p99_loaded = percentile(loaded, 0.99);
  const double max_loaded = percentile(loaded, 1.0);

  const double qps_1 = throughput(home, 1, seconds);
  const double qps_8 = throughput(home, 8, seconds);
  const double qps_64 = throughput(home, 64, seconds);

  // In-process cache hits.
  ktune_client* cached = open_client(home, 60'000, 1'000'000);
  ktune_lookup(cached, k_kernel, k_shape, "f32", "cpu", &a);
  const long k_hits = 10'000'000;
  const auto hit_start = Clock::now();
  std::int64_t sink = 0;
  for (long i = 0; i < k_hits; ++i) {
    ktune_lookup(cached, k_kernel, k_shape, "f32", "cpu", &a);
    sink += a.param_count;
  }
  const double cache_hit_ns = us_since(hit_start) * 1000.0 / static_cast<double>(k_hits);
  if (a.source != KTUNE_SOURCE_CACHE || sink == 0) die("cache lookups did not hit the cache");
  ktune_close(cached);

  // ktuned stopped: the database fallback.
  raw_request(socket, R"({"op":"shutdown"})");
  int status = 0;
  ::waitpid(daemon, &status, 0);
  ktune_client* offline = open_client(home, -1, 5000);
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
  const double db_us = percentile(db_samples, 0.50);
  std::filesystem::remove_all(home);

  std::printf("%-44s %12s\n", "lookup (gemm M=N=K=32, exact winner)", "value");
  std::printf("%-44s %12.2f us\n", "1 client, back to back, p50", p50);
  std::printf("%-44s %12.2f us\n", "1 client, back to back, p99", p99);
  std::printf("%-44s %12.2f us\n", "p50 while a tune and imports write", p50_loaded);
  std::printf("%-44s %12.2f us\n", "p99 while a tune and imports write", p99_loaded);
  std::printf("%-44s %12.2f us\n", "max while a tune and imports write", max_loaded);
  std::printf("%-44s %12.2f\n", "p99 under writes / idle p99", p99_loaded / p99);
  std::printf("%-44s %12zu\n", "  lookups in those 3 s", loaded.size());
  std::printf("%-44s %12.0f /s\n", ("1 client process, " + std::to_string(int(seconds)) + " s").c_str(), qps_1);
  std::printf("%-44s %12.0f /s\n", ("8 client processes, " + std::to_string(int(seconds)) + " s").c_str(), qps_8);
  std::printf("%-44s %12.0f /s\n", ("64 client processes, " + std::to_string(int(seconds)) + " s").c_str(), qps_64);
  std::printf("%-44s %12.1f ns\n", "in-process cache hit", cache_hit_ns);
  std::printf("%-44s %12.2f us\n", "database fallback (ktuned stopped), p50", db_us);
  std::printf("%-44s %12s\n", "anchor: Redis GET over a Unix socket", "10.7 / 26.5 us, 81.7k/s (8)");
  std::printf("{\"bench\":\"lookup\",\"p50_us\":%.2f,\"p99_us\":%.2f,\"p99_us_under_writes\":%.2f,"
              "\"p99_ratio_under_writes\":%.2f,\"max_us_under_writes\":%.0f,\"qps_1\":%.0f,\"qps_8\":%.0f,"
              "\"qps_64\":%.0f,\"cache_hit_ns\":%.1f,\"db_fallback_us\":%.2f}\n",
              p50, p99, p99_loaded, p99_loaded / p99, max_loaded, qps_1, qps_8, qps_64, cache_hit_ns,
              db_us);
  return 0;
}
