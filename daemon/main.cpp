// ktuned: the ktune autotuning daemon. Everything lives in ktune_daemon; see daemon/server.hpp.
#include "core/paths.hpp"
#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "daemon/server.hpp"

#include <csignal>
#include <cstdint>
#include <sys/stat.h>
#include <exception>
#include <variant>

int main(int argc, char** argv) {
  using namespace ktune::daemon;
  // A client or worker that goes away mid-write is an error return, not a reason to die.
  std::signal(SIGPIPE, SIG_IGN);
  // Everything ktuned creates (database, WAL, logs, cache, directories) is its user's alone,
  // whatever umask it was started with; workers and compilers inherit this.
  ::umask(077);
  try {
    auto parsed = parse_command_line(argc, argv);
    if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
    auto config = resolve_config(std::get<CommandLine>(parsed), ktune::path_env_from_process(),
                                 executable_dir());
    if (!config) {
      KTUNE_LOG(error) << config.error().message;
      return 1;
    }
    ktune::log::set_level(config->log_level);
    if (auto log = ktune::log::rotate_stderr_file(
            static_cast<std::uint64_t>(config->log_max_mb * 1024.0 * 1024.0), config->log_keep)) {
      KTUNE_LOG(debug) << "the log " << *log << " is rotated past " << config->log_max_mb
                       << " MB, keeping " << config->log_keep << " old file(s)";
    }
    return run_daemon(std::move(*config));
  } catch (const std::exception& e) {
    KTUNE_LOG(error) << "ktuned: fatal: " << e.what();
    return 1;
  }
}
