#pragma once
// The curated problem list: registry x (dtype, head dimension, mask), one family per
// combination, with only the sequence length n varying (n_q = n_k = n, powers of two), so that a
// complexity fit over a family measures how cost grows with n and nothing else.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem.hpp"
#include "impls/implementation.hpp"

namespace attn::bench {

// What a family's problems see and how their scores are formed, beyond the shape: a window (none,
// causal, a sliding window) and, optionally, a soft-cap (core/score_pipeline.hpp).
struct FamilyMask {
  Window window;
  std::optional<double> softcap;
  bool operator==(const FamilyMask&) const = default;
};

// What a family times: the forward pass; the backward pass alone (fed O and the LSE of a forward
// run before the timing, as training's backward is); or both back to back, a training step's
// attention. A backward or forward_backward family's problems are backward problems.
enum class Pass { forward, backward, forward_backward };
std::string_view to_string(Pass pass);
// "forward", "backward", "forward_backward"; throws InputError naming an unknown one.
Pass parse_pass(const std::string& text);

struct FamilySpec {
  const Implementation* implementation = nullptr;
  DType dtype = DType::f32;
  std::int64_t batch = 1;
  std::int64_t heads = 8;
  std::int64_t head_dim = 64;  // d_k = d_v
  Window window;                    // none, causal, or a sliding window {w, 0}
  std::optional<double> softcap;    // c tanh(s / c) of the scores, or none
  std::vector<std::int64_t> sizes;  // n, ascending
  // How it is measured, when that is part of the result: GPU families' "l2_cold" or "l2_hot"
  // (a cold and a hot run of one family must never be compared as the same benchmark).
  std::string variant;
  Pass pass = Pass::forward;

  // "cpu_naive/f32/d64/causal": implementation, dtype, head dimension, mask; then the pass when it
  // is not the forward ("cpu_blocked/f32/d64/causal/backward"); then the variant, if any
  // ("cuda_cublas/f16/d64/none/l2_cold").
  std::string name() const;
  // "none", "causal" (top-left), "causal_bottom_right", "sliding_W" (W keys before the diagonal;
  // with n_q = n_k its alignment does not matter), then "_softcapC" when soft-capped
  std::string mask_name() const;
  // The mask the peer scripts run for this family ("none" or "top_left": with n_q = n_k both
  // causal alignments are that mask), with "/backward" for a backward family; empty when they have
  // none (a sliding window, a soft-cap, forward_backward).
  std::optional<std::string> peer_mask() const;
  // b, h_q = h_kv = heads, n_q = n_k = n, d_k = d_v = head_dim, diffuse inputs, seed 1; a backward
  // problem (op=backward) unless the pass is the forward.
  Problem problem(std::int64_t n) const;
  // What one timed call of size n computes: the problem's figures (Problem::flops, flops_published,
  // bytes_min), the forward's and the backward's summed for forward_backward.
  double flops(std::int64_t n) const;
  double flops_published(std::int64_t n) const;
  double bytes_min(std::int64_t n) const;
  // The workspace one call of size n needs: the larger of its forward's and its backward's.
  std::size_t workspace_bytes(std::int64_t n) const;
};

struct ProblemListOptions {
  std::vector<DType> dtypes;            // empty: f32, or in smoke mode every dtype each implementation accepts
  std::vector<std::int64_t> head_dims{64};
  std::vector<FamilyMask> masks{{Window{}, {}}, {Window::of(Causal::top_left), {}}};
  std::int64_t batch = 1;
  std::int64_t heads = 8;
  std::int64_t min_n = 128;             // powers of two
  std::int64_t max_n = 8192;
  std::map<std::string, std::int64_t> max_n_for;  // per-implementation caps on n (slow ones)
  bool smoke = false;                   // n = 16, 32, 64 whatever min_n/max_n say
  std::string gpu_variant;              // the variant of GPU families (describe().device == "cuda"): "l2_cold", "l2_hot"
  // One family per pass; an implementation without a backward (Capabilities::operations) gets
  // none of the backward's, with a note.
  std::vector<Pass> passes{Pass::forward};
};

struct ProblemList {
  std::vector<FamilySpec> families;
  std::vector<std::string> notes;  // what was left out, and why (unsupported, capped)
};

ProblemList curated_problem_list(std::span<const Implementation* const> implementations, const ProblemListOptions& options);

// The powers of two from min_n to max_n; throws InputError unless both are powers of two with
// 1 <= min_n <= max_n.
std::vector<std::int64_t> powers_of_two(std::int64_t min_n, std::int64_t max_n);
// "none", "causal" (= "top_left"), "bottom_right", "sliding:W" (a sliding window: each query sees
// itself and the W keys before it), each optionally "+softcap:C" (scores s become C tanh(s / C));
// throws InputError naming an unknown one.
FamilyMask parse_mask(const std::string& text);

}  // namespace attn::bench
