#include "compiler/batch_unit.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

namespace ktune {
namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

std::string_view skip_space(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  return text;
}

// The identifier at the start of `text` ("" when there is none).
std::string_view word(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && is_word(text[n])) ++n;
  return text.substr(0, n);
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

void add_once(std::vector<std::string>& list, std::string_view item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.emplace_back(item);
}

// Why a `#pragma` line (the text after "pragma") keeps the source out of batches; "" when it does not.
std::string pragma_problem(std::string_view rest) {
  rest = skip_space(rest);
  if (word(rest) == "once") return "it has #pragma once";
  if (word(rest) == "pack") return "it has #pragma pack, whose effect outlasts the source";
  if (word(rest) != "GCC") return {};
  const std::string_view what = word(skip_space(rest.substr(3)));
  for (const char* lasting : {"optimize", "target", "push_options", "pop_options", "visibility"}) {
    if (what == lasting) {
      return "it has #pragma GCC " + std::string(what) + ", whose effect outlasts the source";
    }
  }
  return {};
}

// Reads one preprocessor line (the text after '#') into `scan`.
void scan_directive(std::string_view line, SourceScan& scan) {
  line = skip_space(line);
  const std::string_view name = word(line);
  const std::string_view rest = skip_space(line.substr(name.size()));
  if (name == "define") {
    if (const std::string_view macro = word(rest); !macro.empty()) add_once(scan.defined_macros, macro);
  } else if (name == "include") {
    const std::size_t close = rest.find('>');
    if (!starts_with(rest, "<") || close == std::string_view::npos) {
      if (scan.not_batchable.empty()) {
        scan.not_batchable = "it includes " + std::string(rest) + ", not a <system> header";
      }
      return;
    }
    add_once(scan.system_includes, rest.substr(1, close - 1));
    scan.defined_before_include = scan.defined_macros;
  } else if (name == "pragma") {
    if (std::string problem = pragma_problem(rest); !problem.empty() && scan.not_batchable.empty()) {
      scan.not_batchable = std::move(problem);
    }
  }
}

} // namespace

SourceScan scan_source(std::string_view text) {
  SourceScan scan;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = skip_space(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    if (starts_with(line, "#")) scan_directive(line.substr(1), scan);
  }
  return scan;
}

namespace {

// Whether `word` occurs in `text` as an identifier of its own.
bool mentions(std::string_view text, std::string_view word) {
  for (auto at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !is_word(text[at - 1]);
    const bool ends = at + word.size() == text.size() || !is_word(text[at + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

bool is_define_of(const CompileJob& job, const std::string& name) {
  return std::any_of(job.defines.begin(), job.defines.end(),
                     [&](const auto& define) { return define.first == name; });
}

} // namespace

std::string unit_obstacle(const CompileJob& job, std::string_view text, const SourceScan& scan) {
  if (job.entry.empty()) return "the job names no entry to rename";
  if (!scan.not_batchable.empty()) return scan.not_batchable;
  if (!mentions(text, job.entry)) return "the source never names its entry " + job.entry;
  for (const auto& macro : scan.defined_before_include) {
    if (!is_define_of(job, macro)) return "it defines " + macro + " before an #include <...>";
  }
  for (const auto& [name, value] : job.defines) {
    if (name == "NDEBUG" || name.rfind('_', 0) == 0) {
      return "its config defines " + name + ", which system headers may read";
    }
  }
  for (const auto& header : scan.system_includes) {
    for (const auto& dir : job.include_dirs) {
      std::error_code ec;
      if (std::filesystem::exists(std::filesystem::path(dir) / header, ec)) {
        return "it includes <" + header + "> from its include directory " + dir;
      }
    }
  }
  return {};
}

std::string batch_unit_text(const std::string& source_path, const SourceScan& scan,
                            const std::string& shim, const std::vector<UnitConfig>& configs,
                            const std::string& preamble_end) {
  std::string unit = "// ktune batch unit: " + std::to_string(configs.size()) + " configs of " +
                     source_path + ", each in its own namespace\n";
  for (const auto& header : scan.system_includes) unit += "#include <" + header + ">\n";
  unit += preamble_end;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const UnitConfig& config = configs[i];
    std::vector<std::string> defined;
    for (const auto& [name, value] : config.defines) {
      unit += "#define " + name + " " + std::to_string(value) + "\n";
      defined.push_back(name);
    }
    for (const auto& [from, to] : config.renames) {
      unit += "#define " + from + " " + to + "\n";
      defined.push_back(from);
    }
    const std::string scope =
        config.scope.empty() ? "ktune_batch_" + std::to_string(i) : config.scope;
    unit += "namespace " + scope + " {\n#include \"" + source_path + "\"\n" + shim + "\n}\n";
    for (const auto& name : scan.defined_macros) add_once(defined, name);
    for (const auto& name : defined) unit += "#undef " + name + "\n";
  }
  return unit;
}

std::string first_error_line(const std::string& log) {
  std::istringstream lines(log);
  std::string line, first;
  while (std::getline(lines, line)) {
    if (line.find("error") != std::string::npos || line.find("Error") != std::string::npos) {
      return line;
    }
    if (first.empty() && line.find_first_not_of(" \t\r") != std::string::npos) first = line;
  }
  return first;
}

} // namespace ktune
