#pragma once
// Op: the ops of the client protocol (docs/protocol.md § Ops), one enumerator each. A request's
// "op" string becomes an Op here and nowhere else; the RequestHandler's route table maps each Op
// to the service that answers it. Adding an op: one X() line here and one route. Pure.
#include <optional>
#include <string>
#include <string_view>

namespace ktune::daemon {

// X(name): the enumerator and the protocol's word are the same.
#define KTUNE_DAEMON_OPS(X)                                                                       \
  X(lookup) X(tune) X(job) X(jobs) X(cancel) X(import) X(kernels) X(add_kernel_dir)               \
  X(remove_kernel_dir) X(stats) X(top) X(devices) X(compile_check) X(confirm) X(canary)           \
  X(revalidate) X(shutdown)

enum class Op {
#define KTUNE_DAEMON_OP_ENUM(name) name,
  KTUNE_DAEMON_OPS(KTUNE_DAEMON_OP_ENUM)
#undef KTUNE_DAEMON_OP_ENUM
};

inline constexpr std::size_t k_op_count = static_cast<std::size_t>(Op::shutdown) + 1;

[[nodiscard]] std::string_view to_string(Op op);
// The op a request names; nullopt for a word that is no op.
[[nodiscard]] std::optional<Op> parse_op(std::string_view text);
// "lookup, tune, ..., canary or shutdown": every op, for the unknown_op message.
[[nodiscard]] std::string op_list();

} // namespace ktune::daemon
