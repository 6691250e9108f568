// Fuzzes TableView (core/winner_table.hpp), the reader of the winner table every client maps:
// arbitrary bytes opened as a table, every entry verified, then lookups over every rung.
// Each input is read twice: as given, and with its header check recomputed, so that mutations
// past the header check reach the section, index and entry readers.
// Properties: nothing crashes or reads outside the input (the sanitizers); open() refuses with
// code bad_table or unknown_layout; every string of an answer lies inside the input.
#include "core/winner_table.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

bool inside(std::string_view text, const std::byte* data, std::size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return text.empty() || (p >= data && p + text.size() < data + size);  // and its NUL
}

// The offset of the header check (docs/protocol.md § Winner table): XXH64 of the bytes before it.
constexpr std::size_t k_header_check_offset = 192;

void read_table(const std::vector<std::byte>& bytes) {
  const std::byte* data = bytes.data();
  const std::size_t size = bytes.size();
  auto view = ktune::table::TableView::open(bytes);
  if (!view) {
    FUZZ_CHECK(view.error().code == ktune::ErrorCode::bad_table || view.error().code == ktune::ErrorCode::unknown_layout,
               "open errors use code bad_table or unknown_layout");
    return;
  }
  (void)view->verify_all();
  (void)view->superseded();
  static const ktune::table::Query k_queries[] = {
      {"gemm", "M=32,N=32,K=32", "f32", "cpu"},
      {"gemm", "K=64, N=8,M=1024", "f64", "cpu"},
      {"gemm", "M=40,N=32,K=32", "f32", "cuda:0"},
      {"reduce_sum", "N=4096", "f32", "0123456789abcdef0123456789abcdef"},
      {"k", "N=1", "f16", "cuda"},
  };
  ktune::table::Scratch scratch;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass takes the memoized paths
    for (const auto& query : k_queries) {
      ktune::table::Answer answer;
      if (view->answer(query, answer, scratch) != ktune::table::Outcome::answered) continue;
      FUZZ_CHECK(inside(answer.config, data, size), "the config lies inside the table");
      FUZZ_CHECK(inside(answer.from_shape, data, size), "from_shape lies inside the table");
      for (std::uint32_t i = 0; i < answer.param_count; ++i) {
        const auto param = view->param(answer, i);
        FUZZ_CHECK(inside(param.name, data, size), "a param's name lies inside the table");
      }
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* raw, std::size_t size) {
  // A copy of exact length (ASan sees a read past the end), 16-byte aligned like the
  // allocator's blocks (a mapping is page-aligned).
  std::vector<std::byte> bytes(size);
  if (size != 0) std::memcpy(bytes.data(), raw, size);
  read_table(bytes);
  if (size >= ktune::table::k_header_bytes) {
    const std::uint64_t check = ktune::table::hash64(bytes.data(), k_header_check_offset);
    std::memcpy(bytes.data() + k_header_check_offset, &check, sizeof check);
    read_table(bytes);
  }
  return 0;
}
