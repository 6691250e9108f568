#pragma once
// Signature: a kernel's typed C/C++ declaration, e.g.
//   void gemm_blocked(const float* A, const float* B, float* C, int M, int N, int K)
// as written in a spec's [kernel].signature or found in the kernel's source. Parsing is pure
// text work: no preprocessor, no templates. Each parameter is a buffer (one '*') of a ktune
// dtype or a scalar of one; KTUNE_DTYPE stands for the job's dtype.
#include "core/result.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

struct SignatureParam {
  std::string c_type;       // the element or scalar type as written: "float", "size_t", "KTUNE_DTYPE"
  std::string name;         // empty when the declaration leaves it out
  std::string dtype;        // ktune dtype the value is held in; empty for KTUNE_DTYPE (the job's)
  bool pointer = false;     // a buffer
  bool const_data = false;  // const T*: the kernel only reads it
  [[nodiscard]] std::string written() const;  // "const float* A", "int M"
};

struct Signature {
  std::string name;
  std::vector<SignatureParam> params;
  int line = 0;             // where it was found (1-based), 0 when given as text
};

// The ktune dtype that holds a C scalar or element type, or "" for KTUNE_DTYPE; nullopt for a
// type ktune does not know. float f32; double f64; int, int32_t, unsigned, uint32_t i32; long,
// long long, int64_t, ptrdiff_t, size_t, uint64_t i64; __half, half f16.
[[nodiscard]] std::optional<std::string> dtype_of_c_type(std::string_view c_type);

// Parses "void name(T a, ...)" with optional leading specifiers (extern "C", static, inline,
// __global__, __launch_bounds__(...)). Errors (code spec_error) say what was expected and found,
// without a file name: the caller adds where the text came from.
[[nodiscard]] Result<Signature> parse_signature(std::string_view text);

// Finds the declaration (or definition) of function `name` in a C/C++/CUDA source: the first
// "void ... name(" outside comments, up to its closing parenthesis. Errors (spec_error): none
// found, or its parameter list does not close.
[[nodiscard]] Result<Signature> find_signature(std::string_view source, std::string_view name);

} // namespace ktune
