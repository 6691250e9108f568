#pragma once
// A/B confirmation for `ktune sweep` and `ktune compare`: every key of a comparison that looks
// changed (tableio::needs_confirmation) is measured again by ktuned as an A/B of its baseline's
// build and its current one (the op `confirm`, daemon/ab_service.hpp), and that measurement's
// verdict becomes the key's (tableio::apply_ab). Keys from the store's history name their stored
// results; rows of table files their source hash and config. The device is the row's
// fingerprint, so a table measured on another machine cannot be confirmed here: such a key is
// ambiguous, saying so.
#include "cli/commands.hpp"
#include "client/client.hpp"
#include "core/result.hpp"
#include "tableio/compare.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

namespace ktune::cli {

// How long one key's A/B may take (it waits for its device lane, then measures ~2 x 20 rounds).
inline constexpr std::chrono::milliseconds k_confirm_timeout{30 * 60 * 1000};

// The confirm request for `key` (in both tables).
[[nodiscard]] nlohmann::json confirm_request(const tableio::KeyComparison& key, double min_effect);

// A confirm reply as the key's A/B figures.
[[nodiscard]] tableio::AbFigures ab_figures(const nlohmann::ordered_json& reply);

// Confirms every key that looks changed, one after the other, saying so on io.err; returns how
// many were measured or tried. Where tonight's winner is another config than the baseline's, the
// winners' A/B measures the configs as much as the builds, so:
// - the source unchanged and the winners' A/B regressed: at the baseline's config tonight's build
//   is the baseline's, so the kernel is the same and tonight's tuning chose a slower config
//   (verdict same, winner_slower);
// - the source changed: the current source at the baseline's config is measured against the
//   baseline's build too. A winners' A/B without a regression becomes regressed when that one is
//   (a slower source hidden by a better config); a regressed one takes that one's verdict when it
//   is not regressed (same or improved: winner_slower; ambiguous).
// A key whose request ktuned refuses (a device of another machine, a kernel it does not have) is
// ambiguous with the reason. Errors: the connection broke.
[[nodiscard]] Result<std::size_t> confirm_changed(Connection& conn, tableio::Comparison& comparison,
                                                  Output& io);

// Every changed-looking key made ambiguous with `why` (no ktuned to measure them).
std::size_t mark_unconfirmed(tableio::Comparison& comparison, const std::string& why);

} // namespace ktune::cli
