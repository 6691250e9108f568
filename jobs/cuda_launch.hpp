#pragma once
// CudaLaunch: the launch geometry of one CUDA candidate, evaluated by the daemon from the spec's
// [launch] expressions (grid, block, shared_bytes) for a shape and config, and carried to the
// bench worker inside the BenchJob. Toolkit-free: built with or without the CUDA backend.
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace ktune {

// CUDA's fixed limits on a launch (every architecture ktune targets).
inline constexpr std::int64_t k_cuda_max_grid_x = 2147483647;
inline constexpr std::int64_t k_cuda_max_grid_yz = 65535;
inline constexpr std::int64_t k_cuda_max_block_xy = 1024;
inline constexpr std::int64_t k_cuda_max_block_z = 64;
inline constexpr std::int64_t k_cuda_max_threads_per_block = 1024;

struct CudaLaunch {
  std::int64_t grid[3] = {1, 1, 1};
  std::int64_t block[3] = {1, 1, 1};
  std::int64_t shared_bytes = 0; // dynamic shared memory per block

  [[nodiscard]] std::int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
  // "grid 64x64x1, block 256x1x1, 0 B shared"
  [[nodiscard]] std::string to_string() const;

  // {"grid":[x,y,z],"block":[x,y,z],"shared_bytes":n}
  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: "bad_request" naming `field` and the key ("launch.grid[1]"): not an object, a
  // dimension that is not an integer >= 1, shared_bytes that is not an integer >= 0.
  [[nodiscard]] static Result<CudaLaunch> from_json(const nlohmann::json& j,
                                                    const std::string& field = "launch");

  bool operator==(const CudaLaunch&) const = default;
};

// Evaluates spec.launch with bind(shape, config). Errors, each naming the kernel, shape, config,
// key and expression: spec_error (the spec has no [launch]), bad_expression (does not compile or
// evaluate, or is not an integer), invalid_config (a dimension < 1, shared_bytes < 0, or over
// CUDA's launch limits above: the config cannot launch at this shape).
[[nodiscard]] Result<CudaLaunch> make_cuda_launch(const KernelSpec& spec, const Shape& shape,
                                                  const Config& config);

} // namespace ktune
