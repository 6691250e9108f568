#include "jobs/cuda_launch.hpp"

#include "core/expr.hpp"
#include "core/protocol.hpp"

#include <limits>

namespace ktune {
namespace {

using nlohmann::json;

Error field_error(const std::string& field, std::string_view expected, const json& found) {
  return make_error(ErrorCode::bad_request, "bench job: field '" + field + "': expected " +
                                                     std::string(expected) + ", found " + found.dump());
}

Result<std::int64_t> read_count(const json& j, const std::string& field, std::int64_t minimum) {
  if (j.is_number_unsigned()) {
    const auto value = j.get<std::uint64_t>();
    if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
        static_cast<std::int64_t>(value) >= minimum) {
      return static_cast<std::int64_t>(value);
    }
  } else if (j.is_number_integer()) {
    const auto value = j.get<std::int64_t>();
    if (value >= minimum) return value;
  }
  return field_error(field, "an integer >= " + std::to_string(minimum), j);
}

Result<void> read_dim3(const json& j, const std::string& field, const char* key, std::int64_t (&out)[3]) {
  const auto it = j.find(key);
  const std::string name = field + "." + key;
  if (it == j.end()) {
    return make_error(ErrorCode::bad_request, "bench job: field '" + name + "' is missing");
  }
  if (!it->is_array() || it->size() != 3) return field_error(name, "an array of 3 integers", *it);
  for (std::size_t i = 0; i < 3; ++i) {
    auto value = read_count((*it)[i], name + "[" + std::to_string(i) + "]", 1);
    if (!value) return value.error();
    out[i] = value.value();
  }
  return {};
}

} // namespace

std::string CudaLaunch::to_string() const {
  return "grid " + std::to_string(grid[0]) + "x" + std::to_string(grid[1]) + "x" + std::to_string(grid[2]) +
         ", block " + std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
         std::to_string(block[2]) + ", " + std::to_string(shared_bytes) + " B shared";
}

json CudaLaunch::to_json() const {
  return json{{"grid", {grid[0], grid[1], grid[2]}},
              {"block", {block[0], block[1], block[2]}},
              {"shared_bytes", shared_bytes}};
}

Result<CudaLaunch> CudaLaunch::from_json(const json& j, const std::string& field) {
  if (!j.is_object()) return field_error(field, "an object", j);
  CudaLaunch launch;
  if (auto r = read_dim3(j, field, "grid", launch.grid); !r) return r.error();
  if (auto r = read_dim3(j, field, "block", launch.block); !r) return r.error();
  if (const auto it = j.find("shared_bytes"); it != j.end()) {
    auto value = read_count(*it, field + ".shared_bytes", 0);
    if (!value) return value.error();
    launch.shared_bytes = value.value();
  }
  return launch;
}

Result<CudaLaunch> make_cuda_launch(const KernelSpec& spec, const Shape& shape, const Config& config) {
  const std::string where =
      "kernel " + spec.name + " at " + shape.to_string() + " config " + config_to_string(config);
  if (!spec.launch) {
    return make_error(ErrorCode::spec_error, where + ": [launch]: missing (required for a CUDA launch)");
  }
  std::vector<std::string> variables = spec.shape_dims;
  for (const auto& param : spec.params) variables.push_back(param.name);
  const NamedValues bindings = bind(shape, config);

  const auto eval = [&](const std::string& text, const std::string& key) -> Result<std::int64_t> {
    auto expr = Expr::compile(text, variables);
    if (!expr) return make_error(expr.error().code, where + ": " + key + ": " + expr.error().message);
    auto value = expr->eval_int(bindings);
    if (!value) return make_error(value.error().code, where + ": " + key + ": " + value.error().message);
    return value.value();
  };
  const auto out_of_range = [&](const std::string& key, const std::string& text, std::int64_t value,
                                const std::string& expected) {
    return make_error(ErrorCode::bad_launch, where + ": " + key + " '" + text + "' = " + std::to_string(value) +
                                            ": expected " + expected);
  };

  CudaLaunch launch;
  static const char* const k_axes[3] = {"x", "y", "z"};
  for (int i = 0; i < 3; ++i) {
    const std::string grid_key = "[launch].grid[" + std::to_string(i) + "]";
    auto grid = eval(spec.launch->grid[i], grid_key);
    if (!grid) return grid.error();
    const std::int64_t grid_max = i == 0 ? k_cuda_max_grid_x : k_cuda_max_grid_yz;
    if (grid.value() < 1 || grid.value() > grid_max) {
      return out_of_range(grid_key, spec.launch->grid[i], grid.value(),
                          "1 to " + std::to_string(grid_max) + " blocks in " + k_axes[i]);
    }
    launch.grid[i] = grid.value();

    const std::string block_key = "[launch].block[" + std::to_string(i) + "]";
    auto block = eval(spec.launch->block[i], block_key);
    if (!block) return block.error();
    const std::int64_t block_max = i == 2 ? k_cuda_max_block_z : k_cuda_max_block_xy;
    if (block.value() < 1 || block.value() > block_max) {
      return out_of_range(block_key, spec.launch->block[i], block.value(),
                          "1 to " + std::to_string(block_max) + " threads in " + k_axes[i]);
    }
    launch.block[i] = block.value();
  }
  if (launch.threads_per_block() > k_cuda_max_threads_per_block) {
    return make_error(ErrorCode::bad_launch,
                      where + ": [launch].block: " + std::to_string(launch.block[0]) + "x" +
                          std::to_string(launch.block[1]) + "x" + std::to_string(launch.block[2]) + " = " +
                          std::to_string(launch.threads_per_block()) + " threads: expected at most " +
                          std::to_string(k_cuda_max_threads_per_block) + " per block");
  }
  auto shared = eval(spec.launch->shared_bytes, "[launch].shared_bytes");
  if (!shared) return shared.error();
  if (shared.value() < 0) {
    return out_of_range("[launch].shared_bytes", spec.launch->shared_bytes, shared.value(),
                        "at least 0 bytes");
  }
  launch.shared_bytes = shared.value();
  return launch;
}

} // namespace ktune
