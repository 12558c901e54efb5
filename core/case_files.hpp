#pragma once
// The file route, for kernels that cannot be linked: a cases directory holds each case's inputs
// as .npy files and a manifest.json; another program (a PyTorch or JAX script, another binary)
// writes each case's output as out_NNNN.npy (and, for a dropout case, the keep mask it drew as
// keep_NNNN.npy) into an outputs directory; `attnbench check` reads
// them back (impls/file_outputs) and verifies them as `attnbench verify` does.
//
// Encodings (stated in the manifest too). Layout BHSD, C order:
//   q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v], out [b, h_q, n_q, d_v].
//   f64 '<f8', f32 '<f4', f16 '<f2' (the exact bits); bf16: '<f4' holding exactly the bf16
//   values (widening is exact), and a bf16 output is '<f4' whose every value bf16 represents
//   (what out.float() gives in PyTorch) or '<u2' bf16 bit patterns.
//   mask [b or 1, h_q or 1, n_q, n_k] '|b1', true = visible: causal, key padding and the
//   boolean mask combined (present when the case masks anything); bias: the additive bias
//   [b or 1, h_q or 1, n_q, n_k] in the case's encoding (present when the case has one).
//   lse (optional) [b, h_q, n_q]: '<f8' for f64 cases, '<f4' otherwise; -inf for fully masked rows.
//   keep (required for a dropout case, dropout=p: the manifest's "dropout" is {"p", "seed"}, else
//   null) [b, h_q, n_q, n_k]: the keep mask Z the program drew from its own random stream, 1 kept,
//   0 dropped, as '|b1', '|u1' or '<f4'; the output is O_i = sum_j P_ij Z_ij / (1 - p) v_j (the
//   LSE is the softmax's, before dropout). The output is judged given this Z, and Z by its keep
//   rate (judge/judge.hpp's judge_keep); a masked key's entry does not matter.
//   A fully masked row's output is zeros, or NaN where the kernel declares that policy.
// The backward pass (a case whose repro string says op=backward: `attnbench cases --backward`):
//   the cases directory also holds d_o [b, h_q, n_q, d_v] (dO, in d_o's encoding, generated as
//   generate_d_o(problem) gives it), and the program writes, beside its own forward's out (and lse,
//   optional; keep for dropout), the gradients dq [b, h_q, n_q, d_k], dk [b, h_kv, n_k, d_k] and
//   dv [b, h_kv, n_k, d_v], each in its role's encoding as an output is (bf16: '<f4' holding bf16
//   values or '<u2' bits). Their semantics (reference/README.md, "The backward pass"), with P after
//   the sink and before dropout, Z the program's keep mask, r = 1/(1 - p): dV_j = sum_i P_ij Z_ij r
//   dO_i, dP_ij = <dO_i, v_j> Z_ij r, D_i = sum_j P_ij dP_ij, dS_ij = P_ij (dP_ij - D_i), through a
//   soft-cap dX = dS sech^2(x/c), dQ_i = scale sum_j dX_ij k_j, dK_j = scale sum_i dX_ij q_i; under
//   GQA dK and dV summed over a group's query heads; a fully masked row contributes nothing. Only
//   the gradients are judged: out and lse are what the program's backward was fed, read but not
//   judged (a forward case judges them), and keep is what the gradients are judged given.
//   Optionally, where the case has sinks (a bias), d_sink [h_q] '<f4' (d_bias in the bias's shape
//   and encoding): dσ_h = -sum_{b,i} P_i,sink D_i (dBias = dS summed over the dimensions the bias
//   broadcasts over), judged where the outputs directory holds them (impls/file_outputs).
// A kernel's declaration of what it supports (impls/capability_declaration.hpp, given to
// `attnbench cases --declare`) is stored in the manifest with what it made of the case set: a
// case outside it written as its projection (the manifest's repro is the projection's, and
// projected_from names the case), or listed under "skipped" with the reason.
// Every input file is byte-identical to what generate_inputs(problem) (and generate_d_o(problem))
// gives for the case's repro string, which check regenerates and compares before anything is verified.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/inputs.hpp"
#include "core/npy.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_role.hpp"

namespace attn {

struct CaseFileEntry {
  std::size_t index = 0;  // the case's number in its case set
  Problem problem;        // what the files hold: the case, or its projection onto a declaration
  std::string projected_from, projection;  // the named case's repro and what changed; empty: not projected
  std::string q, k, v, mask, bias;  // file names in the cases directory; mask/bias empty when absent
  std::string out, lse;             // file names the outputs directory is expected to hold (lse optional)
  std::string keep;                 // the keep mask's file, for a dropout case (empty: none expected)
  // A backward case's (all empty for a forward one): dO in the cases directory, and the gradient
  // files the outputs directory is expected to hold.
  std::string d_o, dq, dk, dv;
  // A backward case's with sinks (a bias): the d_sink (d_bias) file the outputs directory may hold.
  std::string d_sink, d_bias;
  const std::string& gradient_file(Role role) const {
    return role == Role::dq ? dq : role == Role::dk ? dk : role == Role::dv ? dv : role == Role::d_sink ? d_sink : d_bias;
  }
};

// A case of the set that a declaration left no problem for (no file is written for it).
struct SkippedCase {
  std::size_t index = 0;
  std::string repro, reason;
};

// What a declaration made of the case set, written into the manifest beside the cases.
struct CaseDeclaration {
  std::string capabilities_json;           // the declaration (impls/capability_declaration.hpp's JSON)
  std::string fully_masked = "zeros";      // its policy, stated per case for the program
  std::vector<SkippedCase> skipped;
};

struct CaseDirectory {
  std::filesystem::path dir;
  std::vector<CaseFileEntry> cases;
  std::string declaration_json;  // the manifest's declaration; empty: none (every case is expected)
  std::vector<SkippedCase> skipped;
};

// The cases as the set named them (before any projection), written and skipped, by index.
std::vector<std::pair<std::size_t, Problem>> named_cases(const CaseDirectory& directory);

// The npy element type a tensor of `dtype` is written as (bf16: f32 holding the values).
npy::ElementType npy_type_of(DType dtype);
// A tensor as a .npy array in the file route's encoding.
npy::Array tensor_to_npy(const Tensor& tensor);
// The visibility mask [b or 1, h_q or 1, n_q, n_k] of a problem, true = visible.
npy::Array visibility_mask_npy(const Problem& problem, const Mask& mask);
// Expected shapes of the outputs.
std::vector<std::int64_t> output_shape(const Problem& problem);
std::vector<std::int64_t> lse_shape(const Problem& problem);
std::vector<std::int64_t> keep_shape(const Problem& problem);  // [b, h_q, n_q, n_k]
// A gradient's (dq, dk or dv): the shape of the input it is the gradient of; d_sink's [h_q] and
// d_bias's the bias's ([b or 1, h_q or 1, n_q, n_k]).
std::vector<std::int64_t> gradient_shape(const Problem& problem, Role role);
// Its dtype: its role's; d_sink's f32 (the sinks'), d_bias's the bias's.
DType gradient_dtype(const Problem& problem, Role role);

// Writes every case's .npy files into dir (created if missing; refused when it holds anything
// but an earlier cases directory, whose files are replaced) and then manifest.json, so a
// directory whose writing was cut short has no manifest. on_case is called after each case.
// case_numbers: each case's index in its set (empty: 0, 1, ...). With a declaration,
// projected_from and projection (one per case, empty where not projected) say what each case
// was projected from.
struct CaseProjection {
  std::string projected_from, projection;
};
void write_case_directory(const std::filesystem::path& dir, const std::vector<Problem>& cases,
                          const std::vector<std::size_t>& case_numbers = {},
                          const std::function<void(const CaseFileEntry&)>& on_case = {}, const CaseDeclaration* declaration = nullptr,
                          const std::vector<CaseProjection>& projections = {});

// Reads dir/manifest.json; a missing or malformed manifest, or one that contradicts its repro
// strings, is an InputError naming the manifest and the fault.
CaseDirectory read_case_directory(const std::filesystem::path& dir);

// Throws InputError naming the file and the first difference unless the case's input files
// hold exactly generate_inputs(entry.problem), and a backward case's d_o file generate_d_o's
// (e.g. an edited q.npy, or another attnbench version's inputs).
void check_case_inputs(const CaseDirectory& directory, const CaseFileEntry& entry, const CaseInputs& inputs);

// Reads an output file into `out` (shape [b, h_q, n_q, d_v] in the problem's dtype) or an LSE
// file into `lse` ([b, h_q, n_q, 1]); throws InputError naming the file and the fault
// (missing, malformed, truncated, wrong shape or dtype, a bf16 output that bf16 cannot hold).
void read_output_file(const std::filesystem::path& path, const Problem& problem, Tensor& out);
void read_lse_file(const std::filesystem::path& path, const Problem& problem, Tensor& lse);
// A gradient file (role dq, dk, dv, d_sink or d_bias) into `gradient` (make_gradients' tensor), as an output is read.
void read_gradient_file(const std::filesystem::path& path, const Problem& problem, Role role, Tensor& gradient);
// Dropout's keep mask [b, h_q, n_q, n_k] ('|b1', '|u1' or '<f4') into `keep` (make_keep's f32
// tensor), each value as it is (judge_keep refuses one that is not 0 or 1 where a key is visible).
// A missing file is an InputError naming it and what it should hold.
void read_keep_file(const std::filesystem::path& path, const Problem& problem, Tensor& keep);
// The same for an array already read (`name` goes into the messages).
void keep_array_into_tensor(const npy::Array& array, const std::string& name, const Problem& problem, Tensor& keep);
// The same for any array already read: `name` (its file) and `what` ("output", "q", ...) go into
// the messages; target has `shape` and `dtype`.
void array_into_tensor(const npy::Array& array, const std::string& name, const std::vector<std::int64_t>& shape, DType dtype, Tensor& target,
                       std::string_view what);

}  // namespace attn
