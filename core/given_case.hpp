#pragma once
// A user's own tensors (`attnbench check --inputs DIR`): q, k, v and optional mask, bias and
// valid lengths as .npy files in one directory with settings.json, and the outputs to judge
// (out.npy, optional lse.npy, and keep.npy for dropout). Unlike the cases directory (core/case_files.hpp), nothing here is
// generated: the Problem read from DIR describes the shapes, dtype, causality, padding and scale,
// and its repro string cannot regenerate the tensors; `source` names where they are.
//
// Files (BHSD, C order; encodings as in core/case_files.hpp):
//   q.npy [b, h_q, n_q, d_k], k.npy [b, h_kv, n_k, d_k], v.npy [b, h_kv, n_k, d_v]: '<f8', '<f4'
//     or '<f2' give the dtype; bf16 is settings "dtype": "bf16" with '<f4' bf16 values or '<u2' bits.
//   mask.npy (optional) '|b1' [1|b, 1|h_q, n_q, n_k], true = the key is visible.
//   bias.npy (optional) [1|b, 1|h_q, n_q, n_k] in q's encoding, added to the scaled scores.
//   valid_lens.npy (optional) integers [b] (per batch) or [b, n_q] (per query): keys j < len are visible.
//   settings.json: {"scale": number (default 1/sqrt(d_k)), "causal": "none"|"top_left"|"bottom_right",
//     "dtype": "f64"|"f32"|"f16"|"bf16" (default: q's), "dtypes": "o:f32" (roles of their own dtype,
//     as the repro string's dtypes= token: "q:f16,o:f32"), "sinks": [one logit per query head],
//     and each score modification's settings by name (core/score_pipeline.hpp): "softcap": c,
//     "dropout_p": p (0 < p < 1, rounded to f32), "dropout_seed": s (only names the kernel's
//     stream in the repro string)}; any other key is an error.
//   out.npy [b, h_q, n_q, d_v] and optional lse.npy [b, h_q, n_q] ('<f8' for f64, '<f4' otherwise).
//   keep.npy [b, h_q, n_q, n_k] ('|b1', '|u1' or '<f4', 1 kept, 0 dropped), required with "dropout_p"
//     and refused without: the keep mask the kernel drew; out is sum_j P_ij Z_ij / (1 - p) v_j, judged
//     given this Z, and Z by its keep rate (judge_keep). It lies with out.npy (the outputs directory).
// Every part of the mask composes by intersection; a row that sees no key has a zero output row.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "core/tensor.hpp"

namespace attn {

struct GivenCase {
  Problem problem;
  CaseInputs inputs;
  Tensor out;                // [b, h_q, n_q, d_v] in o's dtype
  std::optional<Tensor> lse;  // [b, h_q, n_q, 1] when lse.npy is there
  std::string source;        // "the tensors in DIR"
  std::optional<Tensor> keep;  // [b, h_q, n_q, n_k] f32, dropout's keep mask, when keep.npy is there
};

// A user's tensors already in memory (the Python package's reference() and judge()), each in
// its own dtype: the problem's dtype is q's, and k, v, the bias or o in another dtype are roles of
// their own (ProblemNumerics::role_dtypes). Extents must agree as for the files above.
struct GivenArrays {
  Tensor q, k, v;                              // [b, h_q, n_q, d_k], [b, h_kv, n_k, d_k], [b, h_kv, n_k, d_v]
  std::optional<Tensor> bias;                  // [1|b, 1|h_q, n_q, n_k]
  std::vector<std::uint8_t> mask;              // nonzero = visible, C order over mask_shape
  std::vector<std::int64_t> mask_shape;        // [1|b, 1|h_q, n_q, n_k]; empty: no boolean mask
  std::vector<std::int64_t> valid_lens;        // keys j < len are visible
  std::vector<std::int64_t> valid_lens_shape;  // [b] or [b, n_q]; empty: no padding
  std::optional<double> scale;                 // unset: 1/sqrt(d_k)
  Window window;                               // causal, sliding or none (core/problem.hpp)
  std::optional<DType> o_dtype;                // unset: q's
  // The score modifications' settings by name (softcap, dropout_p, ...: core/score_pipeline.hpp);
  // dropout's keep mask goes with the outputs (GivenCase::keep).
  std::vector<NamedSetting> settings;
  std::vector<double> sinks;                   // one logit per query head (rounded to f32); empty: none
};

// The problem and inputs of GivenArrays (moved in: a borrowed tensor stays borrowed). Throws
// InputError naming the argument ("k", "mask", "valid_lens") and the fault.
std::pair<Problem, CaseInputs> given_case_of(GivenArrays arrays);

// Reads DIR's inputs and settings, and the outputs from outputs_dir (empty: DIR). Throws
// InputError naming the file and the fault: missing, malformed, wrong dtype or shape, dimensions
// that disagree between files, unknown or bad settings.
GivenCase read_given_case(const std::filesystem::path& dir, const std::filesystem::path& outputs_dir = {});

}  // namespace attn
