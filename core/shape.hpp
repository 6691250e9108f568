#pragma once
// Problem shapes: "M=256,N=256,K=256". Dimension names are identifiers, values positive integers.
#include "core/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ktune {

// Ordered name/value pairs; used for shapes, configs and expression bindings alike.
using NamedValues = std::vector<std::pair<std::string, std::int64_t>>;

struct Shape {
  NamedValues dims;

  // Parses "M=256,N=256,K=256" (spaces around items allowed). Errors (code "bad_shape") name
  // the offending item: empty text, missing '=', bad name, non-integer, value <= 0, duplicates,
  // values over 2^40.
  [[nodiscard]] static Result<Shape> parse(std::string_view text);

  // Canonical text form, "M=256,N=256,K=256", in the order of `dims`.
  [[nodiscard]] std::string to_string() const;
  [[nodiscard]] std::optional<std::int64_t> get(std::string_view name) const;

  bool operator==(const Shape&) const = default;
};

// Reorders `shape` into the kernel's declared dimension order. Errors (code "bad_shape") name
// a missing dimension or one the kernel does not declare.
[[nodiscard]] Result<Shape> conform_shape(const Shape& shape, const std::vector<std::string>& dims,
                                          std::string_view kernel_name);

} // namespace ktune
