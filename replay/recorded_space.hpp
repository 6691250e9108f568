#pragma once
// RecordedSpace: a search space measured exhaustively by someone else, parsed from a Kernel Tuner
// cache file, a T4 results file or an old Kernel Tuner results list (the formats of
// ../shared/datasets/gpu-cache/FORMAT.md). Replay answers a strategy's proposals from it.
//
// The configs present in the file are the valid space; configs of the cartesian product that are
// absent are invalid and never proposed. A present config whose time is a failure marker
// ("CompilationFailedConfig", "RuntimeFailedConfig", ..., a time >= 1e10, or a T4 result whose
// invalidity is not "correct") is valid but fails when evaluated.
#include "core/result.hpp"
#include "search/search_space.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::replay {

enum class RecordFormat { kerneltuner_cache, t4, results_list };

[[nodiscard]] std::string_view to_string(RecordFormat format);

struct RecordedSpace {
  std::string label;       // the file name, for messages
  RecordFormat format = RecordFormat::kerneltuner_cache;
  std::string kernel_name; // "" when the file does not say
  std::string device_name; // "" when the file does not say
  bool was_unterminated = false; // a Kernel Tuner cache of an interrupted run, repaired

  // Params in the file's order; configs sorted by their value indices (last param fastest).
  search::SearchSpace space;
  // value_text[p][v]: how value v of param p is written (Python str(), as in cache keys).
  std::vector<std::vector<std::string>> value_text;
  // time_ms[id]: the recorded mean time, nullopt for a failed config.
  std::vector<std::optional<double>> time_ms;
  std::size_t measured = 0; // configs with a time
  std::size_t failed = 0;   // configs that failed
  double optimum_ms = 0;    // the smallest recorded time
  std::size_t optimum_config = 0;
  // cost_ms[id]: what evaluating the config cost when it was recorded, compile + benchmark time
  // (Kernel Tuner cache: compile_time + benchmark_time; T4: times.compilation + the sum of
  // times.runtimes, T4 keeping no benchmark wall time). Empty when a config does not record it;
  // cost_missing then says which and what is missing ("results[0]: no number in 'compile_time'").
  std::vector<double> cost_ms;
  std::string cost_missing;

  // "block_size_x=32,block_size_y=4,..."
  [[nodiscard]] std::string config_text(std::size_t config) const;
};

// Parses `text` (the whole file, already decompressed), detecting the format. `label` names the
// file in messages. Never throws and never trusts the input: every error (code "bad_record")
// says what was expected, what was found and where ("A100.json: cache entry '16,1,1': time: ...").
// Files whose objective is not "time" (e.g. the "score" of hyper-parameter sweeps, which is
// maximised) are rejected with code "unsupported_objective". A file with no measured config is an
// error: there is no optimum to compare with.
[[nodiscard]] Result<RecordedSpace> parse_recorded_space(std::string_view text, std::string_view label);

} // namespace ktune::replay
