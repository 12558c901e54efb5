#pragma once
// The invariants attention must keep, checked with RapidCheck against any implementation.
//
// A property is a sentence, a generator of the problems it applies to, and a check of one
// implementation on one problem. Everything a check draws beyond the problem (which rows to
// poison, which permutation, which constant) comes from the problem's seed, so a problem's
// repro string alone reruns a failure exactly:
//     attnbench properties --case 'REPRO' --impl NAME [--property N]
// RapidCheck draws the problems (dimensions first, then the seed that fixes the data) and
// shrinks a failure to a small counterexample, printed as that repro string.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "core/problem.hpp"
#include "impls/implementation.hpp"

namespace attn {

// What a generated problem may contain. Properties restrict it to the problems they hold for.
struct ProblemSpace {
  std::vector<DType> dtypes{DType::f64, DType::f32, DType::f16, DType::bf16};
  bool causal = true;        // top-left and bottom-right
  bool padding = true;       // per-batch and per-query valid lengths
  bool query_padding = true; // per-query valid lengths (a per-query mask)
  bool bool_mask = true;
  bool bias = true;
  bool all_regimes = true;   // else diffuse only
  // Upper bound on b * h_q * n_q * n_k * (d_k + d_v): keeps every check within milliseconds.
  double max_work = 2.0e6;
  bool large = false;        // the slow sweep: 16x the work, longer sequences more often
};

// Problems in `space`: dimensions first (edge values 1, 2, tile - 1, tile, tile + 1 for the
// tiles of the implementations here, primes 97 and 1013, n_q != n_k both ways, d_k != d_v,
// GQA ratios 1, 2, 4 and h_q), then masks and their intersections, the regime, the dtype and
// the seed. Only valid problems come out.
rc::Gen<Problem> gen_problem(const ProblemSpace& space);

struct Property {
  int number;                  // 1-based, stable: what --property selects
  std::string name;            // a sentence that is true of a correct implementation
  ProblemSpace space;          // the problems it applies to
  // Whether it says anything about this implementation (e.g. only those returning weights).
  std::function<bool(const Implementation&)> applies = [](const Implementation&) { return true; };
  // Checks one supported problem. Returns "" when the property holds, else what broke,
  // naming the coordinates.
  std::function<std::string(const Implementation&, const Problem&)> check;
};

// The suite, in order (number 1 first).
const std::vector<Property>& property_suite();

struct PropertyOptions {
  int cases = 40;              // successful cases per (property, implementation)
  std::uint64_t seed = 0;      // RapidCheck's seed; 0: a fresh one, printed on failure
  bool large = false;          // the slow sweep's problem spaces
  bool shrink = true;
};

struct PropertyVerdict {
  enum class Kind { held, failed, not_applicable, gave_up };
  Kind kind = Kind::held;
  int property = 0;
  std::string property_name, implementation;
  int cases = 0;               // successful cases before the verdict
  std::string message;         // the failure, or why it did not apply / gave up
  std::string repro;           // the (shrunk) counterexample's repro string, when failed
  std::uint64_t seed = 0;      // the RapidCheck seed that was used
};

// One property against one implementation: RapidCheck generation and shrinking, problems the
// implementation does not support discarded. Prints nothing.
PropertyVerdict check_property(const Property& property, const Implementation& impl, const PropertyOptions& options);

// One property on exactly one problem (the --case route): held, failed or not_applicable.
PropertyVerdict check_property_on(const Property& property, const Implementation& impl, const Problem& problem);

// A multi-line report of a failure: the property, the implementation, the message, the repro
// string, the command that reruns it and the RapidCheck seed.
std::string describe_failure(const PropertyVerdict& verdict);

// How RapidCheck prints a counterexample: its repro string.
inline void showValue(const Problem& problem, std::ostream& os) { os << problem.repro(); }

}  // namespace attn

namespace rc {
template <>
struct Arbitrary<attn::Problem> {
  static Gen<attn::Problem> arbitrary() { return attn::gen_problem(attn::ProblemSpace{}); }
};
}  // namespace rc
