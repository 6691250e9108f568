#include "bench/host_buffers.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

namespace ktune {

namespace {

constexpr unsigned char k_guard_pattern = 0xA5;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

template <class T>
T load(const void* data, std::size_t index) {
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(data) + index * sizeof(T), sizeof(T));
  return value;
}

template <class T>
void save(void* data, std::size_t index, T value) {
  std::memcpy(static_cast<unsigned char*>(data) + index * sizeof(T), &value, sizeof(T));
}

template <class Int>
Int to_integer(double value) {
  if (std::isnan(value)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<Int>::min());
  const double hi = static_cast<double>(std::numeric_limits<Int>::max());
  if (value <= lo) return std::numeric_limits<Int>::min();
  if (value >= hi) return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}

bool floats_match(double got, double expected, double rtol, double atol) {
  if (got == expected) return true;
  const bool got_nan = std::isnan(got);
  const bool expected_nan = std::isnan(expected);
  if (got_nan || expected_nan) return got_nan && expected_nan;
  return std::fabs(got - expected) <= atol + rtol * std::fabs(expected);
}

} // namespace

std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t exponent = (bits >> 23) & 0xffu;
  std::uint32_t mantissa = bits & 0x7fffffu;

  if (exponent == 0xffu) {  // inf or NaN (keep NaN quiet and non-zero)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u | (mantissa >> 13) : 0u));
  }
  const int half_exponent = static_cast<int>(exponent) - 127 + 15;
  if (half_exponent >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (half_exponent <= 0) {                                                       // subnormal
    if (half_exponent < -10) return sign;                                         // underflow
    mantissa |= 0x800000u;
    const int shift = 14 - half_exponent;
    std::uint32_t half_mantissa = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u) != 0)) ++half_mantissa;
    return static_cast<std::uint16_t>(sign | half_mantissa);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const std::uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u) != 0)) ++half;  // may carry into inf
  return static_cast<std::uint16_t>(sign | half);
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t out = 0;
  if (exponent == 0x1fu) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    out = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
  } else {
    out = sign;
  }
  return std::bit_cast<float>(out);
}

double element_as_double(DType dtype, const void* data, std::size_t index) {
  switch (dtype) {
    case DType::f32: return load<float>(data, index);
    case DType::f64: return load<double>(data, index);
    case DType::f16: return half_to_float(load<std::uint16_t>(data, index));
    case DType::i32: return load<std::int32_t>(data, index);
    case DType::i64: return static_cast<double>(load<std::int64_t>(data, index));
  }
  return 0;
}

void store_element(DType dtype, void* data, std::size_t index, double value) {
  switch (dtype) {
    case DType::f32: save(data, index, static_cast<float>(value)); return;
    case DType::f64: save(data, index, value); return;
    case DType::f16: save(data, index, float_to_half(static_cast<float>(value))); return;
    case DType::i32: save(data, index, to_integer<std::int32_t>(value)); return;
    case DType::i64: save(data, index, to_integer<std::int64_t>(value)); return;
  }
}

Result<HostBuffer> HostBuffer::allocate(DType dtype, std::size_t count, std::string_view label,
                                        std::size_t alignment, std::size_t offset) {
  const std::size_t element = dtype_bytes(dtype);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096 || offset >= alignment) {
    return make_error(ErrorCode::bench_failed, "buffer " + std::string(label) + ": alignment " +
                                           std::to_string(alignment) + " and offset " +
                                           std::to_string(offset) +
                                           ": expected a power of two up to 4096 and an offset below it");
  }
  if (count == 0) {
    return make_error(ErrorCode::bench_failed,
                      "buffer " + std::string(label) + ": expected at least 1 element, found 0");
  }
  const std::size_t limit = std::numeric_limits<std::size_t>::max() / 2;
  if (count > limit / element) {
    return make_error(ErrorCode::bench_failed, "buffer " + std::string(label) + ": " +
                                           std::to_string(count) + " elements of " +
                                           std::string(to_string(dtype)) + " overflow the address space");
  }
  const std::size_t bytes = count * element;
  const std::size_t head = round_up(k_guard_bytes, alignment) + offset;
  auto region = GuardedRegion::map(head + bytes + k_guard_bytes, label);
  if (!region) return region.error();
  HostBuffer buffer;
  buffer.m_region = std::move(region).value();
  buffer.m_data = buffer.m_region.data() + head;
  buffer.m_dtype = dtype;
  buffer.m_count = count;
  buffer.describe("'" + std::string(label) + "'");
  buffer.reset_guards();
  return buffer;
}

void HostBuffer::describe(std::string_view description) {
  m_region.name_contents(description, m_data, bytes());
}

bool HostBuffer::guards_intact() const {
  if (m_data == nullptr) return true;
  const unsigned char* begin = m_region.data();
  const unsigned char* end = begin + m_region.size();
  const auto all_canary = [](const unsigned char* from, const unsigned char* to) {
    for (const unsigned char* p = from; p != to; ++p) {
      if (*p != k_guard_pattern) return false;
    }
    return true;
  };
  return all_canary(begin, m_data) && all_canary(m_data + bytes(), end);
}

void HostBuffer::reset_guards() {
  if (m_data == nullptr) return;
  unsigned char* begin = m_region.data();
  std::memset(begin, k_guard_pattern, static_cast<std::size_t>(m_data - begin));
  unsigned char* tail = m_data + bytes();
  std::memset(tail, k_guard_pattern, static_cast<std::size_t>(begin + m_region.size() - tail));
}

void fill_elements(DType dtype, void* data, std::size_t count, InitKind init, std::uint64_t seed,
                   std::uint64_t stream) {
  BufferInit defaults{init};
  if (init == InitKind::normal) defaults = BufferInit{InitKind::normal, 0, 1, false};
  fill_elements(dtype, data, count, defaults, seed, stream);
}

Result<void> fill_input(DType dtype, void* data, std::size_t count, const BufferInit& init,
                        std::uint64_t seed, std::uint64_t stream) {
  if (init.kind != InitKind::file) {
    fill_elements(dtype, data, count, init, seed, stream);
    return {};
  }
  auto values = read_array_file(init.path, dtype, count);
  if (!values) return values.error();
  std::memcpy(data, values->data(), values->size());
  return {};
}

void fill_elements(DType dtype, void* data, std::size_t count, const BufferInit& spec,
                   std::uint64_t seed, std::uint64_t stream) {
  const InitKind init = spec.kind;
  switch (init) {
    case InitKind::file:
      return;  // fill_input reads the file
    case InitKind::zero:
      std::memset(data, 0, count * dtype_bytes(dtype));
      return;
    case InitKind::ones:
      for (std::size_t i = 0; i < count; ++i) store_element(dtype, data, i, 1.0);
      return;
    case InitKind::index:
      for (std::size_t i = 0; i < count; ++i) store_element(dtype, data, i, static_cast<double>(i));
      return;
    case InitKind::normal: {
      SplitMix64 rng(seed ^ ((stream + 1) * 0xd1b54a32d192ed03ULL));
      constexpr double k_two_pi = 6.283185307179586;
      for (std::size_t i = 0; i < count; i += 2) {
        const double u1 = static_cast<double>((rng.next() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double pair[2] = {r * std::cos(k_two_pi * u2), r * std::sin(k_two_pi * u2)};
        for (std::size_t k = 0; k < 2 && i + k < count; ++k) {
          const double value = spec.a + spec.b * pair[k];
          store_element(dtype, data, i + k, is_integral(dtype) ? std::round(value) : value);
        }
      }
      return;
    }
    case InitKind::uniform: {
      SplitMix64 rng(seed ^ ((stream + 1) * 0xd1b54a32d192ed03ULL));
      if (spec.bounded) {
        for (std::size_t i = 0; i < count; ++i) {
          const double unit = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;  // [0, 1)
          const double value = spec.a + (spec.b - spec.a) * unit;
          store_element(dtype, data, i, is_integral(dtype) ? std::floor(value) : value);
        }
      } else if (is_integral(dtype)) {
        for (std::size_t i = 0; i < count; ++i) {
          store_element(dtype, data, i, static_cast<double>(static_cast<int>(rng.next() >> 60) - 8));
        }
      } else {
        for (std::size_t i = 0; i < count; ++i) store_element(dtype, data, i, rng.next_signed_unit());
      }
      return;
    }
  }
}

void fill_sentinel(DType dtype, void* data, std::size_t count) {
  const std::size_t halfwords = count * dtype_bytes(dtype) / sizeof(std::uint16_t);
  for (std::size_t i = 0; i < halfwords; ++i) save(data, i, k_sentinel_halfword);
}

std::string format_value(double value, int precision) {
  std::ostringstream out;
  out.precision(precision);
  out << value;
  return out.str();
}

void OutputCheck::compare(const std::string& name, DType dtype, const void* got, const void* expected,
                          std::size_t count, double rtol, double atol) {
  m_checked += count;
  const auto mismatch = compare_elements(dtype, got, expected, count, rtol, atol);
  if (!mismatch) return;
  m_differing += mismatch->differing;
  if (!m_first.empty()) return;
  m_first = name + "[" + std::to_string(mismatch->index) + "]: got " + format_value(mismatch->got, 9) +
            ", expected " + format_value(mismatch->expected, 9) +
            (is_integral(dtype) ? std::string(" (exact)")
                                : " (rtol " + format_value(rtol, 6) + ", atol " + format_value(atol, 6) + ")");
}

std::optional<std::string> OutputCheck::failure() const {
  if (m_differing == 0) return std::nullopt;
  return m_first + "; " + std::to_string(m_differing) + " of " + std::to_string(m_checked) + " elements differ";
}

std::optional<ElementMismatch> compare_elements(DType dtype, const void* got, const void* expected,
                                                std::size_t count, double rtol, double atol) {
  std::optional<ElementMismatch> mismatch;
  const auto note = [&](std::size_t i, double g, double e) {
    if (!mismatch) mismatch = ElementMismatch{i, g, e, 0};
    ++mismatch->differing;
  };
  switch (dtype) {
    case DType::i32:
      for (std::size_t i = 0; i < count; ++i) {
        const auto g = load<std::int32_t>(got, i);
        const auto e = load<std::int32_t>(expected, i);
        if (g != e) note(i, g, e);
      }
      break;
    case DType::i64:
      for (std::size_t i = 0; i < count; ++i) {
        const auto g = load<std::int64_t>(got, i);
        const auto e = load<std::int64_t>(expected, i);
        if (g != e) note(i, static_cast<double>(g), static_cast<double>(e));
      }
      break;
    case DType::f32:
      for (std::size_t i = 0; i < count; ++i) {
        const double g = load<float>(got, i);
        const double e = load<float>(expected, i);
        if (!floats_match(g, e, rtol, atol)) note(i, g, e);
      }
      break;
    case DType::f64:
      for (std::size_t i = 0; i < count; ++i) {
        const double g = load<double>(got, i);
        const double e = load<double>(expected, i);
        if (!floats_match(g, e, rtol, atol)) note(i, g, e);
      }
      break;
    case DType::f16:
      for (std::size_t i = 0; i < count; ++i) {
        const double g = half_to_float(load<std::uint16_t>(got, i));
        const double e = half_to_float(load<std::uint16_t>(expected, i));
        if (!floats_match(g, e, rtol, atol)) note(i, g, e);
      }
      break;
  }
  return mismatch;
}

std::string buffers_key(const BenchJob& job) {
  std::string key = job.shape + "|seed=" + std::to_string(job.settings.seed) + "|align=" +
                    std::to_string(job.buffer_alignment) + "+" + std::to_string(job.buffer_offset);
  for (const auto& arg : job.args) {
    key += "|" + arg.name + ":" + arg.kind + ":" + arg.dtype + ":" + std::to_string(arg.count) +
           ":" + arg.init + ":" + std::to_string(std::bit_cast<std::uint64_t>(arg.value)) + ":" +
           std::to_string(arg.seed);
    if (const auto init = parse_buffer_init(arg.init); init && init->kind == InitKind::file) {
      key += ":" + reference_identity(init->path);
    }
  }
  return key;
}

Result<std::vector<unsigned char>> read_array_file(const std::string& path, DType dtype,
                                                  std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::bench_failed, path + ": cannot be read: " + std::strerror(errno));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t want = count * dtype_bytes(dtype);
  std::size_t data_at = 0;
  const bool npy = path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
  if (npy) {
    static constexpr unsigned char k_magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (bytes.size() < 10 || !std::equal(std::begin(k_magic), std::end(k_magic), bytes.begin())) {
      return make_error(ErrorCode::bench_failed, path + ": not a .npy file (no \\x93NUMPY magic)");
    }
    const unsigned major = bytes[6];
    std::size_t header_len = 0, header_at = 0;
    if (major == 1) {
      header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8);
      header_at = 10;
    } else if (bytes.size() >= 12) {
      header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8) |
                   (static_cast<std::size_t>(bytes[10]) << 16) | (static_cast<std::size_t>(bytes[11]) << 24);
      header_at = 12;
    }
    if (header_at == 0 || header_at + header_len > bytes.size()) {
      return make_error(ErrorCode::bench_failed, path + ": truncated .npy header");
    }
    const std::string header(bytes.begin() + static_cast<std::ptrdiff_t>(header_at),
                             bytes.begin() + static_cast<std::ptrdiff_t>(header_at + header_len));
    static const std::pair<DType, const char*> k_descr[] = {
        {DType::f32, "<f4"}, {DType::f64, "<f8"}, {DType::f16, "<f2"}, {DType::i32, "<i4"}, {DType::i64, "<i8"}};
    std::string descr;
    for (const auto& [d, text] : k_descr) {
      if (d == dtype) descr = text;
    }
    if (header.find("'" + descr + "'") == std::string::npos) {
      return make_error(ErrorCode::bench_failed, path + ": expected descr '" + descr + "' (" +
                                             std::string(to_string(dtype)) + "), found header " + header);
    }
    if (header.find("'fortran_order': True") != std::string::npos) {
      return make_error(ErrorCode::bench_failed, path + ": expected C order, found fortran_order True");
    }
    data_at = header_at + header_len;
  }
  if (bytes.size() - data_at != want) {
    return make_error(ErrorCode::bench_failed, path + ": expected " + std::to_string(count) + " elements of " +
                                           std::string(to_string(dtype)) + " (" + std::to_string(want) +
                                           " bytes), found " + std::to_string(bytes.size() - data_at) +
                                           " bytes of data");
  }
  return std::vector<unsigned char>(bytes.begin() + static_cast<std::ptrdiff_t>(data_at), bytes.end());
}

std::string reference_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  return path + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

} // namespace ktune
