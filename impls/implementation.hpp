#pragma once
// The one interface every implementation fills (CUTLASS-library style): describe, supports a
// problem (or says why not), workspace size, run. An unsupported problem is a skip with a
// reason, never a pass or a failure.
#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "core/precision.hpp"
#include "core/problem.hpp"
#include "core/role_tensors.hpp"
#include "core/score_pipeline.hpp"
#include "core/tensor.hpp"

namespace attn {

// The masks an implementation implements; every declared kind composes with every other. None
// unless declared: a mask kind added here is unsupported everywhere until an implementation says so.
struct MaskSupport {
  bool causal_top_left = false, causal_bottom_right = false;
  bool padding_per_batch = false, padding_per_query = false;
  bool bool_mask = false, bias = false;  // bias: an additive bias, ALiBi's included
  // Any other window (core/problem.hpp, Window): a lower bound (a sliding window) or a right side
  // other than 0 or unbounded, either alignment.
  bool windows = false;
  // Problems whose window is none: plain attention, which every kernel computes unless it says
  // otherwise. False: a causal-only kernel (every problem it runs has a causal window; projection
  // adds one, bottom-right where declared).
  bool non_causal = true;
  static constexpr MaskSupport every() { return {true, true, true, true, true, true, true, true}; }
  bool any() const { return causal_top_left || causal_bottom_right || padding_per_batch || padding_per_query || bool_mask || bias || windows; }
};

// What an implementation declares it computes: the space that verify projects named cases onto
// and that the property suite draws from (impls/capability_space.hpp). It declares what it
// supports and nothing else: the defaults are plain attention (forward, BHSD, MHA, d_k = d_v, no
// mask, any scale, no score modification), and each feature beyond it (a mask kind, GQA, d_k !=
// d_v, a score modification, a dtype) is named, so a feature added later is unsupported
// everywhere until an implementation lists it. A plugin declares what its C description says, and
// `supports` may still refuse a problem inside the space (then a projection is tried).
struct Capabilities {
  std::string summary;                 // one line: the algorithm and its precision
  std::string device = "cpu";          // "cpu" or "cuda"
  // What it computes (Problem::operation). covers() refuses any other, naming it, and no
  // projection changes a problem's operation: a forward run says nothing about a backward pass.
  std::vector<Operation> operations{Operation::forward};
  // Its backward pass also computes the gradients of the score pipeline's parameters: d_sink (dσ,
  // on problems with sinks) and d_bias (dBias, on problems with a bias), each where the problem has
  // it. Undeclared they are neither asked for nor judged, and verify's record says so (not computed,
  // which is not a pass); dQ, dK and dV are judged either way.
  bool parameter_gradients = false;
  std::vector<DType> dtypes;           // the dtypes of one-dtype problems: every data role accepts them
  // A role's own dtypes: mixed-precision problems (o in f32 on f16 inputs). A problem is declared
  // when every data role it uses (data_roles_of) in the problem's dtype accepts that dtype (here
  // or in `dtypes`), and every role in a dtype of its own has that dtype listed here, for itself.
  // As the plugin ABI's per-role list, whose ATTNBENCH_ROLE_DATA entries are `dtypes`.
  std::map<Role, std::vector<DType>> role_dtypes;
  std::vector<Layout> layouts{Layout::bhsd};  // in all_layouts() order
  MaskSupport masks;
  bool gqa = false;                    // h_kv < h_q (GQA, MQA)
  // Any scale. False: the default 1/sqrt(d_k) only (a kernel with the scale built in); projection
  // drops a case's explicit scale.
  bool custom_scale = true;
  bool different_dk_dv = false;
  // Head dimensions (d_k and d_v): the listed ones when non-empty, else [min_head_dim, max_head_dim].
  std::int64_t min_head_dim = 1, max_head_dim = std::int64_t{1} << 31;
  std::vector<std::int64_t> head_dims;
  // Masked keys are kept out entirely: NaN or Inf in a masked K or V row never reaches an output
  // (most kernels compute 0 * V for them, and 0 * NaN is NaN). Declared, the check of it is a
  // failure; undeclared, a finding.
  bool masked_nonfinite_safe = false;
  bool returns_lse = false;
  bool returns_weights = false;
  bool deterministic = true;           // bitwise-identical results on repeated runs
  FullyMaskedPolicy fully_masked = FullyMaskedPolicy::zeros;
  // Its matrix products' arithmetic when coarser than the working precision (TF32 tensor cores
  // on f32 inputs): the pass rule's yardsticks and floor scale by the ratio of unit roundoffs
  // (core/pass_rule.hpp, precision_scale) and the bench's roofline is that GEMM's.
  MatmulPrecision matmul_precision = MatmulPrecision::working;
  // Its accumulators' arithmetic when coarser than the working precision (an f16 accumulator,
  // 2^-11; bf16, 2^-8): the pass rule scales by it like by the products' (the coarser of the
  // two, judged_precision), the roofline does not.
  MatmulPrecision accumulation_precision = MatmulPrecision::working;
  MatmulPrecision judged_precision() const { return coarser(matmul_precision, accumulation_precision); }
  // The score modifications it computes (core/score_pipeline.hpp): none unless listed. Never
  // projected away: without its soft-cap a problem is another function.
  std::vector<ScoreModification> score_modifications;
};

// Every dtype, for one-dtype problems and for every role of a mixed-precision one: what an
// implementation that reads and writes each tensor in its own dtype declares.
inline void declare_every_dtype(Capabilities& c) {
  c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
  for (Role role : data_roles) c.role_dtypes[role] = c.dtypes;
}

// Every mask kind, GQA and d_k != d_v: what an implementation that computes any shape and mask
// declares (with its dtypes and score modifications, which it names itself).
inline void declare_every_mask_and_shape(Capabilities& c) {
  c.masks = MaskSupport::every();
  c.gqa = true;
  c.different_dk_dv = true;
}

// Whether `caps` lists the score modification (covers() skips a problem that uses one it does not).
inline bool lists(const Capabilities& caps, ScoreModification m) {
  return std::find(caps.score_modifications.begin(), caps.score_modifications.end(), m) != caps.score_modifications.end();
}

struct Support {
  bool ok = true;
  std::string reason;  // why not, when !ok
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

struct RunArgs {
  const Problem& problem;
  const CaseInputs& inputs;         // the mask; q, k, v are also the tensor set's inputs
  // A forward pass (RoleTensors::forward): q, k, v in; out, poisoned:
  //   o        [b, h_q, n_q, d_v] in the problem's dtype, always there;
  //   lse      [b, h_q, n_q, 1], f64 for f64 problems else f32; absent: not wanted;
  //   weights  [b, h_q, n_q, n_k], same dtype as lse; absent: not wanted.
  RoleTensors tensors;
  std::span<std::byte> workspace;   // workspace_bytes(problem) bytes
  int threads = 0;                  // CPU threads to use; 0: every core
};

// A pass prepared on a device: inputs uploaded, outputs and workspace allocated, so that a GPU
// benchmark times the kernels alone (CUDA events around enqueue, no transfers). For a backward
// problem the preparation runs the forward once, untimed, for its O and LSE, and enqueue runs the
// backward alone (the CUDA implementations; the bench does not time a device backward yet).
class DeviceRun {
 public:
  virtual ~DeviceRun() = default;
  // Enqueues one pass on `stream` (a cudaStream_t); does not synchronise. Throws naming the
  // failed call.
  virtual void enqueue(void* stream) = 0;
  // Synchronises, copies the outputs back (O, or dQ, dK and dV) and throws unless every element
  // was written and is finite (a kernel that skips work is an error, not a fast result).
  virtual void check_output() = 0;
  // Device memory this run holds beyond Q, K, V, O and the LSE: the implementation's workspace.
  virtual std::size_t workspace_bytes() const = 0;
};

class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual std::string name() const = 0;
  virtual Capabilities describe() const = 0;
  virtual Support supports(const Problem& problem) const = 0;
  // Scratch memory run needs, for up to every core of this machine.
  virtual std::size_t workspace_bytes(const Problem& problem) const = 0;
  // Throws std::exception with a message naming the failure; the harness turns it into that
  // case's failure.
  virtual void run(const RunArgs& args) const = 0;
  // Device implementations: the same problem prepared on the device (see DeviceRun); host
  // implementations return null.
  virtual std::unique_ptr<DeviceRun> prepare_device_run(const Problem& /*problem*/, const CaseInputs& /*inputs*/) const {
    return nullptr;
  }
  // Implementations that time themselves (a plugin, timed inside its worker process so that the
  // messages and copies around each call are not counted): `warmup` untimed then `iterations`
  // timed runs, the seconds of each; the benchmarks use them as manual time. Throws like run.
  // The others return false / nothing and are timed by the caller.
  virtual bool times_itself() const { return false; }
  virtual std::vector<double> timed_runs(const Problem& /*problem*/, const CaseInputs& /*inputs*/, int /*warmup*/, int /*iterations*/) const {
    return {};
  }
  // Calls cut off by a time limit so far (a plugin's, killed in its worker; in-process ones have
  // no limit and return 0). The property suite reads it around a check: a problem whose call
  // timed out is never run again, neither while shrinking nor to confirm the counterexample, as
  // each such run costs a whole timeout.
  virtual int timed_out_calls() const { return 0; }
  // What showed only after the last run() returned, asked once its output has been judged: a
  // plugin whose call left a thread writing into the output (its worker is then restarted). ""
  // when nothing did; in-process implementations have nothing to say.
  virtual std::string late_problems() const { return {}; }
  // True where run() hands back outputs computed elsewhere, once (files another program wrote,
  // impls/file_outputs; outputs captured with their inputs, verification/given_outputs.hpp): a
  // second call reads the same bits and a call on other inputs cannot be answered, so verify makes
  // none of the calls that mean another computation (a failure's second run, a backward's
  // determinism run and its rerun on the reference's O and LSE, a GQA failure's MHA form).
  virtual bool outputs_given() const { return false; }
};

// Weights and LSE tensors in the working precision of a problem, poisoned.
Tensor make_weights(const Problem& problem);

}  // namespace attn
