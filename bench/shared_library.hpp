#pragma once
// SharedLibrary: a move-only owner of a dlopen handle (RTLD_NOW | RTLD_LOCAL), closed with
// dlclose when the owner goes away. Symbols looked up through it are valid only while it lives.
//
// Thread safety: dlerror() is per thread in glibc, so open/symbol report the right message when
// called from any one thread.
#include "core/result.hpp"

#include <string>
#include <string_view>
#include <utility>

namespace ktune {

class SharedLibrary {
public:
  // Errors: "runtime_error" with "cannot load <path>: <dlerror text>".
  [[nodiscard]] static Result<SharedLibrary> open(const std::string& path);

  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  // The address of `name`. Errors: "runtime_error" with "symbol '<name>' not found in <path>:
  // <dlerror text>" (also when the symbol resolves to a null address).
  [[nodiscard]] Result<void*> symbol(const std::string& name) const;
  [[nodiscard]] const std::string& path() const { return m_path; }

private:
  SharedLibrary(void* handle, std::string path) : m_handle(handle), m_path(std::move(path)) {}
  void* m_handle = nullptr;
  std::string m_path;
};

} // namespace ktune
