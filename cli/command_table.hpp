#pragma once
// The `ktune` command table's entry: a command, or a group of commands, as two functions over its
// own state, the same shape for every entry:
//
//   void add_X(CLI::App& app, XCommand& command);      registers the subcommand(s) on `app`
//   std::optional<int> run_X(const XCommand& command, const GlobalOptions& global, Output& io);
//                                                      runs whichever of them was parsed, giving
//                                                      its exit code; nullopt when none was
//
// and, where a parsed value needs a check CLI11 cannot make, a third, run after the parse and
// before anything runs (also under KTUNE_PARSE_ONLY): it completes the state from the parsed
// text and gives a usage error's exit code (the error reported on io), else nullopt.
//   std::optional<int> check_X(XCommand& command, Output& io);
//
// cli/commands.cpp lists the entries once, in the order `ktune --help` shows them. The state
// holds CLI11's pointers into itself: an entry is made in place and never copied or moved.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace ktune::cli {

class CommandEntry {
public:
  virtual ~CommandEntry() = default;
  virtual void add_to(CLI::App& app) = 0;
  [[nodiscard]] virtual std::optional<int> check(Output& io) = 0;
  [[nodiscard]] virtual std::optional<int> run(const GlobalOptions& global, Output& io) = 0;
};

template <class State> using AddFunction = void (*)(CLI::App&, State&);
template <class State>
using RunFunction = std::optional<int> (*)(const State&, const GlobalOptions&, Output&);
template <class State> using CheckFunction = std::optional<int> (*)(State&, Output&);

template <class State> class CommandOf final : public CommandEntry {
public:
  CommandOf(AddFunction<State> add, RunFunction<State> run, CheckFunction<State> check)
      : m_add(add), m_run(run), m_check(check) {}
  CommandOf(const CommandOf&) = delete;
  CommandOf& operator=(const CommandOf&) = delete;

  void add_to(CLI::App& app) override { m_add(app, m_state); }
  std::optional<int> check(Output& io) override {
    return m_check == nullptr ? std::nullopt : m_check(m_state, io);
  }
  std::optional<int> run(const GlobalOptions& global, Output& io) override {
    return m_run(m_state, global, io);
  }

private:
  State m_state;
  AddFunction<State> m_add;
  RunFunction<State> m_run;
  CheckFunction<State> m_check;
};

// One table line: command(add_X, run_X) or command(add_X, run_X, check_X).
template <class State>
[[nodiscard]] std::unique_ptr<CommandEntry> command(AddFunction<State> add, RunFunction<State> run,
                                                    CheckFunction<State> check = nullptr) {
  return std::make_unique<CommandOf<State>>(add, run, check);
}

} // namespace ktune::cli
