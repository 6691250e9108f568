#pragma once
// Content hashes (XXH3-128, hex). Used for source hashes, compile-cache keys and fingerprints.
#include <memory>
#include <string>
#include <string_view>

namespace ktune {

class Hasher {
public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  // Each update is length-prefixed, so ("ab","c") and ("a","bc") hash differently.
  Hasher& update(std::string_view data);
  [[nodiscard]] std::string hex_digest() const; // 32 hex characters

private:
  struct State;
  std::unique_ptr<State> m_state;
};

[[nodiscard]] std::string hash_hex(std::string_view data);

} // namespace ktune
