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
#include <map>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "core/problem.hpp"
#include "impls/implementation.hpp"

namespace attn {

// What a generated problem may contain: the property's own space, narrowed to what the
// implementation declares (narrowed_to). Every feature listed is drawn often enough that 100
// draws see it; none of the draws depends on RapidCheck's size (which is 0 until a case passes:
// size-scaled draws would ask for the same problem again and again).
struct ProblemSpace {
  std::vector<DType> dtypes{DType::f64, DType::f32, DType::f16, DType::bf16};
  // A role's own dtypes, drawn for about one problem in four (mixed precision: an f32 output of
  // f16 inputs, a bf16 K); narrowed to what the implementation declares for each role itself.
  std::map<Role, std::vector<DType>> role_dtypes{{Role::q, dtypes}, {Role::k, dtypes}, {Role::v, dtypes}, {Role::o, dtypes}};
  std::vector<Layout> layouts{Layout::bhsd, Layout::bshd, Layout::strided};  // each draw takes one (Problem::layout)
  MaskSupport masks = MaskSupport::every();   // the masks that may be drawn, intersecting when several are
  bool gqa = true;                            // h_kv < h_q may be drawn
  bool different_dk_dv = true;
  // Head dims: the listed ones when non-empty, else [min_head_dim, max_head_dim].
  std::int64_t min_head_dim = 1, max_head_dim = 256;
  std::vector<std::int64_t> head_dims;
  bool custom_scale = true;  // explicit scales, some far from 1/sqrt(d_k): 0.05x, 2x, and plain 1
  // The score pipeline's modifications that may be drawn (core/score_pipeline.hpp), each for about
  // one problem in four of an implementation that lists it: soft-caps of 0.5, 2, 8 and 50 (below,
  // around and far above the scores of each regime); sinks drawn around -4, 0, 2 and 40; dropout
  // at p = 0.1, 0.5 and 0.9.
  std::vector<ScoreModification> score_modifications{all_score_modifications.begin(), all_score_modifications.end()};
  std::vector<Regime> regimes{Regime::diffuse, Regime::peaked, Regime::saturated, Regime::large, Regime::sparse_int, Regime::uniform01};
  // The operation every problem has: the backward's properties (21 to 27) draw backward problems,
  // which run the implementation's forward and then its backward.
  Operation operation = Operation::forward;
  // What every problem of the property must have (a property about it means nothing otherwise).
  bool needs_causal = false;       // a causal mask, of a declared alignment
  bool needs_gqa = false;          // h_kv < h_q
  bool needs_mask = false;         // some masked key
  bool needs_window = false;       // a window beyond causal (a bounded left side, or a right side past the diagonal)
  bool needs_alibi = false;        // ALiBi's bias
  bool needs_sink = false;         // an attention sink
  bool needs_dropout = false;      // dropout
  bool wants_fully_masked = false; // shaped so that fully masked rows are likely
  // Upper bound on b * h_q * n_q * n_k * (d_k + d_v): keeps every check within milliseconds.
  double max_work = 2.0e6;
  bool large = false;        // the slow sweep: 16x the work, longer sequences more often
};

// The space narrowed to what an implementation declares (dtypes, layouts, masks, GQA,
// d_k != d_v, head dims). Empty lists mean nothing can be drawn.
ProblemSpace narrowed_to(const ProblemSpace& space, const Capabilities& caps);

// Whether a problem lies in the space, its needs included (a projection must stay there).
bool admits(const ProblemSpace& space, const Problem& problem);

// Problems in `space`: dimensions first (edge values 1, 2, tile - 1, tile, tile + 1 for the
// tiles of the implementations here, primes 97 and 1013, n_q != n_k both ways, d_k != d_v,
// GQA ratios 1, 2, 4 and h_q), then masks and their intersections, the scale, the layout, the
// regime, the dtype and the seed. Only valid problems come out, at a fixed RapidCheck size.
rc::Gen<Problem> gen_problem(const ProblemSpace& space);

struct Property {
  int number;                  // 1-based, stable: what --property selects
  std::string name;            // a sentence that is true of a correct implementation
  ProblemSpace space;          // the problems it applies to
  // "" when the property says something about an implementation that declares `caps`, else
  // the capability it misses: "needs a mask (declares none)", "needs returns_weights".
  std::function<std::string(const Capabilities&)> missing = [](const Capabilities&) { return std::string(); };
  // Checks one supported problem. Returns "" when the property holds, else what broke,
  // naming the coordinates.
  std::function<std::string(const Implementation&, const Problem&)> check;
  // A check that names a behaviour many correct kernels have (non-finite values leaking from
  // masked rows) rather than a wrong answer: its failure is a finding unless the implementation
  // declares the stronger guarantee, then a failure. Null: always a failure.
  std::function<bool(const Capabilities&)> failure_is_finding;
};

// The suite, in order (number 1 first).
const std::vector<Property>& property_suite();

struct PropertyOptions {
  int cases = 40;              // successful cases per (property, implementation)
  std::uint64_t seed = 0;      // RapidCheck's seed; 0: a fresh one, printed on failure
  bool large = false;          // the slow sweep's problem spaces
  bool shrink = true;
};

// held: every draw passed. failed: a counterexample (a failure of the run). finding: the check
// failed, but what it names is allowed by the declaration (shown, not a failure).
// not_applicable: the implementation lacks what the property is about (the message names it).
// gave_up: too few of the drawn problems were accepted to run the asked number of cases; neither
// a pass nor a failure, reported with the reason.
struct PropertyVerdict {
  enum class Kind { held, failed, finding, not_applicable, gave_up };
  Kind kind = Kind::held;
  int property = 0;
  std::string property_name, implementation;
  int cases = 0;               // successful cases before the verdict
  int projected = 0;           // of those, problems drawn outside what supports() accepts, run as their projection
  int discarded = 0;           // problems neither the implementation nor a projection accepted
  std::string message;         // the failure, or why it did not apply / gave up
  std::string repro;           // the (shrunk) counterexample's repro string, when failed
  std::uint64_t seed = 0;      // the RapidCheck seed that was used
};

// One property against one implementation: RapidCheck generation and shrinking over the space
// narrowed to what the implementation declares; a drawn problem that supports() refuses is
// replaced by its projection (impls/capability_space.hpp, resolve), discarded only when no
// projection is accepted either. Prints nothing.
PropertyVerdict check_property(const Property& property, const Implementation& impl, const PropertyOptions& options);

// One property on exactly one problem (the --case route): held, failed, finding or not_applicable.
PropertyVerdict check_property_on(const Property& property, const Implementation& impl, const Problem& problem);

// Whether a verdict fails a run: failed only (a finding, n/a or gave up does not).
inline bool is_failure(const PropertyVerdict& v) { return v.kind == PropertyVerdict::Kind::failed; }

// A multi-line report of a failure (or a finding): the property, the implementation, the message, the repro
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
