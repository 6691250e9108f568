#include "core/hash.hpp"

#include <xxhash.h>

#include <array>
#include <cstdint>
#include <new>

namespace ktune {

struct Hasher::State {
  XXH3_state_t* xxh = nullptr;
  State() : xxh(XXH3_createState()) {
    if (xxh == nullptr) throw std::bad_alloc();
    XXH3_128bits_reset(xxh);
  }
  ~State() { XXH3_freeState(xxh); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

Hasher::Hasher() : m_state(std::make_unique<State>()) {}
Hasher::~Hasher() = default;

Hasher& Hasher::update(std::string_view data) {
  std::array<unsigned char, 8> length{};
  auto size = static_cast<std::uint64_t>(data.size());
  for (auto& byte : length) {
    byte = static_cast<unsigned char>(size & 0xff);
    size >>= 8;
  }
  XXH3_128bits_update(m_state->xxh, length.data(), length.size());
  XXH3_128bits_update(m_state->xxh, data.data(), data.size());
  return *this;
}

std::string Hasher::hex_digest() const {
  const XXH128_hash_t digest = XXH3_128bits_digest(m_state->xxh);
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out(32, '0');
  auto put = [&](std::uint64_t word, std::size_t at) {
    for (int i = 15; i >= 0; --i) {
      out[at + static_cast<std::size_t>(i)] = k_hex[word & 0xf];
      word >>= 4;
    }
  };
  put(digest.high64, 0);
  put(digest.low64, 16);
  return out;
}

std::string hash_hex(std::string_view data) {
  Hasher hasher;
  hasher.update(data);
  return hasher.hex_digest();
}

} // namespace ktune
