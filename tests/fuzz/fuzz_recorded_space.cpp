// Fuzzes parse_recorded_space (replay/recorded_space.hpp) on Kernel Tuner cache, T4 and
// results-list text. Properties: nothing throws or crashes; errors use code "bad_record" or
// "unsupported_objective"; an accepted space is consistent: one time per config, measured +
// failed = configs, the optimum is a measured config with the smallest time, and every
// config's text names every param.
#include "replay/recorded_space.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto space = ktune::replay::parse_recorded_space(text, "fuzz.json");
  if (!space) {
    FUZZ_CHECK(space.error().code == ktune::ErrorCode::bad_record || space.error().code == ktune::ErrorCode::unsupported_objective,
               "errors use code bad_record or unsupported_objective");
    FUZZ_CHECK(space.error().message.rfind("fuzz.json", 0) == 0, "errors start with the label");
    return 0;
  }
  const std::size_t configs = space->space.size();
  FUZZ_CHECK(configs > 0, "an accepted space has configs");
  FUZZ_CHECK(space->time_ms.size() == configs, "one time per config");
  FUZZ_CHECK(space->measured + space->failed == configs, "measured + failed = configs");
  FUZZ_CHECK(space->measured > 0, "an accepted space has a measured config");
  FUZZ_CHECK(space->value_text.size() == space->space.param_count(), "value texts for every param");
  for (std::size_t p = 0; p < space->space.param_count(); ++p) {
    FUZZ_CHECK(space->value_text[p].size() == space->space.params()[p].values.size(), "a text for every value");
  }
  FUZZ_CHECK(space->optimum_config < configs, "the optimum is a config");
  FUZZ_CHECK(space->time_ms[space->optimum_config] == space->optimum_ms, "the optimum's time is optimum_ms");
  std::size_t measured = 0;
  for (std::size_t c = 0; c < configs; ++c) {
    if (!space->time_ms[c]) continue;
    ++measured;
    FUZZ_CHECK(std::isfinite(*space->time_ms[c]), "recorded times are finite");
    FUZZ_CHECK(*space->time_ms[c] >= space->optimum_ms, "no time is below the optimum");
  }
  FUZZ_CHECK(measured == space->measured, "measured counts the configs with a time");
  for (std::size_t c = 0; c < configs && c < 64; ++c) {
    const std::string config = space->config_text(c);
    for (const auto& param : space->space.params()) {
      FUZZ_CHECK(config.find(param.name) != std::string::npos, "config_text names every param");
    }
  }
  return 0;
}
