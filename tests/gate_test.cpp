// The CI gate on in-memory results: Mann-Whitney U against scipy.stats.mannwhitneyu (scipy
// 1.17.1, alternative="greater", method="auto"), config parsing, result recognition and
// merging, each verdict kind, and the JUnit XML.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "records/gate_baseline_record.hpp"
#include "reports/gate.hpp"
#include "reports/mann_whitney.hpp"

namespace {

using nlohmann::json;
using namespace attn::gate;
using attn::GateBaseline;
using attn::read_gate_baseline;
using attn::to_json;

struct Textbook {
  std::vector<double> x, y;
  double u, p;
  bool exact;
};

TEST(MannWhitney, MatchesScipyGreater) {
  // Values printed by scipy.stats.mannwhitneyu(x, y, alternative="greater").
  const std::vector<Textbook> cases{
      {{2.1, 2.3, 2.2, 2.4, 2.5}, {1.0, 1.1, 1.2, 1.3, 1.4}, 25.0, 0.003968253968253968, true},
      {{1, 2, 3}, {4, 5, 6}, 0.0, 1.0, true},
      {{1.5, 3.2, 2.7, 4.1}, {1.1, 2.0, 3.0, 0.9, 2.2}, 16.0, 0.09523809523809523, true},
      {{1, 2, 2, 3, 4}, {2, 3, 3, 5, 1}, 10.5, 0.7043959482943336, false},  // ties: normal approximation
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5}, 55.0, 0.3668649978481236, false},
      {{1, 1, 1}, {1, 1, 1}, 4.5, 1.0, false},
      {{19, 22, 16, 29, 24}, {20, 11, 17, 12}, 17.0, 0.05555555555555555, true},
  };
  for (const auto& c : cases) {
    const attn::MannWhitney r = attn::mann_whitney_greater(c.x, c.y);
    EXPECT_DOUBLE_EQ(r.u, c.u);
    EXPECT_NEAR(r.p_value, c.p, 1e-12 * std::max(1.0, c.p)) << "u = " << c.u;
    EXPECT_EQ(r.exact, c.exact);
  }
}

TEST(MannWhitney, ExactTailByHand) {
  // n1 = n2 = 2: the 6 orderings have U = 0, 1, 2, 2, 3, 4.
  EXPECT_DOUBLE_EQ(attn::mann_whitney_exact_sf(2, 2, 4), 1.0 / 6);
  EXPECT_DOUBLE_EQ(attn::mann_whitney_exact_sf(2, 2, 2), 4.0 / 6);
  EXPECT_DOUBLE_EQ(attn::mann_whitney_exact_sf(2, 2, 0), 1.0);
  EXPECT_DOUBLE_EQ(attn::mann_whitney_exact_sf(5, 5, 25), 1.0 / 252);
  EXPECT_THROW(attn::mann_whitney_greater(std::vector<double>{}, std::vector<double>{1.0}), std::invalid_argument);
}

json base_config() {
  return json::parse(R"({"schema": "attnbench.gate-config", "schema_version": 1,
    "accuracy": {"implementations": ["impl_a"], "error_growth": {"metric": "max_ulps", "factor": 2, "slack": 4}},
    "speed": {"method": "mann_whitney", "alpha": 0.01, "min_slowdown": 0.05, "min_repetitions": 5,
              "max_median_ratio": 1.3, "machine_keys": ["cpu_model"], "on_machine_mismatch": "skip"}})");
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one mentioning " << needle;
  } catch (const attn::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GateConfig, ParsesAndRefusesUnknownKeys) {
  const Config c = parse_config(base_config(), "gate.json");
  EXPECT_EQ(c.accuracy.implementations, std::vector<std::string>{"impl_a"});
  ASSERT_TRUE(c.accuracy.error_growth.has_value());
  EXPECT_EQ(c.accuracy.error_growth->factor, 2);
  EXPECT_EQ(c.speed.min_repetitions, 5);
  auto typo = base_config();
  typo["speed"]["min_slowdwn"] = 0.5;
  expect_input_error([&] { parse_config(typo, "gate.json"); }, "speed.min_slowdwn");
  auto top = base_config();
  top["sped"] = json::object();
  expect_input_error([&] { parse_config(top, "gate.json"); }, "'sped'");
  auto method = base_config();
  method["speed"]["method"] = "t_test";
  expect_input_error([&] { parse_config(method, "gate.json"); }, "not one of");
  auto regex = base_config();
  regex["speed"]["benchmarks"] = {"("};
  expect_input_error([&] { parse_config(regex, "gate.json"); }, "bad regular expression");
  auto schema = base_config();
  schema.erase("schema");
  expect_input_error([&] { parse_config(schema, "gate.json"); }, "gate.json");
  auto alpha = base_config();
  alpha["speed"]["alpha"] = 2;
  expect_input_error([&] { parse_config(alpha, "gate.json"); }, "speed.alpha");
  auto comment = base_config();
  comment["comment"] = "allowed";
  comment["speed"]["comment"] = "allowed";
  EXPECT_NO_THROW(parse_config(comment, "gate.json"));
}

json verify_record(const std::string& impl, const std::string& repro, const std::string& status, double ulps) {
  json r{{"implementation", impl}, {"case_index", 0}, {"label", "label of " + repro}, {"repro", repro}, {"status", status}, {"future_field", 1}};
  if (status == "skip") {
    r["skip_reason"] = "no f16 here";
  } else {
    r["metrics"] = {{"max_abs", ulps * 1e-7}, {"max_ulps", ulps}};
    r["reasons"] = status == "fail" ? json::array({"max abs error 1e-3 > tolerance 1e-6"}) : json::array();
  }
  return r;
}

json verify_doc(std::vector<json> records) {
  return {{"schema", "attnbench.verify"}, {"schema_version", 1}, {"context", {{"cpu_model", "cpu X"}}}, {"records", records}};
}

json bench_doc(const std::string& name, const std::vector<double>& times_ms, const std::string& cpu = "cpu X") {
  json benchmarks = json::array();
  for (std::size_t i = 0; i < times_ms.size(); ++i)
    benchmarks.push_back({{"name", name + "/real_time"}, {"run_name", name + "/real_time"}, {"run_type", "iteration"},
                          {"repetitions", times_ms.size()}, {"repetition_index", i}, {"real_time", times_ms[i] * 1e3},
                          {"cpu_time", times_ms[i] * 1e3 / 2}, {"time_unit", "us"}});
  benchmarks.push_back({{"name", name + "/real_time_median"}, {"run_name", name + "/real_time"}, {"run_type", "aggregate"},
                        {"aggregate_name", "median"}, {"real_time", 1.0}, {"time_unit", "ms"}});
  return {{"context", {{"cpu_model", cpu}, {"num_cpus", 2}}}, {"benchmarks", benchmarks}, {"attnbench", json::object()}};
}

Results results_of(const std::vector<json>& docs) {
  Results r;
  int i = 0;
  for (const auto& d : docs) add_results(r, d, "file" + std::to_string(i++) + ".json");
  return r;
}

const Outcome* find(const Report& report, Kind kind, const std::string& needle) {
  for (const auto& o : report.outcomes)
    if (o.kind == kind && o.name.find(needle) != std::string::npos) return &o;
  return nullptr;
}

const std::vector<double> base_times{10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.15};

TEST(GateResults, RecognisesSchemasAndMergesShards) {
  EXPECT_EQ(document_schema(bench_doc("impl_a/f32/d64/causal/n:64", {1}), "b.json"), "attnbench.bench");
  json tagged = bench_doc("impl_a/f32/d64/causal/n:64", {1});
  tagged["schema"] = "attnbench.bench";
  tagged["schema_version"] = 1;
  tagged["shard"] = {{"index", 0}, {"count", 2}};
  EXPECT_EQ(document_schema(tagged, "b.json"), "attnbench.bench");
  tagged["attnbench"]["complete"] = false;
  Results partial;
  add_results(partial, tagged, "partial.json");
  ASSERT_EQ(partial.notes.size(), 1u);
  EXPECT_NE(partial.notes[0].find("partial.json: the bench run did not finish"), std::string::npos);
  json odd_type = bench_doc("impl_a/f32/d64/causal/n:64", {1});
  odd_type["benchmarks"][0]["run_type"] = 3;
  expect_input_error([&] { add_results(partial, odd_type, "odd_type.json"); }, "odd_type.json: benchmarks[0]: \"run_type\" is not a string");
  json newer = tagged;
  newer["schema_version"] = 2;
  expect_input_error([&] { document_schema(newer, "newer.json"); }, "newer.json: attnbench.bench schema_version 2 is newer");
  expect_input_error([] { document_schema(json{{"schema", "attnbench.unknown"}}, "odd.json"); }, "odd.json: unknown schema");
  expect_input_error([] { document_schema(json{{"records", json::array()}}, "plain.json"); }, "plain.json");
  expect_input_error([] { document_schema(json::array(), "array.json"); }, "array.json");
  Results r;
  add_results(r, verify_doc({verify_record("impl_a", "case 1", "pass", 3)}), "shard0.json");
  add_results(r, verify_doc({verify_record("impl_a", "case 2", "pass", 3)}), "shard1.json");
  EXPECT_EQ(r.accuracy.size(), 2u);
  expect_input_error([&] { add_results(r, verify_doc({verify_record("impl_a", "case 2", "pass", 3)}), "shard2.json"); },
                     "in shard1.json and in shard2.json");
  add_results(r, bench_doc("impl_a/f32/d64/causal/n:64", base_times), "bench0.json");
  ASSERT_EQ(r.speed.count("impl_a/f32/d64/causal/n:64"), 1u);
  EXPECT_EQ(r.speed.at("impl_a/f32/d64/causal/n:64").samples_ms.size(), base_times.size());  // the median aggregate is not a sample
  EXPECT_NEAR(r.speed.at("impl_a/f32/d64/causal/n:64").samples_ms[0], 10.0, 1e-12);
  expect_input_error([&] { add_results(r, bench_doc("impl_a/f32/d64/causal/n:64", base_times), "bench1.json"); }, "bench0.json and in bench1.json");
  json props{{"schema", "attnbench.properties"}};
  expect_input_error([&] { add_results(r, props, "props.json"); }, "nothing the gate reads");
  json broken = verify_doc({verify_record("impl_a", "case 9", "pass", 3)});
  broken["records"][0].erase("metrics");
  expect_input_error([&] { add_results(r, broken, "broken.json"); }, "broken.json: records[0] (impl_a, case 0): missing \"metrics\"");
}

TEST(GateResults, BaselineRoundTrip) {
  const Results r = results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 3), verify_record("impl_a", "case 2", "skip", 0)}),
                                bench_doc("impl_a/f32/d64/causal/n:64", base_times)});
  const json b = baseline_json(r);
  EXPECT_EQ(b["schema"], baseline_schema);
  Results again;
  add_results(again, json::parse(b.dump()), "baseline.json");
  ASSERT_EQ(again.accuracy.size(), 2u);
  EXPECT_EQ(again.accuracy.at("impl_a case 1").max_ulps, 3);
  EXPECT_EQ(again.accuracy.at("impl_a case 2").status, "skip");
  EXPECT_EQ(again.speed.at("impl_a/f32/d64/causal/n:64").samples_ms, r.speed.at("impl_a/f32/d64/causal/n:64").samples_ms);
  EXPECT_EQ(again.speed.at("impl_a/f32/d64/causal/n:64").machine.at("cpu_model"), "cpu X");
  const Report same = evaluate(parse_config(base_config(), "gate.json"), again, r);
  EXPECT_FALSE(same.failed());
}

// The baseline file through its typed record (records/gate_baseline_record.hpp): written and read
// back equal, an infinite error as "inf", and each malformed part named.
TEST(GateResults, BaselineRecordReadsBackWhatItWrote) {
  GateBaseline b;
  b.sources = {{"verify.json", {{"cpu_model", "cpu X"}}}, {"bench.json", {}}};
  b.accuracy = {{"impl_a", "case 1", "label 1", "fail", "", std::numeric_limits<double>::infinity(), 0.5, 0},
                {"impl_a", "case 2", "label 2", "skip", "no f16 here", 0, 0, 0}};
  b.speed = {{"impl_a/f32/d64/none/n:64", {1.0, 2.0}, {1.5, 2.5}, std::nullopt, 1}, {"impl_b/f32/d64/none/n:64", {}, {}, "it threw", 1}};
  const json written = to_json(b);
  EXPECT_EQ(written["accuracy"][0]["max_ulps"], "inf");
  const GateBaseline back = read_gate_baseline(json::parse(written.dump()), "b.json");
  ASSERT_EQ(back.sources.size(), 2u);
  EXPECT_EQ(back.sources[0].context.at("cpu_model"), "cpu X");
  ASSERT_EQ(back.accuracy.size(), 2u);
  EXPECT_TRUE(std::isinf(back.accuracy[0].max_ulps));
  EXPECT_EQ(back.accuracy[1].skip_reason, "no f16 here");
  ASSERT_EQ(back.speed.size(), 2u);
  EXPECT_EQ(back.speed[0].cpu_samples_ms, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(back.speed[1].error, "it threw");
  EXPECT_EQ(to_json(back), written);

  json out_of_range = written;
  out_of_range["speed"][1]["source"] = 2;
  expect_input_error([&] { read_gate_baseline(out_of_range, "b.json"); }, "b.json: speed[1]: \"source\" is not an index into \"sources\"");
  json unknown = written;
  unknown["accuracy"][0]["status"] = "flaky";
  expect_input_error([&] { read_gate_baseline(unknown, "b.json"); }, "b.json: accuracy[0]: unknown status 'flaky'");
  json newer = written;
  newer["schema_version"] = 2;
  expect_input_error([&] { read_gate_baseline(newer, "b.json"); }, "gate baseline schema_version 2 is not 1");
}

TEST(GateEvaluate, UnchangedPasses) {
  const Config c = parse_config(base_config(), "gate.json");
  const auto docs = std::vector<json>{verify_doc({verify_record("impl_a", "case 1", "pass", 3)}), bench_doc("impl_a/f32/d64/causal/n:64", base_times)};
  const Report report = evaluate(c, results_of(docs), results_of(docs));
  EXPECT_FALSE(report.failed());
  EXPECT_EQ(report.count(Kind::accuracy, Verdict::pass), 1);
  EXPECT_EQ(report.count(Kind::presence, Verdict::pass), 2);
  EXPECT_EQ(report.count(Kind::speed, Verdict::pass), 1);
}

TEST(GateEvaluate, FailingVerdictFailsNamingTheCase) {
  const Config c = parse_config(base_config(), "gate.json");
  const Results base = results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 3), verify_record("impl_a", "case 2", "pass", 3)})});
  const Results now = results_of({verify_doc({verify_record("impl_a", "case 1", "fail", 3000), verify_record("impl_a", "case 2", "pass", 3)})});
  const Report report = evaluate(c, base, now);
  EXPECT_TRUE(report.failed());
  const Outcome* o = find(report, Kind::accuracy, "case 1");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->verdict, Verdict::fail);
  EXPECT_NE(format_outcome(*o).find("verdict fail: max abs error"), std::string::npos) << format_outcome(*o);
  EXPECT_NE(format_outcome(*o).find("[repro: case 1]"), std::string::npos);
  EXPECT_EQ(find(report, Kind::accuracy, "case 2")->verdict, Verdict::pass);
}

TEST(GateEvaluate, ErrorGrowthBeyondFactorFails_SyntheticRecords) {
  const Config c = parse_config(base_config(), "gate.json");  // factor 2, slack 4
  const Results base = results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 10)})});
  EXPECT_FALSE(evaluate(c, base, results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 24)})})).failed());
  const Report grown = evaluate(c, base, results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 25)})}));
  ASSERT_TRUE(grown.failed());
  EXPECT_NE(find(grown, Kind::accuracy, "case 1")->message.find("max_ulps grew: 25 vs baseline 10"), std::string::npos);
}

TEST(GateEvaluate, MissingAndNowUnsupportedFailPresence_SyntheticRecords) {
  const Config c = parse_config(base_config(), "gate.json");
  const Results base = results_of({verify_doc({verify_record("impl_a", "case 1", "pass", 3), verify_record("impl_a", "case 2", "pass", 3),
                                               verify_record("impl_a", "case 3", "skip", 0), verify_record("impl_b", "case 1", "pass", 3)}),
                                   bench_doc("impl_a/f32/d64/causal/n:64", base_times)});
  const Results now = results_of({verify_doc({verify_record("impl_a", "case 2", "skip", 0)})});
  const Report report = evaluate(c, base, now);
  EXPECT_TRUE(report.failed());
  EXPECT_EQ(find(report, Kind::presence, "case 1")->message, "passed in the baseline, missing from the results");
  EXPECT_EQ(find(report, Kind::presence, "case 2")->message, "passed in the baseline, now unsupported: no f16 here");
  EXPECT_EQ(find(report, Kind::presence, "case 3"), nullptr);                  // skipped in the baseline: nothing to keep
  EXPECT_EQ(find(report, Kind::presence, "impl_b"), nullptr);                  // not a gated implementation
  EXPECT_EQ(find(report, Kind::presence, "n:64")->verdict, Verdict::fail);      // the benchmark is missing too
  EXPECT_EQ(find(report, Kind::accuracy, "case 2")->verdict, Verdict::skipped);
}

TEST(GateEvaluate, TwofoldSlowdownFailsNoiseDoesNot_SyntheticTimes) {
  const Config c = parse_config(base_config(), "gate.json");
  const Results base = results_of({bench_doc("impl_a/f32/d64/causal/n:64", base_times)});
  std::vector<double> slow, noisy;
  for (double t : base_times) slow.push_back(2 * t);
  for (std::size_t i = 0; i < base_times.size(); ++i) noisy.push_back(base_times[i] * (i % 2 ? 1.03 : 0.99));
  const Report slower = evaluate(c, base, results_of({bench_doc("impl_a/f32/d64/causal/n:64", slow)}));
  ASSERT_TRUE(slower.failed());
  const std::string line = format_outcome(*find(slower, Kind::speed, "n:64"));
  EXPECT_NE(line.find("FAIL speed impl_a/f32/d64/causal/n:64: median 20.100 ms vs baseline 10.050 ms (+100 %), Mann-Whitney p = 2.9e-04"),
            std::string::npos) << line;
  // The same on CPU time (half the real time in bench_doc).
  Config cpu = c;
  cpu.speed.time = "cpu_time";
  const Report slower_cpu = evaluate(cpu, base, results_of({bench_doc("impl_a/f32/d64/causal/n:64", slow)}));
  ASSERT_TRUE(slower_cpu.failed());
  EXPECT_NE(format_outcome(*find(slower_cpu, Kind::speed, "n:64")).find("CPU time median 10.050 ms vs baseline 5.025 ms (+100 %)"), std::string::npos);
  // 3 % slower in half the repetitions: below min_slowdown, not a failure whatever p says.
  EXPECT_FALSE(evaluate(c, base, results_of({bench_doc("impl_a/f32/d64/causal/n:64", noisy)})).failed());
}

TEST(GateEvaluate, FewRepetitionsFallBackToTheMedianRatio) {
  const Config c = parse_config(base_config(), "gate.json");  // max_median_ratio 1.3
  const Results base = results_of({bench_doc("impl_a/f32/d64/causal/n:64", {10, 10.1, 9.9})});
  const Report slow = evaluate(c, base, results_of({bench_doc("impl_a/f32/d64/causal/n:64", {14, 14, 14})}));
  EXPECT_TRUE(slow.failed());
  ASSERT_FALSE(slow.notes.empty());
  EXPECT_NE(slow.notes[0].find("median ratio threshold"), std::string::npos);
  EXPECT_FALSE(evaluate(c, base, results_of({bench_doc("impl_a/f32/d64/causal/n:64", {12, 12, 12})})).failed());
}

TEST(GateEvaluate, AnotherMachineIsNotGatedForSpeed) {
  Config c = parse_config(base_config(), "gate.json");
  const Results base = results_of({bench_doc("impl_a/f32/d64/causal/n:64", base_times, "cpu X")});
  std::vector<double> slow;
  for (double t : base_times) slow.push_back(2 * t);
  const Results now = results_of({bench_doc("impl_a/f32/d64/causal/n:64", slow, "cpu Y")});
  const Report skipped = evaluate(c, base, now);
  EXPECT_FALSE(skipped.failed());
  EXPECT_EQ(find(skipped, Kind::speed, "n:64")->verdict, Verdict::skipped);
  ASSERT_FALSE(skipped.notes.empty());
  EXPECT_NE(skipped.notes[0].find("cpu_model 'cpu Y' vs baseline 'cpu X'"), std::string::npos) << skipped.notes[0];
  c.speed.on_machine_mismatch = "compare";
  EXPECT_TRUE(evaluate(c, base, now).failed());
}

TEST(GateEvaluate, BenchmarkErrorFails) {
  const Config c = parse_config(base_config(), "gate.json");
  json doc = bench_doc("impl_a/f32/d64/causal/n:64", {1.0});
  doc["benchmarks"][0]["error_occurred"] = true;
  doc["benchmarks"][0]["error_message"] = "output element left unwritten";
  const Report report = evaluate(c, results_of({bench_doc("impl_a/f32/d64/causal/n:64", base_times)}), results_of({doc}));
  ASSERT_TRUE(report.failed());
  EXPECT_EQ(find(report, Kind::speed, "n:64")->message, "benchmark error: output element left unwritten");
}

TEST(GateJunit, EscapesAndCounts) {
  EXPECT_EQ(xml_escape("a<b>&\"c'\n"), "a&lt;b&gt;&amp;&quot;c&apos;&#10;");
  Report report;
  report.outcomes.push_back({Kind::accuracy, "impl <a> & \"b\"", Verdict::fail, "max abs 1e-3 > 1e-6 & more", "b=1 hq=2"});
  report.outcomes.push_back({Kind::speed, "impl_a/f32/d64/causal/n:64", Verdict::skipped, "no baseline", ""});
  report.notes.push_back("a note with <angle>");
  const std::string xml = junit_xml(report);
  EXPECT_NE(xml.find("<testsuites name=\"attnbench gate\" tests=\"2\" failures=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testsuite name=\"accuracy\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\">"), std::string::npos);
  EXPECT_NE(xml.find("name=\"impl &lt;a&gt; &amp; &quot;b&quot;\""), std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"max abs 1e-3 &gt; 1e-6 &amp; more\""), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"no baseline\"/>"), std::string::npos);
  EXPECT_EQ(xml.find("<angle>"), std::string::npos);
}

}  // namespace
