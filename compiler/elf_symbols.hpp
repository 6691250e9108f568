#pragma once
// The symbols a shared object defines in its dynamic symbol table (.dynsym), read from the ELF
// file's bytes: what dlsym can find, learnt without loading it (nothing of a kernel runs in the
// compile worker). 64-bit little-endian ELF only, as the host compiler writes on x86-64 and
// aarch64.
#include "core/result.hpp"

#include <set>
#include <string>
#include <string_view>

namespace ktune {

// The names of the defined global and weak symbols of .dynsym. Errors: "internal" saying what
// is malformed (no ELF magic, a section outside the file, no .dynsym).
[[nodiscard]] Result<std::set<std::string>> defined_dynamic_symbols(std::string_view elf);

} // namespace ktune
