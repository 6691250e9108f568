#pragma once
// The translation unit that compiles several configs of one cpp source at once (HostCompiler's
// batches), and what it needs to know of the source: pure functions of text, no I/O.
//
// The unit: the source's `#include <...>` lines hoisted to global scope (their include guards
// make the inclusions inside the namespaces no-ops), then for config i
//   #define NAME value            its defines
//   #define <from> <to>           its renames (the entry and the shim symbol, after its cache key)
//   namespace ktune_batch_<i> {
//   #include "<source>"
//   <shim>
//   }
//   #undef                        its defines, its renames and every macro the source #defines
// so that no macro of one config reaches the next (one defined under `#if BM > 32` included).
#include "core/shape.hpp"

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

// One config of a batch unit.
struct UnitConfig {
  NamedValues defines;
  Renames renames;
};

// The unit's text for `configs` of the source at `source_path` (absolute), with `shim` (may be
// empty) after the source in every namespace.
[[nodiscard]] std::string batch_unit_text(const std::string& source_path, const SourceScan& scan,
                                          const std::string& shim,
                                          const std::vector<UnitConfig>& configs);

} // namespace ktune
