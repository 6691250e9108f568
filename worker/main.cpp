// ktune-worker: see k_usage and worker/worker.hpp.
#include "worker/stop_guard.hpp"
#include "worker/worker.hpp"
#include "worker/standalone.hpp"

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>

namespace {

constexpr const char* k_usage =
    "usage: ktune-worker --fd <N> --role compile|bench [--cpu <core>] [--memory-mb <MiB>]\n"
    "                    [--measure-lock <file>] [--device-name cuda:<N>]\n"
    "       ktune-worker --run-repro <file>\n"
    "       ktune-worker --stop-guard --fd <N>\n"
    "       ktune-worker --list-cuda-devices\n"
    "  --run-repro runs one candidate outside ktuned from a repro bundle's repro.json (ktune\n"
    "  repro; docs/operations.md): compiles it (and its reference), runs it, and prints\n"
    "  \"status: <status> ...\" as ktuned would file it (ok, crash, timeout, mismatch, ...).\n"
    "  --stop-guard is ktuned's: it kills the worker groups ktuned may stop, once ktuned exits\n"
    "  (worker/stop_guard.hpp).\n"
    "  --list-cuda-devices prints the CUDA devices this process sees as one JSON line (the device\n"
    "  probe of a `devices` request runs it, outside the worker's memory limit).\n"
    "  --device-name is the lane a CUDA bench worker serves; its messages name that device.\n";

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

int usage_error(const char* what, std::string_view detail) {
  std::fprintf(stderr, "ktune-worker: %s%.*s\n%s", what, static_cast<int>(detail.size()),
               detail.data(), k_usage);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  const pid_t parent_pid = ::getppid();
  std::optional<int> fd;
  std::optional<ktune::Role> role;
  std::optional<int> cpu;
  std::optional<int> memory_mb;
  std::string measure_lock;
  std::string device_name;
  bool stop_guard = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    }
    if (arg == "--run-repro") {
      if (i + 1 >= argc) return usage_error("missing value after ", arg);
      return ktune::run_repro_file(argv[i + 1]);
    }
    if (arg == "--list-cuda-devices") return ktune::list_cuda_devices_main();
    if (arg == "--stop-guard") {
      stop_guard = true;
      continue;
    }
    if (arg != "--fd" && arg != "--role" && arg != "--cpu" && arg != "--memory-mb" &&
        arg != "--measure-lock" && arg != "--device-name")
      return usage_error("unknown argument ", arg);
    if (i + 1 >= argc) return usage_error("missing value after ", arg);
    const std::string_view value = argv[++i];
    if (arg == "--measure-lock" || arg == "--device-name") {
      (arg == "--measure-lock" ? measure_lock : device_name) = value;
      continue;
    }
    if (arg == "--role") {
      role = ktune::parse_role(value);
      if (!role) return usage_error("--role must be compile or bench, found ", value);
      continue;
    }
    auto number = parse_int(value);
    if (!number || *number < 0)
      return usage_error("expected a non-negative integer, found ", value);
    (arg == "--fd" ? fd : arg == "--cpu" ? cpu : memory_mb) = number;
  }
  if (!fd) return usage_error("--fd is required", "");
  if (stop_guard) return ktune::run_stop_guard(*fd);
  if (!role) return usage_error("--role is required", "");

  if (auto prepared = ktune::prepare_worker_process(
          *fd, parent_pid, cpu,
          memory_mb ? std::optional<long long>(*memory_mb) : std::nullopt);
      !prepared) {
    std::fprintf(stderr, "ktune-worker: %s\n", prepared.error().message.c_str());
    return 1;
  }
  return ktune::run_worker(*fd, *role, measure_lock, device_name);
}
