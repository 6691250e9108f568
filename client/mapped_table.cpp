#include "client/mapped_table.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ktune::client {

namespace {

constexpr auto k_backoff_min = std::chrono::milliseconds(10);
constexpr auto k_backoff_max = std::chrono::milliseconds(1000);
// A table renamed over between our open() and our look at its superseded word: open again.
constexpr int k_open_attempts = 3;

} // namespace

void MappedTable::set_path(std::string path) {
  unmap();
  ++m_epoch;
  m_path = std::move(path);
  m_error.clear();
  m_retry_at = {};
  m_backoff = std::chrono::milliseconds(0);
}

void MappedTable::unmap() {
  if (m_map != nullptr) ::munmap(m_map, m_size);
  m_map = nullptr;
  m_size = 0;
  m_view = table::TableView();
}

const table::TableView* MappedTable::reopen() {
  if (m_path.empty()) return nullptr;
  const auto now = std::chrono::steady_clock::now();
  // A superseded table has a successor to map at once; a missing one waits out the backoff.
  if (m_map == nullptr && now < m_retry_at) return nullptr;
  unmap();
  for (int attempt = 0; attempt < k_open_attempts; ++attempt) {
    const int fd = ::open(m_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      m_error = "winner table " + m_path + ": " + std::strerror(errno);
      break;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
      m_error = "winner table " + m_path + ": not a regular file with contents";
      ::close(fd);
      break;
    }
    m_size = static_cast<std::size_t>(st.st_size);
    void* map = ::mmap(nullptr, m_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) {
      m_error = "winner table " + m_path + ": cannot map it: " + std::strerror(errno);
      m_size = 0;
      break;
    }
    m_map = map;
    auto view = table::TableView::open(
        std::span(static_cast<const std::byte*>(m_map), m_size));
    if (!view) {
      m_error = "winner table " + m_path + ": " + view.error().message;
      unmap();
      break;
    }
    m_view = *view;
    if (!m_view.superseded()) {
      ++m_epoch;
      m_error.clear();
      m_backoff = std::chrono::milliseconds(0);
      return &m_view;
    }
    unmap();
  }
  m_backoff = m_backoff.count() == 0 ? k_backoff_min : std::min(m_backoff * 2, k_backoff_max);
  m_retry_at = now + m_backoff;
  return nullptr;
}

} // namespace ktune::client
