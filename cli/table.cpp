#include "cli/table.hpp"

#include <algorithm>
#include <cassert>
#include <utility>

namespace ktune::cli {

std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

Table::Table(std::vector<Column> columns) : m_columns(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  assert(cells.size() <= m_columns.size());
  cells.resize(m_columns.size());
  m_rows.push_back(std::move(cells));
}

void Table::print(std::ostream& out) const {
  std::vector<std::size_t> widths(m_columns.size(), 0);
  for (std::size_t c = 0; c < m_columns.size(); ++c) {
    widths[c] = display_width(m_columns[c].header);
    for (const auto& row : m_rows) widths[c] = std::max(widths[c], display_width(row[c]));
  }

  auto print_line = [&](auto&& cell_of) {
    std::string line;
    for (std::size_t c = 0; c < m_columns.size(); ++c) {
      const std::string& cell = cell_of(c);
      std::size_t pad = widths[c] - display_width(cell);
      bool last = c + 1 == m_columns.size();
      if (c > 0) line += "  ";
      if (m_columns[c].align == Align::right) {
        line.append(pad, ' ');
        line += cell;
      } else {
        line += cell;
        if (!last) line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };

  print_line([&](std::size_t c) -> const std::string& { return m_columns[c].header; });
  for (const auto& row : m_rows)
    print_line([&](std::size_t c) -> const std::string& { return row[c]; });
}

} // namespace ktune::cli
