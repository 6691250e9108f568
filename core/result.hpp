#pragma once
// Result<T>: a value or an Error, for every call that can fail in an expected way (bad input,
// a missing file, a failed candidate). Exceptions are reserved for programming errors.
#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ktune {

// `code` is a stable machine-readable word (the protocol's error codes, docs/protocol.md);
// `message` says what was expected, what was found and where.
struct Error {
  std::string code;
  std::string message;
};

[[nodiscard]] inline Error make_error(std::string code, std::string message) {
  return Error{std::move(code), std::move(message)};
}

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
