#pragma once
// Compile backends behind one interface (the job and its outcome: jobs/compile_job.hpp);
// compiling never throws for a bad candidate: a compile error is an outcome.
#include "jobs/compile_job.hpp"
#include "jobs/dtype.hpp"

#include <string>

namespace ktune {

class Compiler {
public:
  virtual ~Compiler() = default;
  // Cache key of the artifact `job` produces: source hash, defines, dtype, flags, compiler
  // identity + version, arch and the cache format version.
  [[nodiscard]] virtual std::string cache_key(const CompileJob& job) const = 0;
  // Returns the cached artifact when present, else compiles into the cache (temp file + rename).
  [[nodiscard]] virtual CompileOutcome compile(const CompileJob& job) = 0;
};

} // namespace ktune
