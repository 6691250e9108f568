#pragma once
// Merging two tables of winners: the rows of both, and for a key present in both, one row chosen
// by a policy. Every key whose configs differ is reported as a conflict (what was kept, what was
// dropped, why); a key present in both with the same config is not a conflict.
#include "tableio/table.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

enum class Policy {
  faster,  // the lower median_ms; a tie keeps the base row
  newer,   // the later time_ms (when it was measured); a tie keeps the base row
  keep,    // the base row always
};

[[nodiscard]] std::string_view to_string(Policy policy);
// "faster", "newer", "keep"; nullopt otherwise.
[[nodiscard]] std::optional<Policy> parse_policy(std::string_view text);

struct Conflict {
  RowKey key;
  TableRow kept, dropped;
  std::string why;  // "faster: 1.2 ms < 1.5 ms", "newer: measured at ... > ...", "keep: ..."
};

// The decision for one key present in both tables.
struct Decision {
  bool take_incoming = false;
  bool conflict = false;  // the configs differ
  std::string why;
};
[[nodiscard]] Decision decide(const TableRow& base, const TableRow& incoming, Policy policy);

struct MergeResult {
  Table table;  // normalized; host and exported_at_ms of the base
  std::vector<Conflict> conflicts;  // in key order
  std::size_t added = 0;     // keys only in incoming
  std::size_t replaced = 0;  // keys in both where the incoming row was taken
  std::size_t kept = 0;      // keys in both where the base row stayed
};

// Both tables must be normalized (sorted, unique keys). Kernel sources are united.
[[nodiscard]] MergeResult merge(const Table& base, const Table& incoming, Policy policy);

} // namespace ktune::tableio
