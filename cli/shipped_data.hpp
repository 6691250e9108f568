#pragma once
// The data an install ships next to the ktune binary (<prefix>/share/ktune, found from the
// binary's own location as ktuned finds it; the build tree has the same layout).
#include "core/result.hpp"

#include <string>
#include <vector>

namespace ktune::cli {

// <dir of the running ktune>/<KTUNE_DATA_DIR_FROM_BIN>, e.g. /usr/share/ktune; empty when
// /proc/self/exe cannot be read.
[[nodiscard]] std::string shipped_data_dir();

// The sweep file a user named: `given` when it exists; else, when `given` has no directory part
// other than the source tree's configs/sweeps/, the shipped sweep of that file name (or that
// name + ".toml") in <shipped_data_dir>/sweeps, so `ktune sweep configs/sweeps/cpu.toml` works
// outside a checkout. Error "sweep_error" says where it looked and lists the shipped sweeps.
// `sweep_dir` is the directory searched (shipped_data_dir() + "/sweeps" by default).
[[nodiscard]] Result<std::string> resolve_sweep_file(const std::string& given,
                                                     const std::string& sweep_dir);

// The *.toml names (without .toml) of `sweep_dir`, sorted.
[[nodiscard]] std::vector<std::string> shipped_sweeps(const std::string& sweep_dir);

} // namespace ktune::cli
