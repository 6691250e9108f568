#pragma once
// Element types and buffer initialisations by name: shared by the job builders (daemon side) and
// the runners and compilers (worker side).
#include "core/buffer_init.hpp"
#include "core/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ktune {

enum class DType { f32, f64, f16, i32, i64 };

// "f32" "f64" "f16" "i32" "i64"; nullopt for anything else.
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view text);
[[nodiscard]] std::string_view to_string(DType dtype);
[[nodiscard]] std::size_t dtype_bytes(DType dtype);
[[nodiscard]] bool is_integral(DType dtype);

// The kind of an init text (parse_buffer_init, core/buffer_init.hpp); nullopt when it is not one.
[[nodiscard]] std::optional<InitKind> parse_init_kind(std::string_view text);

// Maps a dtype name to its C type: f32 float, f64 double, i32 int32_t, i64 int64_t. Errors
// (code "bad_dtype"): f16 ("f16 is not supported by the host compiler") and unknown names.
// dtype_size knows f16 (2 bytes).
[[nodiscard]] Result<std::string> dtype_c_type(std::string_view dtype);
[[nodiscard]] Result<std::size_t> dtype_size(std::string_view dtype);

} // namespace ktune
