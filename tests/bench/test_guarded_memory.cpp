#include "bench/guarded_memory.hpp"
#include "bench/host_buffers.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

using namespace ktune;

namespace {

struct ChildEnd {
  int status = 0;
  std::string said;  // its stderr
};

// Runs `body` in a forked child with the guard fault handler installed; its stderr and how it
// ended.
ChildEnd in_child(const std::function<void()>& body) {
  int err[2];
  REQUIRE(::pipe(err) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[0]);
    // Catch's own fatal-signal handler stays out of the child: the default death is the verdict.
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGBUS, SIG_DFL);
    install_guard_fault_handler();
    body();
    ::_exit(0);
  }
  ::close(err[1]);
  ChildEnd end;
  char chunk[512];
  for (ssize_t n; (n = ::read(err[0], chunk, sizeof chunk)) > 0;) {
    end.said.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(err[0]);
  REQUIRE(::waitpid(child, &end.status, 0) == child);
  return end;
}

} // namespace

TEST_CASE("GuardedRegion: usable pages between guards as large as they are", "[bench][guarded]") {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto small = GuardedRegion::map(10, "small");
  REQUIRE(small.ok());
  CHECK(small->size() == static_cast<std::size_t>(page));
  CHECK(small->guard_bytes() == static_cast<std::size_t>(page));
  CHECK(reinterpret_cast<std::uintptr_t>(small->data()) % static_cast<std::uintptr_t>(page) == 0);
  CHECK(small->data()[0] == 0);
  auto large = GuardedRegion::map(std::size_t{5} << 20, "large");
  REQUIRE(large.ok());
  CHECK(large->guard_bytes() == large->size());
  auto huge = GuardedRegion::map(std::size_t{256} << 20, "huge");
  REQUIRE(huge.ok());
  CHECK(huge->guard_bytes() == GuardedRegion::k_max_guard_bytes);
}

TEST_CASE("HostBuffer: 64 bytes past a page boundary, as before guard pages", "[bench][guarded]") {
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const std::size_t count : {1u, 1000u, 1u << 20}) {
    auto buffer = HostBuffer::allocate(DType::f32, count, "A");
    REQUIRE(buffer.ok());
    CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % static_cast<std::uintptr_t>(page) ==
          HostBuffer::k_guard_bytes);
  }
}

TEST_CASE("a write one buffer-length past a HostBuffer faults and names it", "[bench][guarded]") {
  constexpr std::size_t n = 8192;  // 32 KiB
  const ChildEnd end = in_child([&] {
    auto buffer = HostBuffer::allocate(DType::f32, n, "C");
    if (!buffer) ::_exit(3);
    buffer->describe("output 'C'");
    auto* data = static_cast<volatile float*>(buffer->data());
    data[n - 1] = 1.0f;   // its last element: fine
    data[2 * n - 1] = 1.0f;  // one buffer-length past it
  });
  INFO(end.said);
  REQUIRE(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGSEGV);
  CHECK_THAT(end.said, Catch::Contains("wrote outside its buffers: SIGSEGV in the guard page " +
                                       std::to_string((n - 1) * 4) +
                                       " bytes past the end of output 'C'"));
}

TEST_CASE("a write before a HostBuffer's start faults and names it", "[bench][guarded]") {
  const ChildEnd end = in_child([&] {
    auto buffer = HostBuffer::allocate(DType::f32, 1024, "X");
    if (!buffer) ::_exit(3);
    auto* data = static_cast<volatile float*>(buffer->data());
    data[-1024] = 1.0f;
  });
  INFO(end.said);
  REQUIRE(WIFSIGNALED(end.status));
  CHECK_THAT(end.said, Catch::Contains("bytes before the start of 'X'"));
}

TEST_CASE("a SealedCopy is read-only: a write into it faults and names it", "[bench][guarded]") {
  const std::string text = "pristine";
  auto copy = SealedCopy::of(text.data(), text.size(), "the pristine copy of 'A'");
  REQUIRE(copy.ok());
  CHECK(std::memcmp(copy->data(), text.data(), text.size()) == 0);
  CHECK(copy->hash() == content_hash(text.data(), text.size()));
  const ChildEnd end = in_child([&] { const_cast<volatile unsigned char*>(copy->data())[2] = 'x'; });
  INFO(end.said);
  REQUIRE(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGSEGV);
  CHECK_THAT(end.said, Catch::Contains("a write into the pristine copy of 'A'"));
}

TEST_CASE("a fault outside every guarded region keeps its default death and says nothing",
          "[bench][guarded]") {
  const ChildEnd end = in_child([] { *static_cast<volatile int*>(nullptr) = 1; });
  REQUIRE(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGSEGV);
  CHECK(end.said.find("wrote outside") == std::string::npos);
}
