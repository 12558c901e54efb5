// Repro strings written before Problem v2 (the built-in default and quick sets and hand-written
// variants of every field) keep parsing to the same problem: tests/data/repro_strings_v1.txt holds
// each string with the label and JSON that the flat Problem printed for it, and the file is never
// regenerated from the current code, so a change to the parser, printer or JSON shows here.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/case_sets.hpp"
#include "core/problem.hpp"

namespace attn {
namespace {

struct Entry {
  int line;
  std::string input, label, json;
};

std::vector<Entry> read_entries() {
  std::ifstream file(ATTN_TEST_DATA "/repro_strings_v1.txt");
  EXPECT_TRUE(file) << "cannot open " ATTN_TEST_DATA "/repro_strings_v1.txt";
  std::vector<Entry> entries;
  std::string text;
  for (int line = 1; std::getline(file, text); ++line) {
    if (text.empty() || text[0] == '#') continue;
    const auto tab1 = text.find('\t');
    const auto tab2 = text.find('\t', tab1 + 1);
    EXPECT_NE(tab2, std::string::npos) << "line " << line << " lacks two tabs";
    if (tab2 == std::string::npos) continue;
    entries.push_back({line, text.substr(0, tab1), text.substr(tab1 + 1, tab2 - tab1 - 1), text.substr(tab2 + 1)});
  }
  return entries;
}

TEST(ReproCompat, OldStringsParseToTheSameProblem) {
  const auto entries = read_entries();
  ASSERT_GT(entries.size(), 150u);
  for (const Entry& e : entries) {
    SCOPED_TRACE(::testing::Message() << "line " << e.line << ": " << e.input);
    const Problem p = parse_problem(e.input);
    EXPECT_EQ(nlohmann::json(p), nlohmann::json::parse(e.json));
    EXPECT_EQ(nlohmann::json(p).dump(), e.json);  // the same keys, values and number spellings
    EXPECT_EQ(p.label(), e.label);
    const std::string repro = p.repro();
    EXPECT_EQ(repro.find('\n'), std::string::npos);
    EXPECT_EQ(parse_problem(repro), p);
    EXPECT_EQ(repro, nlohmann::json::parse(e.json).at("repro").get<std::string>());
  }
}

// The built-in sets still print exactly the strings stored: a case set's repro strings are how
// users name its cases in reports and case files.
// Cases added to a set since come after the stored ones (124 default, then 32 quick).
TEST(ReproCompat, BuiltInSetsPrintTheStoredStrings) {
  constexpr std::size_t stored_default = 124, stored_quick = 32;
  std::vector<std::string> stored;
  for (const Entry& e : read_entries()) stored.push_back(e.input);
  ASSERT_GE(stored.size(), stored_default + stored_quick);
  const std::vector<Problem> defaults = default_cases(), quick = quick_cases();
  ASSERT_GE(defaults.size(), stored_default);
  ASSERT_GE(quick.size(), stored_quick);
  for (std::size_t i = 0; i < stored_default; ++i) EXPECT_EQ(defaults[i].repro(), stored[i]) << "default case " << i;
  for (std::size_t i = 0; i < stored_quick; ++i) EXPECT_EQ(quick[i].repro(), stored[stored_default + i]) << "quick case " << i;
}

}  // namespace
}  // namespace attn
