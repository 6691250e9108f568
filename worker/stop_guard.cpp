#include "worker/stop_guard.hpp"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <set>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unistd.h>

namespace ktune {

namespace {

// "+123" or "-123" with a pid above 1; nullopt-like 0 for anything else.
pid_t parse_group(std::string_view line) {
  if (line.size() < 2) return 0;
  pid_t pgid = 0;
  const auto [end, ec] = std::from_chars(line.data() + 1, line.data() + line.size(), pgid);
  if (ec != std::errc() || end != line.data() + line.size() || pgid <= 1) return 0;
  return pgid;
}

} // namespace

int run_stop_guard(int fd) {
  for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGPIPE}) ::signal(sig, SIG_IGN);
  std::set<pid_t> held;
  std::string pending;
  char chunk[512];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    pending.append(chunk, static_cast<std::size_t>(got));
    for (auto end = pending.find('\n'); end != std::string::npos; end = pending.find('\n')) {
      const std::string_view line(pending.data(), end);
      if (const pid_t pgid = parse_group(line); pgid != 0) {
        if (line[0] == '+') held.insert(pgid);
        if (line[0] == '-') held.erase(pgid);
      }
      pending.erase(0, end + 1);
    }
  }
  for (const pid_t pgid : held) ::kill(-pgid, SIGKILL);
  return 0;
}

} // namespace ktune
