// Fuzzes decode_text (replay/file_reader.hpp), the in-memory form of read_text_file, on plain
// and gzip bytes, then parses what it gives with parse_recorded_space as `ktune replay` does.
// Properties: nothing crashes; errors use code "io_error"; bytes that are not gzip come back
// unchanged; the decompressed size respects the limit.
#include "replay/file_reader.hpp"
#include "replay/recorded_space.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t k_max_bytes = std::size_t{1} << 20;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto text = ktune::replay::decode_text(bytes, "fuzz.json.gz", k_max_bytes);
  if (!text) {
    FUZZ_CHECK(text.error().code == ktune::ErrorCode::io_error, "errors use code io_error");
    FUZZ_CHECK(text.error().message.rfind("fuzz.json.gz", 0) == 0, "errors start with the label");
    return 0;
  }
  FUZZ_CHECK(text->size() <= k_max_bytes, "the decompressed size respects the limit");
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip) FUZZ_CHECK(*text == bytes, "bytes that are not gzip come back unchanged");
  auto space = ktune::replay::parse_recorded_space(*text, "fuzz.json.gz");
  if (!space) {
    FUZZ_CHECK(space.error().code == ktune::ErrorCode::bad_record || space.error().code == ktune::ErrorCode::unsupported_objective,
               "parse errors use code bad_record or unsupported_objective");
  }
  return 0;
}
