#include "cli/command_tree.hpp"

namespace ktune::cli {

namespace {

// "TEXT:{config,median,status}" -> {"config", "median", "status"}.
std::vector<std::string> choices_of(const std::string& type_name) {
  std::vector<std::string> choices;
  const auto open = type_name.find(":{");
  const auto close = type_name.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return choices;
  std::string item;
  for (char c : type_name.substr(open + 2, close - open - 2)) {
    if (c == ',') {
      if (!item.empty()) choices.push_back(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  if (!item.empty()) choices.push_back(item);
  return choices;
}

CommandOption describe(const CLI::Option& option, bool inherited) {
  CommandOption o;
  for (const auto& name : option.get_lnames()) o.names.push_back("--" + name);
  for (const auto& name : option.get_snames()) o.names.push_back("-" + name);
  if (o.names.empty()) o.positional = option.get_name(true, false);
  o.description = option.get_description();
  o.takes_value = option.get_expected_max() > 0 || !o.positional.empty();  // flags expect 0
  if (o.takes_value) {
    const std::string type = option.get_type_name();
    o.value_name = type.substr(0, type.find(':'));
    o.choices = choices_of(type);
  }
  o.required = option.get_required();
  o.inherited = inherited;
  return o;
}

void collect(const CLI::App& app, const std::string& path,
             const std::vector<CommandOption>& inherited, std::vector<CommandNode>& nodes) {
  CommandNode node;
  node.path = path;
  node.description = app.get_description();
  node.footer = app.get_footer();
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name().empty() || sub->get_group().empty()) continue;
    node.subcommands.push_back(sub->get_name());
    node.subcommand_descriptions.push_back(sub->get_description());
  }
  std::vector<CommandOption> positionals, options;
  for (const CLI::Option* option : app.get_options()) {
    CommandOption o = describe(*option, false);
    (o.positional.empty() ? options : positionals).push_back(std::move(o));
  }
  node.options = std::move(positionals);
  node.options.insert(node.options.end(), options.begin(), options.end());
  node.options.insert(node.options.end(), inherited.begin(), inherited.end());
  nodes.push_back(node);

  // What falls through to the subcommands: this command's options but help and positionals.
  std::vector<CommandOption> passed = inherited;
  for (const auto& o : options) {
    if (o.names.empty() || o.names.front() == "--help" || o.names.front() == "--version") continue;
    passed.push_back(o);
    passed.back().inherited = true;
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name().empty() || sub->get_group().empty()) continue;
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(),
            sub->get_fallthrough() ? passed : std::vector<CommandOption>{}, nodes);
  }
}

} // namespace

std::vector<CommandNode> command_tree(const CLI::App& app) {
  std::vector<CommandNode> nodes;
  collect(app, "", {}, nodes);
  return nodes;
}

} // namespace ktune::cli
