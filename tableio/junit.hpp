#pragma once
// JUnit XML, the report format CI systems read: suites of test cases, written with pugixml.
// tableio/compare.hpp turns a comparison or a table into suites; `ktune fleet merge` adds one
// for its shards.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

struct JunitCase {
  std::string classname{}, name{};
  std::string failure{};  // "" = not failed; else the failure's message
  std::string text{};     // the failure's body, or the passing case's system-out
  std::string failure_type = "failure";
  std::string skipped{};  // "" = run; else why it was skipped (neither failed nor passed)
};

struct JunitSuite {
  std::string name;
  std::vector<JunitCase> cases;
  [[nodiscard]] std::size_t failures() const;
  [[nodiscard]] std::size_t skipped() const;
};

[[nodiscard]] JunitSuite junit_suite(std::string_view suite_name, const std::vector<JunitCase>& cases);

// One document: <testsuites name="ktune"> with the summed counts, a <testsuite> per suite (tests,
// failures, errors="0", skipped), a <testcase> per case (time="0") holding its <failure
// type message>, <skipped message/> or <system-out>. Text is escaped by the XML library; control
// characters XML 1.0 cannot carry become spaces.
[[nodiscard]] std::string render_junit(const std::vector<JunitSuite>& suites);

} // namespace ktune::tableio
