#include "core/paths.hpp"

#include <cstdlib>
#include <unistd.h>

namespace ktune {

InstancePaths resolve_paths(const PathEnv& env) {
  InstancePaths p;
  if (!env.ktune_home.empty()) {
    p.runtime_dir = env.ktune_home;
    p.state_dir = env.ktune_home;
  } else {
    p.runtime_dir = !env.xdg_runtime_dir.empty() ? env.xdg_runtime_dir + "/ktune"
                                                 : "/tmp/ktune-" + std::to_string(env.uid);
    if (!env.xdg_state_home.empty()) p.state_dir = env.xdg_state_home + "/ktune";
    else if (!env.home.empty()) p.state_dir = env.home + "/.local/state/ktune";
    else p.state_dir = p.runtime_dir + "/state";
  }
  p.socket = p.runtime_dir + "/ktuned.sock";
  p.lock_file = p.runtime_dir + "/ktuned.lock";
  p.pid_file = p.runtime_dir + "/ktuned.pid";
  p.db = p.state_dir + "/ktune.db";
  p.cache_dir = p.state_dir + "/cache";
  p.log_dir = p.state_dir + "/log";
  return p;
}

PathEnv path_env_from_process() {
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  return PathEnv{get("KTUNE_HOME"), get("XDG_RUNTIME_DIR"), get("XDG_STATE_HOME"), get("HOME"),
                 static_cast<unsigned>(::getuid())};
}

} // namespace ktune
