#include "core/hash.hpp"

#include <catch2/catch.hpp>

TEST_CASE("core/hash: XXH3-128 hex digests", "[core][hash]") {
  SECTION("32 lowercase hex characters, deterministic") {
    const std::string a = ktune::hash_hex("hello");
    CHECK(a.size() == 32);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(a == ktune::hash_hex("hello"));
    CHECK(a != ktune::hash_hex("hellp"));
    CHECK(ktune::hash_hex("") != ktune::hash_hex(std::string(1, '\0')));
  }
  SECTION("streaming equals one-shot for the same updates") {
    ktune::Hasher h;
    h.update("hello");
    CHECK(h.hex_digest() == ktune::hash_hex("hello"));
  }
  SECTION("updates are length-prefixed") {
    ktune::Hasher ab_c;
    ab_c.update("ab").update("c");
    ktune::Hasher a_bc;
    a_bc.update("a").update("bc");
    ktune::Hasher abc;
    abc.update("abc");
    CHECK(ab_c.hex_digest() != a_bc.hex_digest());
    CHECK(ab_c.hex_digest() != abc.hex_digest());
  }
  SECTION("digest does not consume the state") {
    ktune::Hasher h;
    h.update("x");
    const std::string first = h.hex_digest();
    CHECK(h.hex_digest() == first);
    h.update("y");
    CHECK(h.hex_digest() != first);
  }
  SECTION("large inputs") {
    const std::string big(1 << 20, 'z');
    CHECK(ktune::hash_hex(big) != ktune::hash_hex(big.substr(1)));
  }
}
