#pragma once
// How an input buffer is filled, as a kernel spec writes it ([[args]].init):
//   "uniform"            floats in [-1, 1), integers in [-8, 7]
//   "uniform(lo, hi)"    values in [lo, hi) (integers: rounded down), lo < hi
//   "normal"             normal(0, 1)
//   "normal(mean, std)"  std >= 0 (integers: rounded to nearest)
//   "zero", "ones", "index" (element i holds i)
//   "file:PATH"          the elements of a file: a .npy (C order, the buffer's dtype) or raw
//                        little-endian elements; exactly as many as the buffer holds. PATH is as
//                        the spec wrote it (relative to its directory, "{shape}" for the canonical
//                        shape) until the kernel loader and the bench job builder resolve it
#include <optional>
#include <string>
#include <string_view>

namespace ktune {

enum class InitKind { uniform, zero, ones, index, normal, file };

struct BufferInit {
  InitKind kind = InitKind::uniform;
  double a = -1, b = 1;   // uniform: [a, b); normal: mean a, std b
  bool bounded = false;   // parameters were written (uniform on integers: [a, b) not [-8, 7])
  std::string path{};     // file: the file's path, as written after "file:"
};

// The prefix of a file init ("file:PATH").
inline constexpr std::string_view k_file_init_prefix = "file:";

// nullopt for anything else (an unknown name, bad numbers, lo >= hi, std < 0, "file:" with no
// path).
[[nodiscard]] std::optional<BufferInit> parse_buffer_init(std::string_view text);

} // namespace ktune
