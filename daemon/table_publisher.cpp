#include "daemon/table_publisher.hpp"

#include "core/device_identity.hpp"
#include "daemon/log.hpp"
#include "jobs/dtype.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstring>

namespace ktune::daemon {

namespace {

constexpr double k_slow_publish_ms = 100.0;

std::string errno_text() { return std::strerror(errno); }

// CPU time of the calling thread, ms.
double thread_cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

} // namespace

TableFile table_file_for(const DaemonConfig& config) {
  TableFile file;
  file.path = table::table_path_for_socket(config.socket);
  if (config.allow_uids.empty() && config.allow_gids.empty()) {
    file.mode = 0600;
  } else if (config.allow_uids.empty() && config.allow_gids.size() == 1) {
    file.mode = 0640;
    file.group = static_cast<gid_t>(config.allow_gids.front());
  } else {
    file.mode = 0644;
  }
  return file;
}

TablePublisher::TablePublisher(asio::io_context& io, TableFile file, TableSources sources,
                               WinnerIndex& index)
    : m_io(io), m_sources(sources), m_index(index), m_timer(io), m_writer(std::move(file)) {
  m_index.for_each([this](const WinnerRecord& record) { winner_changed(record); });
  m_index.set_observer([this](const WinnerRecord& record) { winner_changed(record); });
  m_thread = std::thread([this] { run(); });
  schedule_refresh(std::chrono::milliseconds(0));
}

TablePublisher::~TablePublisher() {
  m_index.set_observer(nullptr);
  m_timer.cancel();
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_one();
  m_thread.join();
}

void TablePublisher::winner_changed(const WinnerRecord& record) {
  {
    std::lock_guard lock(m_mutex);
    if (m_pending.empty()) m_pending_since = std::chrono::steady_clock::now();
    m_pending.push_back(record);
  }
  m_wake.notify_one();
  // A device not named by any winner so far may need its own entry.
  if (m_fingerprints.insert(record.fingerprint).second && m_started) refresh();
}

void TablePublisher::schedule_refresh(std::chrono::steady_clock::duration after) {
  m_timer.expires_after(after);
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (!m_started && !m_sources.devices.probed()) {
      schedule_refresh(k_probe_poll);
      return;
    }
    m_started = true;
    refresh();
    schedule_refresh(k_refresh);
  });
}

void TablePublisher::refresh() {
  Meta meta = gather();
  if (m_last_meta && *m_last_meta == meta) return;
  m_last_meta = meta;
  {
    std::lock_guard lock(m_mutex);
    m_pending_meta = std::move(meta);
  }
  m_wake.notify_one();
}

TablePublisher::Meta TablePublisher::gather() const {
  Meta meta;
  meta.flags = m_sources.tune_on_miss_everywhere ? table::k_flag_tune_on_miss : 0;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [name, language] : m_sources.registry.families()) {
    auto cached = m_sources.kernels.get(name, language, now);
    if (!cached) continue;
    const CachedKernel& k = **cached;
    table::KernelEntry entry;
    entry.name = k.name;
    entry.family = language == Language::cuda ? table::Family::cuda : table::Family::cpp;
    entry.source_hash = k.source_hash;
    entry.dims = k.dims;
    entry.dtype_axis = k.dtype_axis;
    // What a lookup accepts (RequestHandler::climb): a CPU family needs a C type for the dtype.
    for (const auto& dtype : k.dtypes) {
      if (!k.runs_on_cpu || dtype_c_type(dtype)) entry.dtypes.push_back(dtype);
    }
    if (!k.dtype_axis && !k.dtypes.empty() &&
        (entry.dtypes.empty() || entry.dtypes.front() != k.dtypes.front())) {
      entry.dtypes.clear();   // its one dtype is not answerable: ktuned says why
    }
    entry.default_config = k.default_config;
    meta.kernels.push_back(std::move(entry));
  }
  // Devices by every name a lookup may give, resolved as ktuned resolves them.
  std::set<std::string> named;
  auto add = [&](const std::string& name) {
    if (!named.insert(name).second) return;
    auto resolved = m_sources.devices.resolve(name, Language::cuda);
    if (!resolved || resolved->fingerprint.empty()) return;
    meta.devices.push_back(table::DeviceEntry{
        name, std::string(resolved->fingerprint),
        resolved->language == Language::cuda ? table::Family::cuda : table::Family::cpp,
        resolved->local, m_index.has_stale_peers(resolved->fingerprint)});
  };
  for (const auto& device : m_sources.devices.all_local()) {
    // The index learns a local device's identity at its first lookup; the table needs it now
    // (which devices have stale peers).
    if (!m_index.knows_identity(device.fingerprint)) {
      m_index.set_identity(device.fingerprint, split_device_identity(device.details));
    }
    add(device.name);
    if (device.name == "cuda:0") add("cuda");
    add(device.fingerprint);
  }
  for (const auto& fingerprint : m_fingerprints) add(fingerprint);
  return meta;
}

void TablePublisher::run() {
  // Linux nice is per thread; raising it needs no privilege. A failure only costs priority.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), k_publisher_nice) != 0) {
    KTUNE_LOG(warn) << "table publisher: setpriority: " << errno_text();
  }
  std::unique_lock lock(m_mutex);
  while (true) {
    m_wake.wait(lock, [this] { return m_stop || m_pending_meta || !m_pending.empty(); });
    if (!m_stop) {
      // Changes that come together are published together; after a publish that took longer
      // than k_coalesce, the next waits twice as long (at most a third of a core for a stream
      // of changes, such as an import's 32-row steps).
      const auto earliest = std::max(std::chrono::steady_clock::now() + k_coalesce,
                                     m_last_publish_end + 2 * m_last_publish_took);
      m_wake.wait_until(lock, earliest, [this] { return m_stop; });
    }
    std::vector<WinnerRecord> changes;
    changes.swap(m_pending);
    const auto since = m_pending_since;
    std::optional<Meta> meta;
    meta.swap(m_pending_meta);
    const bool stop = m_stop;
    lock.unlock();
    apply(changes);
    if (meta) m_meta = std::move(meta);
    // At a stop, only what changed since the last table is published.
    if (m_meta && (!stop || !changes.empty())) {
      publish(*m_meta, changes.empty() ? std::nullopt : std::optional(since));
    }
    lock.lock();
    if (stop) return;
  }
}

void TablePublisher::apply(std::vector<WinnerRecord>& changes) {
  std::string key;
  for (auto& r : changes) {
    key.assign(r.kernel).push_back('\x1f');
    key.append(r.dtype).push_back('\x1f');
    key.append(r.fingerprint);
    const auto [group_it, new_group] = m_group_of.try_emplace(key, m_groups.size());
    if (new_group) m_groups.push_back(table::WinnerGroup{r.kernel, r.dtype, r.fingerprint, {}});
    auto& winners = m_groups[group_it->second].winners;
    key.push_back('\x1f');
    key.append(r.shape).push_back('\x1f');
    key.append(r.source_hash);
    table::WinnerEntry entry{std::move(r.shape), std::move(r.source_hash), std::move(r.config),
                             r.median_ms, r.gflops, r.job_id};
    const auto [winner_it, new_winner] = m_winner_of.try_emplace(key, winners.size());
    if (new_winner) {
      winners.push_back(std::move(entry));
      ++m_winner_count;
    } else {
      winners[winner_it->second] = std::move(entry);
    }
  }
}

std::uint64_t TableFileWriter::adopt_existing() {
  UniqueFd old(::open(m_file.path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  char head[24] = {};
  if (!old.valid() || ::fstat(old.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_uid != ::geteuid() || ::pread(old.get(), head, sizeof head, 0) != sizeof head ||
      std::memcmp(head, table::k_magic, sizeof table::k_magic) != 0) {
    return 0;
  }
  std::uint64_t generation = 0;
  std::memcpy(&generation, head + 16, sizeof generation);
  m_current = std::move(old);
  return generation;
}

Result<void> TableFileWriter::write(std::span<const std::byte> bytes, std::uint64_t generation) {
  const std::string tmp = m_file.path + ".new";
  auto fail = [&](const std::string& what) {
    Error error = make_error(ErrorCode::io_error, what + ": " + errno_text());
    ::unlink(tmp.c_str());
    return error;
  };
  // A new file of our own (O_EXCL): a leftover of ours is removed first; a file another user
  // put there (a socket directory may be shared and sticky) cannot be, and is never written.
  ::unlink(tmp.c_str());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, m_file.mode));
  if (!fd.valid()) return make_error(ErrorCode::io_error, "cannot create " + tmp + ": " + errno_text());
  if (::fchmod(fd.get(), m_file.mode) != 0) return fail("cannot set the mode of " + tmp);
  if (m_file.group != static_cast<gid_t>(-1) &&
      ::fchown(fd.get(), static_cast<uid_t>(-1), m_file.group) != 0) {
    return fail("cannot give " + tmp + " to group " + std::to_string(m_file.group) + " ([access])");
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write " + tmp);
    done += static_cast<std::size_t>(n);
  }
  if (::rename(tmp.c_str(), m_file.path.c_str()) != 0) {
    return fail("cannot rename " + tmp + " to " + m_file.path);
  }
  if (m_current.valid() &&
      ::pwrite(m_current.get(), &generation, sizeof generation, table::k_superseded_offset) !=
          sizeof generation) {
    KTUNE_LOG(warn) << "cannot mark the previous winner table superseded: " << errno_text()
                    << " (its readers see the new one when they open it again)";
  }
  m_current = std::move(fd);
  return {};
}

void TablePublisher::publish(const Meta& meta,
                             std::optional<std::chrono::steady_clock::time_point> since) {
  const auto start = std::chrono::steady_clock::now();
  const double start_cpu_ms = thread_cpu_ms();
  if (!m_adopted) {
    m_adopted = true;
    m_generation = m_writer.adopt_existing();
  }
  table::TableContent content;
  content.generation = ++m_generation;
  content.published_unix_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  content.flags = meta.flags;
  content.devices = meta.devices;
  content.kernels = meta.kernels;
  auto bytes = table::encode(content, m_groups);
  if (!bytes) {
    KTUNE_LOG(error) << "winner table not published: " << bytes.error().message;
    return;
  }
  if (auto written = m_writer.write(*bytes, content.generation); !written) {
    KTUNE_LOG(error) << "winner table not published: " << written.error().message;
    return;
  }
  const double elapsed_ms = log::elapsed_ms(start);
  m_last_publish_end = std::chrono::steady_clock::now();
  m_last_publish_took = m_last_publish_end - start;
  m_published_generation = content.generation;
  m_published_winners = m_winner_count;
  m_publish_ms = elapsed_ms;
  m_publish_cpu_ms = thread_cpu_ms() - start_cpu_ms;
  if (since) m_visible_ms = log::elapsed_ms(*since);
  if (elapsed_ms > k_slow_publish_ms) {
    KTUNE_LOG(info) << "winner table generation " << content.generation << " (" << m_winner_count
                    << " winners, " << bytes->size() << " bytes) published in " << elapsed_ms
                    << " ms";
  } else {
    KTUNE_LOG(debug) << "winner table generation " << content.generation << " (" << m_winner_count
                     << " winners, " << bytes->size() << " bytes) published in " << elapsed_ms
                     << " ms";
  }
}

TablePublisher::Status TablePublisher::status() const {
  return Status{m_published_generation.load(), m_published_winners.load(), m_publish_ms.load(),
                m_publish_cpu_ms.load(), m_visible_ms.load(), m_writer.file().path};
}

nlohmann::json table_status_json(const TablePublisher::Status& status) {
  return {{"path", status.path},
          {"generation", status.generation},
          {"winners", status.winners},
          {"publish_ms", status.publish_ms},
          {"publish_cpu_ms", status.publish_cpu_ms},
          {"visible_ms", status.visible_ms}};
}

} // namespace ktune::daemon
