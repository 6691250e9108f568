#pragma once
// TargetResolver: a kernel, shape, dtype and local device named in a request, resolved and
// checked against each other -- the one place their errors are worded (a tune, a tune-on-miss,
// and a lookup that does not pass the lookup path's quick checks). io thread only.
#include "core/device.hpp"
#include "core/result.hpp"
#include "core/shape.hpp"
#include "jobs/kernel_registry.hpp"

#include <string>

namespace ktune::daemon {

class DeviceRegistry;
class WorkerPool;

struct Target {
  LoadedKernel kernel;
  Shape shape;         // conformed to the kernel's dims
  std::string dtype;   // the kernel's own element type where it has no dtype axis
  DeviceInfo device;
};

class TargetResolver {
public:
  TargetResolver(KernelRegistry& registry, DeviceRegistry& devices, WorkerPool& workers)
      : m_registry(registry), m_devices(devices), m_workers(workers) {}

  // Errors: unknown_device, unknown_kernel, spec_error, spec_too_large, bad_shape, bad_dtype,
  // no_device (a family in the other language; a device this ktuned does not have; an unknown
  // CPU, which has a worker asked again).
  [[nodiscard]] Result<Target> resolve(const std::string& kernel, const std::string& shape,
                                       const std::string& dtype, const std::string& device);

private:
  KernelRegistry& m_registry;
  DeviceRegistry& m_devices;
  WorkerPool& m_workers;
};

} // namespace ktune::daemon
