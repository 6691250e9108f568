#include "daemon/table_watch.hpp"

#include "core/hash.hpp"
#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "replay/file_reader.hpp"

#include <sys/inotify.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ktune::daemon {

namespace {

// Tables are read on the io thread: a 10,000-row table is about 10 MB, read in milliseconds.
constexpr std::size_t k_max_table_bytes = std::size_t{256} << 20;

bool is_table_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && name.size() > 5 &&
         name.compare(name.size() - 5, 5, ".json") == 0;
}

} // namespace

TableWatch::TableWatch(boost::asio::io_context& io, Import import)
    : m_inotify(io), m_import(std::move(import)) {}

Result<std::unique_ptr<TableWatch>> TableWatch::create(boost::asio::io_context& io,
                                                       const std::vector<std::string>& dirs,
                                                       Import import) {
  UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (fd.get() < 0) {
    return make_error(ErrorCode::config_error, std::string("table_dirs: inotify_init1 failed: ") +
                                          std::strerror(errno));
  }
  std::unique_ptr<TableWatch> watch(new TableWatch(io, std::move(import)));
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return make_error(ErrorCode::config_error, "[daemon].table_dirs: " + dir + " is not a directory" +
                                            (ec ? " (" + ec.message() + ")" : std::string()));
    }
    const int wd = ::inotify_add_watch(fd.get(), dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO);
    if (wd < 0) {
      return make_error(ErrorCode::config_error, "[daemon].table_dirs: cannot watch " + dir + ": " +
                                            std::strerror(errno));
    }
    watch->m_dirs[wd] = dir;
  }
  watch->m_inotify.assign(fd.release());
  return watch;
}

void TableWatch::start() {
  for (const auto& [wd, dir] : m_dirs) {
    KTUNE_LOG(info) << "watching " << dir << " for tables";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.is_regular_file() && is_table_name(entry.path().filename().string())) {
        consider(entry.path().string());
      }
    }
    if (ec) KTUNE_LOG(warn) << "table_dirs: cannot list " << dir << ": " << ec.message();
  }
  read_events();
}

void TableWatch::stop() {
  m_stopped = true;
  boost::system::error_code ignored;
  m_inotify.cancel(ignored);
}

void TableWatch::read_events() {
  m_inotify.async_read_some(
      boost::asio::buffer(m_buffer), [this](const boost::system::error_code& ec, std::size_t n) {
        if (m_stopped || ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          KTUNE_LOG(error) << "table_dirs: reading inotify events failed: " << ec.message()
                           << "; new tables are no longer imported";
          return;
        }
        std::size_t at = 0;
        while (at + sizeof(inotify_event) <= n) {
          const auto* event = reinterpret_cast<const inotify_event*>(m_buffer.data() + at);
          at += sizeof(inotify_event) + event->len;
          if (event->mask & IN_Q_OVERFLOW) {
            KTUNE_LOG(warn) << "table_dirs: inotify queue overflowed; scanning again";
            for (const auto& [wd, dir] : m_dirs) {
              std::error_code ignored;
              for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
                if (is_table_name(entry.path().filename().string())) consider(entry.path().string());
              }
            }
            continue;
          }
          auto dir = m_dirs.find(event->wd);
          if (dir == m_dirs.end() || event->len == 0) continue;
          const std::string name(event->name);
          if (is_table_name(name)) consider(dir->second + "/" + name);
        }
        read_events();
      });
}

void TableWatch::consider(const std::string& path) {
  auto text = replay::read_text_file(path, k_max_table_bytes);
  if (!text) {
    KTUNE_LOG(warn) << "table_dirs: " << text.error().message;
    return;
  }
  const std::string hash = hash_hex(*text);
  if (!m_hashes.insert(hash).second) return;
  KTUNE_LOG(info) << "table_dirs: importing " << path;
  m_import(std::move(*text), path, [this, path, hash](Result<nlohmann::json> reply) {
    if (!reply) {
      // Not a table (kept: the same bytes are not tried again), or the store failed (forgotten:
      // the next change of the file tries again).
      KTUNE_LOG(warn) << "table_dirs: " << path << " not imported: " << reply.error().message;
      if (reply.error().code != ErrorCode::bad_request && reply.error().code != ErrorCode::invalid_table) {
        m_hashes.erase(hash);
      }
      return;
    }
    KTUNE_LOG(info) << "table_dirs: imported " << path << ": " << reply->value("rows", 0)
                    << " rows, " << reply->value("imported", 0) << " new, "
                    << reply->value("replaced", 0) << " replaced, " << reply->value("unchanged", 0)
                    << " unchanged";
  });
}

} // namespace ktune::daemon
