#include "daemon/devices.hpp"

#include "core/protocol.hpp"

namespace ktune::daemon {

namespace code = protocol::code;

Result<std::vector<DeviceInfo>> devices_from_json(const nlohmann::json& outcome) {
  const auto it = outcome.find("devices");
  if (!outcome.is_object() || it == outcome.end() || !it->is_array()) {
    return make_error(code::internal,
                      "worker reply to 'devices': expected {\"devices\":[...]}, found " +
                          outcome.dump());
  }
  std::vector<DeviceInfo> devices;
  for (const auto& d : *it) {
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string() ||
        !d.contains("fingerprint") || !d["fingerprint"].is_string()) {
      return make_error(code::internal,
                        "worker reply to 'devices': a device without a name and fingerprint: " +
                            d.dump());
    }
    devices.push_back(DeviceInfo{d["name"].get<std::string>(), d["fingerprint"].get<std::string>(),
                                 d.value("details", nlohmann::json::object())});
  }
  return devices;
}

namespace {

// A failure to get an answer from a worker (spawn_error, crash, worker_lost, timeout) as a
// protocol code: internal. The worker's own no_device passes as it is.
Error as_reply_error(const Error& error) {
  if (error.code == code::no_device) return error;
  return make_error(code::internal,
                    "asking a worker for CUDA devices failed: " + error.code + ": " + error.message);
}

} // namespace

void query_cuda_devices(WorkerPool& workers, CudaDevicesHandler done) {
  std::shared_ptr<WorkerProcess> worker;
  for (const WorkerRole role : {WorkerRole::bench, WorkerRole::compile}) {
    auto idle = workers.idle_worker(role);
    if (!idle) return done(as_reply_error(idle.error()));
    if (*idle) {
      worker = *idle;
      break;
    }
  }
  if (!worker) {
    return done(make_error(code::no_device,
                           "cannot ask for CUDA devices now: the bench worker and all " +
                               std::to_string(workers.limit(WorkerRole::compile)) +
                               " compile workers are busy; retry when the running job ends"));
  }
  worker->request("devices", nlohmann::json::object(),
                  [done = std::move(done)](Result<nlohmann::json> reply) {
                    if (!reply) return done(as_reply_error(reply.error()));
                    done(devices_from_json(*reply));
                  });
}

Result<DeviceInfo> find_cuda_device(const std::vector<DeviceInfo>& devices,
                                    const std::string& device) {
  const std::string name = device == "cuda" ? std::string("cuda:0") : device;
  std::string seen;
  for (const auto& d : devices) {
    if (d.name == name) return d;
    seen += (seen.empty() ? "" : ", ") + d.name;
  }
  return make_error(code::unknown_device, "unknown device '" + device + "': the workers see " +
                                              std::to_string(devices.size()) + " CUDA device" +
                                              (devices.size() == 1 ? "" : "s") +
                                              (seen.empty() ? "" : " (" + seen + ")"));
}

nlohmann::json devices_reply(const DeviceInfo& cpu, const Result<std::vector<DeviceInfo>>& cuda) {
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", cpu.name}, {"fingerprint", cpu.fingerprint}, {"details", cpu.details}});
  nlohmann::json status;
  if (cuda) {
    for (const auto& d : *cuda) {
      list.push_back({{"name", d.name}, {"fingerprint", d.fingerprint}, {"details", d.details}});
    }
    status = {{"available", true}};
  } else {
    status = {{"available", false}, {"code", cuda.error().code}, {"reason", cuda.error().message}};
  }
  return {{"devices", std::move(list)}, {"cuda", std::move(status)}};
}

Result<void> target_cuda_device(const Store& store, const JobRecord& record, CompileJob& job) {
  if (job.language != "cuda") return {};
  auto device = store.get_device(record.fingerprint);
  if (!device) return device.error();
  const std::string where = "job " + std::to_string(record.id) + " on " + record.device;
  if (!device->has_value()) {
    return make_error(code::internal, where + ": no device with fingerprint " +
                                          record.fingerprint + " in the store");
  }
  const auto& details = (*device)->details;
  const auto arch = details.find("arch");
  if (arch == details.end() || !arch->is_string()) {
    return make_error(code::internal, where + ": the stored device has no \"arch\"");
  }
  job.arch = arch->get<std::string>();
  return {};
}

void target_cuda_device(const JobRecord& record, BenchJob& job) {
  if (!job.launch || record.device.rfind("cuda:", 0) != 0) return;
  job.cuda_device = std::stoi(record.device.substr(5));
}

} // namespace ktune::daemon
