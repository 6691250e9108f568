#pragma once
// The translation unit that compiles several configs of one source at once (HostCompiler's and
// NvrtcCompiler's batches), and what it needs to know of the source: functions of text (and,
// for unit_obstacle, whether a header exists in an include directory).
//
// The unit: the source's `#include <...>` lines hoisted to global scope (their include guards
// make the inclusions inside the namespaces no-ops), the caller's `preamble_end` text, then for
// config i
//   #define NAME value            its defines
//   #define <from> <to>           its renames (the entry and the shim symbol, after its cache key)
//   namespace <scope> {           its scope; ktune_batch_<i> when it names none
//   #include "<source>"
//   <shim>
//   }
//   #undef                        its defines, its renames and every macro the source #defines
// so that no macro of one config reaches the next (one defined under `#if BM > 32` included).
#include "core/shape.hpp"
#include "jobs/compile_job.hpp"

#include <algorithm>
#include <span>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ktune {

using Renames = std::vector<std::pair<std::string, std::string>>; // macro name -> replacement

// What a batch unit needs to know of a source's text.
struct SourceScan {
  // Why the source cannot share a translation unit with other configs of itself; "" = it can.
  // Conservative: `#pragma once` (its second inclusion would be empty), an include that is not
  // `<...>` (a local header's own macros and guards are not scanned), and the pragmas whose
  // effect outlasts the source (GCC optimize, target, push_options, pop_options, visibility;
  // pack).
  std::string not_batchable;
  std::vector<std::string> system_includes; // header names of its #include <...>, in order, once
  std::vector<std::string> defined_macros;  // every name it #defines, in order, once
  // The names it #defines before its last #include <...>: hoisted above the configs, that
  // header would no longer see them (harmless for a tunable's default, not for a macro that
  // configures a library).
  std::vector<std::string> defined_before_include;
};

[[nodiscard]] SourceScan scan_source(std::string_view text);

// Why configs of `job` (whose source is `text`, scanned as `scan`) cannot share a unit, "" when
// they can: the job names an entry to rename, the source is batchable (SourceScan) and names the
// entry, nothing the hoisted <headers> read depends on the config (a macro the source defines
// before one that is not a tunable's default, a define the system headers may read: NDEBUG or
// a leading underscore), and no <header> comes from the job's include directories (hoisted above
// the configs, it would not see their defines). The language is the caller's to judge.
[[nodiscard]] std::string unit_obstacle(const CompileJob& job, std::string_view text,
                                        const SourceScan& scan);

// One config of a batch unit.
struct UnitConfig {
  NamedValues defines;
  Renames renames;
  std::string scope;  // its namespace; "" = ktune_batch_<its index>
};

// The unit's text for `configs` of the source at `source_path` (absolute), with `shim` (may be
// empty) after the source in every namespace and `preamble_end` (may be empty) between the
// hoisted includes and the first config.
[[nodiscard]] std::string batch_unit_text(const std::string& source_path, const SourceScan& scan,
                                          const std::string& shim,
                                          const std::vector<UnitConfig>& configs,
                                          const std::string& preamble_end = {});

// The first line of a compiler log that reports an error (a compiler's "error", an assembler's
// "Error"), else its first non-empty line.
[[nodiscard]] std::string first_error_line(const std::string& log);

// A unit of several configs failed to compile as a whole: builds each half again with `build`
// (which splits further as it fails), so that a config's own error stays its result. When every
// config then compiles, they failed only together: each gets `batch_error` saying so, with the
// unit's first error line. `outcome(planned)` is the config's CompileOutcome.
template <class Planned, class Build, class OutcomeOf>
void split_failed_unit(std::span<Planned* const> unit, const std::string& log, Build&& build,
                       OutcomeOf&& outcome) {
  const std::size_t half = unit.size() / 2;
  build(unit.first(half));
  build(unit.subspan(half));
  const bool all_ok = std::all_of(unit.begin(), unit.end(), [&](Planned* p) {
    return outcome(*p).status == CandidateStatus::ok;
  });
  if (!all_ok) return;  // a config's own failure explains the unit's
  for (Planned* planned : unit) {
    outcome(*planned).batch_error = "a batch of " + std::to_string(unit.size()) +
                                    " configs failed though each compiles without the others: " +
                                    first_error_line(log);
  }
}

} // namespace ktune
