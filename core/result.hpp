#pragma once
// Result<T>: a value or an Error, for every call that can fail in an expected way (bad input,
// a missing file, a failed candidate). Exceptions are reserved for programming errors.
#include "core/error_code.hpp"

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ktune {

// `code` says what kind of failure (core/error_code.hpp; its string is the protocol's word);
// `message` says what was expected, what was found and where.
struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
};

[[nodiscard]] inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

// "code: message": an error in a log line or inside another error's message.
[[nodiscard]] std::string describe(const Error& error);

// An error read from a message (a reply of ktuned or of a worker): the code its word names, or
// `internal` with the unknown word kept in the message.
[[nodiscard]] Error error_from_wire(std::string_view code, std::string message);

template <class T>
class [[nodiscard]] Result {
public:
  Result(T value) : m_v(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : m_v(std::in_place_index<1>, std::move(error)) {}

  [[nodiscard]] bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }

  [[nodiscard]] T& value() & { assert(ok()); return std::get<0>(m_v); }
  [[nodiscard]] const T& value() const& { assert(ok()); return std::get<0>(m_v); }
  [[nodiscard]] T&& value() && { assert(ok()); return std::get<0>(std::move(m_v)); }
  [[nodiscard]] const Error& error() const { assert(!ok()); return std::get<1>(m_v); }
  // The value, or `fallback` for an error (where a failure means "nothing there").
  [[nodiscard]] T value_or(T fallback) const& { return ok() ? std::get<0>(m_v) : std::move(fallback); }
  [[nodiscard]] T value_or(T fallback) && { return ok() ? std::get<0>(std::move(m_v)) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

private:
  std::variant<T, Error> m_v;
};

template <>
class [[nodiscard]] Result<void> {
public:
  Result() = default;
  Result(Error error) : m_error(std::move(error)), m_ok(false) {}

  [[nodiscard]] bool ok() const { return m_ok; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] const Error& error() const { assert(!ok()); return m_error; }

private:
  Error m_error;
  bool m_ok = true;
};

} // namespace ktune
