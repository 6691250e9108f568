#pragma once
// Text for the `ktune` commands' tables: fields of a daemon reply read leniently (a missing or
// mistyped field reads as null, 0 or "-", never throws) and numbers, configs, durations and
// times formatted one way for every command.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace ktune::cli {

// `object[key]`, or null when `object` is not an object or has no such key.
[[nodiscard]] const nlohmann::ordered_json& field(const nlohmann::ordered_json& object, const char* key);
// A number as an integer (a float truncated), else `fallback`.
[[nodiscard]] std::int64_t as_int(const nlohmann::ordered_json& v, std::int64_t fallback = 0);
// A number as a double, else `fallback`.
[[nodiscard]] double as_double(const nlohmann::ordered_json& v, double fallback = 0);
// A field as table text: strings verbatim, null "-", booleans yes/no, lists joined by ',',
// objects as NAME=value pairs.
[[nodiscard]] std::string as_text(const nlohmann::ordered_json& v);

// Unix seconds (or milliseconds, when implausibly large) as ISO 8601 local time with its UTC
// offset (2026-11-25T09:13:58+01:00); strings verbatim; anything else "-".
[[nodiscard]] std::string format_time(const nlohmann::ordered_json& v);

// {"BM":64,"BN":32} -> "BM=64<sep>BN=32"; null or empty -> "-".
[[nodiscard]] std::string format_config(const nlohmann::ordered_json& config, std::string_view separator);
// Seconds as "12.3 s", "4m 05s" or "2h 03m 04s".
[[nodiscard]] std::string format_duration(double seconds);
// Milliseconds with 3 decimals from 1 ms up, 3 significant digits below.
[[nodiscard]] std::string format_ms(double ms);
// GFLOP/s with one decimal from 1 up, 3 significant digits below; 0 (unknown) -> "-".
[[nodiscard]] std::string format_gflops(double gflops);

} // namespace ktune::cli
