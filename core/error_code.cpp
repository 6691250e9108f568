#include "core/error_code.hpp"

#include "core/result.hpp"

#include <array>
#include <string_view>

namespace ktune {

namespace {

constexpr std::array k_names = {
#define KTUNE_ERROR_CODE_NAME(name) std::string_view(#name),
    KTUNE_ERROR_CODES(KTUNE_ERROR_CODE_NAME)
#undef KTUNE_ERROR_CODE_NAME
};

} // namespace

std::string_view to_string(ErrorCode code) { return k_names[static_cast<std::size_t>(code)]; }

std::optional<ErrorCode> parse_error_code(std::string_view text) {
  for (std::size_t i = 0; i < k_names.size(); ++i) {
    if (k_names[i] == text) return static_cast<ErrorCode>(i);
  }
  return std::nullopt;
}

std::string describe(const Error& error) {
  return std::string(to_string(error.code)) + ": " + error.message;
}

Error error_from_wire(std::string_view code, std::string message) {
  if (const auto known = parse_error_code(code)) return Error{*known, std::move(message)};
  return Error{ErrorCode::internal, "(code '" + std::string(code) + "') " + message};
}

} // namespace ktune
