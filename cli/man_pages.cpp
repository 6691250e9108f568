#include "cli/man_pages.hpp"

#include "cli/command_tree.hpp"
#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

namespace ktune::cli {

namespace {

// Text for roff: backslashes and hyphens escaped (an option's '-' must stay a minus sign), and a
// control character at the start of a line made literal.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\e";
    else if (c == '-') out += "\\-";
    else out += c;
  }
  if (!out.empty() && (out.front() == '.' || out.front() == '\'')) out.insert(0, "\\&");
  return out;
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// A footer as paragraphs: blank lines separate paragraphs, indented lines (examples) are kept
// as they are.
void write_text(const std::string& text, std::ostream& out) {
  std::istringstream lines(text);
  std::string line;
  bool literal = false, fresh = true;
  while (std::getline(lines, line)) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    const bool indented = !line.empty() && line.front() == ' ';
    if (line.empty()) {
      if (literal) out << ".fi\n.RE\n";
      literal = false;
      if (!fresh) out << ".PP\n";
      fresh = true;
      continue;
    }
    if (indented && !literal) out << ".RS 2\n.nf\n";
    if (!indented && literal) out << ".fi\n.RE\n";
    literal = indented;
    out << escaped(indented ? line.substr(std::min(line.find_first_not_of(' '), std::size_t{2}))
                            : line)
        << '\n';
    fresh = false;
  }
  if (literal) out << ".fi\n.RE\n";
}

std::string synopsis_args(const CommandNode& node) {
  std::string text;
  bool options = false;
  for (const auto& o : node.options) {
    if (!o.positional.empty()) {
      text += " " + std::string(o.required ? "" : "[") + "\\fI" + escaped(o.positional) + "\\fR" +
              (o.required ? "" : "]");
    } else {
      options = true;
    }
  }
  if (!node.subcommands.empty()) text += " \\fICOMMAND\\fR";
  return (options ? " [\\fIOPTIONS\\fR]" : "") + text;
}

void write_options(const CommandNode& node, std::ostream& out) {
  for (const auto& o : node.options) {
    out << ".TP\n";
    if (!o.positional.empty()) {
      out << "\\fI" << escaped(o.positional) << "\\fR";
    } else {
      std::string names;
      for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + ("\\fB" + escaped(n) + "\\fR");
      out << names;
    }
    if (!o.choices.empty()) {
      std::string choices;
      for (const auto& c : o.choices) choices += (choices.empty() ? "" : "|") + escaped(c);
      out << (o.positional.empty() ? " " : ": ") << choices;
    } else if (o.takes_value && o.positional.empty()) {
      out << " \\fI" << escaped(o.value_name.empty() ? "VALUE" : o.value_name) << "\\fR";
    }
    if (o.required) out << " (required)";
    out << '\n' << escaped(o.description) << '\n';
  }
}

std::string sentence(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

ManPage program_page(const std::string& program, const std::vector<CommandNode>& nodes,
                     const std::string& version) {
  const CommandNode& top = nodes.front();
  std::string description = top.description;  // "ktune: tune kernels ...."
  if (description.rfind(program + ": ", 0) == 0) description.erase(0, program.size() + 2);
  if (!description.empty() && description.back() == '.') description.pop_back();
  std::ostringstream out;
  out << ".TH " << upper(program) << " 1 \"\" \"" << program << " " << version
      << "\" \"User Commands\"\n"
      << ".SH NAME\n" << program << " \\- " << escaped(sentence(description)) << '\n'
      << ".SH SYNOPSIS\n.B " << program << "\n"
      << "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n"
      << ".SH DESCRIPTION\n" << escaped(top.description) << "\n.PP\n";
  write_text(top.footer, out);
  out << ".SH OPTIONS\n";
  write_options(top, out);
  out << ".SH COMMANDS\n";
  for (std::size_t i = 0; i < top.subcommands.size(); ++i) {
    out << ".TP\n\\fB" << program << "\\-" << escaped(top.subcommands[i]) << "\\fR(1)\n"
        << escaped(top.subcommand_descriptions[i]) << '\n';
  }
  out << ".SH SEE ALSO\n\\fBktuned\\fR(1)\n";
  return {program + ".1", out.str()};
}

ManPage group_page(const std::string& program, const std::vector<CommandNode>& nodes,
                   const CommandNode& group, const std::string& version) {
  std::string name = program + "-" + group.path;
  std::ostringstream out;
  std::string description = sentence(group.description);
  if (!description.empty() && description.back() == '.') description.pop_back();
  out << ".TH " << upper(name) << " 1 \"\" \"" << program << " " << version
      << "\" \"User Commands\"\n"
      << ".SH NAME\n" << escaped(name) << " \\- " << escaped(description) << '\n'
      << ".SH SYNOPSIS\n.B " << program << " " << escaped(group.path) << "\n"
      << synopsis_args(group).substr(1) << '\n'
      << ".SH DESCRIPTION\n" << escaped(group.description) << '\n';
  if (!group.footer.empty()) {
    out << ".PP\n";
    write_text(group.footer, out);
  }
  out << ".SH OPTIONS\n";
  write_options(group, out);
  bool any = false;
  for (const auto& node : nodes) {
    if (node.path.rfind(group.path + " ", 0) != 0) continue;
    if (!any) out << ".SH COMMANDS\n";
    any = true;
    out << ".SS \"" << program << " " << escaped(node.path) << "\"\n"
        << ".B " << program << " " << escaped(node.path) << "\n" << synopsis_args(node).substr(1)
        << "\n.PP\n" << escaped(node.description) << '\n';
    if (!node.footer.empty()) {
      out << ".PP\n";
      write_text(node.footer, out);
    }
    bool own = false;
    for (const auto& o : node.options) own = own || !o.inherited;
    if (own) {
      out << ".PP\nOptions:\n";
      write_options(node, out);
    }
  }
  out << ".SH SEE ALSO\n\\fB" << program << "\\fR(1)\n";
  return {name + ".1", out.str()};
}

} // namespace

std::vector<ManPage> man_pages(const CLI::App& app, const std::string& version) {
  const std::vector<CommandNode> nodes = command_tree(app);
  const std::string program = app.get_name();
  std::vector<ManPage> pages{program_page(program, nodes, version)};
  for (const auto& node : nodes) {
    if (!node.path.empty() && node.path.find(' ') == std::string::npos) {
      pages.push_back(group_page(program, nodes, node, version));
    }
  }
  return pages;
}

void add_man_command(CLI::App& app, ManCommand& command) {
  command.app = &app;
  command.command = app.add_subcommand("man-pages", "Write the man pages into DIR");
  command.command->group("");  // hidden: the build runs it
  command.command->add_option("dir", command.dir, "directory")->required();
}

std::optional<int> run_man_command(const ManCommand& command, const GlobalOptions& /*global*/,
                                   Output& io) {
  if (command.command == nullptr || !command.command->parsed()) return std::nullopt;
  std::error_code ec;
  std::filesystem::create_directories(command.dir, ec);
  if (ec) return report_error(io, ErrorCode::io_error, "cannot create " + command.dir + ": " + ec.message());
  for (const auto& page : man_pages(*command.app, KTUNE_VERSION)) {
    const std::string path = (std::filesystem::path(command.dir) / page.file).string();
    if (auto w = write_file_atomic(path, page.text); !w) {
      return report_error(io, w.error().code, w.error().message);
    }
    io.out << path << '\n';
  }
  return k_exit_ok;
}

} // namespace ktune::cli
