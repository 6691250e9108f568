#pragma once
// ktune-worker --stop-guard --fd N: the process that ends what ktuned has stopped when ktuned
// dies first (daemon/stop_guard.hpp is ktuned's side; docs/ARCHITECTURE.md § Workers).
//
// ktuned stops the compile it lends the bench CPU to (SIGSTOP to the worker's process group)
// while the cpu lane measures. A stopped process holds the SIGTERM of its PR_SET_PDEATHSIG pending
// until it runs again, and the kernel continues an orphaned stopped group (SIGHUP, SIGCONT) only
// when the process that inherits it is in another session. Under a reaper in ktuned's own session
// (a container's init, a CI runner, a child subreaper) a compile stopped when ktuned was killed
// would stay stopped for good, its compiler too, holding whatever ktuned's stdout was.
//
// The guard reads lines from fd N:
//   +<pgid>   ktuned may stop this process group from now on
//   -<pgid>   no longer (the group's leader exited)
// and at end of file, that is once ktuned has exited in whatever way, sends SIGKILL to every group
// still held and exits 0. It ignores SIGHUP, SIGINT and SIGTERM: it ends with ktuned, not before.
namespace ktune {

int run_stop_guard(int fd);

} // namespace ktune
