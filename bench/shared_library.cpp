#include "bench/shared_library.hpp"

#include <dlfcn.h>

#include <utility>

namespace ktune {

namespace {

std::string last_dl_error(const char* fallback) {
  const char* text = ::dlerror();
  return text != nullptr ? std::string(text) : std::string(fallback);
}

} // namespace

Result<SharedLibrary> SharedLibrary::open(const std::string& path) {
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return make_error(ErrorCode::bench_failed,
                      "cannot load " + path + ": " + last_dl_error("dlopen failed without a message"));
  }
  return SharedLibrary(handle, path);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : m_handle(std::exchange(other.m_handle, nullptr)), m_path(std::move(other.m_path)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (m_handle != nullptr) ::dlclose(m_handle);
    m_handle = std::exchange(other.m_handle, nullptr);
    m_path = std::move(other.m_path);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (m_handle != nullptr) ::dlclose(m_handle);
}

Result<void*> SharedLibrary::symbol(const std::string& name) const {
  ::dlerror();
  void* address = ::dlsym(m_handle, name.c_str());
  if (address == nullptr) {
    return make_error(ErrorCode::bench_failed, "symbol '" + name + "' not found in " + m_path + ": " +
                                           last_dl_error("it resolves to a null address"));
  }
  return address;
}

} // namespace ktune
