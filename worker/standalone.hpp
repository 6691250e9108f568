#pragma once
// ktune-worker --run-repro FILE: runs one candidate outside ktuned, as a repro bundle's run.sh
// does (ktune repro, docs/operations.md § Repro bundles).
//
// FILE is JSON: {"compile":{CompileJob},"reference_compile":{CompileJob}|null,"bench":{BenchJob},
// "compile_timeout_s":..,"bench_timeout_s":..,"memory_mb":..}. Relative paths (sources, include
// and cache directories, expected files) are taken from the current directory. The reference
// (when there is one) and the candidate are compiled, then the candidate is run; each step runs
// in its own forked process group under the deadline and address-space cap, so that a crash,
// a hang or an exit in the middle of a run is classified as ktuned classifies it: crash (a
// signal), compile_timeout / timeout (the deadline; the group is killed), worker_lost (an exit
// without an outcome); otherwise the outcome's own status (ok, compile_error, mismatch,
// runtime_error, ...). Host (cpp) candidates only.
//
// Prints one line per step, the bench outcome's JSON ("outcome: {..}") and last
// "status: <status> [detail]". Exit status: 0 ok, 1 any other candidate status, 2 a bad file.
#include <string>

namespace ktune {

[[nodiscard]] int run_repro_file(const std::string& path);

} // namespace ktune
