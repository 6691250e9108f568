#pragma once
// The lookup fast path's reader: a request line of the plain shape
//   {"v":1,"id":..,"op":"lookup","kernel":..,"shape":..,"dtype":..,"device":..,"tune_on_miss":..}
// (members in any order; strings of printable ASCII without escapes, integers, true, false,
// null) read without building a JSON tree. Anything else -- another op, an escape, a nested
// value, an unknown member, a missing kernel or shape -- is not that shape: nullopt, and the
// line goes the general way (protocol::decode_request), which reports errors. Pure.
#include <optional>
#include <string>
#include <string_view>

namespace ktune::daemon {

struct LookupLine {
  std::string_view id = "null";   // the id's JSON text as sent (a string keeps its quotes)
  std::string kernel, shape, dtype = "f32", device = "cpu";
  bool tune_on_miss = false;
};

[[nodiscard]] std::optional<LookupLine> read_lookup_line(std::string_view line);

} // namespace ktune::daemon
