#pragma once
// Where an instance keeps its socket, database, compile cache and logs.
//
// KTUNE_HOME set:   everything under it (socket ktuned.sock, db ktune.db, cache/, log/).
// otherwise:        socket and lock under $XDG_RUNTIME_DIR/ktune (else /tmp/ktune-<uid>),
//                   data under $XDG_STATE_HOME/ktune (else $HOME/.local/state/ktune).
// Pure: the caller passes the environment values (empty = unset).
#include <string>

namespace ktune {

struct InstancePaths {
  std::string runtime_dir;   // created 0700
  std::string socket;
  std::string lock_file;     // single-instance lock
  std::string pid_file;
  std::string state_dir;
  std::string db;
  std::string cache_dir;
  std::string log_dir;
};

struct PathEnv {
  std::string ktune_home, xdg_runtime_dir, xdg_state_home, home;
  unsigned uid = 0;
};

[[nodiscard]] InstancePaths resolve_paths(const PathEnv& env);

// Reads KTUNE_HOME, XDG_RUNTIME_DIR, XDG_STATE_HOME, HOME and getuid() (the one impure helper,
// kept here so every binary resolves paths the same way).
[[nodiscard]] PathEnv path_env_from_process();

} // namespace ktune
