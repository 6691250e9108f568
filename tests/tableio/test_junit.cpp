// JUnit XML written with pugixml: whatever a kernel name, a shape or a reason holds, the document
// parses back (here with pugixml, as a CI system's parser would) to the same names and counts.
#include "tableio/junit.hpp"

#include <catch2/catch.hpp>
#include <pugixml.hpp>

#include <string>

namespace tableio = ktune::tableio;

TEST_CASE("JUnit XML parses back to the names and text it was given", "[tableio][junit]") {
  const std::string awkward = "k<&>\"'\x01 ]]> -- \xc3\xa9";   // markup, quotes, a control char, UTF-8
  const std::vector<tableio::JunitCase> cases = {
      {.classname = "suite." + awkward, .name = "passes " + awkward, .text = "out " + awkward},
      {.classname = "suite.x", .name = "fails", .failure = "message " + awkward,
       .text = "body " + awkward},
      {.classname = "suite.y", .name = "skipped", .skipped = "not in the baseline " + awkward},
  };
  const std::string xml = tableio::render_junit({tableio::junit_suite("s " + awkward, cases),
                                                 tableio::junit_suite("empty", {})});
  INFO(xml);
  pugi::xml_document doc;
  REQUIRE(doc.load_string(xml.c_str()));
  const std::string clean = "k<&>\"'  ]]> -- \xc3\xa9";  // the control character became a space

  const pugi::xml_node all = doc.child("testsuites");
  CHECK(all.attribute("tests").as_int() == 3);
  CHECK(all.attribute("failures").as_int() == 1);
  const pugi::xml_node suite = all.child("testsuite");
  CHECK(suite.attribute("name").value() == "s " + clean);
  CHECK(suite.attribute("tests").as_int() == 3);
  CHECK(suite.attribute("failures").as_int() == 1);
  CHECK(suite.attribute("skipped").as_int() == 1);
  CHECK(suite.next_sibling("testsuite").attribute("tests").as_int() == 0);

  pugi::xml_node test = suite.child("testcase");
  CHECK(test.attribute("classname").value() == "suite." + clean);
  CHECK(test.attribute("name").value() == "passes " + clean);
  CHECK(test.child("system-out").text().get() == "out " + clean);
  test = test.next_sibling("testcase");
  CHECK(test.child("failure").attribute("type").value() == std::string("failure"));
  CHECK(test.child("failure").attribute("message").value() == "message " + clean);
  CHECK(test.child("failure").text().get() == "body " + clean);
  test = test.next_sibling("testcase");
  CHECK(test.child("skipped").attribute("message").value() == "not in the baseline " + clean);
  CHECK_FALSE(test.child("failure"));
}
