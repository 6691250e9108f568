#include "daemon/winner_index.hpp"

#include "daemon/replies.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace ktune::daemon {

namespace {

constexpr char k_sep = '\x1f';

std::string pair_key(std::string_view a, std::string_view b) {
  std::string key;
  key.reserve(a.size() + b.size() + 1);
  key.append(a).push_back(k_sep);
  key.append(b);
  return key;
}

void append_double(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

void append_int(std::string& out, std::int64_t value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

// Shapes and names in the index are identifiers, digits, '=' and ','; quoting needs no escapes
// beyond what nlohmann's dump gives for safety on anything else.
void append_string(std::string& out, std::string_view text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
  });
  if (plain) {
    out.push_back('"');
    out.append(text);
    out.push_back('"');
  } else {
    out += nlohmann::json(std::string(text)).dump();
  }
}

} // namespace

std::string WinnerIndex::group_key(std::string_view kernel, std::string_view dtype,
                                   std::string_view fingerprint) {
  std::string key;
  key.reserve(kernel.size() + dtype.size() + fingerprint.size() + 2);
  key.append(kernel).push_back(k_sep);
  key.append(dtype).push_back(k_sep);
  key.append(fingerprint);
  return key;
}

void WinnerIndex::clear() {
  m_groups.clear();
  m_kernel_device.clear();
  m_devices.clear();
  m_size = 0;
}

void WinnerIndex::put(const WinnerRecord& record) {
  if (m_observer) m_observer(record);
  auto& group = m_groups[group_key(record.kernel, record.dtype, record.fingerprint)];
  IndexedWinner entry{record.shape,        shape_log_dims(record.shape), record.source_hash,
                      record.config,       record.median_ms,             record.gflops,
                      record.job_id,       record.updated_at};
  for (auto& existing : group) {
    if (existing.shape == record.shape && existing.source_hash == record.source_hash) {
      existing = std::move(entry);
      return;
    }
  }
  group.push_back(std::move(entry));
  ++m_kernel_device[pair_key(record.kernel, record.fingerprint)];
  ++m_devices[record.fingerprint];
  ++m_size;
}

void WinnerIndex::for_each(const std::function<void(const WinnerRecord&)>& visit) const {
  WinnerRecord record;
  for (const auto& [key, winners] : m_groups) {
    const auto first = key.find(k_sep), second = key.find(k_sep, first + 1);
    record.kernel = key.substr(0, first);
    record.dtype = key.substr(first + 1, second - first - 1);
    record.fingerprint = key.substr(second + 1);
    for (const auto& w : winners) {
      record.shape = w.shape;
      record.source_hash = w.source_hash;
      record.config = w.config;
      record.median_ms = w.median_ms;
      record.gflops = w.gflops;
      record.job_id = w.job_id;
      record.updated_at = w.updated_at;
      visit(record);
    }
  }
}

const std::vector<IndexedWinner>* WinnerIndex::group(std::string_view kernel, std::string_view dtype,
                                                     std::string_view fingerprint) const {
  const auto it = m_groups.find(group_key(kernel, dtype, fingerprint));
  return it == m_groups.end() ? nullptr : &it->second;
}

bool WinnerIndex::kernel_has_winners_on(std::string_view kernel,
                                        std::string_view fingerprint) const {
  return m_kernel_device.count(pair_key(kernel, fingerprint)) != 0;
}

bool WinnerIndex::device_has_winners(std::string_view fingerprint) const {
  return m_devices.count(std::string(fingerprint)) != 0;
}

void WinnerIndex::set_identity(const std::string& fingerprint, const DeviceIdentity& identity) {
  auto [it, added] = m_identities.try_emplace(fingerprint);
  if (!added) {
    auto& peers = m_hardware[it->second.hardware_id];
    peers.erase(std::remove(peers.begin(), peers.end(), fingerprint), peers.end());
  }
  it->second = Identity{identity.hardware_id, identity.environment};
  m_hardware[identity.hardware_id].push_back(fingerprint);
}

bool WinnerIndex::knows_identity(std::string_view fingerprint) const {
  return m_identities.count(std::string(fingerprint)) != 0;
}

bool WinnerIndex::has_stale_peers(std::string_view fingerprint) const {
  const auto it = m_identities.find(std::string(fingerprint));
  if (it == m_identities.end()) return false;
  for (const auto& peer : m_hardware.at(it->second.hardware_id)) {
    if (peer != fingerprint && device_has_winners(peer)) return true;
  }
  return false;
}

bool WinnerIndex::same_hardware(std::string_view a, std::string_view b) const {
  if (a == b) return false;
  const auto first = m_identities.find(std::string(a));
  const auto second = m_identities.find(std::string(b));
  return first != m_identities.end() && second != m_identities.end() &&
         first->second.hardware_id == second->second.hardware_id;
}

WinnerIndex::Stale WinnerIndex::stale_winner(std::string_view kernel, std::string_view source_hash,
                                             std::string_view shape, std::string_view dtype,
                                             std::string_view fingerprint) const {
  Stale found;
  const auto it = m_identities.find(std::string(fingerprint));
  if (it == m_identities.end()) return found;
  for (const auto& peer : m_hardware.at(it->second.hardware_id)) {
    if (peer == fingerprint) continue;
    const auto* winners = group(kernel, dtype, peer);
    if (!winners) continue;
    for (const auto& w : *winners) {
      if (w.shape != shape || w.source_hash != source_hash) continue;
      const bool newer = !found.winner || w.updated_at > found.winner->updated_at ||
                         (w.updated_at == found.winner->updated_at && w.job_id > found.winner->job_id);
      if (newer) {
        found.winner = &w;
        found.fingerprint = &peer;
      }
    }
  }
  if (!found.winner) return found;
  auto [text, added] = m_changes.try_emplace(pair_key(*found.fingerprint, fingerprint));
  if (added) {
    text->second = environment_change(m_identities.at(*found.fingerprint).environment,
                                      it->second.environment);
    if (text->second.empty()) text->second = "the device's fingerprint";
  }
  found.change = &text->second;
  return found;
}

double shape_distance(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty()) return std::numeric_limits<double>::infinity();
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(sum);
}

std::vector<double> shape_log_dims(std::string_view shape) {
  std::vector<double> dims;
  while (!shape.empty()) {
    const auto comma = shape.find(',');
    const std::string_view item = shape.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) return {};
    std::int64_t value = 0;
    const auto digits = item.substr(eq + 1);
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size() || value <= 0) return {};
    dims.push_back(std::log(static_cast<double>(value)));
    if (comma == std::string_view::npos) break;
    shape.remove_prefix(comma + 1);
  }
  return dims;
}

Result<const CachedKernel*> KernelCache::get(const std::string& name, Language language,
                                             std::chrono::steady_clock::time_point now) {
  std::string key;
  key.reserve(name.size() + 1);
  key += name;
  key += language == Language::cpp ? '\x01' : '\x02';
  auto it = m_kernels.find(key);
  if (it != m_kernels.end()) {
    CachedKernel& cached = it->second;
    if (now - cached.checked_at < k_kernel_refresh || cached.reloading) return &cached;
    if (unchanged(cached.inputs)) {
      cached.checked_at = now;
      return &cached;
    }
    if (m_reload) {
      cached.reloading = true;
      m_reload(cached.spec_path, m_registry.kernel_dir_of(cached.spec_path),
               [this, key, name, language, spec_path = cached.spec_path](
                   Result<LoadedKernel> loaded, std::vector<FileStamp> inputs) {
                 finish_reload(key, name, language, spec_path, std::move(loaded), std::move(inputs));
               });
      return &cached;
    }
  }
  auto loaded = m_registry.find(name, language);
  if (!loaded) {
    if (it != m_kernels.end()) m_kernels.erase(it);
    return loaded.error();
  }
  CachedKernel entry;
  entry.name = loaded->spec.name;
  entry.source_hash = loaded->source_hash;
  entry.dims = loaded->spec.shape_dims;
  entry.dtypes = loaded->spec.dtypes;
  entry.dtype_axis = loaded->spec.dtype_axis;
  entry.runs_on_cpu = loaded->spec.language == Language::cpp;
  entry.default_config = config_json_text(loaded->spec.default_config);
  entry.checked_at = now;
  entry.spec_path = loaded->spec_path;
  entry.inputs = loaded->inputs;
  auto& slot = m_kernels[key];
  slot = std::move(entry);
  return &slot;
}

void KernelCache::finish_reload(const std::string& key, const std::string& name, Language language,
                                const std::string& spec_path, Result<LoadedKernel> loaded,
                                std::vector<FileStamp> inputs) {
  auto installed = m_registry.install(name, spec_path, std::move(loaded), std::move(inputs));
  const auto it = m_kernels.find(key);
  if (it == m_kernels.end()) return;
  // Broken, renamed or another language now: the next lookup asks the registry (which holds
  // the error already, without reading a file).
  if (!installed || installed->spec.name != name || installed->spec.language != language) {
    m_kernels.erase(it);
    return;
  }
  CachedKernel& entry = it->second;
  entry.source_hash = installed->source_hash;
  entry.dims = installed->spec.shape_dims;
  entry.dtypes = installed->spec.dtypes;
  entry.dtype_axis = installed->spec.dtype_axis;
  entry.runs_on_cpu = installed->spec.language == Language::cpp;
  entry.default_config = config_json_text(installed->spec.default_config);
  entry.checked_at = std::chrono::steady_clock::now();
  entry.spec_path = installed->spec_path;
  entry.inputs = installed->inputs;
  entry.reloading = false;
}

std::string_view rung_name(Rung rung) {
  switch (rung) {
  case Rung::exact: return "exact";
  case Rung::stale: return "stale";
  case Rung::nearest: return "nearest";
  case Rung::fallback_default: return "default";
  }
  return "default";
}

LadderAnswer climb_ladder(const WinnerIndex& index, const CachedKernel& kernel,
                          std::string_view shape, std::string_view dtype,
                          std::string_view fingerprint) {
  LadderAnswer answer;
  bool source_changed = false;
  const auto* group = index.group(kernel.name, dtype, fingerprint);
  if (group) {
    for (const auto& w : *group) {
      if (w.shape == shape && w.source_hash == kernel.source_hash) {
        answer.rung = Rung::exact;
        answer.winner = &w;
        answer.config = &w.config;
        return answer;
      }
    }
  }
  // The same key on this hardware under another environment comes before another shape's
  // winner under this one: same hardware, same shape, only the software moved.
  if (const auto stale = index.stale_winner(kernel.name, kernel.source_hash, shape, dtype,
                                            fingerprint);
      stale.winner) {
    answer.rung = Rung::stale;
    answer.winner = stale.winner;
    answer.config = &stale.winner->config;
    answer.stale = stale;
    answer.reason = "environment_changed";
    return answer;
  }
  if (group) {
    const IndexedWinner* nearest = nullptr;
    double best = std::numeric_limits<double>::infinity();
    std::vector<double> wanted;
    for (const auto& w : *group) {
      if (w.shape == shape) {  // under another source: the exact scan above took the current one
        source_changed = true;
        continue;
      }
      if (w.source_hash != kernel.source_hash) continue;
      if (wanted.empty()) wanted = shape_log_dims(shape);
      const double d = shape_distance(wanted, w.log_dims);
      // Ties (equal up to rounding) go to the shape that sorts first, so the answer does not
      // depend on the order the winners were stored in.
      constexpr double k_tie = 1e-9;
      const bool tie = nearest && std::abs(d - best) <= k_tie;
      if ((!tie && d < best) || (tie && w.shape < nearest->shape)) {
        best = d;
        nearest = &w;
      }
    }
    if (nearest) {
      answer.rung = Rung::nearest;
      answer.winner = nearest;
      answer.config = &nearest->config;
      answer.reason = source_changed ? "source_changed" : "shape_not_tuned";
      return answer;
    }
    // Winners exist for this kernel, dtype and device, all under other source hashes.
    source_changed = true;
  }
  answer.rung = Rung::fallback_default;
  answer.config = &kernel.default_config;
  if (source_changed) {
    answer.reason = "source_changed";
  } else if (!index.device_has_winners(fingerprint)) {
    answer.reason = "device_never_tuned";
  } else if (index.kernel_has_winners_on(kernel.name, fingerprint)) {
    answer.reason = "dtype_not_tuned";
  } else {
    answer.reason = "no_results_for_kernel";
  }
  return answer;
}

void append_lookup_result(std::string& out, const LadderAnswer& answer,
                          std::optional<std::int64_t> tune_job) {
  out += "{\"rung\":\"";
  out += rung_name(answer.rung);
  out += answer.rung == Rung::exact ? "\",\"exact\":true" : "\",\"exact\":false";
  out += ",\"config\":";
  out += answer.config && !answer.config->empty() ? *answer.config : std::string("{}");
  if (answer.winner) {
    if (answer.rung == Rung::nearest) {
      out += ",\"from_shape\":";
      append_string(out, answer.winner->shape);
    }
    out += ",\"median_ms\":";
    append_double(out, answer.winner->median_ms);
    out += ",\"gflops\":";
    append_double(out, answer.winner->gflops);
    out += ",\"job\":";
    append_int(out, answer.winner->job_id);
  }
  if (!answer.reason.empty()) {
    out += ",\"reason\":\"";
    out += answer.reason;
    out += '"';
  }
  if (answer.rung == Rung::stale && answer.stale.fingerprint && answer.stale.change) {
    out += ",\"from_device\":";
    append_string(out, *answer.stale.fingerprint);
    out += ",\"change\":";
    append_string(out, *answer.stale.change);
  }
  if (tune_job) {
    out += ",\"tune_job\":";
    append_int(out, *tune_job);
  }
  out += '}';
}

} // namespace ktune::daemon
