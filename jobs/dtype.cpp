#include "jobs/dtype.hpp"

#include "core/protocol.hpp"

namespace ktune {

std::optional<DType> parse_dtype(std::string_view text) {
  if (text == "f32") return DType::f32;
  if (text == "f64") return DType::f64;
  if (text == "f16") return DType::f16;
  if (text == "i32") return DType::i32;
  if (text == "i64") return DType::i64;
  return std::nullopt;
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "f32";
}

std::size_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 4;
}

bool is_integral(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

std::optional<InitKind> parse_init_kind(std::string_view text) {
  const auto init = parse_buffer_init(text);
  if (!init) return std::nullopt;
  return init->kind;
}

Result<std::string> dtype_c_type(std::string_view dtype) {
  if (dtype == "f32") return std::string("float");
  if (dtype == "f64") return std::string("double");
  if (dtype == "i32") return std::string("int32_t");
  if (dtype == "i64") return std::string("int64_t");
  if (dtype == "f16") {
    return make_error(ErrorCode::bad_dtype, "f16 is not supported by the host compiler");
  }
  return make_error(ErrorCode::bad_dtype, "unknown dtype '" + std::string(dtype) +
                                                   "' (expected f32, f64, i32, i64 or f16)");
}

Result<std::size_t> dtype_size(std::string_view dtype) {
  if (dtype == "f32" || dtype == "i32") return std::size_t{4};
  if (dtype == "f64" || dtype == "i64") return std::size_t{8};
  if (dtype == "f16") return std::size_t{2};
  return make_error(ErrorCode::bad_dtype, "unknown dtype '" + std::string(dtype) +
                                                   "' (expected f32, f64, i32, i64 or f16)");
}

} // namespace ktune
