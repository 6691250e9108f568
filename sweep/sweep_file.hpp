#pragma once
// Sweep files (configs/sweeps/*.toml): a grid of tune jobs a CI pipeline runs unattended.
//
//   [sweep]
//   name = "nightly"          # optional; default: the file name without .toml
//   priority = -10            # optional, -100..100; below interactive tunes (0) by default
//
//   [[kernel]]                # one table per kernel (a kernel may appear more than once)
//   name = "gemm"
//   devices = ["cpu"]         # default ["cpu"]
//   dtypes = ["f32"]          # default ["f32"]
//   strategy = "exhaustive"   # default exhaustive
//   budget = "5%"             # optional: a count (integer or "30") or a share ("5%")
//   [kernel.shapes]           # every dimension the kernel declares
//   M = [256, 512]            # a list ...
//   N = { from = 256, to = 1024, step = 256 }   # ... or a range, to inclusive: 256 512 768 1024
//   K = { from = 256, to = 4096, times = 2 }    # ... or a geometric one: 256 512 1024 2048 4096
//
// The grid of a kernel table is devices x dtypes x the cartesian product of its shape dims (dims
// in the order written). Jobs are numbered in file order; shard i/N takes the jobs whose number
// is i-1 modulo N, so N shards cover every job exactly once, whatever machine runs them.
#include "core/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::sweep {

struct SweepJob {
  std::size_t number = 0;     // position in the whole sweep, from 0
  std::string kernel, shape, dtype, device, strategy;
  std::optional<std::int64_t> budget;   // evaluations ...
  std::optional<double> budget_fraction; // ... or a share of the admitted configs
};

struct Sweep {
  std::string name;
  int priority = -10;
  std::vector<SweepJob> jobs;
};

struct Shard {
  std::size_t index = 1, count = 1;   // 1-based: shard 1/2 and 2/2
};

// "2/4" -> {2, 4}. Errors (code "bad_shard"): not "i/N" with 1 <= i <= N.
[[nodiscard]] Result<Shard> parse_shard(std::string_view text);

// Parses sweep file text; `where` names the file in errors. Errors (code "sweep_error") name the
// file, the table and the key: a missing kernel name or shapes, an empty list, a range that does
// not advance, more than 100,000 jobs, a bad budget or priority, an unknown key.
[[nodiscard]] Result<Sweep> parse_sweep(std::string_view text, const std::string& where);
[[nodiscard]] Result<Sweep> load_sweep(const std::string& path);

// The jobs of one shard, in sweep order.
[[nodiscard]] std::vector<SweepJob> shard_jobs(const Sweep& sweep, const Shard& shard);

} // namespace ktune::sweep
