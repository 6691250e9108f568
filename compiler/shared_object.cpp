#include "compiler/shared_object.hpp"

#include "core/protocol.hpp"
#include "core/read_at.hpp"

#include <elf.h>

#include <cstring>
#include <optional>
#include <vector>

namespace ktune {
namespace {

Error elf_error(const std::string& what) {
  return make_error(ErrorCode::internal, "shared object: " + what);
}

// The bytes of section `s`; nullopt when they lie outside the file.
std::optional<std::string_view> contents(std::string_view elf, const Elf64_Shdr& s) {
  if (s.sh_offset > elf.size() || elf.size() - s.sh_offset < s.sh_size) return std::nullopt;
  return elf.substr(s.sh_offset, s.sh_size);
}

} // namespace

Result<SharedObject> read_shared_object(std::string_view elf) {
  const auto header = read_at<Elf64_Ehdr>(elf, 0);
  if (!header || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0) {
    return elf_error("expected an ELF file, found " + std::to_string(elf.size()) +
                     " bytes without the ELF magic");
  }
  if (header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_ident[EI_DATA] != ELFDATA2LSB ||
      header->e_shentsize != sizeof(Elf64_Shdr)) {
    return elf_error("expected a 64-bit little-endian ELF file");
  }
  std::vector<Elf64_Shdr> sections;
  for (std::uint64_t i = 0; i < header->e_shnum; ++i) {
    const auto section = read_at<Elf64_Shdr>(elf, header->e_shoff + i * sizeof(Elf64_Shdr));
    if (!section) return elf_error("section header " + std::to_string(i) + " lies outside the file");
    sections.push_back(*section);
  }
  SharedObject object;
  bool dynsym = false;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type == SHT_INIT_ARRAY) object.init_functions += s.sh_size / sizeof(Elf64_Addr);
    if (s.sh_type != SHT_DYNSYM) continue;
    dynsym = true;
    const auto symbols = contents(elf, s);
    const auto names = s.sh_link < sections.size() ? contents(elf, sections[s.sh_link]) : std::nullopt;
    if (!symbols || !names) return elf_error(".dynsym or its names lie outside the file");
    for (std::size_t at = 0; at + sizeof(Elf64_Sym) <= symbols->size(); at += sizeof(Elf64_Sym)) {
      const auto symbol = read_at<Elf64_Sym>(*symbols, at);
      const unsigned char binding = ELF64_ST_BIND(symbol->st_info);
      if (symbol->st_shndx == SHN_UNDEF || (binding != STB_GLOBAL && binding != STB_WEAK)) continue;
      if (symbol->st_name >= names->size()) continue;
      const std::string_view rest = names->substr(symbol->st_name);
      object.exports.emplace(rest.substr(0, rest.find('\0')));
    }
  }
  if (!dynsym) return elf_error("no dynamic symbol table (.dynsym)");
  return object;
}

} // namespace ktune
