#include "tableio/merge.hpp"

#include <cstdio>

namespace ktune::tableio {

namespace {

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g ms", ms);
  return buf;
}

} // namespace

std::string_view to_string(Policy policy) {
  switch (policy) {
    case Policy::faster: return "faster";
    case Policy::newer: return "newer";
    case Policy::keep: return "keep";
  }
  return "unknown";
}

std::optional<Policy> parse_policy(std::string_view text) {
  for (Policy p : {Policy::faster, Policy::newer, Policy::keep}) {
    if (to_string(p) == text) return p;
  }
  return std::nullopt;
}

Decision decide(const TableRow& base, const TableRow& incoming, Policy policy) {
  Decision decision;
  decision.conflict = !same_config(base.config, incoming.config);
  switch (policy) {
    case Policy::faster:
      decision.take_incoming = incoming.median_ms < base.median_ms;
      decision.why = decision.take_incoming
                         ? "faster: incoming " + ms_text(incoming.median_ms) + " < existing " +
                               ms_text(base.median_ms)
                         : "faster: existing " + ms_text(base.median_ms) + " <= incoming " +
                               ms_text(incoming.median_ms);
      break;
    case Policy::newer:
      decision.take_incoming = incoming.time_ms > base.time_ms;
      decision.why = decision.take_incoming
                         ? "newer: incoming measured at " + std::to_string(incoming.time_ms) +
                               " > existing " + std::to_string(base.time_ms)
                         : "newer: existing measured at " + std::to_string(base.time_ms) +
                               " >= incoming " + std::to_string(incoming.time_ms);
      break;
    case Policy::keep:
      decision.take_incoming = false;
      decision.why = "keep: the existing winner stays";
      break;
  }
  return decision;
}

MergeResult merge(const Table& base, const Table& incoming, Policy policy) {
  MergeResult out;
  out.table.host = base.host;
  out.table.exported_at_ms = base.exported_at_ms;
  auto b = base.rows.begin();
  auto i = incoming.rows.begin();
  while (b != base.rows.end() || i != incoming.rows.end()) {
    if (i == incoming.rows.end() || (b != base.rows.end() && b->key() < i->key())) {
      out.table.rows.push_back(*b++);
      continue;
    }
    if (b == base.rows.end() || i->key() < b->key()) {
      out.table.rows.push_back(*i++);
      ++out.added;
      continue;
    }
    const Decision decision = decide(*b, *i, policy);
    const TableRow& kept = decision.take_incoming ? *i : *b;
    const TableRow& dropped = decision.take_incoming ? *b : *i;
    out.table.rows.push_back(kept);
    ++(decision.take_incoming ? out.replaced : out.kept);
    if (decision.conflict) out.conflicts.push_back({b->key(), kept, dropped, decision.why});
    ++b;
    ++i;
  }
  out.table.kernels = base.kernels;
  out.table.kernels.insert(out.table.kernels.end(), incoming.kernels.begin(),
                           incoming.kernels.end());
  (void)out.table.normalize();  // rows are sorted and unique by construction; sorts kernels
  return out;
}

} // namespace ktune::tableio
