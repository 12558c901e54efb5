#pragma once
// The one interface every implementation fills (CUTLASS-library style): describe, supports a
// problem (or says why not), workspace size, run. An unsupported problem is a skip with a
// reason, never a pass or a failure.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

struct Capabilities {
  std::string summary;                 // one line: the algorithm and its precision
  std::string device = "cpu";          // "cpu" or "cuda"
  std::vector<DType> dtypes;           // input/output types it accepts
  bool returns_lse = false;
  bool returns_weights = false;
  bool deterministic = true;           // bitwise-identical results on repeated runs
  FullyMaskedPolicy fully_masked = FullyMaskedPolicy::zeros;
};

struct Support {
  bool ok = true;
  std::string reason;  // why not, when !ok
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

struct RunArgs {
  const Problem& problem;
  const CaseInputs& inputs;
  Tensor& out;                      // [b, h_q, n_q, d_v] in the problem's dtype, poisoned
  Tensor* lse = nullptr;            // [b, h_q, n_q, 1], f64 for f64 problems else f32; null: not wanted
  Tensor* weights = nullptr;        // [b, h_q, n_q, n_k], same dtype as lse; null: not wanted
  std::span<std::byte> workspace;   // workspace_bytes(problem) bytes
  int threads = 0;                  // CPU threads to use; 0: every core
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
};

// Weights and LSE tensors in the working precision of a problem, poisoned.
Tensor make_weights(const Problem& problem);

}  // namespace attn
