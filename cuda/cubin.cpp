#include "cuda/cubin.hpp"

#include "core/protocol.hpp"
#include "core/read_at.hpp"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>

namespace ktune::cuda {
namespace {

// .nv.info record formats and the attributes read here. Every record starts with a format byte
// and an attribute byte; EIFMT_SVAL records then carry a u16 size and that many bytes, the other
// formats a 2-byte value.
constexpr std::uint8_t k_eifmt_sval = 0x04;
constexpr std::uint8_t k_eiattr_frame_size = 0x11;
constexpr std::uint8_t k_eiattr_regcount = 0x2f;

Error elf_error(const std::string& what) { return make_error(ErrorCode::internal, "CUBIN: " + what); }

std::string string_at(std::string_view strings, std::uint32_t offset) {
  if (offset >= strings.size()) return {};
  const std::string_view rest = strings.substr(offset);
  return std::string(rest.substr(0, rest.find('\0')));
}

nlohmann::json known_or_null(int value) {
  return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value);
}

int int_or_unknown(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return -1;
  return it->get<int>();
}

// The first unsigned number after `pos` in `line` that is followed by `unit`, e.g. the 24 of
// "Used 24 registers" for unit " registers".
std::optional<int> number_before(std::string_view line, std::string_view unit) {
  const auto at = line.find(unit);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  std::size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
  if (start == at) return std::nullopt;
  long value = 0;
  for (std::size_t i = start; i < at; ++i) {
    value = value * 10 + (line[i] - '0');
    if (value > 1'000'000'000) return std::nullopt;
  }
  return static_cast<int>(value);
}

// The text between the first pair of single quotes, or after `prefix` to the end of the line.
std::string quoted_or_rest(std::string_view line, std::string_view prefix) {
  const auto open = line.find('\'');
  if (open != std::string_view::npos) {
    const auto close = line.find('\'', open + 1);
    if (close != std::string_view::npos) return std::string(line.substr(open + 1, close - open - 1));
  }
  const auto at = line.find(prefix);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + prefix.size());
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.remove_suffix(1);
  return std::string(rest);
}

} // namespace

nlohmann::json KernelResources::to_json() const {
  return nlohmann::json{{"name", name},
                        {"registers", known_or_null(registers)},
                        {"stack_bytes", known_or_null(stack_bytes)},
                        {"spill_store_bytes", known_or_null(spill_store_bytes)},
                        {"spill_load_bytes", known_or_null(spill_load_bytes)},
                        {"shared_bytes", known_or_null(shared_bytes)}};
}

KernelResources KernelResources::from_json(const nlohmann::json& j) {
  KernelResources r;
  if (!j.is_object()) return r;
  if (const auto it = j.find("name"); it != j.end() && it->is_string()) r.name = it->get<std::string>();
  r.registers = int_or_unknown(j, "registers");
  r.stack_bytes = int_or_unknown(j, "stack_bytes");
  r.spill_store_bytes = int_or_unknown(j, "spill_store_bytes");
  r.spill_load_bytes = int_or_unknown(j, "spill_load_bytes");
  r.shared_bytes = int_or_unknown(j, "shared_bytes");
  return r;
}

namespace {

// A CUBIN's section headers and their contents, bounds-checked.
class ElfSections {
public:
  // Reads the ELF header and the section headers. Errors: not a 64-bit little-endian ELF file,
  // or a header outside the file.
  static Result<ElfSections> read(std::string_view file) {
    const auto header = read_at<Elf64_Ehdr>(file, 0);
    if (!header || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0) {
      return elf_error("expected an ELF file, found " + std::to_string(file.size()) +
                       " bytes without the ELF magic");
    }
    if (header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_ident[EI_DATA] != ELFDATA2LSB) {
      return elf_error("expected a 64-bit little-endian ELF file");
    }
    if (header->e_shentsize != sizeof(Elf64_Shdr)) {
      return elf_error("section header size " + std::to_string(header->e_shentsize) + ", expected " +
                       std::to_string(sizeof(Elf64_Shdr)));
    }
    ElfSections out;
    out.m_file = file;
    out.m_names_index = header->e_shstrndx;
    for (std::uint64_t i = 0; i < header->e_shnum; ++i) {
      const auto section = read_at<Elf64_Shdr>(file, header->e_shoff + i * sizeof(Elf64_Shdr));
      if (!section) return elf_error("section header " + std::to_string(i) + " lies outside the file");
      out.m_sections.push_back(*section);
    }
    return out;
  }

  // A section's bytes (empty for NOBITS); nullopt when it lies outside the file.
  [[nodiscard]] std::optional<std::string_view> contents(std::size_t index) const {
    if (index >= m_sections.size()) return std::nullopt;
    const Elf64_Shdr& s = m_sections[index];
    if (s.sh_type == SHT_NOBITS) return std::string_view();
    if (s.sh_offset > m_file.size() || m_file.size() - s.sh_offset < s.sh_size) return std::nullopt;
    return m_file.substr(s.sh_offset, s.sh_size);
  }

  [[nodiscard]] const std::vector<Elf64_Shdr>& headers() const { return m_sections; }
  [[nodiscard]] std::size_t names_index() const { return m_names_index; }

private:
  std::string_view m_file;
  std::vector<Elf64_Shdr> m_sections;
  std::size_t m_names_index = 0;
};

// The global function symbols (the kernels), and each one's symbol index.
Result<std::vector<KernelResources>> read_kernel_symbols(const ElfSections& elf, std::size_t symtab,
                                                         std::map<std::uint32_t, std::size_t>& kernel_of_symbol) {
  const auto symbols = elf.contents(symtab);
  const auto symbol_names = elf.contents(elf.headers()[symtab].sh_link);
  if (!symbols || !symbol_names) return elf_error("the symbol table lies outside the file");
  std::vector<KernelResources> kernels;
  const std::size_t symbol_count = symbols->size() / sizeof(Elf64_Sym);
  for (std::size_t i = 0; i < symbol_count; ++i) {
    const auto symbol = read_at<Elf64_Sym>(*symbols, i * sizeof(Elf64_Sym));
    if (!symbol) break;
    if (ELF64_ST_TYPE(symbol->st_info) != STT_FUNC || ELF64_ST_BIND(symbol->st_info) != STB_GLOBAL) continue;
    KernelResources kernel;
    kernel.name = string_at(*symbol_names, symbol->st_name);
    if (kernel.name.empty()) continue;
    kernel_of_symbol[static_cast<std::uint32_t>(i)] = kernels.size();
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

// The .nv.info records of register count and stack frame size, filed under their kernels.
Result<void> read_nv_info(std::string_view info, const std::map<std::uint32_t, std::size_t>& kernel_of_symbol,
                          std::vector<KernelResources>& kernels) {
  std::size_t offset = 0;
  while (offset + 4 <= info.size()) {
    const auto format = static_cast<std::uint8_t>(info[offset]);
    const auto attribute = static_cast<std::uint8_t>(info[offset + 1]);
    if (format != k_eifmt_sval) {
      offset += 4;
      continue;
    }
    const auto size = read_at<std::uint16_t>(info, offset + 2);
    if (!size || offset + 4 + *size > info.size()) {
      return elf_error(".nv.info record at offset " + std::to_string(offset) + " runs past the section");
    }
    if ((attribute == k_eiattr_regcount || attribute == k_eiattr_frame_size) && *size == 8) {
      const auto symbol = read_at<std::uint32_t>(info, offset + 4);
      const auto value = read_at<std::uint32_t>(info, offset + 8);
      const auto kernel = kernel_of_symbol.find(*symbol);
      if (kernel != kernel_of_symbol.end()) {
        KernelResources& k = kernels[kernel->second];
        (attribute == k_eiattr_regcount ? k.registers : k.stack_bytes) = static_cast<int>(*value);
      }
    }
    offset += 4 + *size;
  }
  return {};
}

} // namespace

Result<std::vector<KernelResources>> read_cubin_kernels(std::string_view cubin) {
  auto elf = ElfSections::read(cubin);
  if (!elf) return elf.error();
  const auto names = elf->contents(elf->names_index());
  if (!names) return elf_error("the section name table lies outside the file");
  std::map<std::string, std::size_t> by_name;
  std::optional<std::size_t> symtab;
  for (std::size_t i = 0; i < elf->headers().size(); ++i) {
    by_name[string_at(*names, elf->headers()[i].sh_name)] = i;
    if (elf->headers()[i].sh_type == SHT_SYMTAB && !symtab) symtab = i;
  }
  if (!symtab) return elf_error("no symbol table");
  std::map<std::uint32_t, std::size_t> kernel_of_symbol;
  auto kernels = read_kernel_symbols(*elf, *symtab, kernel_of_symbol);
  if (!kernels) return kernels.error();
  if (const auto info_index = by_name.find(".nv.info"); info_index != by_name.end()) {
    const auto info = elf->contents(info_index->second);
    if (!info) return elf_error("section .nv.info lies outside the file");
    if (auto read = read_nv_info(*info, kernel_of_symbol, *kernels); !read) return read.error();
  }
  return kernels;
}

std::vector<KernelResources> parse_ptxas_info(std::string_view log) {
  std::vector<std::string> entries; // in report order
  std::map<std::string, KernelResources> functions;
  std::string current;
  std::size_t start = 0;
  while (start < log.size()) {
    auto end = log.find('\n', start);
    if (end == std::string_view::npos) end = log.size();
    const std::string_view line = log.substr(start, end - start);
    start = end + 1;
    if (line.find("ptxas") == std::string_view::npos) continue;

    if (line.find("Compiling entry function") != std::string_view::npos) {
      current = quoted_or_rest(line, "Compiling entry function");
      if (!current.empty() && std::find(entries.begin(), entries.end(), current) == entries.end()) {
        entries.push_back(current);
      }
      functions[current].name = current;
      continue;
    }
    if (line.find("Function properties for") != std::string_view::npos) {
      current = quoted_or_rest(line, "Function properties for ");
      functions[current].name = current;
      continue;
    }
    if (current.empty()) continue;
    KernelResources& f = functions[current];
    if (const auto v = number_before(line, " bytes stack frame")) f.stack_bytes = *v;
    if (const auto v = number_before(line, " bytes spill stores")) f.spill_store_bytes = *v;
    if (const auto v = number_before(line, " bytes spill loads")) f.spill_load_bytes = *v;
    if (const auto v = number_before(line, " registers")) {
      // "Used N registers, ..., M bytes smem": no smem figure means none.
      f.registers = *v;
      f.shared_bytes = number_before(line, " bytes smem").value_or(0);
    }
  }
  std::vector<KernelResources> out;
  for (const auto& name : entries) out.push_back(functions[name]);
  return out;
}

std::vector<KernelResources> merge_resources(std::vector<KernelResources> from_cubin,
                                             const std::vector<KernelResources>& from_log) {
  for (auto& kernel : from_cubin) {
    const auto match = std::find_if(from_log.begin(), from_log.end(),
                                    [&](const KernelResources& r) { return r.name == kernel.name; });
    if (match == from_log.end()) continue;
    const auto fill = [](int& target, int source) {
      if (target < 0) target = source;
    };
    fill(kernel.registers, match->registers);
    fill(kernel.stack_bytes, match->stack_bytes);
    fill(kernel.spill_store_bytes, match->spill_store_bytes);
    fill(kernel.spill_load_bytes, match->spill_load_bytes);
    fill(kernel.shared_bytes, match->shared_bytes);
  }
  return from_cubin;
}

} // namespace ktune::cuda
