#include "daemon/targets.hpp"

#include "daemon/devices.hpp"
#include "jobs/dtype.hpp"

#include <algorithm>

namespace ktune::daemon {

namespace {

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

} // namespace

Result<Target> TargetResolver::resolve(const std::string& kernel_name,
                                       const std::string& shape_text,
                                       const std::string& requested_dtype,
                                       const std::string& device_name) {
  const bool cuda = is_cuda_device(device_name);
  if (!cuda && device_name != "cpu") {
    return make_error(ErrorCode::unknown_device,
                      "unknown device '" + device_name + "' (expected cpu, cuda:N or all)");
  }
  auto kernel = m_registry.find(kernel_name, cuda ? Language::cuda : Language::cpp);
  if (!kernel && kernel.error().code == ErrorCode::unknown_kernel) {
    if (auto other = m_registry.find(kernel_name)) kernel = std::move(other); // rejected below
  }
  if (!kernel) return kernel.error();
  const KernelSpec& spec = kernel->spec;

  auto shape = Shape::parse(shape_text);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, spec.shape_dims, spec.name);
  if (!conformed) return conformed.error();

  // A family without a dtype axis answers the default dtype (f32) with its one element type.
  const std::string dtype =
      !spec.dtype_axis && requested_dtype == "f32" ? spec.dtypes.front() : requested_dtype;
  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), dtype) == spec.dtypes.end()) {
    return make_error(ErrorCode::bad_dtype, "kernel " + spec.name + " does not declare dtype '" +
                                                dtype + "' (declared: " + join(spec.dtypes, ", ") +
                                                ")");
  }
  if (spec.language != (cuda ? Language::cuda : Language::cpp)) {
    return make_error(ErrorCode::no_device, "kernel " + spec.name + " is written in " +
                                                std::string(to_string(spec.language)) +
                                                " and cannot run on device " + device_name +
                                                (cuda ? "" : " (tune it with --device cuda:N)"));
  }
  if (!cuda) {
    if (auto c_type = dtype_c_type(dtype); !c_type) {
      return make_error(ErrorCode::bad_dtype,
                        "dtype '" + dtype + "' cannot run on device cpu: " + c_type.error().message);
    }
  }
  auto device = m_devices.local(device_name);
  if (!device) {
    // An unknown CPU (a worker could not run when asked): asked again, so that the next tune
    // finds it once workers run again.
    if (!cuda && m_devices.probe_again_if_unknown(m_workers)) {
      return make_error(device.error().code,
                        device.error().message + "; a worker is being asked again: try again");
    }
    return device.error();
  }
  return Target{std::move(*kernel), std::move(*conformed), dtype, std::move(*device)};
}

} // namespace ktune::daemon
