#include "daemon/devices.hpp"

#include "core/protocol.hpp"
#include "daemon/log.hpp"

#include <algorithm>
#include <limits>

namespace ktune::daemon {


namespace {

Result<DeviceInfo> device_from_json(const nlohmann::json& d) {
  if (!d.is_object() || !d.contains("name") || !d["name"].is_string() ||
      !d.contains("fingerprint") || !d["fingerprint"].is_string()) {
    return make_error(ErrorCode::internal,
                      "worker reply to 'devices': a device without a name and fingerprint: " +
                          d.dump());
  }
  return DeviceInfo{d["name"].get<std::string>(), d["fingerprint"].get<std::string>(),
                    d.value("details", nlohmann::json::object()), d.value("uuid", std::string())};
}

} // namespace

Result<DeviceProbe> probe_from_json(const nlohmann::json& outcome) {
  if (!outcome.is_object() || !outcome.contains("cpu")) {
    return make_error(ErrorCode::internal,
                      "worker reply to 'devices': expected {\"cpu\":{..},\"devices\":[...]}, "
                      "found " + outcome.dump());
  }
  DeviceProbe probe;
  auto cpu = device_from_json(outcome["cpu"]);
  if (!cpu) return cpu.error();
  probe.cpu = std::move(*cpu);
  probe.cuda_backend = outcome.value("cuda_backend", false);
  if (const auto error = outcome.find("cuda_error"); error != outcome.end()) {
    probe.cuda = error_from_wire(error->value("code", std::string(to_string(ErrorCode::no_device))),
                                 error->value("message", std::string("no CUDA device")));
    return probe;
  }
  const auto list = outcome.find("devices");
  if (list == outcome.end() || !list->is_array()) {
    return make_error(ErrorCode::internal, "worker reply to 'devices': neither \"devices\":[...] nor "
                                      "\"cuda_error\" in " + outcome.dump());
  }
  std::vector<DeviceInfo> cuda;
  for (const auto& d : *list) {
    auto device = device_from_json(d);
    if (!device) return device.error();
    cuda.push_back(std::move(*device));
  }
  probe.cuda = std::move(cuda);
  return probe;
}

namespace {

// A failure to get an answer from a worker (spawn_failed, worker_crashed, worker_gone,
// worker_timeout) as a protocol code: internal.
Error as_reply_error(const Error& error) {
  return make_error(ErrorCode::internal,
                    "asking a worker for the devices failed: " + describe(error));
}

bool is_hex(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

nlohmann::json device_json(const DeviceInfo& d) {
  nlohmann::json out{{"name", d.name}, {"fingerprint", d.fingerprint}, {"details", d.details}};
  if (!d.uuid.empty()) out["uuid"] = d.uuid;
  return out;
}

} // namespace

bool is_cuda_device(const std::string& device) {
  if (device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  return std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

void DeviceRegistry::remember(const DeviceInfo& device) {
  const bool cpu = device.details.is_object() && device.details.value("kind", "") == "cpu";
  m_known[device.fingerprint] = {device.name, cpu ? Language::cpp : Language::cuda};
}

DeviceRegistry::DeviceRegistry() : m_cpu{"cpu", "", {{"kind", "cpu"}}, ""} {}

bool DeviceRegistry::probe_again_if_unknown(WorkerPool& pool) {
  if (m_cpu_unknown.empty() || m_probing) return m_probing;
  const auto now = std::chrono::steady_clock::now();
  if (m_last_retry && now - *m_last_retry < k_reprobe_every) return false;
  m_last_retry = now;
  KTUNE_LOG(info) << "the CPU is unknown (" << m_cpu_unknown << "); asking a worker again";
  probe(pool);
  return true;
}

void DeviceRegistry::probe(WorkerPool& pool, std::function<void()> done) {
  m_probing = true;
  Work work;
  work.op = "devices";
  work.priority = std::numeric_limits<int>::max();
  work.deadline = std::chrono::seconds(60);
  work.on_reply = [this, &pool, done = std::move(done)](Result<nlohmann::json> reply,
                                                        const Delivery&) {
    m_probed = true;
    m_probing = false;
    auto probe = reply ? probe_from_json(*reply) : Result<DeviceProbe>(as_reply_error(reply.error()));
    if (!probe) {
      if (!m_cpu.fingerprint.empty()) {
        // A worker outage says nothing new of the devices: what an earlier probe found stays.
        KTUNE_LOG(warn) << "device probe failed (" << probe.error().message
                        << "); keeping the devices found before";
        if (done) done();
        return;
      }
      m_cpu_unknown = probe.error().message;
      m_cuda = probe.error();
      KTUNE_LOG(warn) << "devices unknown: " << m_cpu_unknown;
      if (done) done();
      return;
    }
    m_cpu = std::move(probe->cpu);
    m_cuda_backend = probe->cuda_backend;
    m_cpu_unknown.clear();
    remember(m_cpu);
    KTUNE_LOG(info) << "device cpu: " << m_cpu.details.value("model", std::string("?"))
                    << ", fingerprint " << m_cpu.fingerprint;
    m_cuda = std::move(probe->cuda);
    if (m_cuda) {
      for (const auto& d : *m_cuda) {
        remember(d);
        if (!pool.has_lane(d.name)) {
          KTUNE_LOG(info) << "device " << d.name << ": "
                          << d.details.value("name", std::string("?")) << ", fingerprint "
                          << d.fingerprint << "; bench lane added";
        }
        pool.add_lane(d.name, {}, d.uuid);
      }
    } else {
      KTUNE_LOG(info) << "no CUDA device (" << m_cuda.error().code << "): "
                      << m_cuda.error().message;
    }
    if (done) done();
  };
  pool.submit("", std::move(work));
}

Error DeviceRegistry::no_cuda(const std::string& device) const {
  if (!m_probed) {
    return make_error(ErrorCode::no_device, "device " + device +
                                           ": ktuned is still asking its workers for CUDA "
                                           "devices; retry in a moment");
  }
  if (!m_cuda) return make_error(ErrorCode::no_device, "device " + device + ": " + m_cuda.error().message);
  std::string seen;
  for (const auto& d : *m_cuda) seen += (seen.empty() ? "" : ", ") + d.name;
  return make_error(ErrorCode::no_device, "device " + device + ": this machine has " +
                                         std::to_string(m_cuda->size()) + " CUDA device" +
                                         (m_cuda->size() == 1 ? "" : "s") +
                                         (seen.empty() ? "" : " (" + seen + ")"));
}

Result<ResolvedDevice> DeviceRegistry::resolve(const std::string& device, Language prefer) const {
  if (device == "cpu") return ResolvedDevice{m_cpu.name, m_cpu.fingerprint, Language::cpp, true};
  if (is_cuda_device(device)) {
    const DeviceInfo* found = find_cuda(device);
    if (!found) return no_cuda(device);
    return ResolvedDevice{found->name, found->fingerprint, Language::cuda, true};
  }
  if (is_hex(device)) {
    if (const auto it = m_known.find(device); it != m_known.end()) {
      bool here = device == m_cpu.fingerprint;
      if (m_cuda) {
        for (const auto& d : *m_cuda) here = here || d.fingerprint == device;
      }
      return ResolvedDevice{it->second.first, it->first, it->second.second, here};
    }
    return ResolvedDevice{device, device, prefer, false};
  }
  return make_error(ErrorCode::unknown_device,
                    "unknown device '" + device +
                        "' (expected cpu, cuda:N or a device fingerprint of 32 hex digits)");
}

const DeviceInfo* DeviceRegistry::find_cuda(const std::string& device) const {
  if (!m_cuda) return nullptr;
  const std::string_view name = device == "cuda" ? std::string_view("cuda:0") : device;
  for (const auto& d : *m_cuda) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

Result<DeviceInfo> DeviceRegistry::local(const std::string& device) const {
  if (device == "cpu") {
    if (!m_cpu_unknown.empty()) {
      return make_error(ErrorCode::no_device, "device cpu is unknown: " + m_cpu_unknown);
    }
    return m_cpu;
  }
  if (!is_cuda_device(device)) {
    return make_error(ErrorCode::unknown_device,
                      "unknown device '" + device + "' (expected cpu, cuda:N or all)");
  }
  if (const DeviceInfo* found = find_cuda(device)) return *found;
  return no_cuda(device);
}

std::vector<DeviceInfo> DeviceRegistry::all_local() const {
  std::vector<DeviceInfo> out;
  if (m_cpu_unknown.empty()) out.push_back(m_cpu);
  if (m_cuda) out.insert(out.end(), m_cuda->begin(), m_cuda->end());
  return out;
}

nlohmann::json DeviceRegistry::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& d : all_local()) list.push_back(device_json(d));
  nlohmann::json status;
  if (m_cuda) {
    status = {{"available", true}};
  } else {
    status = {{"available", false}, {"code", std::string(to_string(m_cuda.error().code))}, {"reason", m_cuda.error().message}};
  }
  nlohmann::json out{{"devices", std::move(list)}, {"cuda", std::move(status)}};
  if (!m_cpu_unknown.empty()) {
    out["cpu"] = {{"available", false}, {"code", std::string(to_string(ErrorCode::no_device))}, {"reason", m_cpu_unknown}};
  }
  return out;
}

Result<void> target_cuda_device(const Store& store, const JobRecord& record, CompileJob& job) {
  if (job.language != "cuda") return {};
  auto device = store.get_device(record.fingerprint);
  if (!device) return device.error();
  const std::string where = "job " + std::to_string(record.id) + " on " + record.device;
  if (!device->has_value()) {
    return make_error(ErrorCode::internal, where + ": no device with fingerprint " +
                                          record.fingerprint + " in the store");
  }
  const auto& details = (*device)->details;
  const auto arch = details.find("arch");
  if (arch == details.end() || !arch->is_string()) {
    return make_error(ErrorCode::internal, where + ": the stored device has no \"arch\"");
  }
  job.arch = arch->get<std::string>();
  return {};
}

void target_cuda_device(const JobRecord& record, BenchJob& job) {
  if (!job.launch || record.device.rfind("cuda", 0) != 0) return;
  // The lane's worker sees only this GPU (CUDA_VISIBLE_DEVICES, WorkerPool): its device 0.
  job.cuda_device = 0;
}

} // namespace ktune::daemon
