#include "cli/parse_errors.hpp"

#include "cli/daemon_calls.hpp"

#include <vector>

namespace ktune::cli {

std::optional<std::string> unknown_argument_message(const CLI::App& app) {
  const std::vector<std::string> left = app.remaining(true);
  if (left.empty()) return std::nullopt;
  // The deepest command parsed, and the option names that reach it.
  const CLI::App* command = &app;
  std::string path = app.get_name();
  std::vector<std::string> names;
  for (;;) {
    for (const CLI::Option* option : command->get_options()) {
      for (const auto& n : option->get_lnames()) names.push_back("--" + n);
      for (const auto& n : option->get_snames()) names.push_back("-" + n);
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : command->get_subcommands({})) {
      if (sub->parsed()) next = sub;
    }
    if (next == nullptr) break;
    if (!next->get_fallthrough()) names.clear();
    command = next;
    path += " " + command->get_name();
  }
  std::string word = left.front();
  for (const auto& w : left) {
    if (w.size() > 1 && w.front() == '-') {
      word = w;
      break;
    }
  }
  if (word.size() > 1 && word.front() == '-') {
    word = word.substr(0, word.find('='));
    return "unknown option '" + word + "' for `" + path + "`" + did_you_mean(word, names) +
           "; run `" + path + " --help`";
  }
  return "unexpected argument '" + word + "' for `" + path + "`; run `" + path + " --help`";
}

} // namespace ktune::cli
