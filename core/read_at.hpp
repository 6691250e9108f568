#pragma once
// read_at: a trivially copyable value read from a byte view at an offset, bounds-checked (the
// ELF readers of shared objects and CUBINs: compiler/shared_object.cpp, cuda/cubin.cpp).
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ktune {

// The T at `offset` of `bytes`, nullopt when it does not lie wholly inside.
template <class T>
[[nodiscard]] std::optional<T> read_at(std::string_view bytes, std::uint64_t offset) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return std::nullopt;
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

} // namespace ktune
