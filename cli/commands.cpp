#include "cli/commands.hpp"

#include "cli/cache_command.hpp"
#include "cli/command_table.hpp"
#include "cli/compare_command.hpp"
#include "cli/completion.hpp"
#include "cli/cuda_commands.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/daemon_command.hpp"
#include "cli/db_command.hpp"
#include "cli/distill_command.hpp"
#include "cli/fleet.hpp"
#include "cli/history_command.hpp"
#include "cli/job_commands.hpp"
#include "cli/kernel_commands.hpp"
#include "cli/lookup_commands.hpp"
#include "cli/man_pages.hpp"
#include "cli/parse_errors.hpp"
#include "cli/report_command.hpp"
#include "cli/repro_command.hpp"
#include "cli/sweep_command.hpp"
#include "cli/table_commands.hpp"
#include "cli/top_command.hpp"
#include "cli/tune_command.hpp"
#include "replay/replay_command.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;

// `replay` lives in ktune_replay, which knows nothing of Output: its table entry.
struct ReplayEntry {
  std::optional<replay::ReplayCommand> command;
};
void add_replay_entry(CLI::App& app, ReplayEntry& entry) { entry.command.emplace(app); }
std::optional<int> run_replay_entry(const ReplayEntry& entry, const GlobalOptions& global,
                                    Output& io) {
  if (!entry.command->parsed()) return std::nullopt;
  return entry.command->run(global.json, io.out, io.err);
}

// The command table: every command or command group once, in the order `ktune --help` lists
// them (cli/command_table.hpp says what an entry is).
std::vector<std::unique_ptr<CommandEntry>> command_table() {
  std::vector<std::unique_ptr<CommandEntry>> table;
  table.push_back(command(add_daemon_commands, run_daemon_commands));
  table.push_back(command(add_cuda_commands, run_cuda_commands));
  table.push_back(command(add_table_commands, run_table_commands));
  table.push_back(command(add_sweep_command, run_sweep_command));
  table.push_back(command(add_fleet_commands, run_fleet_commands));
  table.push_back(command(add_compare_command, run_compare_command));
  table.push_back(command(add_history_command, run_history_command));
  table.push_back(command(add_distill_command, run_distill_command));
  table.push_back(command(add_cache_command, run_cache_command));
  table.push_back(command(add_db_command, run_db_command));
  table.push_back(command(add_repro_command, run_repro_command));
  table.push_back(command(add_kernel_commands, run_kernel_commands));
  // run_report_command needs no GlobalOptions (tests/report calls it so).
  table.push_back(command<ReportCommand>(
      add_report_command,
      [](const ReportCommand& c, const GlobalOptions&, Output& io) { return run_report_command(c, io); }));
  table.push_back(command(add_top_command, run_top_command));
  table.push_back(command(add_replay_entry, run_replay_entry));
  table.push_back(command(add_man_command, run_man_command));
  table.push_back(command(add_kernels_command, run_kernels_command));
  table.push_back(command(add_tune_command, run_tune_command, check_tune_command));
  table.push_back(command(add_job_commands, run_job_commands));
  table.push_back(command(add_query_command, run_query_command));
  table.push_back(command(add_revalidate_command, run_revalidate_command));
  table.push_back(command(add_completion_command, run_completion_command));
  return table;
}

// Passes everything through to `target` and keeps what it saw: the byte count and the end of
// the text (for the last error line).
class WatchingBuf : public std::streambuf {
public:
  explicit WatchingBuf(std::streambuf* target) : m_target(target) {}
  [[nodiscard]] std::size_t bytes() const { return m_bytes; }
  [[nodiscard]] const std::string& tail() const { return m_tail; }

protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    m_bytes += static_cast<std::size_t>(n);
    m_tail.append(s, static_cast<std::size_t>(n));
    if (m_tail.size() > 8192) m_tail.erase(0, m_tail.size() - 4096);
    return m_target->sputn(s, n);
  }
  int sync() override { return m_target->pubsync(); }

private:
  std::streambuf* m_target;
  std::size_t m_bytes = 0;
  std::string m_tail;
};

// The app with its global options (into `global`) and footer; the commands come from the table.
void set_up_app(CLI::App& app, GlobalOptions& global) {
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string(KTUNE_VERSION));
  app.failure_message([](const CLI::App* self, const CLI::Error& e) {
    return "ktune: " + std::string(e.what()) + "\nRun `" + self->get_name() +
           " --help` (or `ktune <command> --help`) for usage.\n";
  });
  app.add_option("--socket", global.socket,
                 "ktuned's Unix socket (default: $KTUNE_HOME/ktuned.sock, else "
                 "$XDG_RUNTIME_DIR/ktune/ktuned.sock)");
  app.add_flag("--json", global.json,
               "print the daemon's result object as one JSON document instead of tables");
}

void add_footer(CLI::App& app) {
  app.footer("Commands talk to ktuned over its Unix socket; `ktune <command> --help` explains\n"
             "each one.\n\n"
             "Autostart: every command that sends ktuned a request (tune, job, jobs, cancel,\n"
             "query, kernels, devices, compile-check, import, sweep, daemon start) starts ktuned\n"
             "when none answers, and says so on stderr; it then exits after 600 s without\n"
             "clients or jobs. `daemon stop`, `daemon status`, `daemon log`, top, export,\n"
             "compare, history, repro, report, replay, cache and db never start one.\n"
             "KTUNE_NO_AUTOSTART=1 turns autostart off.\n\n"
             "With --json every command prints one JSON document on stdout, an error too:\n"
             "{\"error\":{\"code\":...,\"message\":...}} with a non-zero exit.\n\nExamples:\n"
             "  ktune daemon start\n"
             "  ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait\n"
             "  ktune query gemm --shape M=256,N=256,K=256 --device cpu" + k_exit_codes_help);
}

// The first word that is not an option names the command: one that does not exist gets the
// nearest names instead of CLI11's "A subcommand is required".
std::optional<int> check_command_word(const CLI::App& app, int argc, const char* const* argv,
                                      Output& io) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--socket") {
      ++i;
      continue;
    }
    if (word.empty() || word.front() == '-') continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      return report_error(io, ErrorCode::usage,
                          "unknown command '" + std::string(word) + "'" +
                              did_you_mean(std::string(word), names) + "; run `ktune --help`",
                          k_exit_usage);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// CLI11's parse: a usage error (the unknown-option hook's message first) or --help/--version
// printed gives the exit code; nullopt when a command line parsed.
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv, Output& io) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (auto unknown = unknown_argument_message(app)) {
        return report_error(io, ErrorCode::usage, *unknown, k_exit_usage);
      }
    }
    if (io.json && e.get_exit_code() != 0) {
      return report_error(io, ErrorCode::usage, e.what(), k_exit_usage);
    }
    int code = app.exit(e, io.out, io.err);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }
  return std::nullopt;
}

int run_command(int argc, const char* const* argv, Output& io) {
  CLI::App app{"ktune: tune kernels with the ktuned daemon and look up their winners.", "ktune"};
  GlobalOptions global;
  set_up_app(app, global);
  const auto table = command_table();
  for (const auto& entry : table) entry->add_to(app);
  add_footer(app);

  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--json") io.json = true;
  }
  if (auto code = check_command_word(app, argc, argv, io)) return *code;
  if (auto code = parse_command_line(app, argc, argv, io)) return *code;
  io.json = global.json;
  for (const auto& entry : table) {
    if (auto code = entry->check(io)) return *code;
  }
  if (const char* parse_only = std::getenv("KTUNE_PARSE_ONLY"); parse_only && *parse_only == '1') {
    return k_exit_ok;
  }
  try {
    for (const auto& entry : table) {
      if (auto code = entry->run(global, io)) return *code;
    }
  } catch (const json::exception& e) {
    // Only a reply that breaks the protocol's types reaches here.
    return report_error(io, ErrorCode::bad_reply, std::string("unexpected reply from ktuned: ") + e.what());
  }
  return report_error(io, ErrorCode::usage, "no command given; run `ktune --help`", k_exit_usage);
}

} // namespace

int run(int argc, const char* const* argv, Output& io) {
  bool json_mode = false;
  for (int i = 1; i < argc; ++i) json_mode = json_mode || std::string_view(argv[i]) == "--json";
  if (!json_mode) return run_command(argc, argv, io);
  // --json: a command that fails without printing anything on stdout (an error written as
  // text by a command that has no JSON error path of its own) still ends with one JSON error.
  WatchingBuf out_buf(io.out.rdbuf());
  WatchingBuf err_buf(io.err.rdbuf());
  std::ostream out(&out_buf);
  std::ostream err(&err_buf);
  Output watched{out, err, io.err_is_tty, true, false};
  const int code = run_command(argc, argv, watched);
  out.flush();
  err.flush();
  if (code != k_exit_ok && out_buf.bytes() == 0) {
    std::string text = err_buf.tail();
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (const auto nl = text.find_last_of('\n'); nl != std::string::npos) text.erase(0, nl + 1);
    std::string error_code = code == k_exit_usage ? "usage" : "error";
    if (text.rfind("ktune: ", 0) == 0) {
      text.erase(0, 7);
      // "code: message" when the first word is a code (lower case and underscores).
      const auto colon = text.find(": ");
      if (colon != std::string::npos && colon > 0 &&
          text.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == colon) {
        error_code = text.substr(0, colon);
        text.erase(0, colon + 2);
      }
    }
    if (text.empty()) text = "ktune exited with status " + std::to_string(code);
    print_json(io, json{{"error", {{"code", error_code}, {"message", text}}}});
  }
  return code;
}

} // namespace ktune::cli
