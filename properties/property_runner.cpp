// One property against one implementation: RapidCheck draws, projects refused problems, shrinks a
// failure; or one property on exactly one problem. (check_property, check_property_on)
#include "properties/property_suite.hpp"

#include <exception>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <rapidcheck/detail/Property.h>
#include <rapidcheck/detail/Results.h>
#include <rapidcheck/detail/TestListener.h>
#include <rapidcheck/detail/TestMetadata.h>
#include <rapidcheck/detail/TestParams.h>

#include "impls/capability_space.hpp"
#include "properties/property_detail.hpp"

namespace attn {

using property_detail::DerivedProblemRefused;
using property_detail::run_failed_prefix;
using property_detail::work_of;

namespace {

// The property's space narrowed to the declaration, or why nothing is left ("" when something is).
std::string narrow(const Property& property, const Capabilities& caps, ProblemSpace& space) {
  if (auto missing = property.missing(caps); !missing.empty()) return missing;
  space = narrowed_to(property.space, caps);
  auto names = [](const auto& values) {
    std::vector<std::string> out;
    for (const auto& x : values) out.emplace_back(to_string(x));
    return fmt::format("{}", fmt::join(out, ", "));
  };
  if (space.dtypes.empty())
    return fmt::format("needs one of the dtypes {} (declares {})", names(property.space.dtypes), caps.dtypes.empty() ? "none" : names(caps.dtypes));
  if (space.layouts.empty()) return fmt::format("needs one of the layouts {} (declares {})", names(property.space.layouts), caps.layouts.empty() ? "none" : names(caps.layouts));
  return "";
}

// What both ways of checking a property start with: the verdict naming the property and the
// implementation, its declaration, and the property's space narrowed to it; the verdict is
// already not applicable when nothing of the space is left.
struct Start {
  PropertyVerdict verdict;
  Capabilities caps;
  ProblemSpace space;
  bool applicable() const { return verdict.kind != PropertyVerdict::Kind::not_applicable; }
};

Start start(const Property& property, const Implementation& impl) {
  Start s{{}, impl.describe(), {}};
  s.verdict.property = property.number;
  s.verdict.property_name = property.name;
  s.verdict.implementation = impl.name();
  if (auto why = narrow(property, s.caps, s.space); !why.empty()) {
    s.verdict.kind = PropertyVerdict::Kind::not_applicable;
    s.verdict.message = why;
  }
  return s;
}

// A failure the implementation's declaration allows is a finding.
void classify_failure(const Property& property, const Capabilities& caps, PropertyVerdict& v) {
  const bool run_failed = v.message.rfind(run_failed_prefix, 0) == 0;
  if (v.kind == PropertyVerdict::Kind::failed && !run_failed && property.failure_is_finding && property.failure_is_finding(caps))
    v.kind = PropertyVerdict::Kind::finding;
}

// A projection can grow the work (equal sequence lengths: 1013 x 2 becomes 1013 x 1013): both
// lengths halve together, which keeps their relation (equal stays equal), until the problem is
// back within the space's budget.
Problem fit_to_budget(Problem p, const ProblemSpace& space) {
  const double budget = space.max_work * (space.large ? 16 : 1);
  const std::int64_t old_n_q = p.n_q;
  while (work_of(p) > budget && std::max(p.n_q, p.n_k) > 1) {
    p.n_q = std::max<std::int64_t>(1, p.n_q / 2);
    p.n_k = std::max<std::int64_t>(1, p.n_k / 2);
  }
  if (p.padding.kind == KeyPadding::Kind::per_query && p.n_q != old_n_q) {
    std::vector<std::int64_t> lengths;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.n_q; ++i) lengths.push_back(p.padding.valid_len[std::size_t(b * old_n_q + i)]);
    p.padding.valid_len = std::move(lengths);
  }
  for (auto& len : p.padding.valid_len) len = std::min(len, p.n_k);
  return p;
}

}  // namespace

PropertyVerdict check_property_on(const Property& property, const Implementation& impl, const Problem& problem) {
  Start s = start(property, impl);
  PropertyVerdict& v = s.verdict;
  const Capabilities& caps = s.caps;
  v.repro = problem.repro();
  if (!s.applicable()) return v;
  if (Support s = covers(caps, problem); !s.ok || !(s = impl.supports(problem)).ok) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "unsupported problem: " + s.reason;
    return v;
  }
  try {
    v.message = property.check(impl, problem);
  } catch (const DerivedProblemRefused& refused) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = refused.what();
    return v;
  }
  v.kind = v.message.empty() ? PropertyVerdict::Kind::held : PropertyVerdict::Kind::failed;
  v.cases = v.message.empty() ? 1 : 0;
  classify_failure(property, caps, v);
  return v;
}

PropertyVerdict check_property(const Property& property, const Implementation& impl, const PropertyOptions& options) {
  Start s = start(property, impl);
  PropertyVerdict& v = s.verdict;
  const Capabilities& caps = s.caps;
  ProblemSpace& space = s.space;
  v.seed = options.seed != 0 ? options.seed : std::random_device{}();
  if (!s.applicable()) return v;
  space.large = options.large;
  const auto problems = gen_problem(space);

  std::string last_failure;
  std::optional<Problem> last_failing;  // what ran in the last failing case: the shrunk counterexample, projected
  int drawn = 0, projected = 0, discarded = 0;
  std::string discard_reason;
  // Once a call has timed out, no problem runs again: each shrinking step would cost another
  // timeout (an implementation that hangs everywhere would cost one per step). Every candidate
  // is discarded, so the counterexample stays the one that hung.
  const int timeouts_before = impl.timed_out_calls();
  auto timed_out = [&] { return impl.timed_out_calls() != timeouts_before; };
  auto testable = [&] {
    if (timed_out()) RC_DISCARD("a call timed out: nothing runs again");
    Problem p = *problems;
    ++drawn;
    try {
      p.validate();
    } catch (const std::exception& e) {
      RC_FAIL(std::string("the property's generator made an invalid problem (a bug in properties/): ") + e.what());
    }
    // A problem the implementation refuses runs as its projection onto what it accepts, when
    // that projection is still a problem the property is about.
    bool moved = false;
    if (!covers(caps, p).ok || !impl.supports(p).ok) {
      const Resolution r = resolve(impl, p);
      if (!r.problem || !admits(space, *r.problem)) {
        ++discarded;
        discard_reason = r.problem ? fmt::format("{}; its projection ({}) is not a problem property {} is about", r.skip_reason, r.changes,
                                                 property.number)
                                   : r.skip_reason;
        RC_DISCARD("unsupported problem");
      }
      p = fit_to_budget(*r.problem, space);
      if (!admits(space, p) || !covers(caps, p).ok || !impl.supports(p).ok) {
        ++discarded;
        discard_reason = fmt::format("{}; its projection ({}) is refused once shortened to the work budget", r.skip_reason, r.changes);
        RC_DISCARD("unsupported problem");
      }
      moved = true;
    }
    std::string failure;
    try {
      failure = property.check(impl, p);
    } catch (const DerivedProblemRefused& refused) {
      ++discarded;
      discard_reason = refused.what();
      RC_DISCARD("the check needs a problem the implementation refuses");
    }
    if (!failure.empty()) {
      last_failure = failure;
      last_failing = p;
      RC_FAIL(failure);
    }
    projected += moved;
  };
  // RapidCheck's public entry point (rc::check) prints its own report, reads its configuration
  // from the RC_PARAMS environment variable and returns only a bool. A verdict needs what the
  // public API does not give: the seed and case count chosen here, the number of successes, a
  // failure told apart from giving up (too many discards), and a silent run (the kill matrix fails
  // on purpose). So the driver uses rc::detail's checkProperty, TestParams and TestListener, the
  // same calls rc::check makes; a RapidCheck upgrade that moves them breaks this one function.
  rc::detail::TestMetadata metadata;
  metadata.id = fmt::format("{}/{}", impl.name(), property.number);
  metadata.description = property.name;
  rc::detail::TestParams params;
  params.seed = v.seed;
  params.maxSuccess = options.cases;
  params.maxSize = 100;
  params.maxDiscardRatio = 10;
  params.disableShrinking = !options.shrink;
  // A listener of our own: the default one collects failures for a "reproduce" banner at exit,
  // which expected failures (the mutants' kill matrix) would fill with noise. The repro string
  // and seed in the verdict are how a failure reruns.
  struct Silent final : rc::detail::TestListener {
    void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
    void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  } silent;
  const rc::detail::TestResult result = rc::detail::checkProperty(rc::detail::toProperty(testable), metadata, params, silent);

  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  v.discarded = discarded;
  if (result.match(success)) {
    v.kind = PropertyVerdict::Kind::held;
    v.cases = success.numSuccess;
    v.projected = projected;
  } else if (result.match(failure)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.cases = failure.numSuccess;
    // The last failing case is the shrunk one; its problem as it ran (projected where it was)
    // is the counterexample, so the printed repro string reruns it without a projection.
    if (last_failing)
      v.repro = last_failing->repro();
    else if (!failure.counterExample.empty())
      v.repro = failure.counterExample.front().second;
    v.message = last_failure.empty() ? failure.description : last_failure;
    if (!v.repro.empty() && !timed_out()) {
      try {
        const Problem shrunk = parse_problem(v.repro);
        if (auto again = property.check(impl, shrunk); !again.empty()) v.message = again;
      } catch (const std::exception&) {  // an unparsable repro or a refused derived problem: keep the message
      }
    }
    classify_failure(property, caps, v);
  } else if (result.match(gave_up) && gave_up.numSuccess == 0) {
    // It accepts none of the problems drawn, nor their projections (e.g. a GPU implementation
    // where no device is): nothing to check, which is not the same as a sparse space.
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = fmt::format("accepts none of the {} problems drawn, nor their projections: {}", drawn, discard_reason);
  } else if (result.match(gave_up)) {
    v.kind = PropertyVerdict::Kind::gave_up;
    v.cases = gave_up.numSuccess;
    v.projected = projected;
    v.message = fmt::format("{} of {} problems drawn were refused, and so were their projections (last: {})", discarded, drawn,
                            discard_reason);
  } else if (result.match(error)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.message = "RapidCheck error: " + error.description;
  }
  return v;
}

std::string describe_failure(const PropertyVerdict& v) {
  return fmt::format(
      "property {} {} for {}: {}\n  {}\n  counterexample: {}\n  rerun: attnbench properties --impl {} --property {} --case '{}'\n"
      "  the same problem under the pass rule: attnbench verify --impl {} --case '{}'\n"
      "  RapidCheck seed: {} (after {} passing case(s))\n",
      v.property, v.kind == PropertyVerdict::Kind::finding ? "finding" : "failed", v.implementation, v.property_name, v.message, v.repro,
      v.implementation, v.property, v.repro, v.implementation, v.repro, v.seed, v.cases);
}

}  // namespace attn
