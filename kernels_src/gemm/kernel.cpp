// gemm: C = A * B, row-major, A is M x K, B is K x N, C is M x N; element type KTUNE_DTYPE.
//
// Tunables (-D from the config):
//   BM, BN, BK  cache blocking: a BK x BN panel of B is packed once per (column block, k block)
//               and reused by every BM-row block of A;
//   UNROLL      rows of the register tile (micro-kernel);
//   VEC         SIMD vectors per row of the register tile (its width is VEC * lanes columns).
// The register tile is UNROLL x VEC vectors of accumulators; configs whose tile does not fit the
// register file spill and run slower, which is what tuning is for. Any M, N, K is handled: edge
// tiles are computed on clamped rows and zero-padded columns and only the valid part is stored.
//
// ABI: extern "C" void gemm(void** args), args = {A, B, C, &M, &N, &K} (scalars are int64_t).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifndef KTUNE_DTYPE
#error "KTUNE_DTYPE (the element type) must be defined"
#endif
#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(UNROLL) || !defined(VEC)
#error "the tunables BM, BN, BK, UNROLL and VEC must be defined"
#endif
#if BM <= 0 || BN <= 0 || BK <= 0 || UNROLL <= 0 || VEC <= 0
#error "BM, BN, BK, UNROLL and VEC must be positive"
#endif

#if defined(__AVX512F__)
#define GEMM_VEC_BYTES 64
#elif defined(__AVX__)
#define GEMM_VEC_BYTES 32
#else
#define GEMM_VEC_BYTES 16
#endif

namespace {

using T = KTUNE_DTYPE;
typedef T Vec __attribute__((vector_size(GEMM_VEC_BYTES)));

constexpr int k_lanes = GEMM_VEC_BYTES / static_cast<int>(sizeof(T));
constexpr int k_mr = UNROLL;             // register tile rows
constexpr int k_nr = VEC * k_lanes;      // register tile columns
constexpr std::int64_t k_panel_cols = (BN + k_nr - 1) / k_nr * k_nr;

inline Vec load(const T* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(T* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// Packs B[k0 : k0+kb, j0 : j0+nb] into column panels of k_nr: panel p holds kb rows of k_nr
// contiguous elements; columns past nb are zero.
void pack_b(const T* b, std::int64_t ldb, std::int64_t kb, std::int64_t nb, T* packed) {
  for (std::int64_t j = 0; j < nb; j += k_nr) {
    const std::int64_t cols = nb - j < k_nr ? nb - j : k_nr;
    T* dst = packed + j * kb;
    for (std::int64_t k = 0; k < kb; ++k) {
      const T* src = b + k * ldb + j;
      std::int64_t c = 0;
      for (; c < cols; ++c) dst[k * k_nr + c] = src[c];
      for (; c < k_nr; ++c) dst[k * k_nr + c] = T(0);
    }
  }
}

// C[0:rows, 0:cols] += A[0:rows, 0:kb] * panel, with rows <= k_mr and cols <= k_nr.
void micro_kernel(std::int64_t kb, const T* a, std::int64_t lda, const T* panel, T* c,
                  std::int64_t ldc, int rows, int cols) {
  const T* arow[k_mr];
  for (int r = 0; r < k_mr; ++r) arow[r] = a + (r < rows ? r : rows - 1) * lda;

  Vec acc[k_mr][VEC] = {};
  for (std::int64_t k = 0; k < kb; ++k) {
    Vec bv[VEC];
    for (int v = 0; v < VEC; ++v) bv[v] = load(panel + k * k_nr + v * k_lanes);
    for (int r = 0; r < k_mr; ++r) {
      const T av = arow[r][k];
      for (int v = 0; v < VEC; ++v) acc[r][v] += av * bv[v];
    }
  }

  if (rows == k_mr && cols == k_nr) {
    for (int r = 0; r < k_mr; ++r)
      for (int v = 0; v < VEC; ++v) {
        T* p = c + r * ldc + v * k_lanes;
        store(p, load(p) + acc[r][v]);
      }
    return;
  }
  T tile[k_mr][k_nr];
  std::memcpy(tile, acc, sizeof tile);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) c[r * ldc + j] += tile[r][j];
}

} // namespace

extern "C" void gemm(void** args) {
  const T* a = static_cast<const T*>(args[0]);
  const T* b = static_cast<const T*>(args[1]);
  T* c = static_cast<T*>(args[2]);
  const std::int64_t m = *static_cast<const std::int64_t*>(args[3]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[4]);
  const std::int64_t k = *static_cast<const std::int64_t*>(args[5]);
  if (m <= 0 || n <= 0) return;
  std::memset(c, 0, static_cast<std::size_t>(m * n) * sizeof(T));
  if (k <= 0) return;

  constexpr std::size_t panel_bytes = BK * k_panel_cols * sizeof(T);
  constexpr std::size_t alloc_bytes = (panel_bytes + 63) / 64 * 64;
  T* packed = static_cast<T*>(std::aligned_alloc(64, alloc_bytes));
  if (packed == nullptr) std::abort();

  for (std::int64_t jc = 0; jc < n; jc += BN) {
    const std::int64_t nb = n - jc < BN ? n - jc : BN;
    for (std::int64_t pc = 0; pc < k; pc += BK) {
      const std::int64_t kb = k - pc < BK ? k - pc : BK;
      pack_b(b + pc * n + jc, n, kb, nb, packed);
      for (std::int64_t ic = 0; ic < m; ic += BM) {
        const std::int64_t mb = m - ic < BM ? m - ic : BM;
        for (std::int64_t jr = 0; jr < nb; jr += k_nr) {
          const int cols = static_cast<int>(nb - jr < k_nr ? nb - jr : k_nr);
          const T* panel = packed + jr * kb;
          for (std::int64_t ir = 0; ir < mb; ir += k_mr) {
            const int rows = static_cast<int>(mb - ir < k_mr ? mb - ir : k_mr);
            micro_kernel(kb, a + (ic + ir) * k + pc, k, panel, c + (ic + ir) * n + jc + jr, n,
                         rows, cols);
          }
        }
      }
    }
  }
  std::free(packed);
}
