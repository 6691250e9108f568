#include "daemon/ops.hpp"

#include <array>

namespace ktune::daemon {

namespace {

constexpr std::array<std::string_view, k_op_count> k_names = {
#define KTUNE_DAEMON_OP_NAME(name) std::string_view(#name),
    KTUNE_DAEMON_OPS(KTUNE_DAEMON_OP_NAME)
#undef KTUNE_DAEMON_OP_NAME
};

} // namespace

std::string_view to_string(Op op) { return k_names[static_cast<std::size_t>(op)]; }

std::optional<Op> parse_op(std::string_view text) {
  for (std::size_t i = 0; i < k_names.size(); ++i) {
    if (k_names[i] == text) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::string op_list() {
  std::string list;
  for (std::size_t i = 0; i < k_names.size(); ++i) {
    if (i > 0) list += i + 1 == k_names.size() ? " or " : ", ";
    list += k_names[i];
  }
  return list;
}

} // namespace ktune::daemon
