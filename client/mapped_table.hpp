#pragma once
// MappedTable: the winner table ktuned publishes (core/winner_table.hpp), mapped read-only into
// a lookup client. view() costs one load while the mapped table is current: when the publisher
// marks it superseded, the next view() maps the new file (the old mapping goes; what answers
// pointed into is valid until then). A missing or unreadable file is tried again after a
// backoff (10 ms doubling to 1 s), so a host without a table costs one failed open() per period.
// One thread at a time, like the client handle that owns it.
#include "core/winner_table.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ktune::client {

class MappedTable {
public:
  MappedTable() = default;
  ~MappedTable() { unmap(); }
  MappedTable(const MappedTable&) = delete;
  MappedTable& operator=(const MappedTable&) = delete;

  // The table file; "" turns the table off.
  void set_path(std::string path);
  [[nodiscard]] const std::string& path() const { return m_path; }

  // The current table, or nullptr (off, not there, unreadable, another layout version; error()
  // says why).
  [[nodiscard]] const table::TableView* view() {
    if (m_map != nullptr && !m_view.superseded()) return &m_view;
    return reopen();
  }
  [[nodiscard]] const std::string& error() const { return m_error; }
  // Counts the tables mapped so far (0: none yet): an answer remembered with the epoch it came
  // from is still valid while the epoch is the same.
  [[nodiscard]] std::uint64_t epoch() const { return m_epoch; }

private:
  const table::TableView* reopen();
  void unmap();

  std::string m_path;
  void* m_map = nullptr;
  std::size_t m_size = 0;
  table::TableView m_view;
  std::string m_error;
  std::chrono::steady_clock::time_point m_retry_at{};
  std::chrono::milliseconds m_backoff{0};
  std::uint64_t m_epoch = 0;
};

} // namespace ktune::client
