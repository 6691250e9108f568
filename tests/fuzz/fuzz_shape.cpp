// Fuzzes Shape::parse (core/shape.hpp) and conform_shape. Properties: errors use code
// "bad_shape"; a parsed shape has positive values <= 2^40 and unique names, its canonical
// text parses back to the same shape, and conforming it to its own dimension order is the
// identity; parsing is linear in the input's size (a sample of inputs is also parsed as 64
// copies with their names made distinct).
#include "core/shape.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (ktune::fuzz::sampled_for_linear_check(data, size)) {
    constexpr int copies = 64;
    std::string many;
    for (int c = 0; c < copies; ++c) {
      if (c > 0) many += ',';
      for (char ch : text) {
        if (ch == '=') many += "_" + std::to_string(c);
        many += ch;
      }
    }
    ktune::fuzz::check_linear(std::string(text), many, copies,
                              [](const std::string& input) { (void)ktune::Shape::parse(input); });
  }
  auto shape = ktune::Shape::parse(text);
  if (!shape) {
    FUZZ_CHECK(shape.error().code == ktune::ErrorCode::bad_shape, "parse errors use code bad_shape");
    FUZZ_CHECK(!shape.error().message.empty(), "an error has a message");
    return 0;
  }
  FUZZ_CHECK(!shape->dims.empty(), "a parsed shape has dimensions");
  std::set<std::string> names;
  std::vector<std::string> order;
  for (const auto& [name, value] : shape->dims) {
    FUZZ_CHECK(value > 0 && value <= (std::int64_t{1} << 40), "values are in 1..2^40");
    FUZZ_CHECK(names.insert(name).second, "names are unique");
    FUZZ_CHECK(shape->get(name) == value, "get() finds every dimension");
    order.push_back(name);
  }
  const std::string canonical = shape->to_string();
  auto again = ktune::Shape::parse(canonical);
  FUZZ_CHECK(again.ok(), "the canonical text parses");
  FUZZ_CHECK(*again == *shape, "the canonical text parses to the same shape");
  FUZZ_CHECK(again->to_string() == canonical, "the canonical text is stable");

  auto conformed = ktune::conform_shape(*shape, order, "fuzz");
  FUZZ_CHECK(conformed.ok() && *conformed == *shape, "conforming to the shape's own order is the identity");
  if (order.size() > 1) {
    std::vector<std::string> fewer(order.begin() + 1, order.end());
    auto missing = ktune::conform_shape(*shape, fewer, "fuzz");
    FUZZ_CHECK(!missing.ok() && missing.error().code == ktune::ErrorCode::bad_shape, "an undeclared dimension is an error");
  }
  return 0;
}
