#pragma once
// HostCompiler: the system C++ compiler (c++, or $KTUNE_CXX) building a shared object:
//   <cxx> -std=c++17 -O3 -march=native -shared -fPIC -DNAME=value... -o <tmp> <source>
// into <cache_dir>/<key[0:2]>/<key>.so. The compiler's identity (`<cxx> --version` first line)
// is part of the key.
#include "compiler/compiler.hpp"

namespace ktune {

class HostCompiler final : public Compiler {
public:
  explicit HostCompiler(std::string cxx = {}); // empty: $KTUNE_CXX, else "c++"
  [[nodiscard]] std::string cache_key(const CompileJob& job) const override;
  [[nodiscard]] CompileOutcome compile(const CompileJob& job) override;
  [[nodiscard]] const std::string& version() const { return m_version; }

private:
  std::string m_cxx;
  std::string m_version;
};

// The host compiler's `--version` first line ("c++ (Debian 12.2.0-14) 12.2.0"); empty if it
// cannot be run.
[[nodiscard]] std::string host_compiler_version(const std::string& cxx);

} // namespace ktune
