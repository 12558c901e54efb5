#pragma once
// The space of problems an implementation declares (Capabilities), and the projection of a named
// case onto it. A narrow kernel (f32 only, one layout, no bias) would otherwise skip most of a
// case set: instead each case is moved to the nearest problem the kernel declares, keeping the
// edge the case was written for (its shape, regime and seed; a fully masked row stays fully
// masked where the declared masks can express it). The projected case is a problem of its own,
// with its own repro string, so a failure reruns exactly.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "impls/implementation.hpp"

namespace attn {

// Whether a role accepts a dtype: listed for it (role_dtypes) or for every data role (dtypes).
bool accepts_dtype(const Capabilities& caps, Role role, DType dtype);
// Some role declares a dtype of its own that differs from a one-dtype problem's, so mixed-precision
// problems are declared.
bool declares_mixed_dtypes(const Capabilities& caps);

// Whether the declared capabilities cover the problem; the reason names the first thing missing
// ("dtype f16 not declared", "causal bottom-right mask not declared", ...).
Support covers(const Capabilities& caps, const Problem& problem);

// The problem moved into the declared space, one feature at a time in this order: the dtype (to
// f32 where declared, else the nearest declared; then each data role whose dtype is not declared
// for it: to the nearest dtype declared for that role alone, keeping the mix, else back to the
// problem's dtype), the layout, GQA -> MHA, d_k != d_v -> equal,
// head dims clamped to the declared ones, then each undeclared mask to the nearest declared one
// (another window to per-query padding when it has no lower bound, else to the causal window of
// its alignment when its right side is 0, else dropped; causal alignment to the other alignment;
// causal or per-batch padding to per-query padding; per-query padding to per-batch padding
// keeping each batch's first row; else dropped), an explicit scale to the default where only the
// default is declared, and no window to a causal one (bottom-right where declared) for a
// causal-only kernel. Returns the problem unchanged when it is
// covered; std::nullopt when no dtype or layout is declared, or when the problem's operation is
// not (an operation is never projected).
std::optional<Problem> project_onto(const Capabilities& caps, const Problem& problem);

// What an implementation runs for a named case: the case itself when supported, else the first
// of its projections that `supports` accepts, tried in a fixed order: onto the declared space,
// then cumulatively equal sequence lengths, MHA, equal head dims, one dtype for every role, f32, and fewer masks (bias,
// boolean mask, padding, causal dropped in turn). A problem whose operation is not declared is
// skipped with covers()'s reason, never projected.
struct Resolution {
  std::optional<Problem> problem;  // what runs; nullopt: nothing the implementation accepts
  bool projected = false;          // problem differs from the case
  // What the projection changed, step by step: "dtype f16 -> f32; then MHA: h_kv 1 -> 4".
  std::string changes;
  std::string skip_reason;         // when nothing runs: the case's own refusal
};
Resolution resolve(const Implementation& impl, const Problem& problem);

// The features a problem exercises, as stable names ("dtype:f32", "layout:bshd", "causal_top_left",
// "padding_per_batch", "gqa", "dk_ne_dv", "custom_scale", "nq_ne_nk", "fully_masked_rows",
// "regime:large", "nk_1", "long_rows", ...), for coverage reports.
std::vector<std::string> features_of(const Problem& problem);
// The features an implementation's declaration says it should be tested on.
std::vector<std::string> declared_features(const Capabilities& caps);

}  // namespace attn
