#pragma once
// Usage errors that CLI11 words unhelpfully.
#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

// After a failed parse of `app`: when an argument was left over that no command knows (a
// misspelt option, `ktune tune gemm --shpae M=1`), "unknown option '--shpae' for `ktune tune`
// (did you mean '--shape'?)" naming the deepest command parsed and the nearest of its options
// (its own and those falling through from its parents); nullopt when nothing was left over.
// CLI11 checks required options before left-over ones, so without this a misspelt required
// option reads "--shape is required".
[[nodiscard]] std::optional<std::string> unknown_argument_message(const CLI::App& app);

} // namespace ktune::cli
