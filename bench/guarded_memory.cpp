#include "bench/guarded_memory.hpp"

#include <xxhash.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace ktune {

namespace {

std::size_t page_bytes() {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The ranges the fault handler can name. A slot is in use while `hi` is non-zero; it is written
// before `lo`/`hi` are published (release) and `hi` is cleared before it is reused.
struct Named {
  std::atomic<std::uintptr_t> lo{0}, hi{0};  // the whole mapping, guards included
  std::uintptr_t usable_lo = 0, usable_hi = 0;
  std::atomic<std::uintptr_t> contents_lo{0}, contents_hi{0};
  std::atomic<bool> sealed{false};
  char label[96] = {};
};

constexpr std::size_t k_slots = 1024;
std::array<Named, k_slots> g_named;

void set_label(Named& named, std::string_view label) {
  const std::size_t n = std::min(label.size(), sizeof named.label - 1);
  std::memcpy(named.label, label.data(), n);
  named.label[n] = '\0';
}

int register_range(std::uintptr_t lo, std::uintptr_t hi, std::uintptr_t usable_lo,
                   std::uintptr_t usable_hi, std::string_view label) {
  for (std::size_t i = 0; i < k_slots; ++i) {
    Named& n = g_named[i];
    if (n.hi.load(std::memory_order_acquire) != 0) continue;
    n.usable_lo = usable_lo;
    n.usable_hi = usable_hi;
    n.contents_lo.store(usable_lo, std::memory_order_relaxed);
    n.contents_hi.store(usable_hi, std::memory_order_relaxed);
    n.sealed.store(false, std::memory_order_relaxed);
    set_label(n, label);
    n.lo.store(lo, std::memory_order_relaxed);
    n.hi.store(hi, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;  // full: the guards still fault, unnamed
}

void unregister_range(int slot) {
  if (slot < 0) return;
  g_named[static_cast<std::size_t>(slot)].hi.store(0, std::memory_order_release);
  g_named[static_cast<std::size_t>(slot)].lo.store(0, std::memory_order_relaxed);
}

// Async-signal-safe text building for the handler.
struct Line {
  char text[320];
  std::size_t used = 0;
  void add(const char* s) {
    while (*s != '\0' && used + 1 < sizeof text) text[used++] = *s++;
  }
  void add(std::uintptr_t value) {
    char digits[24];
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0 && n < sizeof digits);
    while (n > 0 && used + 1 < sizeof text) text[used++] = digits[--n];
  }
};

struct sigaction g_previous_segv {};
struct sigaction g_previous_bus {};

void on_fault(int sig, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const Named& n : g_named) {
    const std::uintptr_t hi = n.hi.load(std::memory_order_acquire);
    if (hi == 0 || address < n.lo.load(std::memory_order_relaxed) || address >= hi) continue;
    Line line;
    line.add(k_guard_fault_prefix.data());
    line.add(sig == SIGBUS ? "SIGBUS " : "SIGSEGV ");
    const std::uintptr_t begin = n.contents_lo.load(std::memory_order_relaxed);
    const std::uintptr_t end = n.contents_hi.load(std::memory_order_relaxed);
    if (address < n.usable_lo) {
      line.add("in the guard page ");
      line.add(begin - address);
      line.add(" bytes before the start of ");
    } else if (address >= n.usable_hi) {
      line.add("in the guard page ");
      line.add(address - end);
      line.add(" bytes past the end of ");
    } else if (n.sealed.load(std::memory_order_relaxed)) {
      line.add("a write into ");
    } else {
      line.add("at byte ");
      line.add(address - begin);
      line.add(" of ");
    }
    line.add(n.label);
    line.add("\n");
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.text, line.used);
    break;
  }
  // The previous disposition takes over: the faulting instruction runs again and meets it.
  ::sigaction(sig, sig == SIGBUS ? &g_previous_bus : &g_previous_segv, nullptr);
  (void)context;
}

} // namespace

Result<GuardedRegion> GuardedRegion::map(std::size_t bytes, std::string_view label) {
  const std::size_t page = page_bytes();
  const std::size_t usable = round_up(std::max<std::size_t>(bytes, 1), page);
  const std::size_t guard = std::clamp(usable, page, round_up(k_max_guard_bytes, page));
  if (usable > (std::size_t{1} << 46)) {
    return make_error(ErrorCode::bench_failed, "buffer " + std::string(label) + ": " +
                                           std::to_string(bytes) + " bytes exceed the address space");
  }
  const std::size_t total = guard + usable + guard;
  void* base = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return make_error(ErrorCode::bench_failed, "buffer " + std::string(label) + ": cannot map " +
                                           std::to_string(total) + " bytes (" +
                                           std::to_string(usable) + " usable between guard pages): " +
                                           std::strerror(errno));
  }
  GuardedRegion region;
  region.m_base = static_cast<unsigned char*>(base);
  region.m_total = total;
  region.m_usable = region.m_base + guard;
  region.m_usable_bytes = usable;
  region.m_guard_bytes = guard;
  if (::mprotect(region.m_usable, usable, PROT_READ | PROT_WRITE) != 0) {
    return make_error(ErrorCode::bench_failed, "buffer " + std::string(label) + ": cannot make " +
                                           std::to_string(usable) + " bytes writable: " +
                                           std::strerror(errno));
  }
  const auto at = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  region.m_slot = register_range(at(region.m_base), at(region.m_base + total), at(region.m_usable),
                                 at(region.m_usable + usable), label);
  return region;
}

GuardedRegion::GuardedRegion(GuardedRegion&& other) noexcept
    : m_base(std::exchange(other.m_base, nullptr)),
      m_total(std::exchange(other.m_total, 0)),
      m_usable(std::exchange(other.m_usable, nullptr)),
      m_usable_bytes(std::exchange(other.m_usable_bytes, 0)),
      m_guard_bytes(std::exchange(other.m_guard_bytes, 0)),
      m_slot(std::exchange(other.m_slot, -1)) {}

GuardedRegion& GuardedRegion::operator=(GuardedRegion&& other) noexcept {
  if (this != &other) {
    release();
    m_base = std::exchange(other.m_base, nullptr);
    m_total = std::exchange(other.m_total, 0);
    m_usable = std::exchange(other.m_usable, nullptr);
    m_usable_bytes = std::exchange(other.m_usable_bytes, 0);
    m_guard_bytes = std::exchange(other.m_guard_bytes, 0);
    m_slot = std::exchange(other.m_slot, -1);
  }
  return *this;
}

GuardedRegion::~GuardedRegion() { release(); }

void GuardedRegion::release() noexcept {
  unregister_range(m_slot);
  m_slot = -1;
  if (m_base != nullptr) ::munmap(m_base, m_total);
  m_base = nullptr;
}

void GuardedRegion::name_contents(std::string_view label, const void* begin, std::size_t bytes) {
  if (m_slot < 0) return;
  Named& n = g_named[static_cast<std::size_t>(m_slot)];
  const auto lo = reinterpret_cast<std::uintptr_t>(begin);
  n.contents_lo.store(lo, std::memory_order_relaxed);
  n.contents_hi.store(lo + bytes, std::memory_order_relaxed);
  set_label(n, label);
}

Result<void> GuardedRegion::seal() {
  if (m_usable == nullptr) return {};
  if (::mprotect(m_usable, m_usable_bytes, PROT_READ) != 0) {
    return make_error(ErrorCode::bench_failed, std::string("cannot make a copy read-only: ") + std::strerror(errno));
  }
  if (m_slot >= 0) g_named[static_cast<std::size_t>(m_slot)].sealed.store(true, std::memory_order_relaxed);
  return {};
}

Result<SealedCopy> SealedCopy::of(const void* data, std::size_t bytes, std::string_view label) {
  SealedCopy copy;
  auto region = GuardedRegion::map(bytes, label);
  if (!region) return region.error();
  copy.m_region = std::move(region).value();
  if (bytes > 0) std::memcpy(copy.m_region.data(), data, bytes);
  copy.m_region.name_contents(label, copy.m_region.data(), bytes);
  if (auto sealed = copy.m_region.seal(); !sealed) {
    return make_error(ErrorCode::bench_failed, std::string(label) + ": " + sealed.error().message);
  }
  copy.m_bytes = bytes;
  copy.m_hash = content_hash(copy.m_region.data(), bytes);
  return copy;
}

std::uint64_t content_hash(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

void install_guard_fault_handler() {
  struct sigaction current {};
  if (::sigaction(SIGSEGV, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) != 0 &&
      current.sa_sigaction == on_fault) {
    return;  // installed already
  }
  static std::array<unsigned char, 64 * 1024> alternate_stack;
  stack_t stack{};
  stack.ss_sp = alternate_stack.data();
  stack.ss_size = alternate_stack.size();
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous_segv);
  ::sigaction(SIGBUS, &action, &g_previous_bus);
}

} // namespace ktune
