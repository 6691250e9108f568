#pragma once
// Table: aligned plain-text columns for the CLI's listings.
//
//   Table t({{"ID", Align::right}, {"KERNEL"}});
//   t.add_row({"3", "gemm"});
//   t.print(std::cout);
//
// Columns are separated by two spaces; the last column is not padded, so long free text (a
// failure reason) goes last. Widths count UTF-8 code points. Rows shorter than the header are
// padded with empty cells; longer rows are a programming error (assert).
#include <ostream>
#include <string>
#include <vector>

namespace ktune::cli {

enum class Align { left, right };

struct Column {
  std::string header;
  Align align = Align::left;
};

class Table {
public:
  explicit Table(std::vector<Column> columns);

  void add_row(std::vector<std::string> cells);
  [[nodiscard]] std::size_t rows() const { return m_rows.size(); }

  // Writes the header line and every row, each ending in '\n'.
  void print(std::ostream& out) const;

private:
  std::vector<Column> m_columns;
  std::vector<std::vector<std::string>> m_rows;
};

// Display width of `text` in UTF-8 code points.
[[nodiscard]] std::size_t display_width(const std::string& text);

} // namespace ktune::cli
