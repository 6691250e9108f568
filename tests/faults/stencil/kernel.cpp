// stencil: OUT[y][x] = (IN[y][x] + IN[y][x-1] + IN[y][x+1] + IN[y-1][x] + IN[y+1][x]) / 5 over
// TX x TY tiles, edges clamped; TX=256 also writes the last tile's first row one buffer-length
// past OUT (see kernel.toml).
//
// ABI: extern "C" void stencil(void** args), args = {IN, OUT, &NX, &NY} (int64_t sizes).
#include <algorithm>
#include <cstdint>

#if !defined(TX) || !defined(TY)
#error "the tunables TX and TY must be defined"
#endif

namespace {
using T = KTUNE_DTYPE;
} // namespace

extern "C" void stencil(void** args) {
  const T* in = static_cast<const T*>(args[0]);
  T* out = static_cast<T*>(args[1]);
  const std::int64_t nx = *static_cast<const std::int64_t*>(args[2]);
  const std::int64_t ny = *static_cast<const std::int64_t*>(args[3]);
  const auto at = [&](std::int64_t y, std::int64_t x) {
    return in[std::clamp<std::int64_t>(y, 0, ny - 1) * nx + std::clamp<std::int64_t>(x, 0, nx - 1)];
  };
  for (std::int64_t ty = 0; ty < ny; ty += TY) {
    for (std::int64_t tx = 0; tx < nx; tx += TX) {
      const std::int64_t y_end = std::min<std::int64_t>(ty + TY, ny);
      const std::int64_t x_end = std::min<std::int64_t>(tx + TX, nx);
      for (std::int64_t y = ty; y < y_end; ++y) {
        for (std::int64_t x = tx; x < x_end; ++x) {
          const T value = (at(y, x) + at(y, x - 1) + at(y, x + 1) + at(y - 1, x) + at(y + 1, x)) / T(5);
          out[y * nx + x] = value;
#if TX == 256
          // The slip: the last tile's first row goes to the "next buffer" as well.
          if (ty + TY >= ny && y == ty) out[nx * ny + y * nx + x] = value;
#endif
        }
      }
    }
  }
}
