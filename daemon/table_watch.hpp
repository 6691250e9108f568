#pragma once
// TableWatch: imports the tables that appear in the directories of [daemon].table_dirs, so that a
// fleet receives tuned tables by whatever moves files (NFS, rsync, a package, a container layer).
//
// At start every `*.json` file of each directory is read; afterwards inotify reports files
// written and closed (IN_CLOSE_WRITE) or moved in (IN_MOVED_TO, the rename of an atomic write),
// read through the daemon's io_context (an Asio stream_descriptor on the inotify fd). A file is
// imported through `import` (ImportService::import_text: the `import` op's path) once per
// content: its XXH3-128 hash is remembered from the moment its import starts, so the same bytes
// seen again (a touch, a copy under another name, a second event) are not imported again. A
// failed import forgets the hash, so the next change of the file tries again; a file that is not
// a table is logged once per content. Hashes live in memory; after a restart the startup scan
// imports each file once more, which writes nothing for rows the store already holds (docs/
// export-format.md § Import: unchanged). Names starting with '.' and names not ending in
// ".json" (the temporary files of an atomic write) are ignored; subdirectories are not watched.
// io thread only.
#include "core/result.hpp"
#include "core/unique_fd.hpp"
#include "tableio/merge.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace ktune::daemon {

class TableWatch {
public:
  using Done = std::function<void(Result<nlohmann::json>)>;
  // Imports the text of the file `path`; calls `done` with the import's reply or error.
  using Import = std::function<void(std::string text, std::string path, Done done)>;

  // Watches `dirs`. Errors ("config_error"): a directory that does not exist or cannot be
  // watched, naming it and the cause.
  [[nodiscard]] static Result<std::unique_ptr<TableWatch>> create(boost::asio::io_context& io,
                                                                  const std::vector<std::string>& dirs,
                                                                  Import import);
  // Scans the directories once and starts reading events.
  void start();
  // Stops reading events; imports in flight finish (or are dropped by the handler).
  void stop();

private:
  TableWatch(boost::asio::io_context& io, Import import);
  void read_events();
  void consider(const std::string& path);

  boost::asio::posix::stream_descriptor m_inotify;
  Import m_import;
  std::map<int, std::string> m_dirs;  // watch descriptor -> directory
  std::set<std::string> m_hashes;     // contents imported or being imported
  std::array<char, 64 * 1024> m_buffer{};
  bool m_stopped = false;
};

} // namespace ktune::daemon
