#include "bench/host_buffers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace ktune;

TEST_CASE("dtype and init names", "[bench][host_buffers]") {
  for (const char* name : {"f32", "f64", "f16", "i32", "i64"}) {
    const auto dtype = parse_dtype(name);
    REQUIRE(dtype);
    CHECK(to_string(*dtype) == name);
  }
  CHECK_FALSE(parse_dtype("f8"));
  CHECK_FALSE(parse_dtype(""));
  CHECK(dtype_bytes(DType::f16) == 2);
  CHECK(dtype_bytes(DType::f32) == 4);
  CHECK(dtype_bytes(DType::i64) == 8);
  CHECK(is_integral(DType::i32));
  CHECK_FALSE(is_integral(DType::f64));
  CHECK(parse_init_kind("index") == InitKind::index);
  CHECK_FALSE(parse_init_kind("random"));
}

TEST_CASE("half conversions", "[bench][host_buffers]") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(70000.0f) == 0x7c00);                      // overflow to inf
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -26)) == 0x0000);         // underflow
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie rounds to even
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x0200) == std::ldexp(1.0f, -15));
  CHECK(std::isinf(half_to_float(0xfc00)));
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t bits = 0; bits < 0x7c00; bits += 7) {
    const auto h = static_cast<std::uint16_t>(bits);
    CHECK(float_to_half(half_to_float(h)) == h);
  }
}

TEST_CASE("HostBuffer", "[bench][host_buffers]") {
  SECTION("aligned, sized, guarded") {
    auto buffer = HostBuffer::allocate(DType::f32, 13, "A");
    REQUIRE(buffer.ok());
    CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % HostBuffer::k_alignment == 0);
    CHECK(buffer->count() == 13);
    CHECK(buffer->bytes() == 52);
    CHECK(buffer->guards_intact());

    auto* bytes = static_cast<unsigned char*>(buffer->data());
    bytes[52] = 0;  // one past the last element
    CHECK_FALSE(buffer->guards_intact());
    buffer->reset_guards();
    CHECK(buffer->guards_intact());
    bytes[-1] = 0;  // one before the first
    CHECK_FALSE(buffer->guards_intact());
    buffer->reset_guards();
    std::memset(bytes, 0x5a, buffer->bytes());  // the data itself is free to change
    CHECK(buffer->guards_intact());
  }

  SECTION("moves") {
    auto buffer = HostBuffer::allocate(DType::i64, 4, "A");
    REQUIRE(buffer.ok());
    void* data = buffer->data();
    HostBuffer moved = std::move(buffer).value();
    CHECK(moved.data() == data);
    HostBuffer other = std::move(HostBuffer::allocate(DType::f16, 3, "B")).value();
    other = std::move(moved);
    CHECK(other.data() == data);
    CHECK(other.dtype() == DType::i64);
  }

  SECTION("bad sizes are runtime_error naming the buffer") {
    auto empty = HostBuffer::allocate(DType::f32, 0, "Z");
    REQUIRE_FALSE(empty.ok());
    CHECK(empty.error().code == ktune::ErrorCode::bench_failed);
    CHECK_THAT(empty.error().message, Catch::Contains("Z"));
    auto huge = HostBuffer::allocate(DType::f64, std::numeric_limits<std::size_t>::max() / 4, "H");
    REQUIRE_FALSE(huge.ok());
    CHECK_THAT(huge.error().message, Catch::Contains("H"));
  }
}

TEST_CASE("fill_elements", "[bench][host_buffers]") {
  constexpr std::size_t n = 4096;

  SECTION("uniform floats are deterministic, in [-1, 1) and depend on seed and stream") {
    std::vector<float> a(n), b(n), c(n), d(n);
    fill_elements(DType::f32, a.data(), n, InitKind::uniform, 42, 0);
    fill_elements(DType::f32, b.data(), n, InitKind::uniform, 42, 0);
    fill_elements(DType::f32, c.data(), n, InitKind::uniform, 43, 0);
    fill_elements(DType::f32, d.data(), n, InitKind::uniform, 42, 1);
    CHECK(a == b);
    CHECK(a != c);
    CHECK(a != d);
    bool negative = false, positive = false;
    for (float v : a) {
      REQUIRE(v >= -1.0f);
      REQUIRE(v < 1.0f);
      negative = negative || v < -0.5f;
      positive = positive || v > 0.5f;
    }
    CHECK(negative);
    CHECK(positive);
  }

  SECTION("uniform integers are small") {
    std::vector<std::int32_t> a(n);
    fill_elements(DType::i32, a.data(), n, InitKind::uniform, 1, 0);
    std::int32_t lo = 100, hi = -100;
    for (auto v : a) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    CHECK(lo == -8);
    CHECK(hi == 7);
  }

  SECTION("zero, ones, index") {
    std::vector<double> a(n, 3.0);
    fill_elements(DType::f64, a.data(), n, InitKind::zero, 1, 0);
    CHECK(a == std::vector<double>(n, 0.0));
    fill_elements(DType::f64, a.data(), n, InitKind::ones, 1, 0);
    CHECK(a == std::vector<double>(n, 1.0));
    std::vector<std::int64_t> idx(n);
    fill_elements(DType::i64, idx.data(), n, InitKind::index, 1, 0);
    CHECK(idx[0] == 0);
    CHECK(idx[4095] == 4095);
    std::vector<std::uint16_t> h(4);
    fill_elements(DType::f16, h.data(), 4, InitKind::index, 1, 0);
    CHECK(half_to_float(h[3]) == 3.0f);
  }
}

TEST_CASE("compare_elements", "[bench][host_buffers]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  SECTION("floats within tolerance match") {
    const std::vector<double> expected{1.0, 100.0, -2.0, inf, nan};
    const std::vector<double> got{1.0 + 1e-6, 100.05, -2.0, inf, nan};
    CHECK_FALSE(compare_elements(DType::f64, got.data(), expected.data(), 5, 1e-3, 1e-5));
  }

  SECTION("the first difference and the count are reported") {
    const std::vector<float> expected{1.0f, 2.0f, 3.0f, 4.0f};
    const std::vector<float> got{1.0f, 2.5f, 3.0f, 5.0f};
    const auto m = compare_elements(DType::f32, got.data(), expected.data(), 4, 1e-3, 1e-5);
    REQUIRE(m);
    CHECK(m->index == 1);
    CHECK(m->got == 2.5);
    CHECK(m->expected == 2.0);
    CHECK(m->differing == 2);
  }

  SECTION("a NaN on one side only differs") {
    const std::vector<double> expected{1.0, nan};
    const std::vector<double> got{nan, 1.0};
    const auto m = compare_elements(DType::f64, got.data(), expected.data(), 2, 1, 1);
    REQUIRE(m);
    CHECK(m->index == 0);
    CHECK(m->differing == 2);
  }

  SECTION("integers must be equal") {
    const std::vector<std::int32_t> expected{1000, 7};
    const std::vector<std::int32_t> got{1001, 7};
    const auto m = compare_elements(DType::i32, got.data(), expected.data(), 2, 0.5, 10);
    REQUIRE(m);
    CHECK(m->index == 0);
  }

  SECTION("f16 compares the decoded values") {
    const std::vector<std::uint16_t> expected{float_to_half(1.0f), float_to_half(2.0f)};
    const std::vector<std::uint16_t> got{float_to_half(1.0f), float_to_half(2.5f)};
    const auto m = compare_elements(DType::f16, got.data(), expected.data(), 2, 1e-3, 1e-5);
    REQUIRE(m);
    CHECK(m->index == 1);
    CHECK(m->got == 2.5);
  }
}

TEST_CASE("fill_sentinel", "[bench][host_buffers]") {
  constexpr std::size_t n = 5;

  SECTION("floats read as NaN in every width") {
    std::vector<float> f32(n, 1.0f);
    fill_sentinel(DType::f32, f32.data(), n);
    for (float v : f32) CHECK(std::isnan(v));
    std::vector<double> f64(n, 1.0);
    fill_sentinel(DType::f64, f64.data(), n);
    for (double v : f64) CHECK(std::isnan(v));
    std::vector<std::uint16_t> f16(n, float_to_half(1.0f));
    fill_sentinel(DType::f16, f16.data(), n);
    for (std::size_t i = 0; i < n; ++i) CHECK(std::isnan(element_as_double(DType::f16, f16.data(), i)));
  }

  SECTION("integers get a large value that no init produces") {
    std::vector<std::int32_t> i32(n, 0);
    fill_sentinel(DType::i32, i32.data(), n);
    CHECK(i32 == std::vector<std::int32_t>(n, 0x7fff7fff));
    std::vector<std::int64_t> i64(n, 0);
    fill_sentinel(DType::i64, i64.data(), n);
    CHECK(i64 == std::vector<std::int64_t>(n, 0x7fff7fff7fff7fffLL));
  }

  SECTION("only the given elements are written") {
    std::vector<float> a(n, 2.0f);
    fill_sentinel(DType::f32, a.data(), n - 1);
    CHECK(a.back() == 2.0f);
  }

  SECTION("an element left unwritten fails the check; one unwritten on both sides passes") {
    std::vector<float> expected(n, 0.0f), got(n, 0.0f);
    fill_sentinel(DType::f32, got.data(), n);
    for (std::size_t i = 0; i + 1 < n; ++i) got[i] = 0.0f; // the candidate skipped the last one
    auto mismatch = compare_elements(DType::f32, got.data(), expected.data(), n, 1e-3, 1e-5);
    REQUIRE(mismatch.has_value());
    CHECK(mismatch->index == n - 1);
    CHECK(mismatch->differing == 1);
    fill_sentinel(DType::f32, expected.data() + (n - 1), 1); // the reference skipped it too
    CHECK_FALSE(compare_elements(DType::f32, got.data(), expected.data(), n, 1e-3, 1e-5));

    std::vector<std::int32_t> ints(n, 0), ints_got(n);
    fill_sentinel(DType::i32, ints_got.data(), n);
    CHECK(compare_elements(DType::i32, ints_got.data(), ints.data(), n, 0, 0)->differing == n);
  }
}

TEST_CASE("parse_buffer_init and the distributions it names", "[bench][host_buffers]") {
  CHECK(parse_buffer_init("uniform")->kind == InitKind::uniform);
  CHECK_FALSE(parse_buffer_init("uniform")->bounded);
  const auto bounded = parse_buffer_init("uniform(2, 5.5)");
  REQUIRE(bounded.has_value());
  CHECK(bounded->bounded);
  CHECK(bounded->a == 2);
  CHECK(bounded->b == 5.5);
  const auto normal = parse_buffer_init(" normal( -1 , 0.5 ) ");
  REQUIRE(normal.has_value());
  CHECK(normal->kind == InitKind::normal);
  CHECK(normal->a == -1);
  CHECK(normal->b == 0.5);
  CHECK(parse_buffer_init("normal")->b == 1);
  for (const char* bad : {"uniform(5, 2)", "normal(0, -1)", "normal(0)", "gauss(0, 1)", "uniform(a, b)"}) {
    INFO(bad);
    CHECK_FALSE(parse_buffer_init(bad).has_value());
  }

  constexpr std::size_t n = 20000;
  SECTION("uniform(lo, hi) stays in [lo, hi); integers round down") {
    std::vector<double> x(n);
    fill_elements(DType::f64, x.data(), n, *parse_buffer_init("uniform(2, 5.5)"), 1, 0);
    CHECK(*std::min_element(x.begin(), x.end()) >= 2.0);
    CHECK(*std::max_element(x.begin(), x.end()) < 5.5);
    std::vector<std::int32_t> k(n);
    fill_elements(DType::i32, k.data(), n, *parse_buffer_init("uniform(0, 3)"), 1, 0);
    CHECK(*std::min_element(k.begin(), k.end()) == 0);
    CHECK(*std::max_element(k.begin(), k.end()) == 2);
  }
  SECTION("normal(mean, std) has about that mean and deviation, and follows its seed") {
    std::vector<double> x(n), same(n), other(n);
    fill_elements(DType::f64, x.data(), n, *normal, 7, 0);
    fill_elements(DType::f64, same.data(), n, *normal, 7, 0);
    fill_elements(DType::f64, other.data(), n, *normal, 8, 0);
    CHECK(x == same);
    CHECK(x != other);
    double sum = 0, squares = 0;
    for (double v : x) sum += v;
    const double mean = sum / n;
    for (double v : x) squares += (v - mean) * (v - mean);
    CHECK(mean == Approx(-1).margin(0.05));
    CHECK(std::sqrt(squares / n) == Approx(0.5).margin(0.05));
  }
}

TEST_CASE("HostBuffer places data at an alignment and offset", "[bench][host_buffers]") {
  for (const auto& [alignment, offset] :
       {std::pair<std::size_t, std::size_t>{16, 0}, {64, 16}, {4096, 0}, {256, 8}}) {
    auto buffer = HostBuffer::allocate(DType::f32, 100, "A", alignment, offset);
    REQUIRE(buffer.ok());
    INFO(alignment << " + " << offset);
    CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % alignment == offset);
    CHECK(buffer->guards_intact());
    auto* bytes = static_cast<unsigned char*>(buffer->data());
    bytes[-1] = 0;
    CHECK_FALSE(buffer->guards_intact());
    buffer->reset_guards();
    CHECK(buffer->guards_intact());
    bytes[400] = 0;
    CHECK_FALSE(buffer->guards_intact());
  }
  CHECK_FALSE(HostBuffer::allocate(DType::f32, 4, "B", 48, 0).ok());
  CHECK_FALSE(HostBuffer::allocate(DType::f32, 4, "B", 64, 64).ok());
}

TEST_CASE("file:PATH fills an input with a file's elements, exactly as many as the buffer holds",
          "[bench][host_buffers]") {
  const auto file = parse_buffer_init(" file: data/{shape}/A.npy ");
  REQUIRE(file.has_value());
  CHECK(file->kind == InitKind::file);
  CHECK(file->path == "data/{shape}/A.npy");
  CHECK_FALSE(parse_buffer_init("file:").has_value());
  CHECK_FALSE(parse_buffer_init("file:   ").has_value());

  ktune::test::TempDir dir;
  const std::vector<std::int32_t> values = {5, -3, 7, 11};
  const auto raw = dir.write("v.bin", std::string(reinterpret_cast<const char*>(values.data()),
                                                  values.size() * sizeof(std::int32_t)));
  ktune::BufferInit init{InitKind::file};
  init.path = raw.string();
  std::vector<std::int32_t> got(4, 0);
  REQUIRE(fill_input(DType::i32, got.data(), got.size(), init, 1, 0).ok());
  CHECK(got == values);

  std::vector<std::int32_t> longer(5, 0);
  const auto mismatch = fill_input(DType::i32, longer.data(), longer.size(), init, 1, 0);
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.error().message, Catch::Contains("v.bin: expected 5 elements of i32") &&
                                           Catch::Contains("found 16 bytes"));
  init.path = (dir.path() / "none.npy").string();
  const auto missing = fill_input(DType::i32, got.data(), got.size(), init, 1, 0);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("none.npy: cannot be read"));

  ktune::BufferInit generated{InitKind::index};
  REQUIRE(fill_input(DType::i32, got.data(), got.size(), generated, 1, 0).ok());
  CHECK(got == std::vector<std::int32_t>{0, 1, 2, 3});
}
