#include "tableio/junit.hpp"

#include <pugixml.hpp>

#include <algorithm>
#include <sstream>

namespace ktune::tableio {

namespace {

// XML 1.0 has no representation for most control characters, escaped or not.
std::string xml_text(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 && c != '\n' && c != '\t' && c != '\r') c = ' ';
  }
  return out;
}

void attribute(pugi::xml_node node, const char* name, std::string_view value) {
  node.append_attribute(name).set_value(xml_text(value).c_str());
}

void attribute(pugi::xml_node node, const char* name, std::size_t value) {
  node.append_attribute(name).set_value(static_cast<unsigned long long>(value));
}

} // namespace

std::size_t JunitSuite::failures() const {
  return static_cast<std::size_t>(std::count_if(
      cases.begin(), cases.end(), [](const JunitCase& c) { return !c.failure.empty(); }));
}

std::size_t JunitSuite::skipped() const {
  return static_cast<std::size_t>(std::count_if(cases.begin(), cases.end(), [](const JunitCase& c) {
    return c.failure.empty() && !c.skipped.empty();
  }));
}

JunitSuite junit_suite(std::string_view suite_name, const std::vector<JunitCase>& cases) {
  return JunitSuite{std::string(suite_name), cases};
}

std::string render_junit(const std::vector<JunitSuite>& suites) {
  pugi::xml_document doc;
  pugi::xml_node declaration = doc.append_child(pugi::node_declaration);
  declaration.append_attribute("version").set_value("1.0");
  declaration.append_attribute("encoding").set_value("UTF-8");
  std::size_t tests = 0, failures = 0;
  for (const auto& s : suites) {
    tests += s.cases.size();
    failures += s.failures();
  }
  pugi::xml_node all = doc.append_child("testsuites");
  attribute(all, "name", std::string_view("ktune"));
  attribute(all, "tests", tests);
  attribute(all, "failures", failures);
  attribute(all, "errors", std::size_t{0});
  for (const auto& s : suites) {
    pugi::xml_node suite = all.append_child("testsuite");
    attribute(suite, "name", s.name);
    attribute(suite, "tests", s.cases.size());
    attribute(suite, "failures", s.failures());
    attribute(suite, "errors", std::size_t{0});
    attribute(suite, "skipped", s.skipped());
    for (const auto& c : s.cases) {
      pugi::xml_node test = suite.append_child("testcase");
      attribute(test, "classname", c.classname);
      attribute(test, "name", c.name);
      attribute(test, "time", std::size_t{0});
      if (!c.failure.empty()) {
        pugi::xml_node failure = test.append_child("failure");
        attribute(failure, "type", c.failure_type);
        attribute(failure, "message", c.failure);
        failure.text().set(xml_text(c.text).c_str());
      } else if (!c.skipped.empty()) {
        attribute(test.append_child("skipped"), "message", c.skipped);
      } else {
        test.append_child("system-out").text().set(xml_text(c.text).c_str());
      }
    }
  }
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_indent, pugi::encoding_utf8);
  return out.str();
}

} // namespace ktune::tableio
