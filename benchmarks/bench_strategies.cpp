// bench_strategies: every search strategy on every recorded GPU space of the shared dataset,
// at budgets of 0.5%, 1%, 2% and 5% of each space's valid configs (those with a recorded time),
// 20 repeats each; then leave-one-device-out runs with priors.
//
//   bench_strategies DATA_DIR [--repeats N] [--threads N] [--strategies a,b] [--only SUBSTRING] [--seed N]
//                    [--prior-strategy S] [--up-to PERCENT]
//
// DATA_DIR is ../shared/datasets/gpu-cache (README.md, FORMAT.md there). Every .json and .json.gz
// under it is read except spaces/ (search-space specifications, not results); files replay
// cannot use (the "score" objective of published/) are listed as skipped with the reason.
// Prints per-file tables, the mean over files, and as its last line one JSON object:
//   {"bench":"strategies","best_strategy":..,"frac_at_1pct":..,"frac_at_2pct":..,
//    "beats_random_at_1pct_every_file":..,"table":{strategy:{budget:frac}}, ...}
// best_strategy = the highest mean fraction at 2% (then at 1%). It beats random at 1% on a file
// when its mean there exceeds both the simulated random strategy and the exact expectation of
// uniform random sampling (computed from the recorded times, no sampling noise).
// A run's proposals do not depend on its budget, so one run of 5% gives all four budgets
// (--up-to 2 stops the runs at 2%, leaving the larger budgets out, for quicker looks).
//
// Leave-one-device-out: files of the same kernel (same directory name) on several devices (file
// name without .json[.gz] and a _T4 suffix) are the multi-device files, a recording kept in two
// formats (t4/) counted once. Each is replayed, up to 2%, with the
// prior strategy (bayes unless --prior-strategy) given, as its prior, one file of every other
// device of its kernel; once more given the same files with their times inverted (the
// fastest config said to be the slowest: the worst prior there can be); and, where there are
// several, given them with only the first one inverted (mixed: good sources next to one that
// points the wrong way, as a store may hold for a device of another kind); and given them plus
// 4 sources of shuffled times (unrelated: devices or kernel versions that say nothing of this
// one, and that a search weighing its sources could trust by chance). The JSON line gains
//   "frac_at_1pct_prior","frac_at_2pct_prior","frac_at_1pct_cold","frac_at_2pct_cold"
//   (means over the multi-device files, cold = the same strategy without a prior),
//   "worst_prior_minus_cold_1pct" (the file where the prior did worst against cold),
//   "frac_at_1pct_inverted_prior","worst_inverted_minus_cold_1pct",
//   "frac_at_1pct_mixed_prior","worst_mixed_minus_cold_1pct" (over the files with several
//   sources), "frac_at_1pct_unrelated_prior","worst_unrelated_minus_cold_1pct",
//   "frac_at_1pct_prior_several_sources","frac_at_2pct_cold_several_sources" (the acceptance
//   figures over the files whose prior has several sources: kernels measured on three or more
//   devices), "prior_files".
// Failures: each per-file table shows the failed evaluations per run at the largest budget run
// (failed@), with the exact expectation of uniform random sampling of as many configs (failure
// share x evaluations); the files with failures are listed again by failure share, and the JSON
// line gains "failed_evaluations": {file: {"failure_share","evaluations","random",strategy:..}}.
// Repeat r of every strategy on every file runs with repeat_seed(seed, r); the default seed is
// the one the published figures use, another (--seed) gives fresh runs for hold-out checks.
#include "replay/file_reader.hpp"
#include "replay/recorded_space.hpp"
#include "replay/replay.hpp"
#include "search/prior.hpp"
#include "search/strategy.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using ktune::replay::RecordedSpace;

namespace {

constexpr double k_budget_percent[] = {0.5, 1.0, 2.0, 5.0};
constexpr std::size_t k_budgets = std::size(k_budget_percent);
constexpr const char* k_budget_names[] = {"0.5%", "1%", "2%", "5%"};
constexpr std::uint64_t k_default_seed = 20240601;

struct DataFile {
  std::string relative; // to the data directory
  std::string path;
  std::optional<RecordedSpace> space;
  std::string skipped; // why the file was not used
  std::size_t evaluations[k_budgets] = {};
  double random_expected[k_budgets] = {};
  std::string kernel; // the directory name
  std::string device; // the file name without .json[.gz] and _T4
};

// Kernel and device of a data file, by its path: ".../<kernel>/<device>[_T4].json[.gz]".
void name_file(DataFile& f) {
  const fs::path path(f.relative);
  f.kernel = path.parent_path().filename().string();
  std::string stem = path.filename().string();
  for (const char* suffix : {".gz", ".json", "_T4"}) {
    if (stem.ends_with(suffix)) stem.resize(stem.size() - std::string(suffix).size());
  }
  f.device = stem;
}

// The prior with the first `count` sources' times inverted: their fastest config said to be
// their slowest.
ktune::search::Prior inverted(ktune::search::Prior prior, std::size_t count) {
  for (std::size_t s = 0; s < std::min(count, prior.size()); ++s) {
    for (auto& r : prior[s].results) {
      if (r.time_ms) r.time_ms = 1.0 / *r.time_ms;
    }
  }
  return prior;
}

// Sources of no relation to the space, as a store holding other devices or kernel versions may
// give: the first source's results with their times (and failures) shuffled among its configs.
constexpr std::size_t k_unrelated_sources = 4;
// The prior plus `count` unrelated sources (fixed shuffles: every run sees the same ones).
ktune::search::Prior with_unrelated(ktune::search::Prior prior, std::size_t count) {
  if (prior.empty()) return prior;
  std::mt19937_64 rng(20240601);
  for (std::size_t k = 0; k < count; ++k) {
    ktune::search::PriorSource source = prior.front();
    source.label += " (shuffled " + std::to_string(k + 1) + ")";
    std::vector<std::optional<double>> times;
    for (const auto& r : source.results) times.push_back(r.time_ms);
    std::shuffle(times.begin(), times.end(), rng);
    for (std::size_t i = 0; i < times.size(); ++i) source.results[i].time_ms = times[i];
    prior.push_back(std::move(source));
  }
  return prior;
}

// Exact mean fraction of optimum of uniform sampling without replacement of `m` of the n valid
// configs (failed ones contribute nothing): P(best rank >= k) = C(n-k+1, m) / C(n, m).
double expected_random_fraction(const RecordedSpace& space, std::size_t m) {
  std::vector<double> times;
  for (const auto& t : space.time_ms) {
    if (t) times.push_back(*t);
  }
  std::sort(times.begin(), times.end());
  const auto n = static_cast<double>(space.time_ms.size());
  const auto md = static_cast<double>(m);
  auto log_choose = [](double a, double b) { return std::lgamma(a + 1) - std::lgamma(b + 1) - std::lgamma(a - b + 1); };
  double expected = 0;
  double p_at_least = 1; // P(best rank >= k), k = 1
  for (std::size_t k = 1; k <= times.size(); ++k) {
    const double rest = n - static_cast<double>(k);
    const double p_next = rest >= md ? std::exp(log_choose(rest, md) - log_choose(n, md)) : 0.0;
    expected += (p_at_least - p_next) * space.optimum_ms / times[k - 1];
    p_at_least = p_next;
  }
  return expected;
}

std::string fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

std::string pad(const std::string& s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

template <class Work>
void parallel_for(std::size_t count, unsigned threads, Work work) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, threads); ++t) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < count; i = next++) work(i);
    });
  }
  for (auto& th : pool) th.join();
}

int usage() {
  std::cerr << "usage: bench_strategies DATA_DIR [--repeats N] [--threads N] [--strategies a,b] [--only SUBSTRING]"
               " [--seed N] [--prior-strategy S] [--up-to 0.5|1|2|5]\n";
  return 2;
}

struct Options {
  fs::path data_dir;
  std::size_t repeats = 20;
  unsigned threads = 2;
  std::vector<std::string> strategies = ktune::search::strategy_names();
  std::string only;
  std::uint64_t seed = k_default_seed;
  std::string prior_strategy = "bayes";
  std::size_t last_budget = k_budgets - 1; // the largest budget run
};

// The command line; nullopt on a usage error. random and the prior strategy are always run.
std::optional<Options> parse_options(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  Options o;
  o.data_dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return std::nullopt;
    const std::string value = argv[++i];
    try {
      if (arg == "--repeats") {
        o.repeats = std::stoul(value);
      } else if (arg == "--threads") {
        o.threads = static_cast<unsigned>(std::stoul(value));
      } else if (arg == "--strategies") {
        o.strategies = split(value);
      } else if (arg == "--only") {
        o.only = value;
      } else if (arg == "--seed") {
        o.seed = std::stoull(value);
      } else if (arg == "--prior-strategy") {
        o.prior_strategy = value;
      } else if (arg == "--up-to") {
        const double percent = std::stod(value);
        const auto* found = std::find(std::begin(k_budget_percent), std::end(k_budget_percent), percent);
        if (found == std::end(k_budget_percent)) return std::nullopt;
        o.last_budget = static_cast<std::size_t>(found - std::begin(k_budget_percent));
      } else {
        return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (o.repeats == 0 || o.strategies.empty()) return std::nullopt;
  if (std::find(o.strategies.begin(), o.strategies.end(), "random") == o.strategies.end()) o.strategies.push_back("random");
  if (std::find(o.strategies.begin(), o.strategies.end(), o.prior_strategy) == o.strategies.end()) {
    o.strategies.push_back(o.prior_strategy);
  }
  return o;
}

// The result files under the data directory (not spaces/, matching --only), in name order, each
// read and parsed (or marked skipped) with its evaluations per budget and random's exact
// expectation. Empty after a message when there is none.
std::vector<DataFile> load_files(const Options& o) {
  std::error_code ec;
  if (!fs::is_directory(o.data_dir, ec)) {
    std::cerr << "bench_strategies: " << o.data_dir.string() << ": not a directory (expected the gpu-cache dataset)\n";
    return {};
  }
  std::vector<DataFile> files;
  for (auto it = fs::recursive_directory_iterator(o.data_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string name = it->path().filename().string();
    const bool json = name.ends_with(".json") || name.ends_with(".json.gz");
    const std::string relative = fs::relative(it->path(), o.data_dir).generic_string();
    if (!json || relative.starts_with("spaces/")) continue;
    if (!o.only.empty() && relative.find(o.only) == std::string::npos) continue;
    files.push_back(DataFile{relative, it->path().string(), std::nullopt, "", {}, {}, "", ""});
    name_file(files.back());
  }
  std::sort(files.begin(), files.end(), [](const DataFile& a, const DataFile& b) { return a.relative < b.relative; });
  if (files.empty()) {
    std::cerr << "bench_strategies: no .json or .json.gz result files under " << o.data_dir.string() << '\n';
    return {};
  }
  parallel_for(files.size(), o.threads, [&](std::size_t i) {
    DataFile& f = files[i];
    auto text = ktune::replay::read_text_file(f.path);
    if (!text) {
      f.skipped = text.error().message + " (" + std::string(ktune::to_string(text.error().code)) + ")";
      return;
    }
    auto parsed = ktune::replay::parse_recorded_space(*text, f.relative);
    if (!parsed) {
      f.skipped = parsed.error().message + " (" + std::string(ktune::to_string(parsed.error().code)) + ")"; // the message names the file
      return;
    }
    f.space = std::move(parsed).value();
    for (std::size_t b = 0; b < k_budgets; ++b) {
      const double count = std::round(k_budget_percent[b] / 100.0 * static_cast<double>(f.space->measured));
      f.evaluations[b] = std::max<std::size_t>(1, static_cast<std::size_t>(count));
      f.random_expected[b] = expected_random_fraction(*f.space, f.evaluations[b]);
    }
  });
  return files;
}

// The first error of runs on several threads.
struct FirstError {
  std::mutex mutex;
  std::string message;
  void note(const std::string& text) {
    std::lock_guard lock(mutex);
    if (message.empty()) message = text;
  }
};

// A run's fraction of optimum after each budget's evaluations, up to `last_budget`.
template <class Slot>
void record_fractions(const ktune::replay::ReplayRun& run, const DataFile& file, std::size_t last_budget, Slot&& slot) {
  for (std::size_t b = 0; b <= last_budget; ++b) {
    const auto& best_after = run.best_after;
    if (best_after.empty()) continue;
    const double best = best_after[std::min(file.evaluations[b], best_after.size()) - 1];
    slot(b) = std::isfinite(best) ? file.space->optimum_ms / best : 0.0;
  }
}

// Every strategy on every used file, `repeats` times: fraction of optimum per budget and
// failed evaluations per run (at the largest budget).
class StrategyRuns {
public:
  StrategyRuns(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used)
      : m_o(o), m_files(files), m_used(used), m_strategies(o.strategies.size()),
        m_fraction(used.size() * m_strategies * k_budgets * o.repeats, 0.0),
        m_failures(used.size() * m_strategies * o.repeats, 0.0) {}

  // Runs them all, largest spaces first so that the threads finish together; false (after a
  // message) on an error.
  bool run() {
    FirstError error;
    const std::size_t repeats = m_o.repeats;
    const std::size_t jobs = m_used.size() * m_strategies * repeats;
    std::vector<std::size_t> order(jobs);
    for (std::size_t j = 0; j < jobs; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return m_files[m_used[a / (m_strategies * repeats)]].space->space.size() >
             m_files[m_used[b / (m_strategies * repeats)]].space->space.size();
    });
    parallel_for(jobs, m_o.threads, [&](std::size_t k) {
      const std::size_t j = order[k];
      const std::size_t f = j / (m_strategies * repeats);
      const std::size_t s = (j / repeats) % m_strategies;
      const std::size_t r = j % repeats;
      const DataFile& file = m_files[m_used[f]];
      auto run = ktune::replay::replay_run(*file.space, m_o.strategies[s], file.evaluations[m_o.last_budget],
                                           ktune::replay::repeat_seed(m_o.seed, r));
      if (!run) {
        error.note(run.error().message);
        return;
      }
      record_fractions(*run, file, m_o.last_budget, [&](std::size_t b) -> double& { return slot(f, s, b, r); });
      m_failures[(f * m_strategies + s) * repeats + r] = static_cast<double>(run->failed);
    });
    if (!error.message.empty()) std::cerr << "bench_strategies: " << error.message << '\n';
    return error.message.empty();
  }

  [[nodiscard]] double mean(std::size_t f, std::size_t s, std::size_t b) const {
    double sum = 0;
    for (std::size_t r = 0; r < m_o.repeats; ++r) sum += m_fraction[index(f, s, b, r)];
    return sum / static_cast<double>(m_o.repeats);
  }
  [[nodiscard]] double failed(std::size_t f, std::size_t s) const {
    double sum = 0;
    for (std::size_t r = 0; r < m_o.repeats; ++r) sum += m_failures[(f * m_strategies + s) * m_o.repeats + r];
    return sum / static_cast<double>(m_o.repeats);
  }
  // What uniform random sampling of as many configs fails on average (exact).
  [[nodiscard]] double random_failed(std::size_t f) const {
    const DataFile& file = m_files[m_used[f]];
    return ktune::replay::random_expected_failures(*file.space, static_cast<double>(file.evaluations[m_o.last_budget]));
  }

private:
  [[nodiscard]] std::size_t index(std::size_t f, std::size_t s, std::size_t b, std::size_t r) const {
    return ((f * m_strategies + s) * k_budgets + b) * m_o.repeats + r;
  }
  double& slot(std::size_t f, std::size_t s, std::size_t b, std::size_t r) { return m_fraction[index(f, s, b, r)]; }

  const Options& m_o;
  const std::vector<DataFile>& m_files;
  const std::vector<std::size_t>& m_used;
  std::size_t m_strategies;
  std::vector<double> m_fraction;  // [file][strategy][budget][repeat]
  std::vector<double> m_failures;  // [file][strategy][repeat]
};

// Leave-one-device-out: a multi-device file with one file of every other device of its kernel.
struct PriorCase {
  std::size_t f = 0; // position in `used`
  std::vector<std::string> sources;
  ktune::search::Prior prior[4]; // as recorded, inverted, mixed, with unrelated sources
};
constexpr std::size_t k_variants = 4;

std::vector<PriorCase> prior_cases(const std::vector<DataFile>& files, const std::vector<std::size_t>& used) {
  std::vector<PriorCase> cases;
  std::vector<std::string> cased; // "kernel/device" of the cases so far: a recording twice (t4/) counts once
  for (std::size_t f = 0; f < used.size(); ++f) {
    const DataFile& file = files[used[f]];
    const std::string key = file.kernel + "/" + file.device;
    if (std::find(cased.begin(), cased.end(), key) != cased.end()) continue;
    PriorCase c;
    c.f = f;
    std::vector<std::string> devices;
    for (std::size_t g : used) {
      const DataFile& other = files[g];
      if (other.kernel != file.kernel || other.device == file.device ||
          std::find(devices.begin(), devices.end(), other.device) != devices.end()) {
        continue;
      }
      auto source = ktune::replay::prior_source(*file.space, *other.space);
      if (!source) continue; // same directory name, another kernel
      devices.push_back(other.device);
      c.sources.push_back(other.relative);
      c.prior[0].push_back(std::move(*source));
    }
    if (c.prior[0].empty()) continue;
    cased.push_back(key);
    c.prior[1] = inverted(c.prior[0], c.prior[0].size());
    if (c.prior[0].size() >= 2) c.prior[2] = inverted(c.prior[0], 1);
    c.prior[3] = with_unrelated(c.prior[0], k_unrelated_sources);
    cases.push_back(std::move(c));
  }
  return cases;
}

// The prior strategy on every case and variant, up to 2%: fraction of optimum per budget.
class PriorRuns {
public:
  PriorRuns(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
            const std::vector<PriorCase>& cases)
      : m_o(o), m_files(files), m_used(used), m_cases(cases),
        m_budget(std::min<std::size_t>(o.last_budget, 2)),
        m_fraction(cases.size() * k_variants * k_budgets * o.repeats, 0.0) {}

  bool run() {
    FirstError error;
    const std::size_t repeats = m_o.repeats;
    parallel_for(m_cases.size() * k_variants * repeats, m_o.threads, [&](std::size_t j) {
      const std::size_t c = j / (k_variants * repeats);
      const std::size_t v = (j / repeats) % k_variants;
      const std::size_t r = j % repeats;
      if (m_cases[c].prior[v].empty()) return; // mixed needs several sources
      const DataFile& file = m_files[m_used[m_cases[c].f]];
      auto run = ktune::replay::replay_run(*file.space, m_o.prior_strategy, file.evaluations[m_budget],
                                           ktune::replay::repeat_seed(m_o.seed, r), 1, m_cases[c].prior[v]);
      if (!run) {
        error.note(run.error().message);
        return;
      }
      record_fractions(*run, file, m_budget, [&](std::size_t b) -> double& { return m_fraction[index(c, v, b, r)]; });
    });
    if (!error.message.empty()) std::cerr << "bench_strategies: " << error.message << '\n';
    return error.message.empty();
  }

  [[nodiscard]] double mean(std::size_t c, std::size_t v, std::size_t b) const {
    double sum = 0;
    for (std::size_t r = 0; r < m_o.repeats; ++r) sum += m_fraction[index(c, v, b, r)];
    return sum / static_cast<double>(m_o.repeats);
  }

private:
  [[nodiscard]] std::size_t index(std::size_t c, std::size_t v, std::size_t b, std::size_t r) const {
    return ((c * k_variants + v) * k_budgets + b) * m_o.repeats + r;
  }

  const Options& m_o;
  const std::vector<DataFile>& m_files;
  const std::vector<std::size_t>& m_used;
  const std::vector<PriorCase>& m_cases;
  std::size_t m_budget;             // the 2% the summary needs
  std::vector<double> m_fraction;   // [case][variant][budget][repeat]
};

void print_file_tables(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
                       const StrategyRuns& runs) {
  const std::size_t n_strategies = o.strategies.size();
  std::cout << "bench strategies: " << used.size() << " recorded spaces, " << n_strategies << " strategies, "
            << o.repeats << " repeats, budgets 0.5% 1% 2% 5% of the valid configs; mean fraction of optimum\n";
  for (const auto& f : files) {
    if (!f.space) std::cout << "skipped " << f.skipped << '\n';
  }
  for (std::size_t f = 0; f < used.size(); ++f) {
    const DataFile& file = files[used[f]];
    std::cout << "\n" << file.relative << "  (" << file.space->measured << " valid configs, " << file.space->failed
              << " failed; evaluations";
    for (std::size_t b = 0; b < k_budgets; ++b) std::cout << ' ' << file.evaluations[b];
    std::cout << ")\n  " << pad("strategy", 18, true);
    for (const char* name : k_budget_names) std::cout << pad(name, 8);
    std::cout << pad(std::string("failed@") + k_budget_names[o.last_budget], 12) << '\n';
    for (std::size_t s = 0; s < n_strategies; ++s) {
      std::cout << "  " << pad(o.strategies[s], 18, true);
      for (std::size_t b = 0; b < k_budgets; ++b) std::cout << pad(b <= o.last_budget ? fixed(runs.mean(f, s, b), 3) : "-", 8);
      std::cout << pad(fixed(runs.failed(f, s), 1), 12) << '\n';
    }
    std::cout << "  " << pad("(random, exact)", 18, true);
    for (std::size_t b = 0; b < k_budgets; ++b) std::cout << pad(fixed(file.random_expected[b], 3), 8);
    std::cout << pad(fixed(runs.random_failed(f), 1), 12) << '\n';
  }
}

// Failures avoided where there are most to avoid: the files by failure share, printed and as
// the JSON line's "failed_evaluations".
nlohmann::json print_failures(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
                              const StrategyRuns& runs) {
  std::vector<std::size_t> by_failures;
  for (std::size_t f = 0; f < used.size(); ++f) {
    if (files[used[f]].space->failed > 0) by_failures.push_back(f);
  }
  auto failure_share = [&](std::size_t f) {
    const RecordedSpace& space = *files[used[f]].space;
    return static_cast<double>(space.failed) / static_cast<double>(space.space.size());
  };
  std::stable_sort(by_failures.begin(), by_failures.end(),
                   [&](std::size_t a, std::size_t b) { return failure_share(a) > failure_share(b); });
  nlohmann::json failures_json = nlohmann::json::object();
  if (by_failures.empty()) return failures_json;
  std::cout << "\nfailed evaluations at " << k_budget_names[o.last_budget]
            << " on the files with failures, highest failure share first (random: exact expectation)\n  "
            << pad("file", 52, true) << pad("share", 7) << pad("random", 8);
  for (const auto& name : o.strategies) std::cout << pad(name, std::max<std::size_t>(name.size() + 2, 9));
  std::cout << '\n';
  for (std::size_t f : by_failures) {
    std::cout << "  " << pad(files[used[f]].relative, 52, true) << pad(fixed(failure_share(f), 3), 7)
              << pad(fixed(runs.random_failed(f), 1), 8);
    nlohmann::json row{{"failure_share", std::round(failure_share(f) * 1e4) / 1e4},
                       {"evaluations", files[used[f]].evaluations[o.last_budget]},
                       {"random", std::round(runs.random_failed(f) * 100) / 100}};
    for (std::size_t s = 0; s < o.strategies.size(); ++s) {
      std::cout << pad(fixed(runs.failed(f, s), 1), std::max<std::size_t>(o.strategies[s].size() + 2, 9));
      row[o.strategies[s]] = std::round(runs.failed(f, s) * 100) / 100;
    }
    std::cout << '\n';
    failures_json[files[used[f]].relative] = row;
  }
  return failures_json;
}

// Means over files: per strategy and budget, and random's exact expectation per budget.
struct MeanTable {
  std::vector<std::vector<double>> strategy;  // [strategy][budget]
  std::vector<double> random_exact;           // [budget]
};

MeanTable mean_table(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
                     const StrategyRuns& runs) {
  const std::size_t n_strategies = o.strategies.size();
  MeanTable t{std::vector<std::vector<double>>(n_strategies, std::vector<double>(k_budgets, 0.0)),
              std::vector<double>(k_budgets, 0.0)};
  for (std::size_t s = 0; s < n_strategies; ++s) {
    for (std::size_t b = 0; b < k_budgets; ++b) {
      for (std::size_t f = 0; f < used.size(); ++f) t.strategy[s][b] += runs.mean(f, s, b);
      t.strategy[s][b] /= static_cast<double>(used.size());
    }
  }
  for (std::size_t b = 0; b < k_budgets; ++b) {
    for (std::size_t f = 0; f < used.size(); ++f) t.random_exact[b] += files[used[f]].random_expected[b];
    t.random_exact[b] /= static_cast<double>(used.size());
  }
  std::cout << "\nmean over " << used.size() << " files\n  " << pad("strategy", 18, true);
  for (const char* name : k_budget_names) std::cout << pad(name, 8);
  std::cout << '\n';
  for (std::size_t s = 0; s < n_strategies; ++s) {
    std::cout << "  " << pad(o.strategies[s], 18, true);
    for (std::size_t b = 0; b < k_budgets; ++b) std::cout << pad(b <= o.last_budget ? fixed(t.strategy[s][b], 3) : "-", 8);
    std::cout << '\n';
  }
  std::cout << "  " << pad("(random, exact)", 18, true);
  for (std::size_t b = 0; b < k_budgets; ++b) std::cout << pad(fixed(t.random_exact[b], 3), 8);
  std::cout << '\n';
  return t;
}

// The best strategy (highest mean at 2%, then at 1%) against random at 1% on each file: whether
// it beats both the simulated and the exact random everywhere.
bool best_beats_random(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
                       const StrategyRuns& runs, std::size_t best) {
  const std::size_t random_index =
      static_cast<std::size_t>(std::find(o.strategies.begin(), o.strategies.end(), "random") - o.strategies.begin());
  bool beats_everywhere = true;
  std::cout << "\nbest strategy " << o.strategies[best] << " at 1% vs random (simulated / exact):\n";
  for (std::size_t f = 0; f < used.size(); ++f) {
    const double mine = runs.mean(f, best, 1);
    const double simulated = runs.mean(f, random_index, 1);
    const double exact = files[used[f]].random_expected[1];
    const bool beats = mine > simulated && mine > exact;
    beats_everywhere = beats_everywhere && beats;
    std::cout << "  " << pad(files[used[f]].relative, 58, true) << fixed(mine, 3) << "  vs " << fixed(simulated, 3)
              << " / " << fixed(exact, 3) << (beats ? "" : "  NOT BEATEN") << '\n';
  }
  return beats_everywhere;
}

// A leave-one-device-out column: the mean over the files it has and, against cold at 1%, the
// file where it did worst (0 and "" with no file).
struct Tally {
  double sum = 0;
  std::size_t n = 0;
  double worst = std::numeric_limits<double>::infinity();
  std::string worst_file;
  void add(double value) {
    sum += value;
    ++n;
  }
  void add(double value, double cold, const std::string& file) {
    add(value);
    if (value - cold < worst) {
      worst = value - cold;
      worst_file = file;
    }
  }
  [[nodiscard]] double mean() const { return n > 0 ? sum / static_cast<double>(n) : 0.0; }
  [[nodiscard]] double worst_or_zero() const { return n > 0 ? worst : 0.0; }
};

struct PriorTallies {
  Tally cold_1, cold_2, prior_1, prior_2, inverted_1, mixed_1, unrelated_1;
  Tally several_prior_1, several_cold_2; // over the files whose prior has several sources
};

// The leave-one-device-out table and its summary lines.
PriorTallies print_prior_cases(const Options& o, const std::vector<DataFile>& files,
                               const std::vector<std::size_t>& used, const std::vector<PriorCase>& cases,
                               const StrategyRuns& runs, const PriorRuns& prior_runs) {
  PriorTallies t;
  if (cases.empty()) return t;
  const std::size_t prior_strategy_index = static_cast<std::size_t>(
      std::find(o.strategies.begin(), o.strategies.end(), o.prior_strategy) - o.strategies.begin());
  std::cout << "\nleave-one-device-out, " << o.prior_strategy
            << " with the other devices' files as prior (inverted: their times inverted; mixed: the first"
               " one's only;\n  unrel: with " << k_unrelated_sources << " more sources of shuffled times)\n  "
            << pad("file", 52, true) << pad("cold 1%", 9) << pad("cold 2%", 9) << pad("prior 1%", 9)
            << pad("prior 2%", 9) << pad("inv 1%", 9) << pad("mix 1%", 9) << pad("unrel 1%", 9) << '\n';
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const std::size_t f = cases[c].f;
    const std::string& file = files[used[f]].relative;
    const double c1 = runs.mean(f, prior_strategy_index, 1);
    const double c2 = runs.mean(f, prior_strategy_index, 2);
    const double p1 = prior_runs.mean(c, 0, 1);
    const double p2 = prior_runs.mean(c, 0, 2);
    const double i1 = prior_runs.mean(c, 1, 1);
    const double u1 = prior_runs.mean(c, 3, 1);
    t.cold_1.add(c1);
    t.cold_2.add(c2);
    t.prior_1.add(p1, c1, file);
    t.prior_2.add(p2);
    t.inverted_1.add(i1, c1, file);
    t.unrelated_1.add(u1, c1, file);
    std::string mixed = "-";
    if (!cases[c].prior[2].empty()) {
      const double m1 = prior_runs.mean(c, 2, 1);
      mixed = fixed(m1, 3);
      t.mixed_1.add(m1, c1, file);
      t.several_prior_1.add(p1);
      t.several_cold_2.add(c2);
    }
    std::cout << "  " << pad(file, 52, true) << pad(fixed(c1, 3), 9) << pad(fixed(c2, 3), 9)
              << pad(fixed(p1, 3), 9) << pad(fixed(p2, 3), 9) << pad(fixed(i1, 3), 9) << pad(mixed, 9)
              << pad(fixed(u1, 3), 9) << '\n';
  }
  std::cout << "  " << pad("mean over " + std::to_string(cases.size()) + " files", 52, true)
            << pad(fixed(t.cold_1.mean(), 3), 9) << pad(fixed(t.cold_2.mean(), 3), 9)
            << pad(fixed(t.prior_1.mean(), 3), 9) << pad(fixed(t.prior_2.mean(), 3), 9)
            << pad(fixed(t.inverted_1.mean(), 3), 9) << pad(t.mixed_1.n > 0 ? fixed(t.mixed_1.mean(), 3) : "-", 9)
            << pad(fixed(t.unrelated_1.mean(), 3), 9) << " (mixed: over " << t.mixed_1.n << ")\n";
  std::cout << "  worst prior - cold at 1%: " << fixed(t.prior_1.worst, 4) << " (" << t.prior_1.worst_file
            << "); inverted prior: " << fixed(t.inverted_1.worst, 4) << " (" << t.inverted_1.worst_file << ")";
  if (t.mixed_1.n > 0)
    std::cout << "; mixed: " << fixed(t.mixed_1.worst, 4) << " (" << t.mixed_1.worst_file << ")";
  std::cout << "; unrelated: " << fixed(t.unrelated_1.worst, 4) << " (" << t.unrelated_1.worst_file << ")\n";
  if (t.mixed_1.n > 0)
    std::cout << "  over the " << t.mixed_1.n << " files whose prior has several sources: prior 1% "
              << fixed(t.several_prior_1.mean(), 4) << ", cold 2% " << fixed(t.several_cold_2.mean(), 4) << '\n';
  return t;
}

// Everything the last line says.
struct Summary {
  std::size_t best = 0;
  bool beats_everywhere = true;
  MeanTable means;
  PriorTallies tallies;
  nlohmann::json failures;
};

nlohmann::json summary_json(const Options& o, const std::vector<DataFile>& files, const std::vector<std::size_t>& used,
                            const std::vector<PriorCase>& cases, const Summary& s) {
  auto rounded = [](double v) { return std::round(v * 1e4) / 1e4; };
  const PriorTallies& t = s.tallies;
  nlohmann::json prior_files_json = nlohmann::json::object();
  for (const auto& c : cases) prior_files_json[files[used[c.f]].relative] = c.sources;
  nlohmann::json table_json = nlohmann::json::object();
  for (std::size_t i = 0; i < o.strategies.size(); ++i) {
    nlohmann::json row = nlohmann::json::object();
    for (std::size_t b = 0; b <= o.last_budget; ++b) row[k_budget_names[b]] = std::round(s.means.strategy[i][b] * 1e4) / 1e4;
    table_json[o.strategies[i]] = row;
  }
  nlohmann::json random_json = nlohmann::json::object();
  for (std::size_t b = 0; b < k_budgets; ++b) random_json[k_budget_names[b]] = std::round(s.means.random_exact[b] * 1e4) / 1e4;
  nlohmann::json files_json = nlohmann::json::array();
  for (std::size_t f : used) files_json.push_back(files[f].relative);
  const auto several = [&](double v) { return t.mixed_1.n > 0 ? nlohmann::json(rounded(v)) : nlohmann::json(nullptr); };
  return nlohmann::json{
      {"bench", "strategies"},
      {"best_strategy", o.strategies[s.best]},
      {"frac_at_1pct", std::round(s.means.strategy[s.best][1] * 1e4) / 1e4},
      {"frac_at_2pct", std::round(s.means.strategy[s.best][2] * 1e4) / 1e4},
      {"beats_random_at_1pct_every_file", s.beats_everywhere},
      {"table", table_json},
      {"random_exact", random_json},
      {"files", files_json},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"budget_basis", "valid_configs"},
      {"prior_strategy", o.prior_strategy},
      {"frac_at_1pct_prior", rounded(t.prior_1.mean())},
      {"frac_at_2pct_prior", rounded(t.prior_2.mean())},
      {"frac_at_1pct_cold", rounded(t.cold_1.mean())},
      {"frac_at_2pct_cold", rounded(t.cold_2.mean())},
      {"worst_prior_minus_cold_1pct", rounded(t.prior_1.worst_or_zero())},
      {"worst_prior_file", t.prior_1.worst_file},
      {"frac_at_1pct_inverted_prior", rounded(t.inverted_1.mean())},
      {"worst_inverted_minus_cold_1pct", rounded(t.inverted_1.worst_or_zero())},
      {"frac_at_1pct_mixed_prior", several(t.mixed_1.mean())},
      {"worst_mixed_minus_cold_1pct", several(t.mixed_1.worst)},
      {"frac_at_1pct_unrelated_prior", rounded(t.unrelated_1.mean())},
      {"frac_at_1pct_prior_several_sources", several(t.several_prior_1.mean())},
      {"frac_at_2pct_cold_several_sources", several(t.several_cold_2.mean())},
      {"worst_unrelated_minus_cold_1pct", rounded(t.unrelated_1.worst_or_zero())},
      {"prior_files", prior_files_json},
      {"failed_evaluations", s.failures},
  };
}

} // namespace

int main(int argc, char** argv) {
  const auto options = parse_options(argc, argv);
  if (!options) return usage();
  const Options& o = *options;
  const auto started = std::chrono::steady_clock::now();
  std::vector<DataFile> files = load_files(o);
  if (files.empty()) return 1;
  std::vector<std::size_t> used;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (files[i].space) used.push_back(i);
  }
  if (used.empty()) {
    std::cerr << "bench_strategies: no usable result file under " << o.data_dir.string() << '\n';
    return 1;
  }
  StrategyRuns runs(o, files, used);
  if (!runs.run()) return 1;
  const std::vector<PriorCase> cases = prior_cases(files, used);
  PriorRuns prior_runs(o, files, used, cases);
  if (!prior_runs.run()) return 1;

  print_file_tables(o, files, used, runs);
  Summary summary;
  summary.failures = print_failures(o, files, used, runs);
  summary.means = mean_table(o, files, used, runs);
  const auto& table = summary.means.strategy;
  for (std::size_t s = 1; s < o.strategies.size(); ++s) {
    if (table[s][2] > table[summary.best][2] ||
        (table[s][2] == table[summary.best][2] && table[s][1] > table[summary.best][1])) {
      summary.best = s;
    }
  }
  summary.beats_everywhere = best_beats_random(o, files, used, runs, summary.best);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "elapsed " << fixed(seconds, 1) << " s on " << o.threads << " threads\n";
  summary.tallies = print_prior_cases(o, files, used, cases, runs, prior_runs);
  std::cout << summary_json(o, files, used, cases, summary).dump() << std::endl;
  return 0;
}
