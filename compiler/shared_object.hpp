#pragma once
// What a shared object exports and what it runs when loaded, read from its ELF file's bytes
// without loading it (nothing of a kernel runs in the compile worker). 64-bit little-endian ELF
// only, as the host compiler writes on x86-64 and aarch64.
#include "core/result.hpp"

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

namespace ktune {

struct SharedObject {
  std::set<std::string> exports;  // the defined global and weak symbols of .dynsym: what dlsym finds
  // Functions run when it is loaded (.init_array entries): the C runtime's frame_dummy, plus one
  // for a unit's static initializers and one per constructor function.
  std::size_t init_functions = 0;
};

// Errors: "internal" saying what is malformed (no ELF magic, a section outside the file, no
// .dynsym).
[[nodiscard]] Result<SharedObject> read_shared_object(std::string_view elf);

} // namespace ktune
