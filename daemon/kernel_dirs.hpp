#pragma once
// KernelDirs: the directories ktuned loads kernel families from. The configured ones
// ([daemon].kernel_dirs, --kernel-dir, in that order) come first, then the directories clients
// added at run time with the `add_kernel_dir` op (docs/protocol.md § add_kernel_dir), in the
// order they were added. Added directories are kept in a journal next to the database
// (`<db>-kernel-dirs`: one line per change, "+<path>" or "-<path>", appended and synced), so a
// restarted ktuned loads them too and resumes their jobs. A torn last line (a crash in the
// middle of an append) is ignored.
//
// Who may add: ktuned's own uid and root (the families of a directory are compiled and run as
// ktuned's user). What: an absolute path to an existing directory, owned by ktuned's uid or root
// and writable by no one else; it is kept resolved (no symbolic links). Families in it follow the
// rules of every kernel directory (a spec cannot name files outside it).
//
// io thread only.
#include "core/protocol.hpp"
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ktune::daemon {

// The journal of the added directories of a daemon whose database is `db_path`.
[[nodiscard]] std::string added_kernel_dirs_file(const std::string& db_path);

class KernelDirs {
public:
  // Most directories a journal keeps; one more add is refused with bad_request.
  static constexpr std::size_t k_max_added = 256;

  // Reads the journal at `journal` (missing: nothing added). Lines that are not "+/abs/path" or
  // "-/abs/path" are skipped; warnings() says which, and why the journal could not be read.
  KernelDirs(std::vector<std::string> configured, std::string journal);

  // Configured directories, then the added ones not among them.
  [[nodiscard]] std::vector<std::string> all() const;
  [[nodiscard]] const std::vector<std::string>& added() const { return m_added; }
  [[nodiscard]] const std::vector<std::string>& warnings() const { return m_warnings; }

  // Adds `path` for a client of uid `client`. Returns the resolved path and whether it is new
  // (false: configured or added before). Errors: permission_denied (another uid; the connection
  // stays open), bad_request (not absolute, missing, not a directory, owned by another user,
  // writable by group or others, too many added), internal (the journal cannot be written; the
  // directory is then not added).
  struct Change {
    std::string path;
    bool changed = false;
  };
  [[nodiscard]] Result<Change> add(const std::string& path, uid_t client);
  // Removes an added directory (a configured one cannot be: bad_request). changed = false when
  // it was not added. Errors as for add.
  [[nodiscard]] Result<Change> remove(const std::string& path, uid_t client);

private:
  [[nodiscard]] Result<void> append(char sign, const std::string& path);

  std::vector<std::string> m_configured;
  std::string m_journal;
  std::vector<std::string> m_added;
  std::vector<std::string> m_warnings;
};

// `add_kernel_dir` / `remove_kernel_dir` (docs/protocol.md): {"path": "/abs/dir"}. On a change
// (and for an add that changed nothing, so a client sees its families) `rescan` reloads the
// families and returns the `kernels` op's reply, whose families and broken specs under the
// directory are answered: {"path", "added"|"removed", "kernel_dirs", "kernels", "broken"}.
[[nodiscard]] Result<nlohmann::json> kernel_dir_request(
    const protocol::Request& request, uid_t client, KernelDirs& dirs,
    const std::function<Result<nlohmann::json>()>& rescan);

} // namespace ktune::daemon
