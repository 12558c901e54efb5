// gate_planted: test-only driver for the gate's acceptance tests. It runs the real verify and
// bench code paths (attn::verify + verify_to_json, attn::bench::run_bench), as `attnbench verify`
// and `attnbench bench` do, with one implementation optionally replaced by a planted regression
// that keeps its name, so the gate compares it with that implementation's baseline:
//   --plant-mutant MISTAKE:IMPL   IMPL's cases are run by tests/mutants' MISTAKE (an accuracy bug):
//                                 a forward mistake's mutant, or a backward one's (the control's
//                                 forward, the mistake in its backward: verification/backward_mistakes)
//   --plant-slowdown K:IMPL       IMPL runs its whole forward pass K times per call (K x slower)
//   --twin NAME:IMPL              bench also runs IMPL unchanged under NAME, in the same process;
//                                 with --benchmark_enable_random_interleaving=true the two are
//                                 measured in alternation, so a baseline and the planted run see
//                                 the same machine (on a shared one, speed drifts by 2x in minutes)
// Without a plant it is the unchanged tree.
//
//   gate_planted verify --impl cpu_blocked --cases FILE --json OUT [--plant-mutant last_key_tile_dropped:cpu_blocked]
//   gate_planted bench --impl cpu_blocked --masks causal --min-n 64 --max-n 128 --threads 1 --json OUT
//                [--plant-slowdown 2:cpu_blocked] [--benchmark_repetitions=5 ...]
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "benchmarks/bench.hpp"
#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "impls/registry.hpp"
#include "records/context.hpp"
#include "reports/verify_report.hpp"
#include "tests/mutants/mutants.hpp"
#include "verification/backward_mistakes.hpp"

namespace {

// Another implementation under `name`, its forward pass run `repeat` times per call.
class Planted final : public attn::Implementation {
 public:
  Planted(std::string name, const attn::Implementation* inner, std::unique_ptr<attn::Implementation> owned, int repeat)
      : name_(std::move(name)), inner_(inner), owned_(std::move(owned)), repeat_(repeat) {}
  std::string name() const override { return name_; }
  attn::Capabilities describe() const override { return inner_->describe(); }
  attn::Support supports(const attn::Problem& problem) const override { return inner_->supports(problem); }
  std::size_t workspace_bytes(const attn::Problem& problem) const override { return inner_->workspace_bytes(problem); }
  void run(const attn::RunArgs& args) const override {
    for (int i = 0; i < repeat_; ++i) inner_->run(args);
  }

 private:
  std::string name_;
  const attn::Implementation* inner_;
  std::unique_ptr<attn::Implementation> owned_;
  int repeat_;
};

std::pair<std::string, std::string> split_plant(const std::string& spec, const char* option) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    throw attn::InputError(fmt::format("{} wants WHAT:IMPL, got '{}'", option, spec));
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gate_planted: verify or bench with a planted regression (test-only)"};
  app.require_subcommand(1);
  std::vector<std::string> names;
  std::string mutant_spec, slowdown_spec, twin_spec, cases = "quick", json_path;
  attn::bench::BenchOptions bench_options;
  bench_options.masks = {"causal"};

  auto* verify = app.add_subcommand("verify", "attn::verify on a case set, JSON as attnbench verify writes it");
  verify->add_option("--impl", names)->required();
  verify->add_option("--cases", cases);
  verify->add_option("--json", json_path)->required();
  verify->add_option("--plant-mutant", mutant_spec, "MISTAKE:IMPL");

  auto* bench = app.add_subcommand("bench", "attn::bench::run_bench, JSON as attnbench bench writes it");
  bench->add_option("--impl", names)->required();
  bench->add_option("--masks", bench_options.masks)->delimiter(',');
  bench->add_option("--d", bench_options.head_dims)->delimiter(',');
  bench->add_option("--heads", bench_options.heads);
  bench->add_option("--threads", bench_options.threads);
  bench->add_option("--min-n", bench_options.min_n);
  bench->add_option("--max-n", bench_options.max_n);
  bench->add_option("--json", json_path)->required();
  bench->add_option("--plant-slowdown", slowdown_spec, "K:IMPL");
  bench->add_option("--twin", twin_spec, "NAME:IMPL");
  bench->allow_extras();
  CLI11_PARSE(app, argc, argv);

  try {
    attn::Registry registry;
    attn::register_builtin_implementations(registry);
    std::vector<std::unique_ptr<attn::Implementation>> planted;
    std::vector<const attn::Implementation*> chosen;
    std::string plant_what, plant_into;
    if (!mutant_spec.empty()) std::tie(plant_what, plant_into) = split_plant(mutant_spec, "--plant-mutant");
    if (!slowdown_spec.empty()) std::tie(plant_what, plant_into) = split_plant(slowdown_spec, "--plant-slowdown");
    for (const auto& name : names) {
      const attn::Implementation* impl = registry.find(name);
      if (impl == nullptr) throw attn::InputError("unknown implementation " + name);
      if (name != plant_into) {
        chosen.push_back(impl);
        continue;
      }
      if (!mutant_spec.empty()) {
        std::unique_ptr<attn::Implementation> mutant;
        for (const auto mistake : attn::mutants::all_mistakes())
          if (attn::mutants::to_string(mistake) == plant_what) mutant = attn::mutants::make_mutant(mistake);
        for (const auto& known : attn::known_backward_mistakes())
          if (known.name == plant_what) mutant = attn::mutants::make_backward_mutant(known.id);
        if (!mutant) throw attn::InputError("unknown mistake " + plant_what);
        const attn::Implementation* inner = mutant.get();
        planted.push_back(std::make_unique<Planted>(name, inner, std::move(mutant), 1));
        fmt::print("planted: {} runs as mutant_{} (an accuracy regression)\n", name, plant_what);
      } else {
        const int k = std::stoi(plant_what);
        if (k < 2) throw attn::InputError("--plant-slowdown K must be at least 2");
        planted.push_back(std::make_unique<Planted>(name, impl, nullptr, k));
        fmt::print("planted: {} runs its forward pass {} times per call ({}x slower)\n", name, k, k);
      }
      chosen.push_back(planted.back().get());
    }
    if (!plant_into.empty() && planted.empty()) throw attn::InputError("the planted implementation " + plant_into + " is not among --impl");
    if (!twin_spec.empty()) {
      const auto [twin_name, twin_of] = split_plant(twin_spec, "--twin");
      const attn::Implementation* impl = registry.find(twin_of);
      if (impl == nullptr) throw attn::InputError("unknown implementation " + twin_of);
      planted.push_back(std::make_unique<Planted>(twin_name, impl, nullptr, 1));
      chosen.push_back(planted.back().get());
      fmt::print("twin: {} runs {} unchanged\n", twin_name, twin_of);
    }

    if (verify->parsed()) {
      attn::VerifyOptions options;
      const auto context = attn::run_context(1);
      const attn::VerifyRun run = attn::verify(chosen, attn::load_cases(cases), options);
      attn::write_json_file(json_path, attn::verify_to_json(run, options, context));
      attn::print_verify_summary(std::cout, run);
      return run.failed() > 0 ? 1 : 0;
    }
    bench_options.implementations = chosen;
    bench_options.json_path = json_path;
    bench_options.benchmark_flags = bench->remaining();
    bench_options.context = attn::run_context(bench_options.threads > 0 ? bench_options.threads : 1);
    return attn::bench::run_bench(bench_options);
  } catch (const attn::InputError& e) {
    fmt::print(stderr, "gate_planted: error: {}\n", e.what());
    return 2;
  }
}
