// The benchmark suite's own parts: the log-log exponent fit, the curated problem list, the
// memory probe, the machine-peak probes, run_bench's contract (errors are reported per
// benchmark, the run goes on, and the result is 1), the device plan (GPU implementations without
// a device are skipped with the reason) and the --peers plan and comparison per (dtype, d).
// Over 500 lines: one suite for benchmarks/, sharing its fake implementations and runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchmarks/bench.hpp"
#include "benchmarks/device_plan.hpp"
#include "benchmarks/machine_peaks.hpp"
#include "benchmarks/memory_probe.hpp"
#include "benchmarks/peer_cases.hpp"
#include "benchmarks/peer_comparison.hpp"
#include "benchmarks/problem_list.hpp"
#include "benchmarks/scaling_fit.hpp"
#include "core/case_files.hpp"
#include "core/error.hpp"
#include "core/inputs.hpp"

namespace attn::bench {
namespace {

// --- fakes ------------------------------------------------------------------------------------

enum class Behaviour { writes_zeros, throws, leaves_output_unwritten };

class FakeImplementation final : public Implementation {
 public:
  FakeImplementation(std::string name, std::vector<DType> dtypes, Behaviour behaviour = Behaviour::writes_zeros,
                     std::int64_t max_supported_n = 1 << 30)
      : name_(std::move(name)), dtypes_(std::move(dtypes)), behaviour_(behaviour), max_supported_n_(max_supported_n) {}
  std::string name() const override { return name_; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "test fake";
    c.dtypes = dtypes_;
    declare_every_mask_and_shape(c);
    c.device = device;
    c.matmul_precision = matmul_precision;
    return c;
  }
  Support supports(const Problem& p) const override {
    return p.n_k <= max_supported_n_ ? Support::yes() : Support::no("n too large for the fake");
  }
  std::size_t workspace_bytes(const Problem& p) const override { return static_cast<std::size_t>(p.n_q * 4); }
  void run(const RunArgs& a) const override {
    sizes_run.push_back(a.problem.n_q);
    if (a.workspace.size() < workspace_bytes(a.problem)) throw std::runtime_error("workspace too small");
    std::memset(a.workspace.data(), 1, a.workspace.size());
    Tensor& out = a.tensors.required_output(Role::o);
    switch (behaviour_) {
      case Behaviour::throws: throw std::runtime_error("deliberate failure in run");
      case Behaviour::leaves_output_unwritten:
        for (std::int64_t i = 0; i + 1 < out.numel(); ++i) out.set(i, 0.0);  // all but the last
        return;
      case Behaviour::writes_zeros:
        for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, 0.0);
        return;
    }
  }

  // The n of every call, in order (warm-ups and Google Benchmark's probes included).
  mutable std::vector<std::int64_t> sizes_run;

 private:
  std::string name_;
  std::vector<DType> dtypes_;
  Behaviour behaviour_;
  std::int64_t max_supported_n_;

 public:
  std::string device = "cpu";       // "cuda": a GPU implementation as far as bench's planning is concerned
  MatmulPrecision matmul_precision = MatmulPrecision::working;
};

// A fake GPU implementation (never run: the tests that would run one skip where a device is).
std::unique_ptr<FakeImplementation> fake_gpu(const std::string& name, std::vector<DType> dtypes = {DType::f32, DType::f16}) {
  auto impl = std::make_unique<FakeImplementation>(name, std::move(dtypes));
  impl->device = "cuda";
  return impl;
}

DeviceStatus no_device() {
  DeviceStatus d;
  d.reason = "no CUDA device: made up for the test";
  return d;
}

const std::vector<DType> all_dtypes{DType::f64, DType::f32, DType::f16, DType::bf16};

std::filesystem::path fresh_temp_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("attnbench_bench_test_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// --- the exponent fit -------------------------------------------------------------------------

TEST(PowerLawFit, RecoversAnExactPowerLaw) {
  std::vector<double> n, t;
  for (double x = 128; x <= 8192; x *= 2) {
    n.push_back(x);
    t.push_back(3e-6 * x * x);
  }
  const auto fit = fit_power_law(n, t);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->exponent, 2.0, 1e-12);
  EXPECT_NEAR(fit->coefficient, 3e-6, 1e-15);
  EXPECT_NEAR(fit->r_squared, 1.0, 1e-12);
  EXPECT_EQ(fit->points, 7u);
}

TEST(PowerLawFit, UsesOnlyPointsAtOrAboveMinN) {
  // Below 512 the cost is flat (overheads); above it grows as n^2. The fit must see only the latter.
  const std::vector<double> n{128, 256, 512, 1024, 2048, 4096};
  const std::vector<double> t{1.0, 1.0, 1.0, 4.0, 16.0, 64.0};
  const auto fit = fit_power_law(n, t, 512);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->exponent, 2.0, 1e-12);
  EXPECT_EQ(fit->points, 4u);
  const auto all = fit_power_law(n, t);
  ASSERT_TRUE(all.has_value());
  EXPECT_LT(all->exponent, 1.7);
  EXPECT_LT(all->r_squared, 0.95);
}

TEST(PowerLawFit, NoiseLowersRSquaredButKeepsTheExponentClose) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> n, t;
  for (double x = 512; x <= 8192; x *= 2) {
    n.push_back(x);
    t.push_back(x * x * std::exp(noise(rng)));
  }
  const auto fit = fit_power_law(n, t);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->exponent, 2.0, 0.1);
  EXPECT_LT(fit->r_squared, 1.0);
  EXPECT_GT(fit->r_squared, 0.99);
}

TEST(PowerLawFit, NeedsTwoDistinctSizes) {
  EXPECT_FALSE(fit_power_law(std::vector<double>{512}, std::vector<double>{1.0}).has_value());
  EXPECT_FALSE(fit_power_law(std::vector<double>{512, 512}, std::vector<double>{1.0, 2.0}).has_value());
  EXPECT_FALSE(fit_power_law(std::vector<double>{128, 256}, std::vector<double>{1.0, 2.0}, 512).has_value());
  const auto two = fit_power_law(std::vector<double>{512, 1024}, std::vector<double>{1.0, 2.0});
  ASSERT_TRUE(two.has_value());
  EXPECT_NEAR(two->exponent, 1.0, 1e-12);
}

TEST(PowerLawFit, RejectsNonPositiveOrMismatchedInput) {
  EXPECT_THROW(fit_power_law(std::vector<double>{512, 1024}, std::vector<double>{1.0}), std::invalid_argument);
  EXPECT_THROW(fit_power_law(std::vector<double>{512, 1024}, std::vector<double>{1.0, 0.0}), std::invalid_argument);
  EXPECT_THROW(fit_power_law(std::vector<double>{512, 1024}, std::vector<double>{1.0, std::nan("")}), std::invalid_argument);
}

// --- the curated problem list -------------------------------------------------------------------

TEST(ProblemList, PowersOfTwoAndTheirErrors) {
  EXPECT_EQ(powers_of_two(128, 8192), (std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192}));
  EXPECT_EQ(powers_of_two(64, 64), (std::vector<std::int64_t>{64}));
  EXPECT_THROW(powers_of_two(100, 8192), InputError);
  EXPECT_THROW(powers_of_two(128, 1000), InputError);
  EXPECT_THROW(powers_of_two(0, 128), InputError);
  EXPECT_THROW(powers_of_two(256, 128), InputError);
}

TEST(ProblemList, MaskNames) {
  EXPECT_EQ(parse_mask("none").window, Window{});
  EXPECT_EQ(parse_mask("causal").window, Window::of(Causal::top_left));
  EXPECT_EQ(parse_mask("top_left").window, Window::of(Causal::top_left));
  EXPECT_EQ(parse_mask("bottom_right").window, Window::of(Causal::bottom_right));
  EXPECT_EQ(parse_mask("sliding:256").window, (Window{256, 0, Align::top_left}));
  EXPECT_EQ(parse_mask("sliding:0").window, (Window{0, 0, Align::top_left}));
  EXPECT_FALSE(parse_mask("causal").softcap);
  EXPECT_EQ(parse_mask("causal+softcap:30"), (FamilyMask{Window::of(Causal::top_left), 30.0}));
  EXPECT_EQ(parse_mask("sliding:256+softcap:2.5"), (FamilyMask{Window{256, 0, Align::top_left}, 2.5}));
  for (const char* bad : {"sliding", "sliding:", "sliding:-1", "sliding:12x", "window", "causal+", "causal+softcap:", "causal+softcap:0",
                          "causal+softcap:-1", "causal+softcap:inf", "causal+softcap:3x", "causal+sink:1"})
    EXPECT_THROW(parse_mask(bad), InputError) << bad;
  FamilySpec f;
  f.window = parse_mask("sliding:256").window;
  EXPECT_EQ(f.mask_name(), "sliding_256");
  EXPECT_FALSE(f.peer_mask());
  f.window = parse_mask("bottom_right").window;
  EXPECT_EQ(f.mask_name(), "causal_bottom_right");
  EXPECT_EQ(f.peer_mask(), "top_left");
  // A soft-capped family: its name says the cap, its problems carry it, and no peer computes it.
  f.window = Window::of(Causal::top_left);
  f.softcap = 30;
  EXPECT_EQ(f.mask_name(), "causal_softcap30");
  EXPECT_FALSE(f.peer_mask());
  EXPECT_EQ(f.problem(64).softcap, 30.0);
}

TEST(ProblemList, DefaultIsOneFamilyPerImplementationAndMaskWithOnlyNVarying) {
  FakeImplementation naive("cpu_naive", all_dtypes), other("other", all_dtypes);
  const std::vector<const Implementation*> impls{&naive, &other};
  ProblemListOptions o;
  o.max_n_for["cpu_naive"] = 4096;
  const ProblemList list = curated_problem_list(impls, o);
  ASSERT_EQ(list.families.size(), 4u);  // 2 implementations x (none, causal), f32, d = 64
  std::set<std::string> names;
  for (const auto& f : list.families) {
    names.insert(f.name());
    EXPECT_EQ(f.dtype, DType::f32);
    EXPECT_EQ(f.head_dim, 64);
    const auto expected = f.implementation == &naive ? powers_of_two(128, 4096) : powers_of_two(128, 8192);
    EXPECT_EQ(f.sizes, expected) << f.name();
    for (std::int64_t n : f.sizes) {
      const Problem p = f.problem(n);
      EXPECT_NO_THROW(p.validate());
      EXPECT_EQ(p.batch, 1);
      EXPECT_EQ(p.h_q, 8);
      EXPECT_EQ(p.h_kv, 8);
      EXPECT_EQ(p.n_q, n);
      EXPECT_EQ(p.n_k, n);
      EXPECT_EQ(p.d_k, 64);
      EXPECT_EQ(p.d_v, 64);
      EXPECT_EQ(p.window, f.window);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"cpu_naive/f32/d64/none", "cpu_naive/f32/d64/causal", "other/f32/d64/none", "other/f32/d64/causal"}));
  ASSERT_EQ(list.notes.size(), 1u);
  EXPECT_NE(list.notes[0].find("cpu_naive: n capped at 4096"), std::string::npos) << list.notes[0];
}

TEST(ProblemList, CausalHalvesThePublishedFlopsAndExactFlopsCountVisiblePairs) {
  FakeImplementation impl("x", all_dtypes);
  const std::vector<const Implementation*> impls{&impl};
  const ProblemList list = curated_problem_list(impls, {});
  ASSERT_EQ(list.families.size(), 2u);
  const Problem dense = list.families[0].problem(1024), causal = list.families[1].problem(1024);
  EXPECT_TRUE(dense.window.is_none());
  EXPECT_EQ(causal.window, Window::of(Causal::top_left));
  EXPECT_DOUBLE_EQ(causal.flops_published(), dense.flops_published() / 2);
  EXPECT_DOUBLE_EQ(dense.flops(), dense.flops_published());
  EXPECT_DOUBLE_EQ(causal.flops(), 2.0 * 8 * (1024.0 * 1025 / 2) * 128);
}

// A sliding window is a family of its own, timed with its exact FLOPs (no published convention
// for it), for an implementation that declares windows; one that does not is left out, saying why.
TEST(ProblemList, SlidingWindowFamiliesCountTheirVisiblePairs) {
  FakeImplementation with_windows("x", all_dtypes);
  ProblemListOptions o;
  o.masks = {parse_mask("sliding:64")};
  o.min_n = 128;
  o.max_n = 256;
  const std::vector<const Implementation*> impls{&with_windows};
  const ProblemList list = curated_problem_list(impls, o);
  ASSERT_EQ(list.families.size(), 1u);
  EXPECT_EQ(list.families[0].name(), "x/f32/d64/sliding_64");
  const Problem p = list.families[0].problem(256);
  // Row i sees min(i, 64) + 1 keys: 64 * 65 / 2 + 65 * (256 - 64) pairs per head, 8 heads.
  EXPECT_EQ(p.visible_pairs(), 8 * (64 * 65 / 2 + 65 * (256 - 64)));
  EXPECT_DOUBLE_EQ(p.flops_published(), p.flops());

  struct NoWindows final : public Implementation {
    std::string name() const override { return "causal_only"; }
    Capabilities describe() const override {
      Capabilities c;
      c.dtypes = {DType::f32};
      declare_every_mask_and_shape(c);
      c.masks.windows = false;
      return c;
    }
    Support supports(const Problem&) const override { return Support::yes(); }
    std::size_t workspace_bytes(const Problem&) const override { return 0; }
    void run(const RunArgs&) const override {}
  } causal_only;
  const std::vector<const Implementation*> narrow{&causal_only};
  const ProblemList none = curated_problem_list(narrow, o);
  EXPECT_TRUE(none.families.empty());
  ASSERT_FALSE(none.notes.empty());
  EXPECT_NE(none.notes[0].find("window 64,0@top_left not declared"), std::string::npos) << none.notes[0];
}

TEST(ProblemList, SmokeUsesTinySizesAndEveryAcceptedDtype) {
  FakeImplementation naive("cpu_naive", all_dtypes), f64_only("f64_only", {DType::f64});
  const std::vector<const Implementation*> impls{&naive, &f64_only};
  ProblemListOptions o;
  o.smoke = true;
  o.max_n_for["cpu_naive"] = 4096;
  const ProblemList list = curated_problem_list(impls, o);
  EXPECT_EQ(list.families.size(), 2u * 4 + 2u * 1);
  for (const auto& f : list.families) EXPECT_EQ(f.sizes, (std::vector<std::int64_t>{16, 32, 64})) << f.name();
}

TEST(ProblemList, UnsupportedDtypesAndSizesAreLeftOutWithAReason) {
  FakeImplementation f64_only("f64_only", {DType::f64}), small("small", all_dtypes, Behaviour::writes_zeros, 1024);
  const std::vector<const Implementation*> impls{&f64_only, &small};
  ProblemListOptions o;
  o.masks = {FamilyMask{Window{}, {}}};
  const ProblemList list = curated_problem_list(impls, o);
  ASSERT_EQ(list.families.size(), 1u);
  EXPECT_EQ(list.families[0].implementation, &small);
  EXPECT_EQ(list.families[0].sizes, powers_of_two(128, 1024));
  auto has_note = [&](const std::string& text) {
    return std::any_of(list.notes.begin(), list.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has_note("f64_only: skipped f32 (not among its dtypes)"));
  EXPECT_TRUE(has_note("small/f32/d64/none: n=2048 unsupported: n too large for the fake"));
}

// --- the memory probe ---------------------------------------------------------------------------

TEST(MemoryProbe, ReadsResidentMemory) {
  EXPECT_GT(read_status_bytes("VmRSS"), 0);
  EXPECT_GE(read_status_bytes("VmHWM"), read_status_bytes("VmRSS") / 2);
  EXPECT_EQ(read_status_bytes("NoSuchKey"), -1);
}

TEST(MemoryProbe, CountsPagesWhenTheyAreTouchedNotWhenMapped) {
  constexpr std::size_t bytes = 64u << 20;
  MemoryProbe probe;
  probe.start();
  PageBuffer buffer(bytes);
  EXPECT_LT(probe.growth_bytes(), std::int64_t{8} << 20) << "mapping alone must not make pages resident";
  auto span = buffer.span();
  ASSERT_EQ(span.size(), bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) span[i] = std::byte{1};
  EXPECT_GE(probe.growth_bytes(), std::int64_t{60} << 20);
}

TEST(MemoryProbe, PeakResetSeesTransientAllocations) {
  MemoryProbe probe;
  if (!probe.peak_reset()) GTEST_SKIP() << "this kernel does not let a process reset its peak RSS";
  probe.start();
  {
    PageBuffer transient(32u << 20);
    auto span = transient.span();
    for (std::size_t i = 0; i < span.size(); i += 4096) span[i] = std::byte{1};
  }  // unmapped: current RSS falls back, the peak does not
  EXPECT_GE(probe.growth_bytes(), std::int64_t{30} << 20);
  probe.start();  // a new reset forgets it
  EXPECT_LT(probe.growth_bytes(), std::int64_t{8} << 20);
}

TEST(MemoryProbe, EmptyBufferIsValid) {
  PageBuffer empty(0);
  EXPECT_EQ(empty.span().size(), 0u);
}

// --- the machine peaks --------------------------------------------------------------------------

TEST(MachinePeaks, FmaAndSgemmRatesArePositiveAndFinite) {
  PeakSettings s;
  s.threads = 1;
  s.seconds = 0.01;
  s.repetitions = 1;
  s.sgemm_size = 64;
  const auto fma = measure_fma_peak(s);
  const auto sgemm = measure_sgemm_peak(s);
  EXPECT_TRUE(std::isfinite(fma.gflops));
  EXPECT_GT(fma.gflops, 0.05);
  EXPECT_TRUE(std::isfinite(sgemm.gflops));
  EXPECT_GT(sgemm.gflops, 0.01);
  EXPECT_NE(fma.method.find(fma_probe_isa()), std::string::npos);
  EXPECT_NE(sgemm.method.find("64x64x64"), std::string::npos);
  EXPECT_EQ(fma.threads, 1);
}

TEST(MachinePeaks, RejectsNonPositiveSettings) {
  PeakSettings s;
  s.threads = 0;
  EXPECT_THROW(measure_fma_peak(s), std::invalid_argument);
  EXPECT_THROW(measure_sgemm_peak(s), std::invalid_argument);
  s.threads = 1;
  s.sgemm_size = 0;
  EXPECT_THROW(measure_sgemm_peak(s), std::invalid_argument);
}

// --- run_bench --------------------------------------------------------------------------------

BenchOptions smoke_options(const std::vector<const Implementation*>& impls, const std::filesystem::path& json) {
  BenchOptions o;
  o.implementations = impls;
  o.smoke = true;
  o.dtypes = {"f32"};
  o.threads = 1;
  o.json_path = json.string();
  o.context = {{"git_revision", "test"}, {"threads", 1}, {"date", "must not be repeated"}};
  return o;
}

TEST(RunBench, AnErroringImplementationIsReportedTheOthersStillRunAndTheResultIsOne) {
  FakeImplementation good("good", all_dtypes), thrower("thrower", all_dtypes, Behaviour::throws),
      lazy("lazy", all_dtypes, Behaviour::leaves_output_unwritten);
  const auto dir = fresh_temp_dir("errors");
  const auto json_path = dir / "sub" / "bench.json";  // the folder does not exist yet
  auto o = smoke_options({&thrower, &good, &lazy}, json_path);
  o.masks = {"none"};
  EXPECT_EQ(run_bench(o), 1);

  const auto doc = load_json(json_path);
  ASSERT_TRUE(doc.contains("context"));
  ASSERT_TRUE(doc.contains("benchmarks"));
  EXPECT_EQ(doc["context"]["git_revision"], "test");
  EXPECT_TRUE(doc["context"].contains("peak_fma_gflops"));
  EXPECT_TRUE(doc["context"].contains("peak_sgemm_gflops"));
  EXPECT_TRUE(doc["context"].contains("roofline_gflops"));
  EXPECT_NE(doc["context"]["date"], "must not be repeated");  // Google Benchmark's own date stays

  std::map<std::string, int> errors, good_runs;
  for (const auto& b : doc["benchmarks"]) {
    const std::string name = b["name"];
    if (b.value("error_occurred", false)) {
      const std::string message = b["error_message"];
      if (name.rfind("thrower/", 0) == 0) {
        EXPECT_NE(message.find("deliberate failure in run"), std::string::npos) << message;
      }
      if (name.rfind("lazy/", 0) == 0) {
        EXPECT_NE(message.find("unwritten"), std::string::npos) << message;
      }
      ++errors[name.substr(0, name.find('/'))];
    } else if (b["run_type"] == "iteration") {
      EXPECT_EQ(name.rfind("good/", 0), 0u) << name;
      for (const char* counter : {"gflops_exact", "gflops_published", "gbytes_per_second", "peak_fraction", "workspace_bytes", "rss_growth_bytes"})
        EXPECT_TRUE(b.contains(counter)) << name << " lacks " << counter;
      ++good_runs[name];
    }
  }
  EXPECT_EQ(errors["thrower"], 3);
  EXPECT_EQ(errors["lazy"], 3);
  EXPECT_EQ(good_runs.size(), 3u);

  const auto& section = doc["attnbench"];
  EXPECT_EQ(section["errors"].size(), 6u);
  bool saw_good_fit = false;
  for (const auto& fit : section["fits"]) {
    if (fit["family"] == "good/f32/d64/none") {
      saw_good_fit = true;
      EXPECT_FALSE(fit["exponent"].is_null());
      EXPECT_EQ(fit["sizes_measured"], nlohmann::json::array({16, 32, 64}));
      EXPECT_EQ(fit["workspace_bytes_at_16384"], 16384 * 4);
    } else {
      EXPECT_TRUE(fit["exponent"].is_null()) << fit["family"];
    }
  }
  EXPECT_TRUE(saw_good_fit);
  std::filesystem::remove_all(dir);
}

TEST(RunBench, BenchmarkFlagsPassThroughAndAFilteredOutFamilyIsNeitherRunNorReported) {
  FakeImplementation good("good", all_dtypes), thrower("thrower", all_dtypes, Behaviour::throws);
  const auto dir = fresh_temp_dir("filter");
  const auto json_path = dir / "bench.json";
  auto o = smoke_options({&thrower, &good}, json_path);
  o.benchmark_flags = {"--benchmark_filter=^good/.*/causal/"};
  EXPECT_EQ(run_bench(o), 0);  // the thrower's families are filtered out
  const auto doc = load_json(json_path);
  std::set<std::string> families;
  for (const auto& b : doc["benchmarks"]) {
    EXPECT_FALSE(b.value("error_occurred", false)) << b["name"];
    const std::string name = b["name"];
    families.insert(name.substr(0, name.find("/n:")));
  }
  EXPECT_TRUE(families.count("good/f32/d64/causal")) << doc["benchmarks"].dump();
  for (const auto& f : families) EXPECT_EQ(f.rfind("good/f32/d64/causal", 0), 0u) << f;
  ASSERT_EQ(doc["attnbench"]["fits"].size(), 1u);
  EXPECT_EQ(doc["attnbench"]["fits"][0]["family"], "good/f32/d64/causal");
  std::filesystem::remove_all(dir);
}

TEST(RunBench, BadOptionsAreInputErrorsBeforeAnythingIsWritten) {
  FakeImplementation good("good", all_dtypes);
  const auto dir = fresh_temp_dir("bad");
  const auto json_path = dir / "out" / "bench.json";
  auto expect_input_error = [&](auto change, const std::string& text) {
    auto o = smoke_options({&good}, json_path);
    change(o);
    try {
      run_bench(o);
      ADD_FAILURE() << "no InputError for: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "out")) << text;
  };
  expect_input_error([](BenchOptions& o) { o.masks = {"sliding"}; }, "unknown mask 'sliding'");
  expect_input_error([](BenchOptions& o) { o.dtypes = {"f8"}; }, "f8");
  expect_input_error([](BenchOptions& o) { o.smoke = false; o.min_n = 100; }, "--min-n 100 is not a power of two");
  expect_input_error([](BenchOptions& o) { o.threads = -1; }, "--threads");
  expect_input_error([](BenchOptions& o) { o.benchmark_flags = {"--bogus"}; }, "unknown option '--bogus'");
  expect_input_error([](BenchOptions& o) { o.benchmark_flags = {"--benchmark_out=elsewhere.json"}; }, "use --json PATH");
  expect_input_error([](BenchOptions& o) { o.benchmark_flags = {"--benchmark_no_such_flag=1"}; }, "--benchmark_no_such_flag=1");
  expect_input_error([](BenchOptions& o) { o.implementations.clear(); }, "no implementations");
  std::filesystem::remove_all(dir);
}

// --- the device plan -----------------------------------------------------------------------------

TEST(DevicePlan, GpuImplementationsWithoutADeviceAreSkippedWithTheReasonTheOthersKept) {
  FakeImplementation cpu("cpu_fake", all_dtypes);
  const auto gpu = fake_gpu("gpu_fake");
  const std::vector<const Implementation*> impls{gpu.get(), &cpu};
  const DevicePlan plan = plan_devices(impls, no_device());
  EXPECT_EQ(plan.runnable, (std::vector<const Implementation*>{&cpu}));
  EXPECT_EQ(plan.skipped, (std::vector<std::string>{"gpu_fake: skipped: no CUDA device: made up for the test"}));
  EXPECT_FALSE(plan.gpu);
}

TEST(DevicePlan, WithADeviceGpuImplementationsRunInTheOrderAsked) {
  FakeImplementation cpu("cpu_fake", all_dtypes);
  const auto gpu = fake_gpu("gpu_fake");
  const std::vector<const Implementation*> impls{gpu.get(), &cpu};
  DeviceStatus device;
  device.available = true;
  device.name = "made-up GPU";
  const DevicePlan plan = plan_devices(impls, device);
  EXPECT_EQ(plan.runnable, impls);
  EXPECT_TRUE(plan.skipped.empty());
  EXPECT_TRUE(plan.gpu);
  EXPECT_EQ(to_json(device)["name"], "made-up GPU");
  EXPECT_EQ(to_json(no_device()), (nlohmann::json{{"available", false}, {"reason", "no CUDA device: made up for the test"}}));
}

TEST(DevicePlan, L2ModesAndRooflinePrecision) {
  EXPECT_EQ(parse_l2_mode("cold"), L2Mode::cold);
  EXPECT_EQ(parse_l2_mode("hot"), L2Mode::hot);
  EXPECT_EQ(to_string(L2Mode::cold), "cold");
  EXPECT_THROW(parse_l2_mode("warm"), InputError);
  // The roofline is the GEMM in the precision the implementation multiplies in: TF32's or bf16's
  // only for f32 data of an implementation whose products round so.
  const auto gpu = fake_gpu("gpu_fake");
  EXPECT_EQ(roofline_precision(*gpu, DType::f32).name(), "f32");
  EXPECT_EQ(roofline_precision(*gpu, DType::bf16).name(), "bf16");
  gpu->matmul_precision = MatmulPrecision::tf32;
  EXPECT_EQ(roofline_precision(*gpu, DType::f32).name(), "tf32");
  EXPECT_EQ(roofline_precision(*gpu, DType::f16).name(), "f16");
  gpu->matmul_precision = MatmulPrecision::bf16;
  EXPECT_EQ(roofline_precision(*gpu, DType::f32).name(), "bf16");
  EXPECT_EQ(roofline_precision(*gpu, DType::f64).name(), "f64");
}

TEST(DevicePlan, GpuFamiliesCarryTheL2ModeInTheirNamesCpuFamiliesDoNot) {
  FakeImplementation cpu("cpu_fake", all_dtypes);
  const auto gpu = fake_gpu("gpu_fake");
  const std::vector<const Implementation*> impls{&cpu, gpu.get()};
  ProblemListOptions o;
  o.masks = {FamilyMask{Window{}, {}}};
  o.gpu_variant = "l2_hot";
  const ProblemList list = curated_problem_list(impls, o);
  ASSERT_EQ(list.families.size(), 2u);
  EXPECT_EQ(list.families[0].name(), "cpu_fake/f32/d64/none");
  EXPECT_EQ(list.families[1].name(), "gpu_fake/f32/d64/none/l2_hot");
  EXPECT_EQ(list.families[1].mask_name(), "none");
}
// The run API's observers see how many benchmarks will run, each one as it finishes with every
// run so far (what the result file holds at that point, also with no file at all), and the end.
TEST(RunBench, ObserversSeeEveryBenchmarkAsItFinishes) {
  struct Recorder final : BenchObserver {
    std::size_t announced = 0, lines = 0, ends = 0;
    std::vector<std::string> names;
    std::vector<std::size_t> runs_so_far;
    std::size_t runs_at_end = 0;
    void started(std::size_t benchmarks) override { announced = benchmarks; }
    void before_console_line() override { ++lines; }
    void benchmark_finished(const std::string& name, const BenchDocument& so_far) override {
      names.push_back(name);
      runs_so_far.push_back(so_far.runs.size());
    }
    void benchmarks_finished(const BenchDocument& runs) override {
      ++ends;
      runs_at_end = runs.runs.size();
    }
  } recorder;
  FakeImplementation good("good", {DType::f32});
  auto o = smoke_options({&good}, "");
  o.json_path.clear();
  o.masks = {"none"};
  o.benchmark_flags = {"--benchmark_filter=."};  // Google Benchmark keeps an earlier test's filter (same process)
  EXPECT_EQ(run_bench(o, {&recorder}), 0);
  EXPECT_EQ(recorder.ends, 1u);
  ASSERT_EQ(recorder.names.size(), recorder.announced);
  EXPECT_GE(recorder.announced, 3u);  // n = 16, 32, 64
  EXPECT_GE(recorder.lines, recorder.names.size());
  EXPECT_EQ(recorder.names.front().rfind("good/f32/", 0), 0u) << recorder.names.front();
  for (std::size_t i = 1; i < recorder.runs_so_far.size(); ++i) EXPECT_GT(recorder.runs_so_far[i], recorder.runs_so_far[i - 1]);
  EXPECT_GE(recorder.runs_at_end, recorder.runs_so_far.back());
}

TEST(RunBench, EachSizeIsThreeRepetitionsInRandomOrderAmongTheOthersAndFinishesOnce) {
  struct Recorder final : BenchObserver {
    std::size_t announced = 0;
    std::vector<std::string> names;
    void started(std::size_t benchmarks) override { announced = benchmarks; }
    void benchmark_finished(const std::string& name, const BenchDocument&) override { names.push_back(name); }
  } recorder;
  FakeImplementation good("good", {DType::f32});
  auto o = smoke_options({&good}, "");
  o.smoke = false;
  o.json_path.clear();
  o.masks = {"none"};
  o.heads = 1;
  o.min_n = 16;
  o.max_n = 256;
  o.fit_min_n = 16;
  // Only the time per repetition is the test's: the repetitions and their order are the defaults.
  o.benchmark_flags = {"--benchmark_filter=.", "--benchmark_min_time=0.001"};
  BenchDocument seen;
  struct Keeper final : BenchObserver {
    BenchDocument* into;
    explicit Keeper(BenchDocument* into) : into(into) {}
    void benchmarks_finished(const BenchDocument& runs) override { *into = runs; }
  } keeper(&seen);
  ASSERT_EQ(run_bench(o, {&recorder, &keeper}), 0);
  // Five sizes, each reported finished once (not again with its aggregates).
  EXPECT_EQ(recorder.announced, 5u);
  EXPECT_EQ(recorder.names.size(), 5u);
  std::map<std::int64_t, std::set<std::int64_t>> repetitions;
  for (const BenchRun& r : seen.runs)
    if (r.is_iteration()) repetitions[r.n].insert(r.repetition_index);
  ASSERT_EQ(repetitions.size(), 5u);
  for (const auto& [n, indices] : repetitions) EXPECT_EQ(indices, (std::set<std::int64_t>{0, 1, 2})) << "n = " << n;
  // Interleaved: the calls do not take the sizes one after the other, which changes size four
  // times (fifteen repetitions shuffled fall into five blocks once in 15! / (3!^5 5!) = 1.4e6).
  std::size_t changes = 0;
  for (std::size_t i = 1; i < good.sizes_run.size(); ++i) changes += good.sizes_run[i] != good.sizes_run[i - 1];
  EXPECT_GT(changes, 4u) << "the sizes ran one after the other";
}

TEST(RunBench, OnlyGpuImplementationsWithoutADeviceRunNothingSmokePassesARealRunFails) {
  if (gpu_device_info().available) GTEST_SKIP() << "a CUDA device is present: the fake GPU implementation would be run";
  const auto gpu = fake_gpu("gpu_fake");
  const auto dir = fresh_temp_dir("nogpu");
  const auto json_path = dir / "out" / "bench.json";
  auto o = smoke_options({gpu.get()}, json_path);
  EXPECT_EQ(run_bench(o), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "out")) << "nothing ran: no JSON";
  o.smoke = false;
  EXPECT_EQ(run_bench(o), 1);
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  o.l2 = "warm";  // bad input still comes first
  EXPECT_THROW(run_bench(o), InputError);
  std::filesystem::remove_all(dir);
}

TEST(RunBench, AGpuImplementationWithoutADeviceIsSkippedNotAnErrorAndSaidSoInTheJson) {
  if (gpu_device_info().available) GTEST_SKIP() << "a CUDA device is present: the fake GPU implementation would be run";
  FakeImplementation good("good", all_dtypes);
  const auto gpu = fake_gpu("gpu_fake");
  const auto dir = fresh_temp_dir("skipgpu");
  const auto json_path = dir / "bench.json";
  auto o = smoke_options({gpu.get(), &good}, json_path);
  o.masks = {"none"};
  o.benchmark_flags = {"--benchmark_filter=."};  // Google Benchmark keeps an earlier test's filter (same process)
  EXPECT_EQ(run_bench(o), 0);
  const auto doc = load_json(json_path);
  for (const auto& b : doc["benchmarks"]) EXPECT_EQ(std::string(b["name"]).rfind("good/", 0), 0u) << b["name"];
  const auto& gpu_json = doc["attnbench"]["gpu"];
  EXPECT_FALSE(gpu_json["device"]["available"]);
  ASSERT_EQ(gpu_json["skipped"].size(), 1u);
  EXPECT_EQ(std::string(gpu_json["skipped"][0]).rfind("gpu_fake: skipped: ", 0), 0u) << gpu_json["skipped"][0];
  EXPECT_EQ(gpu_json["l2_mode"], "cold");
  EXPECT_TRUE(doc["attnbench"]["errors"].empty());
  std::filesystem::remove_all(dir);
}

// --- the --peers plan and comparison ---------------------------------------------------------------

TEST(PeersPlan, PassesTheProblemListOurFamiliesRun) {
  FakeImplementation cpu("cpu_fake", all_dtypes);
  const std::vector<const Implementation*> impls{&cpu};
  ProblemListOptions plo;
  plo.dtypes = {DType::f32, DType::f16};
  plo.head_dims = {32, 64};
  plo.batch = 2;
  plo.heads = 4;
  plo.min_n = 256;
  plo.max_n = 1024;
  const ProblemList list = curated_problem_list(impls, plo);
  BenchOptions o;
  o.implementations = impls;
  o.dtypes = {"f32", "f16"};
  o.head_dims = {32, 64};
  o.batch = 2;
  o.heads = 4;
  o.masks = {"none", "bottom_right", "causal"};
  o.json_path = "results/x.json";
  o.peers_command = "python3 peers.py";
  const PeersPlan plan = plan_peers(o, 3, list.families);
  EXPECT_EQ(plan.arguments("/tmp/c d"), "--cases '/tmp/c d' --threads 3");
  // The timed problems are our families' problems (their repro strings, so their inputs), per
  // dtype, d, mask (bottom_right as the peers' top-left) and n; the checks come first.
  const std::vector<Problem> timed = plan.timed_problems();
  ASSERT_EQ(timed.size(), 2u * 2u * 2u * 3u);
  std::set<std::string> ours;
  for (const FamilySpec& f : list.families)
    if (f.peer_mask())
      for (const std::int64_t n : f.sizes) ours.insert(f.problem(n).repro());
  for (const Problem& p : timed) EXPECT_TRUE(ours.contains(p.repro())) << p.repro();
  const std::vector<PeerCase> cases = plan.cases();
  ASSERT_EQ(cases.size(), timed.size() + 2u * 2u * 12u);
  EXPECT_EQ(cases.front().role, PeerCase::Role::check);
  EXPECT_EQ(cases.back().role, PeerCase::Role::timed);
  EXPECT_EQ(cases.back().problem, timed.back());
  EXPECT_EQ(plan.out_path, "results/x.peers.json");
  ASSERT_EQ(plan.notes.size(), 1u);  // bottom_right is compared with the peers' causal

  // A GPU family in the run adds --l2; with no family left the options' list is passed.
  const auto gpu = fake_gpu("gpu_fake");
  const std::vector<const Implementation*> gpu_impls{gpu.get()};
  ProblemListOptions gpu_plo;
  gpu_plo.masks = {FamilyMask{Window{}, {}}};
  gpu_plo.min_n = gpu_plo.max_n = 128;
  const ProblemList gpu_list = curated_problem_list(gpu_impls, gpu_plo);
  o.l2 = "hot";
  const PeersPlan gpu_plan = plan_peers(o, 1, gpu_list.families);
  EXPECT_EQ(gpu_plan.arguments("D"), "--cases D --threads 1 --l2 hot");
  EXPECT_EQ(gpu_plan.timed_problems().size(), 2u);  // f32, d 64, none and causal, n = 128
  o.min_n = 16;
  o.max_n = 32;
  const PeersPlan options_plan = plan_peers(o, 1, {});
  EXPECT_EQ(options_plan.arguments("D"), "--cases D --threads 1");
  EXPECT_EQ(options_plan.timed_problems().size(), 2u * 2u * 2u * 2u);  // the options' dtypes, d, masks and n
}

TEST(PeersPlan, SmokeNeedsNamedDtypesAndTheCommandMustNotBeEmpty) {
  FakeImplementation cpu("cpu_fake", all_dtypes);
  BenchOptions o;
  o.implementations = {&cpu};
  o.smoke = true;
  o.peers_command = "python3 peers.py";
  EXPECT_THROW(plan_peers(o, 1, {}), InputError);
  o.dtypes = {"bf16"};
  EXPECT_NO_THROW(plan_peers(o, 1, {}));
  o.peers_command = "  ";
  EXPECT_THROW(plan_peers(o, 1, {}), InputError);
}

// The peer-cases folder: a cases directory whose files are our inputs to the bit, and a manifest
// with each case's role, problem and the harness's figures; a folder of something else is refused.
TEST(PeerCases, WritesOurInputsAndTheProblemsAsData) {
  const auto dir = fresh_temp_dir("peer_cases");
  PeersPlan plan;
  plan.min_n = 16;
  plan.max_n = 32;
  plan.heads = 2;
  plan.head_dims = {32};
  plan.dtypes = {"f32", "bf16"};
  plan.script_masks = {"none", "causal"};
  const std::vector<PeerCase> cases = plan.cases();
  ASSERT_EQ(cases.size(), 2u * 12u + 2u * 2u * 2u);
  write_peer_cases(dir / "pc", cases);
  const CaseDirectory directory = read_case_directory(dir / "pc" / "cases");
  ASSERT_EQ(directory.cases.size(), cases.size());
  for (const CaseFileEntry& entry : directory.cases) {
    EXPECT_EQ(entry.problem, cases[entry.index].problem);
    EXPECT_NO_THROW(check_case_inputs(directory, entry, generate_inputs(entry.problem))) << entry.problem.repro();
  }
  std::ifstream in(dir / "pc" / peer_cases_manifest);
  const auto manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest["schema"], "attnbench.peer_cases");
  ASSERT_EQ(manifest["cases"].size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = manifest["cases"][i];
    const Problem& p = cases[i].problem;
    EXPECT_EQ(c["role"], cases[i].role == PeerCase::Role::check ? "check" : "timed");
    EXPECT_EQ(c["problem"]["repro"], p.repro());
    EXPECT_EQ(c["flops"].get<double>(), p.flops());
    EXPECT_EQ(c["flops_published"].get<double>(), p.flops_published());
    EXPECT_EQ(c["bytes_min"].get<double>(), p.bytes_min());
    EXPECT_EQ(c["q"], fmt::format("cases/q_{:04}.npy", i));
    EXPECT_TRUE(std::filesystem::is_regular_file(dir / "pc" / c["v"].get<std::string>()));
  }
  EXPECT_NO_THROW(write_peer_cases(dir / "pc", cases));  // an earlier peer-cases folder is written over
  std::ofstream(dir / "other.txt") << "x";
  EXPECT_THROW(write_peer_cases(dir, cases), InputError);
  std::filesystem::remove_all(dir);
}

// A peers command that copies a prepared JSON to the --out path it is given (the last argument),
// then exits with `code`.
std::string copying_command(const std::filesystem::path& json, int code) {
  return fmt::format("sh -c 'for a; do out=$a; done; cp {} \"$out\"; exit {}' sh", json.string(), code);
}

// A record of the problem the plan times for (dtype, d, causal, n), as a script echoes it.
nlohmann::json peer_record(const std::string& dtype, std::int64_t d, const std::string& causal, std::int64_t n, double seconds) {
  FamilySpec family;
  family.dtype = parse_dtype(dtype);
  family.head_dim = d;
  family.window = Window::of(causal == "none" ? Causal::none : Causal::top_left);
  return {{"peer", "p"},
          {"peer_version", "1"},
          {"problem", family.problem(n)},
          {"median_seconds", seconds},
          {"valid_target", true}};
}

TEST(RunPeers, ComparesEachRecordWithOurFamilyOfTheSameDtypeAndHeadDimension) {
  const auto dir = fresh_temp_dir("peers_dtype");
  const auto json = dir / "prepared.json";
  {
    std::ofstream out(json);
    out << nlohmann::json{{"peers", {{{"peer", "p"}, {"peer_version", "1"}, {"valid_target", true}}}},
                          {"results",
                           {peer_record("f16", 64, "none", 128, 0.004), peer_record("bf16", 64, "none", 128, 0.006),
                            peer_record("f16", 128, "top_left", 128, 0.010), peer_record("f32", 64, "none", 128, 1.0)}}}
               .dump();
  }
  PeersPlan plan;
  plan.command = copying_command(json, 0);
  plan.min_n = plan.max_n = 128;
  plan.head_dims = {64, 128};
  plan.dtypes = {"f16", "bf16"};
  plan.script_masks = {"none", "causal"};
  plan.out_path = (dir / "peers.json").string();
  const std::vector<OurTime> ours{{"gpu", "none", "none", 128, 2.0, "f16", 64},
                                  {"gpu", "none", "none", 128, 3.0, "bf16", 64},
                                  {"gpu", "causal", "top_left", 128, 4.0, "f16", 128}};
  const PeersOutcome outcome = run_peers(plan, ours);
  ASSERT_FALSE(outcome.failed) << outcome.failure;
  const auto& c = outcome.section["comparisons"];
  ASSERT_EQ(c.size(), 3u) << c.dump();
  std::map<std::tuple<std::string, std::int64_t, std::string>, double> ratio;
  for (const auto& row : c) ratio[{row["dtype"], row["head_dim"], row["mask"]}] = row["ours"][0]["ratio"];
  EXPECT_DOUBLE_EQ((ratio[{"f16", 64, "none"}]), 4.0 / 2.0);
  EXPECT_DOUBLE_EQ((ratio[{"bf16", 64, "none"}]), 6.0 / 3.0);
  EXPECT_DOUBLE_EQ((ratio[{"f16", 128, "causal"}]), 10.0 / 4.0);
  ASSERT_EQ(outcome.section["left_out_records"].size(), 1u);  // the f32 record is not on the list
  EXPECT_NE(std::string(outcome.section["left_out_records"][0]).find("dtype=f32"), std::string::npos);
  EXPECT_NE(std::string(outcome.section["left_out_records"][0]).find("not one of the 8 problems"), std::string::npos);
  EXPECT_EQ(outcome.section["cases"]["timed"], 8);
  std::filesystem::remove_all(dir);
}

TEST(RunPeers, ExitThreeIsPeerUnavailableWithTheScriptsReasonNotAFailure) {
  const auto dir = fresh_temp_dir("peers_unavailable");
  const auto json = dir / "prepared.json";
  {
    std::ofstream out(json);
    out << R"({"peers": [{"peer": "torch_sdpa_flash", "skipped": "PyTorch is not installed"}], "results": []})";
  }
  PeersPlan plan;
  plan.command = copying_command(json, 3);
  plan.min_n = plan.max_n = 16;
  plan.head_dims = {64};
  plan.dtypes = {"f16"};
  plan.script_masks = {"none"};
  plan.out_path = (dir / "peers.json").string();
  const PeersOutcome outcome = run_peers(plan, {{"gpu", "none", "none", 16, 1.0, "f16", 64}});
  EXPECT_FALSE(outcome.failed) << outcome.failure;
  EXPECT_TRUE(outcome.unavailable);
  EXPECT_EQ(outcome.unavailable_reason, "torch_sdpa_flash: PyTorch is not installed");
  EXPECT_EQ(outcome.section["status"], "unavailable");
  EXPECT_EQ(outcome.section["exit_code"], 3);
  // Another exit code is a failure.
  plan.command = copying_command(json, 4);
  EXPECT_TRUE(run_peers(plan, {}).failed);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attn::bench
