// Result files, shards, merging and the report: schema fields of every kind, readers that ignore
// unknown fields, --shard as a partition, merged shards equal to the unsharded run, bad input
// named, the report's sections and charts, the 1/sqrt(d_k) study, the progress display.
// Over 500 lines: one suite per result file family, sharing its fixtures (a run written, read back).
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.hpp"
#include "impls/registry.hpp"
#include "records/bench_record.hpp"
#include "records/context.hpp"
#include "records/peers_record.hpp"
#include "records/properties_record.hpp"
#include "records/verify_record.hpp"
#include "records/progress.hpp"
#include "reports/properties_report.hpp"
#include "reports/report.hpp"
#include "reports/results.hpp"
#include "reports/scale_study.hpp"
#include "reports/svg_chart.hpp"
#include "reports/verify_report.hpp"
#include "tests/mutants/mutants.hpp"

namespace attn {
namespace {

using nlohmann::json;

// --- the typed bench record (records/bench_record.hpp) ---------------------------------------------

BenchRun timed_run(const std::string& family, std::int64_t n, double ms, int repetition = 0) {
  BenchRun r;
  r.family = family;
  r.n = n;
  r.run_name = fmt::format("{}/n:{}/real_time", family, n);
  r.name = r.run_name;
  r.repetitions = 3;
  r.repetition_index = repetition;
  r.iterations = 10;
  r.real_time = ms;
  r.cpu_time = ms / 2;
  r.time_unit = "ms";
  r.counters["gflops_exact"] = 2.5;
  r.counters["peak_fraction"] = std::nan("");
  return r;
}

TEST(BenchRecord, RoundTripsAndWritesNonFiniteFiguresAsNull) {
  BenchDocument d;
  d.shard = Shard{2, 3};
  d.runs = {timed_run("impl/f32/d64/none", 128, 1.5)};
  d.attnbench.complete = true;
  d.attnbench.peaks.fma_gflops = std::numeric_limits<double>::infinity();
  BenchFit fit;
  fit.family = "impl/f32/d64/none";
  fit.fit_min_n = 64;
  fit.sizes_measured = {32, 64, 128};
  fit.exponent = 2.0;
  d.attnbench.fits = {fit};
  const json written = json::parse(to_json(d).dump());  // strict JSON: nlohmann refuses NaN tokens
  EXPECT_EQ(written["schema"], "attnbench.bench");
  EXPECT_TRUE(written["benchmarks"][0]["peak_fraction"].is_null());
  EXPECT_EQ(written["benchmarks"][0]["n"], 128);
  EXPECT_EQ(written["benchmarks"][0]["time_unit"], "ms");
  EXPECT_TRUE(written["attnbench"]["peaks"]["fma_gflops"].is_null());
  EXPECT_EQ(written["shard"], (json{{"index", 2}, {"count", 3}}));
  const BenchDocument read = read_bench_document(written, "round.json");
  ASSERT_EQ(read.runs.size(), 1u);
  EXPECT_EQ(read.runs[0].family, "impl/f32/d64/none");
  EXPECT_EQ(read.runs[0].n, 128);
  EXPECT_DOUBLE_EQ(read.runs[0].real_time_ms(), 1.5);
  EXPECT_TRUE(std::isnan(read.runs[0].counter("peak_fraction")));
  EXPECT_DOUBLE_EQ(read.runs[0].counter("gflops_exact"), 2.5);
  ASSERT_EQ(read.attnbench.fits.size(), 1u);
  EXPECT_EQ(read.attnbench.fits[0].sizes_used(), (std::vector<std::int64_t>{64, 128}));
  EXPECT_TRUE(read.attnbench.complete);
}

// Files written before the runs carried "family" and "n" (Google Benchmark's JSON as its
// JSONReporter wrote it, names and all) still read: the family and n come from the run name.
TEST(BenchRecord, ReadsFilesWrittenBeforeRunsCarriedFamilyAndN) {
  const json old = json::parse(R"({"context": {"num_cpus": 2}, "benchmarks": [
    {"name": "cpu_naive/f32/d64/none/n:128/real_time", "run_name": "cpu_naive/f32/d64/none/n:128/real_time", "run_type": "iteration",
     "repetitions": 1, "repetition_index": 0, "threads": 1, "iterations": 4, "real_time": 2000.0, "cpu_time": 1900.0, "time_unit": "us",
     "gflops_exact": 1.25, "peak_fraction": null},
    {"name": "cpu_naive/f32/d64/none_BigO", "run_name": "cpu_naive/f32/d64/none", "run_type": "aggregate", "repetitions": 1,
     "threads": 1, "aggregate_name": "BigO", "aggregate_unit": "time", "cpu_coefficient": 1e-4, "real_coefficient": 2e-4,
     "big_o": "N^2", "time_unit": "ms"}],
    "attnbench": {"fits": [{"family": "cpu_naive/f32/d64/none", "exponent": null}]}})");
  const BenchDocument d = read_bench_document(old, "old.json");
  ASSERT_EQ(d.runs.size(), 2u);
  EXPECT_EQ(d.runs[0].family, "cpu_naive/f32/d64/none");
  EXPECT_EQ(d.runs[0].n, 128);
  EXPECT_DOUBLE_EQ(d.runs[0].real_time_ms(), 2.0);
  EXPECT_EQ(d.runs[0].case_name(), "cpu_naive/f32/d64/none/n:128");
  EXPECT_EQ(d.runs[1].family, "cpu_naive/f32/d64/none");
  EXPECT_EQ(d.runs[1].n, 0);
  EXPECT_TRUE(d.runs[1].is_complexity());
  EXPECT_DOUBLE_EQ(d.runs[1].real_time_ms(), 2e-4);
  EXPECT_FALSE(d.attnbench.fits[0].exponent.has_value());
  EXPECT_TRUE(d.attnbench.fits[0].sizes_used().empty());
  json bad = old;
  bad["benchmarks"][0]["real_time"] = "fast";
  try {
    read_bench_document(bad, "bad.json");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: benchmarks[0]: \"real_time\" is not a number"), std::string::npos) << e.what();
  }
}

// The peers scripts write median_seconds; a record that cannot be placed or has no time says why.
TEST(PeersRecord, ReadsTimesInMillisecondsAndMarksUnusableRecords) {
  const json doc = json::parse(R"({"context": {}, "peers": [{"peer": "onnx", "valid_target": true}, {"peer": "jax", "skipped": "not installed"}],
    "results": [{"peer": "onnx", "peer_version": "1.2", "valid_target": true, "median_seconds": 0.002,
                 "problem": {"dtype": "f32", "d_k": 64, "causal": "none", "n_q": 128, "repro": "R"}},
                {"peer": "onnx", "error": "out of memory", "problem": {"dtype": "f32", "d_k": 64, "causal": "none", "n_q": 256}},
                {"peer": "onnx", "problem": {"dtype": "f32", "d_k": 64, "causal": "none", "n_q": 512}},
                {"problem": {"n_q": 16}}]})");
  const PeersDocument d = read_peers_document(doc, "peers.json");
  ASSERT_EQ(d.peers.size(), 2u);
  EXPECT_EQ(d.peers[1].skipped.value_or(""), "not installed");
  ASSERT_EQ(d.results.size(), 4u);
  EXPECT_DOUBLE_EQ(d.results[0].median_ms.value_or(0), 2.0);
  EXPECT_EQ(d.results[0].n_q, 128);
  EXPECT_TRUE(d.results[0].unplaced.empty() && d.results[0].untimed.empty());
  EXPECT_EQ(d.results[1].error.value_or(""), "out of memory");
  EXPECT_NE(d.results[2].untimed.find("neither a positive median_seconds nor an error"), std::string::npos);
  EXPECT_NE(d.results[3].unplaced.find("a record without peer"), std::string::npos);
  EXPECT_THROW(read_peers_document(json{{"results", 3}}, "bad.json"), InputError);
}

TEST(PropertyRecord, RoundTrips) {
  const PropertyRecord r{3, "the sentence", "impl", "failed", 10, 2, 1, 42, "broke", "REPRO", "attnbench properties ..."};
  const PropertyRecord back = read_property_record(to_json(r), 0, "p.json");
  EXPECT_EQ(back.property, 3);
  EXPECT_EQ(back.verdict, "failed");
  EXPECT_EQ(back.seed, 42u);
  EXPECT_EQ(back.repro, "REPRO");
  EXPECT_EQ(back.rerun, r.rerun);
  EXPECT_EQ(to_json(back), to_json(r));
}

TEST(BenchRecord, TheMedianPerFamilyAndSizeIsTheMiddleRepetitionElseTheMedianAggregate) {
  std::vector<BenchRun> runs{timed_run("a", 64, 3.0, 0), timed_run("a", 64, 1.0, 1), timed_run("a", 64, 2.0, 2), timed_run("a", 32, 0.5)};
  BenchRun failed = timed_run("a", 128, 9.0);
  failed.error = "deliberate";
  runs.push_back(failed);
  BenchRun median = timed_run("b", 64, 7.0);
  median.aggregate = true;
  median.aggregate_name = "median";
  BenchRun mean = median;
  mean.aggregate_name = "mean";
  mean.real_time = 100;
  runs.push_back(mean);
  runs.push_back(median);
  const auto points = median_points(runs);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].family, "a");
  EXPECT_EQ(points[0].n, 32);
  EXPECT_EQ(points[1].n, 64);
  EXPECT_DOUBLE_EQ(points[1].time_ms(), 2.0);
  EXPECT_EQ(points[2].family, "b");
  EXPECT_DOUBLE_EQ(points[2].time_ms(), 7.0);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// Small cases: cheap enough for the asan build.
std::vector<Problem> tiny_cases() {
  std::vector<Problem> cases;
  const char* repros[] = {"b=1 hq=1 hkv=1 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=1",
                          "b=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=4 dtype=f16 causal=top_left regime=peaked seed=2",
                          "b=2 hq=1 hkv=1 nq=5 nk=7 dk=4 dv=8 dtype=bf16 causal=none pad=3,7 regime=saturated seed=3",
                          "b=1 hq=1 hkv=1 nq=6 nk=6 dk=4 dv=4 dtype=f64 causal=bottom_right regime=sparse_int seed=4",
                          "b=1 hq=1 hkv=1 nq=2 nk=9 dk=16 dv=4 dtype=f32 causal=none regime=large seed=5"};
  for (const char* r : repros) cases.push_back(parse_problem(r));
  return cases;
}

// A verify result document of the tiny cases, or of the shard's part of them.
json verify_document(std::optional<Shard> shard) {
  static Registry registry = [] {
    Registry r;
    register_builtin_implementations(r);
    return r;
  }();
  std::vector<const Implementation*> impls{registry.find("cpu_naive"), registry.find("cpu_blocked")};
  std::vector<Problem> cases = tiny_cases();
  VerifyOptions options;
  options.reference.threads = 1;
  if (shard) {
    std::vector<Problem> mine;
    for (std::size_t p : shard_positions(cases.size(), *shard)) {
      mine.push_back(cases[p]);
      options.case_numbers.push_back(p);
    }
    cases = mine;
  }
  const VerifyRun run = verify(impls, cases, options);
  json doc = verify_to_json(run, options, run_context(1));
  if (shard) doc["shard"] = shard->to_json();
  return doc;
}

// A bench document shaped as `attnbench bench` writes it (Google Benchmark's JSON plus ours).
json bench_document(const std::string& revision) {
  json runs = json::array();
  for (const char* family : {"cpu_naive/f32/d64/none", "cpu_blocked/f32/d64/causal"})
    for (int n : {128, 256, 512, 1024}) {
      const double ms = 1e-5 * n * n * (std::string(family).rfind("cpu_naive", 0) == 0 ? 2.0 : 1.0);
      runs.push_back({{"name", fmt::format("{}/n:{}/real_time", family, n)},
                      {"run_name", fmt::format("{}/n:{}/real_time", family, n)},
                      {"run_type", "iteration"},
                      {"repetitions", 1},
                      {"repetition_index", 0},
                      {"real_time", ms},
                      {"time_unit", "ms"},
                      {"gflops_exact", 2.0 * n * n * 128 * 8 / (ms * 1e6)},
                      {"workspace_bytes", std::string(family).rfind("cpu_naive", 0) == 0 ? 4.0 * n * n : 0.0},
                      {"an_unknown_counter", 7}});
    }
  json fits = json::array({{{"family", "cpu_naive/f32/d64/none"}, {"exponent", 2.0}, {"r_squared", 1.0}, {"fit_min_n", 512},
                            {"sizes_measured", {128, 256, 512, 1024}}, {"workspace_bytes_at_16384", 1073741824}},
                           {{"family", "cpu_blocked/f32/d64/causal"}, {"exponent", 1.98}, {"r_squared", 0.999}, {"fit_min_n", 512},
                            {"sizes_measured", {128, 256, 512, 1024}}, {"workspace_bytes_at_16384", 0}}});
  json context = run_context(2);
  context["git_revision"] = revision;
  return {{"context", {{"date", "2026-01-01T00:00:00+00:00"}, {"git_revision", revision}}},
          {"benchmarks", runs},
          {"schema", "attnbench.bench"},
          {"schema_version", 1},
          {"attnbench",
           {{"schema", "attnbench.bench"},
            {"version", 1},
            {"context", context},
            {"peaks", {{"fma_gflops", 120.0}, {"sgemm_gflops", 90.0}, {"roofline_gflops", 90.0}}},
            {"fits", fits}}}};
}

ResultFile from_json(const std::string& path, const json& doc) { return parse_result_file(path, doc.dump()); }

std::set<std::string> record_keys(const json& records) {
  std::set<std::string> keys;
  for (const auto& r : records)
    keys.insert(fmt::format("{}|{}|{}|{}", r["implementation"].get<std::string>(), r["case_index"].get<int>(), r["repro"].get<std::string>(),
                            r["status"].get<std::string>()));
  return keys;
}
std::set<std::string> record_keys(const std::vector<VerifyRecord>& records) {
  std::set<std::string> keys;
  for (const auto& r : records) keys.insert(fmt::format("{}|{}|{}|{}", r.implementation, r.case_index, r.repro, r.status));
  return keys;
}

// --- the typed verify record (records/verify_record.hpp) ------------------------------------------

// What verify writes reads back as the same record: every field the file has is typed.
TEST(VerifyRecord, RoundTripsWhatVerifyWrites) {
  const json doc = verify_document(std::nullopt);
  ASSERT_FALSE(doc["records"].empty());
  for (std::size_t i = 0; i < doc["records"].size(); ++i) {
    const json& written = doc["records"][i];
    EXPECT_EQ(to_json(read_verify_record(written, i, "v.json")), written) << written.dump(1);
  }
}

// A backward run's records: each gradient's metrics and the baseline's with their term rounding,
// the worst gradient's as the record's metrics, a failure's isolation and diagnosis; read back
// the same, and the report groups and prints them.
TEST(VerifyRecord, RoundTripsBackwardRecords) {
  std::vector<std::unique_ptr<Implementation>> owned;
  owned.push_back(mutants::make_backward_mutant(std::nullopt));
  owned.push_back(mutants::make_backward_mutant(BackwardMistake::dk_scale_missing));
  std::vector<Problem> cases = tiny_cases();
  for (Problem& p : cases) p.operation = Operation::backward;
  VerifyOptions options;
  options.reference.threads = 1;
  const VerifyRun run = verify({owned[0].get(), owned[1].get()}, cases, options);
  EXPECT_GE(run.passed(), int(cases.size())) << "the control passes every case";
  EXPECT_GT(run.failed(), 0);
  const json doc = verify_to_json(run, options, run_context(1));
  bool isolated = false;
  for (std::size_t i = 0; i < doc["records"].size(); ++i) {
    const json& written = doc["records"][i];
    const VerifyRecord back = read_verify_record(written, i, "v.json");
    EXPECT_EQ(to_json(back), written) << written.dump(1);
    ASSERT_EQ(back.gradients.size(), 3u) << written.dump(1);
    EXPECT_EQ(back.gradients[0].role, "dq");
    ASSERT_TRUE(back.baseline);
    EXPECT_GT(back.baseline->gradients.at(1).term_rounding, 0) << "dk's term rounding";
    EXPECT_EQ(back.metrics->max_abs_at[0], 'd') << "coordinates name the gradient: " << back.metrics->max_abs_at;
    if (back.status == "fail") {
      isolated |= back.isolation.find("the fault is in the backward pass") != std::string::npos;
      EXPECT_EQ(back.metrics->max_abs_at.substr(0, 2), "dk") << "the worst gradient of a missing dK scale is dk";
    }
  }
  EXPECT_TRUE(isolated) << "a failing backward says whose fault it is";
}

// The fields the default set rarely writes: a skip, a projection, given inputs, a diagnosis,
// non-finite figures and the NaN ulps marker.
TEST(VerifyRecord, RoundTripsRareFieldsAndNonFiniteFigures) {
  VerifyRecord fail;
  fail.implementation = "impl";
  fail.repro = fail.label = "REPRO";
  fail.case_index = 7;
  fail.status = "fail";
  fail.problem = {{"dtype", "f16"}, {"n_k", 96}, {"causal", "top_left"}, {"padding", {{"kind", "right"}}}};
  fail.reference = VerifyReference{10, 4, 1, true, 1e-9, 0.25};
  fail.baseline = VerifyBaseline{"cpu_naive in the same precision", {}, 0.5, std::nan(""), 0, {}};
  fail.baseline->metrics.max_ulps = 12;
  fail.projected_from = VerifyRecord::Projection{"NAMED", "dtype f16 -> f32"};
  fail.inputs_from = "dir/";
  fail.metrics.emplace();
  fail.metrics->max_abs = INFINITY;
  fail.metrics->max_ulps = VerifyMetrics::nan_ulps;
  fail.metrics->max_ulps_at = "b=0 h=0 i=1 c=2";
  fail.metrics->lse = VerifyMetrics::Lse{std::nan(""), 3};
  fail.tolerance = 1e-3;
  fail.ratio_to_baseline = INFINITY;
  fail.budget_used = INFINITY;
  fail.reasons = {"too far"};
  fail.seconds = 0.5;
  fail.diagnosis = VerifyDiagnosis{"a leak", {{"leak", "a leak", 1e-4, 1e-3}}, {"leak", "scale"}, 3, "", "", ""};
  fail.diagnosis_skipped = "";
  const json j = to_json(fail);
  EXPECT_EQ(j["metrics"]["max_abs"], "inf");
  EXPECT_EQ(j["metrics"]["max_ulps"], VerifyMetrics::nan_ulps);
  EXPECT_FALSE(j.contains("skip_reason"));
  const VerifyRecord back = read_verify_record(j, 0, "v.json");
  EXPECT_EQ(to_json(back), j);
  EXPECT_TRUE(std::isnan(back.max_ulps()));
  EXPECT_TRUE(std::isinf(back.max_abs()));
  EXPECT_TRUE(back.projected() && back.sampled() && back.ulps_measured());
  EXPECT_EQ(back.diagnosis_summary(), "a leak");
  EXPECT_EQ(back.baseline_max_ulps(), 12);
  EXPECT_EQ(back.dtype(), "f16");
  EXPECT_EQ(back.n_k(), 96);
  EXPECT_EQ(back.mask(), "causal top_left + pad right");

  VerifyRecord skip = fail;
  skip.status = "skip";
  skip.skip_reason = "no f16";
  const json s = to_json(skip);
  for (const char* key : {"metrics", "tolerance", "budget_used", "reasons", "seconds", "diagnosis"}) EXPECT_FALSE(s.contains(key)) << key;
  EXPECT_EQ(s["skip_reason"], "no f16");
  EXPECT_EQ(to_json(read_verify_record(s, 0, "v.json")), s);
}

// The verdict table groups by the problem's real variant: a sliding window is not "none", ALiBi is
// not a plain bias, a soft-cap and sinks are named, and roles in a dtype of their own are part of the dtype.
TEST(VerifyRecord, NamesWindowsAlibiAndRoleDtypes) {
  json r = {{"implementation", "impl"}, {"repro", "R"}, {"status", "pass"}, {"metrics", {{"max_abs", 1e-6}, {"max_ulps", 3.0}}}};
  // The score modifications come from the repro string, by the score pipeline's rows (each with its
  // real settings' values; a seed does not split a group).
  r["problem"] = json(parse_problem("b=1 hq=2 hkv=2 nq=4 nk=6 dk=8 dv=8 dtype=f16 dtypes=o:f32 window=3,0@bottom_right bias=alibi softcap=30 "
                                    "sinks=0.5,0.25 dropout=0.25 dropout_seed=9 regime=diffuse seed=1"));
  const VerifyRecord v = read_verify_record(r, 0, "v.json");
  EXPECT_EQ(v.mask(), "window 3,0@bottom_right + alibi + softcap 30 + sink + dropout 0.25");
  EXPECT_EQ(v.dtype(), "f16 (o: f32)");
  // A record whose repro string no longer parses groups without them.
  r["problem"]["repro"] = "b=1 no_such_token=3";
  EXPECT_EQ(read_verify_record(r, 0, "v.json").mask(), "window 3,0@bottom_right + alibi");
}

// A hand-written record (the gate's tests, older files) needs only what the readers use.
TEST(VerifyRecord, ReadsAMinimalRecordAndNamesABadFigure) {
  json r = {{"implementation", "impl"}, {"repro", "R"}, {"status", "pass"}, {"metrics", {{"max_abs", 1e-6}, {"max_ulps", 3.0}}}};
  const VerifyRecord v = read_verify_record(r, 2, "old.json");
  EXPECT_EQ(v.label, "R");
  EXPECT_EQ(v.max_ulps(), 3);
  EXPECT_EQ(v.mask(), "none");
  EXPECT_TRUE(std::isnan(v.n_k()) && std::isnan(v.baseline_max_ulps()));
  EXPECT_FALSE(v.budget_used.has_value());
  r["metrics"]["max_ulps"] = 2.5;
  const std::string m = message_of([&] { read_verify_record(r, 2, "old.json"); });
  EXPECT_NE(m.find("old.json: records[2] (impl, case ?): metrics.max_ulps is not a whole number of ulps: 2.5"), std::string::npos) << m;
  r["metrics"]["max_ulps"] = "nan";
  r["metrics"]["max_abs"] = "lots";
  EXPECT_NE(message_of([&] { read_verify_record(r, 2, "old.json"); }).find("metrics.max_abs is not a number: \"lots\""), std::string::npos);
}

TEST(Shard, ParsesAndRejectsWithAClearMessage) {
  const Shard s = parse_shard("2/4");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  for (const char* bad : {"0/3", "4/3", "a/b", "3", "1/0", "-1/2", "1/2x", ""}) {
    const std::string m = message_of([&] { parse_shard(bad); });
    EXPECT_NE(m.find("--shard"), std::string::npos) << bad << ": " << m;
  }
}

TEST(Shard, IsAPartitionAndDeterministic) {
  for (std::size_t size = 0; size <= 23; ++size)
    for (int count = 1; count <= 6; ++count) {
      std::vector<int> seen(size, 0);
      for (int index = 1; index <= count; ++index) {
        const auto positions = shard_positions(size, {index, count});
        EXPECT_EQ(positions, shard_positions(size, {index, count}));
        for (std::size_t p : positions) ++seen[p];
      }
      for (std::size_t p = 0; p < size; ++p) EXPECT_EQ(seen[p], 1) << "size " << size << " count " << count << " position " << p;
    }
}

TEST(Schema, ContextHasEveryField) {
  const json c = run_context(3);
  for (const char* key : {"git_revision", "build_type", "compiler", "compiler_flags", "cpu_model", "cpu_cores", "cpu_mhz", "threads", "gpu", "date"})
    EXPECT_TRUE(c.contains(key)) << key;
  ASSERT_TRUE(c["gpu"].is_object());
  EXPECT_TRUE(c["gpu"].contains("available"));
  if (!c["gpu"]["available"].get<bool>()) {
    EXPECT_FALSE(c["gpu"]["reason"].get<std::string>().empty());
  }
}

TEST(Schema, EveryKindCarriesSchemaVersionAndContext) {
  const json verify_doc = verify_document(std::nullopt);
  EXPECT_EQ(verify_doc["schema"], "attnbench.verify");
  EXPECT_EQ(verify_doc["schema_version"], 1);
  EXPECT_TRUE(verify_doc["context"].contains("gpu"));
  EXPECT_EQ(from_json("v.json", verify_doc).kind, "verify");

  PropertiesJson props(PropertyOptions{}, run_context(1));
  PropertyVerdict v;
  v.kind = PropertyVerdict::Kind::failed;
  v.cases = 3;
  v.message = "row 2 sums to 1.5";
  v.repro = "b=1 hq=1 hkv=1 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=1";
  Registry registry;
  register_builtin_implementations(registry);
  props.add(v, property_suite()[0], *registry.find("cpu_naive"));
  const json p = props.to_json();
  EXPECT_EQ(p["schema"], "attnbench.properties");
  EXPECT_EQ(p["schema_version"], 1);
  EXPECT_TRUE(p["context"].contains("git_revision"));
  EXPECT_EQ(p["records"][0]["verdict"], "failed");
  EXPECT_NE(p["records"][0]["rerun"].get<std::string>().find("--property 1"), std::string::npos);
  EXPECT_EQ(from_json("p.json", p).kind, "properties");

  const ResultFile b = from_json("b.json", bench_document("abc1234def56"));
  EXPECT_EQ(b.kind, "bench");
  EXPECT_EQ(b.context["git_revision"], "abc1234def56");  // attnbench.context, not Google Benchmark's
  const ResultFile peers = from_json("x.peers.json", {{"schema", "attnbench.peers"}, {"schema_version", 1}, {"context", json::object()},
                                                      {"peers", json::array()}, {"results", json::array()}});
  EXPECT_EQ(peers.kind, "peers");
}

TEST(Readers, IgnoreUnknownFields) {
  json doc = verify_document(std::nullopt);
  doc["a_future_field"] = {{"nested", {1, 2, 3}}};
  doc["context"]["a_future_context_field"] = "x";
  for (auto& r : doc["records"]) {
    r["a_future_record_field"] = 42;
    r["metrics"]["a_future_metric"] = "y";
  }
  const MergedResults m = merge_results({from_json("future.json", doc)});
  EXPECT_EQ(m.verify_records.size(), doc["records"].size());
  const Report report = render_report(m);
  EXPECT_NE(report.markdown.find("## Verdicts per implementation"), std::string::npos);
}

// Skipped cases get one line per implementation with their reasons and counts, not a verdict row
// "skipped 0 0 N" per dtype and mask.
TEST(Report, SkippedCasesAreOneLinePerImplementationWithTheirReasons) {
  json doc = verify_document(std::nullopt);
  json skip = doc["records"][0];
  skip["implementation"] = "narrow";
  skip["status"] = "skip";
  skip["skip_reason"] = "dtype f16 not declared";
  skip.erase("metrics");
  for (int i = 0; i < 3; ++i) {
    skip["case_index"] = 100 + i;
    doc["records"].push_back(skip);
  }
  skip["skip_reason"] = "no CUDA device";
  skip["case_index"] = 103;
  doc["records"].push_back(skip);
  const Report report = render_report(merge_results({from_json("skips.json", doc)}));
  EXPECT_NE(report.markdown.find("| narrow | 4 | dtype f16 not declared (3); no CUDA device (1) |"), std::string::npos) << report.markdown;
  EXPECT_EQ(report.markdown.find("| skipped | 0 | 0 |"), std::string::npos) << report.markdown;
}

TEST(Merge, ShardsEqualTheUnshardedRun) {
  const json whole = verify_document(std::nullopt);
  std::vector<ResultFile> shards;
  for (int i = 3; i >= 1; --i) shards.push_back(from_json(fmt::format("shard{}.json", i), verify_document(Shard{i, 3})));
  const MergedResults merged = merge_results(shards);
  EXPECT_TRUE(merged.warnings.empty()) << merged.warnings.front();
  EXPECT_EQ(record_keys(merged.verify_records), record_keys(whole["records"]));
  // Merged records come back in case order, like the unsharded file.
  for (std::size_t i = 0; i < merged.verify_records.size(); ++i)
    EXPECT_EQ(merged.verify_records[i].case_index, whole["records"][i]["case_index"]);

  // A missing shard is said; the same shard twice counts once.
  const MergedResults partial = merge_results({shards[0], shards[2], shards[2]});
  ASSERT_FALSE(partial.warnings.empty());
  bool said_missing = false, said_duplicate = false;
  for (const auto& w : partial.warnings) {
    said_missing |= w.find("shard(s) 2 of 3 missing") != std::string::npos;
    said_duplicate |= w.find("duplicate") != std::string::npos;
  }
  EXPECT_TRUE(said_missing);
  EXPECT_TRUE(said_duplicate);
}

TEST(Merge, RefusesDifferentRevisionsUnlessAsked) {
  const std::string m = message_of([] { merge_results({from_json("a.json", bench_document("1111111aaaaa")), from_json("b.json", bench_document("2222222bbbbb"))}); });
  EXPECT_NE(m.find("b.json"), std::string::npos) << m;
  EXPECT_NE(m.find("--allow-mixed-revisions"), std::string::npos) << m;
  const MergedResults ok = merge_results({from_json("a.json", bench_document("1111111aaaaa")), from_json("b.json", bench_document("2222222bbbbb"))},
                                         {true});
  ASSERT_FALSE(ok.warnings.empty());
  // A dirty tree and a full SHA name the same commit.
  EXPECT_NO_THROW(merge_results({from_json("a.json", bench_document("1111111aaaaa-dirty")),
                                 from_json("b.json", bench_document("1111111aaaaa0123456789012345678901234567"))}));
}

TEST(BadInput, NamesTheFile) {
  EXPECT_NE(message_of([] { parse_result_file("broken.json", "{\"schema\": "); }).find("broken.json: not valid JSON"), std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("other.json", R"({"schema": "someone.else", "records": []})"); }).find("other.json: unknown schema 'someone.else'"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("plain.json", R"({"hello": 1})"); }).find("plain.json: not an attnbench result"), std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("new.json", R"({"schema": "attnbench.verify", "schema_version": 99, "records": []})"); }).find("new.json"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("norecords.json", R"({"schema": "attnbench.verify", "schema_version": 1})"); }).find("needs an array 'records'"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("list.json", "[1, 2]"); }).find("list.json"), std::string::npos);
  EXPECT_NE(message_of([] { load_result_file("/nonexistent/results.json"); }).find("/nonexistent/results.json: no such file"), std::string::npos);
  EXPECT_NE(message_of([] { parse_result_file("s.json", R"({"schema": "attnbench.verify", "records": [], "shard": {"index": 3, "count": 2}})"); }).find("s.json"),
            std::string::npos);
}

// A record whose status the report does not know is refused, as the gate refuses it, naming the
// file and the record; so is a properties verdict it does not know.
TEST(BadInput, UnknownStatusOrVerdictIsRefused) {
  json doc = verify_document(std::nullopt);
  ASSERT_GE(doc["records"].size(), 2u);
  doc["records"][1]["status"] = "banana";
  const std::string m = message_of([&] { parse_result_file("v.json", doc.dump()); });
  const std::string which = fmt::format("v.json: records[1] ({}, case {}): ", doc["records"][1]["implementation"].get<std::string>(),
                                        doc["records"][1]["case_index"].dump());
  EXPECT_NE(m.find(which), std::string::npos) << m;
  EXPECT_NE(m.find("unknown status 'banana' (expected fail, pass, skip)"), std::string::npos) << m;
  doc["records"][1].erase("status");
  EXPECT_NE(message_of([&] { parse_result_file("v.json", doc.dump()); }).find("no status"), std::string::npos);
  const std::string p = message_of([] {
    parse_result_file("p.json", R"({"schema": "attnbench.properties", "records": [{"property": 3, "implementation": "x", "verdict": "maybe"}]})");
  });
  EXPECT_NE(p.find("p.json: records[0] (x, property 3): unknown verdict 'maybe'"), std::string::npos) << p;
}

// attnbench's files that are not results are told apart from foreign JSON: `report` skips them.
TEST(BadInput, AttnbenchFilesThatAreNotResultsAreNamed) {
  for (const char* schema : {"attnbench.gate-baseline", "attnbench.gate-config", "attnbench.cases"}) {
    SCOPED_TRACE(schema);
    try {
      parse_result_file("x.json", json{{"schema", schema}, {"schema_version", 1}}.dump());
      ADD_FAILURE() << "accepted";
    } catch (const NotAResult& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("x.json: ")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(schema), std::string::npos) << e.what();
    }
  }
  // The command that wrote a verify-shaped file is kept and shown.
  json doc = verify_document(std::nullopt);
  doc["command"] = "check";
  const MergedResults m = merge_results({parse_result_file("check.json", doc.dump())});
  ASSERT_EQ(m.file_kinds.size(), 1u);
  EXPECT_EQ(m.file_kinds[0], "verify (check)");
}

TEST(Report, HasEverySectionAndSelfContainedHtml) {
  json verify_doc = verify_document(std::nullopt);
  verify_doc["context"]["git_revision"] = "abc1234def56";
  // Text from the results is escaped: a hostile implementation name cannot inject markup.
  verify_doc["records"][0]["implementation"] = "<script>alert(1)</script>";
  PropertiesJson props(PropertyOptions{}, json{{"git_revision", "abc1234def56"}});
  Registry registry;
  register_builtin_implementations(registry);
  PropertyVerdict held;
  held.cases = 40;
  props.add(held, property_suite()[0], *registry.find("cpu_naive"));
  const MergedResults m = merge_results({from_json("verify.json", verify_doc), from_json("bench.json", bench_document("abc1234def56")),
                                         from_json("properties.json", props.to_json())});
  const Report r = render_report(m);
  for (const char* section : {"## Where it was measured", "## Verdicts per implementation × dtype × mask", "## Worst errors (with repro strings)",
                              "## Properties (RapidCheck)", "## Throughput", "## Fitted exponents", "## Why the scale is 1/√d_k"})
    EXPECT_NE(r.markdown.find(section), std::string::npos) << section;
  EXPECT_NE(r.markdown.find("| cpu_naive/f32/d64/none | 2.000 |"), std::string::npos);  // the fitted exponent
  EXPECT_NE(r.markdown.find("`b=1 hq=1 hkv=1 nq=3 nk=5"), std::string::npos);              // a repro string
  EXPECT_NE(r.markdown.find("| 512 |"), std::string::npos);                                // the d_k = 512 row
  for (const char* part : {"<!DOCTYPE html>", "cpu_naive: time vs n", "slope 2.00", "Throughput vs n under the measured peak",
                           "measured CPU peak (roofline) 90.0 GFLOP/s", "Error budget used vs n, f16", "pass line: error = tolerance", "Workspace vs n", "<svg", "</html>"})
    EXPECT_NE(r.html.find(part), std::string::npos) << part;
  EXPECT_EQ(r.html.find("http://"), std::string::npos);
  EXPECT_EQ(r.html.find("https://"), std::string::npos);
  EXPECT_EQ(r.html.find("<script"), std::string::npos);
  EXPECT_NE(r.html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / fmt::format("attn_report_test_{}", ::getpid());
  const auto [md, html] = write_report(r, dir.string());
  EXPECT_TRUE(std::filesystem::exists(md));
  EXPECT_TRUE(std::filesystem::exists(html));
  std::filesystem::remove_all(dir);
}

TEST(ScaleStudy, ScaledScoresKeepUnitVarianceAndSpreadWeights) {
  const ScaleStudy s = scale_study();
  ASSERT_EQ(s.rows.size(), 5u);
  for (const auto& r : s.rows) {
    EXPECT_NEAR(r.scaled_variance, 1.0, 0.2) << "d_k " << r.d_k;
    EXPECT_NEAR(r.raw_variance / double(r.d_k), 1.0, 0.2) << "d_k " << r.d_k;
    EXPECT_GT(r.scaled_entropy, 0.8 * s.uniform_entropy) << "d_k " << r.d_k;
    EXPECT_LE(r.raw_entropy, r.scaled_entropy + 1e-9);
  }
  const auto& big = s.rows.back();
  EXPECT_EQ(big.d_k, 512);
  EXPECT_LT(big.raw_entropy, 0.25 * s.uniform_entropy);          // raw scores: the softmax collapses...
  EXPECT_GT(big.raw_max_weight, big.scaled_max_weight + 0.4);   // ...onto one key
  const ScaleStudy again = scale_study();
  EXPECT_EQ(again.rows.back().raw_entropy, big.raw_entropy);    // deterministic
}

TEST(ScaleStudy, CaseRegimesMatchTheirNames) {
  const CaseRegime diffuse = case_regime(parse_problem("b=1 hq=2 hkv=2 nq=16 nk=256 dk=64 dv=8 dtype=f32 causal=none regime=diffuse seed=9"));
  const CaseRegime peaked = case_regime(parse_problem("b=1 hq=2 hkv=2 nq=16 nk=256 dk=64 dv=8 dtype=f32 causal=none regime=peaked seed=9"));
  EXPECT_NEAR(diffuse.score_std, 1.0, 0.25);
  EXPECT_NEAR(peaked.score_std, 8.0, 2.0);
  EXPECT_GT(diffuse.entropy_fraction, peaked.entropy_fraction);
  const CaseRegime saturated = case_regime(parse_problem("b=1 hq=1 hkv=1 nq=8 nk=64 dk=64 dv=8 dtype=f32 causal=none regime=saturated seed=9"));
  EXPECT_GT(saturated.max_weight, 0.9);
}

TEST(Svg, TicksAndEscaping) {
  EXPECT_EQ(svg::ticks(128, 1024, true, 2), (std::vector<double>{128, 256, 512, 1024}));
  EXPECT_EQ(svg::ticks(1, 100, true, 10), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(svg::escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
  svg::Chart c{"t", "x", "y", true, true, 2, 0.5, "", {{"s", {{16, 0}, {32, 3}}, true}}, {{10, "peak"}}};
  const std::string out = svg::render(c);
  EXPECT_NE(out.find("values of 0 are drawn at 0.5"), std::string::npos);
  EXPECT_NE(out.find("peak"), std::string::npos);
}

TEST(Progress, PlainLinesOffATerminalAndABarOnOne) {
  std::FILE* plain = std::tmpfile();
  Progress p("verify", 40, plain, false);
  for (int i = 0; i < 40; ++i) p.step(fmt::format("case {}", i));
  p.finish();
  std::rewind(plain);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), plain));
  std::fclose(plain);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("[verify] 40/40 (100%) case 39\n"), std::string::npos);
  EXPECT_LE(std::count(text.begin(), text.end(), '\n'), 21);  // every 5%, not every step

  std::FILE* tty = std::tmpfile();
  Progress bar("bench", 4, tty, true);
  bar.step("a");
  EXPECT_EQ(bar.bar_text(8), "[bench] [##......] 1/4 (25%) a");
  bar.clear();
  bar.finish();
  std::fclose(tty);
}

}  // namespace
}  // namespace attn
