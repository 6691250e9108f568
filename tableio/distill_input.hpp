#pragma once
// What a distilled rule is built from, read from a store (read-only is enough): the tuned shapes
// of one kernel source, dtype and device (those with a winner) and every result measured there.
#include "core/result.hpp"
#include "db/store.hpp"
#include "tableio/distill.hpp"

#include <string>

namespace ktune::tableio {

// Which results a rule is distilled from.
struct DistillKey {
  std::string kernel, dtype, fingerprint, source_hash;
  std::string device_name;  // the stored device's name ("cpu", "cuda:0"), for messages
};

// Resolves `device` (a stored device's name, "cpu" or "cuda:0", or a fingerprint prefix) and the
// source hash to the key whose winners of `kernel` in `dtype` were stored last: a name several
// fingerprints carry (a compiler changed) and a kernel edited since means the newest. Errors:
// "not_found" naming what the store lacks (no winner of the kernel, none on that device or in
// that dtype), "db_error".
[[nodiscard]] Result<DistillKey> resolve_distill_key(const Store& store, const std::string& kernel,
                                                     const std::string& dtype,
                                                     const std::string& device);

// The input of distill() for `key`, and what it was made from. Per (shape, config) the newest
// result counts: `ok` is measured (its median), any other status failed; a winner without a
// result row there counts its stored median. Configs are in the params order of the kernel's
// stored spec; admission is decided by that spec's constraints (without a stored spec every
// unknown cell counts as admitted). The default config is the spec's [default].
struct LoadedDistillInput {
  DistillInput input;
  std::string spec_text;  // "" when the store has none
  // config index -> its JSON object text in params order ({"BM":64,...}), as tune requests take
  [[nodiscard]] std::string config_text(std::size_t config) const;
};

// Errors: "not_found" (no winner for the key), "invalid_table" for a stored config or shape that
// does not parse (naming it), "db_error".
[[nodiscard]] Result<LoadedDistillInput> load_distill_input(const Store& store,
                                                           const DistillKey& key);

} // namespace ktune::tableio
