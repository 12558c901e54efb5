#include "impls/cuda_fused/cuda_fused.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/metrics.hpp"
#include "impls/cuda_fused/dispatch.hpp"
#include "impls/cuda_fused/fused_plan.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/cuda_support/device_mask.hpp"
#include "impls/cuda_support/device_resources.hpp"

namespace attn {
namespace cuda_fused {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceMask;
using cuda::upload_mask;
using cuda::GuardedBuffer;
using cuda::Stream;

constexpr std::size_t guard_bytes = 256;

// A host tensor handed to a run, checked: the problem's dtype and element count.
void check_tensor(const Tensor& t, DType dtype, std::int64_t elements, const char* name) { cuda::require_tensor(t, dtype, elements, "cuda_fused", name); }

DeviceBuffer zeroed(std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  buffer.zero();
  return buffer;
}

DeviceBuffer uploaded(const Tensor& t) {
  DeviceBuffer buffer(t.bytes());
  buffer.upload(t.data());
  return buffer;
}

// rows rows of `columns` elements of `dtype` from a buffer of row length `from_width` into one of
// row length `to_width` (elements), on `stream`: the zero-padded copies of head dimensions
// without a kernel of their own, in and out.
void copy_columns(void* to, std::int64_t to_width, const void* from, std::int64_t from_width, std::int64_t columns, std::int64_t rows,
                  DType dtype, cudaStream_t stream) {
  const std::size_t eb = std::size_t(bytes_per_element(dtype));
  cuda::check(cudaMemcpy2DAsync(to, std::size_t(to_width) * eb, from, std::size_t(from_width) * eb, std::size_t(columns) * eb,
                                std::size_t(rows), cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpy2DAsync");
}

// A forward pass prepared on the device: Q, K, V and the mask uploaded, O and the LSE poisoned
// between guard regions. Workspace: only the mask's device copies (none for causal or no mask).
class FusedRun final : public DeviceRun {
 public:
  FusedRun(FusedPlan plan, const CaseInputs& in)
      : plan_(std::move(plan)),
        out_(std::size_t(plan_.problem.rows() * plan_.problem.d_v) * std::size_t(bytes_per_element(plan_.problem.dtype)), guard_bytes),
        lse_(std::size_t(plan_.problem.rows()) * sizeof(float), guard_bytes) {
    const Problem& p = plan_.problem;
    const std::int64_t q_elements = p.batch * p.h_q * p.n_q * p.d_k, k_elements = p.batch * p.h_kv * p.n_k * p.d_k,
                       v_elements = p.batch * p.h_kv * p.n_k * p.d_v;
    const std::size_t eb = std::size_t(bytes_per_element(p.dtype));
    check_tensor(in.q, p.dtype, q_elements, "Q");
    check_tensor(in.k, p.dtype, k_elements, "K");
    check_tensor(in.v, p.dtype, v_elements, "V");
    q_ = DeviceBuffer(std::size_t(q_elements) * eb);
    k_ = DeviceBuffer(std::size_t(k_elements) * eb);
    v_ = DeviceBuffer(std::size_t(v_elements) * eb);
    q_.upload(in.q.data());
    k_.upload(in.k.data());
    v_.upload(in.v.data());
    out_.upload(make_output(p).data());  // poisoned: an unwritten element keeps the poison
    lse_.upload(make_lse(p).data());

    FusedParams& k = plan_.params;
    k.q = q_.data(), k.k = k_.data(), k.v = v_.data(), k.o = out_.data();
    // Head dimensions without a kernel of their own: zero-padded copies at the kernel's d. Their
    // padding columns are zeroed once; each run copies the d_k (d_v) real columns in.
    const std::int64_t d = k.head_dim;
    if (plan_.pad_q_k) {
      q_padded_ = zeroed(std::size_t(p.batch * p.h_q * p.n_q * d) * eb);
      k_padded_ = zeroed(std::size_t(p.batch * p.h_kv * p.n_k * d) * eb);
      k.q = q_padded_.data(), k.k = k_padded_.data();
    }
    if (plan_.pad_v_o) {
      v_padded_ = zeroed(std::size_t(p.batch * p.h_kv * p.n_k * d) * eb);
      Tensor o_padded(p.dtype, {p.batch, p.h_q, p.n_q, d});
      o_padded.poison();  // an element the kernel leaves unwritten comes back poisoned
      o_padded_ = DeviceBuffer(o_padded.bytes());
      o_padded_.upload(o_padded.data());
      k.v = v_padded_.data(), k.o = o_padded_.data();
    }
    k.lse = static_cast<float*>(lse_.data());
    // The mask: each row's key limit where padding needs one per (b, i) (causality alone the kernel
    // works out itself), the boolean flags and the bias as f32, at the strides of the tensors
    // uploaded (a bias of extent 1 over a batch of 1 has batch stride 0, whatever its broadcast).
    mask_ = upload_mask(p, in.mask, plan_.upload_key_limit, int(sizeof(float)), "cuda_fused");
    k.flags_batch_stride = mask_.flags_strides.batch;
    k.flags_head_stride = mask_.flags_strides.head;
    k.bias_batch_stride = mask_.bias_strides.batch;
    k.bias_head_stride = mask_.bias_strides.head;
    k.key_limit = static_cast<const std::int64_t*>(mask_.key_limit.data());
    k.bool_flags = static_cast<const std::uint8_t*>(mask_.flags.data());
    k.bias = static_cast<const float*>(mask_.bias.data());
  }

  void enqueue(void* stream) override {
    stream_ = static_cast<cudaStream_t>(stream);
    const Problem& p = plan_.problem;
    const std::int64_t d = plan_.params.head_dim;
    if (plan_.pad_q_k) {
      copy_columns(q_padded_.data(), d, q_.data(), p.d_k, p.d_k, p.batch * p.h_q * p.n_q, p.dtype, stream_);
      copy_columns(k_padded_.data(), d, k_.data(), p.d_k, p.d_k, p.batch * p.h_kv * p.n_k, p.dtype, stream_);
    }
    if (plan_.pad_v_o) copy_columns(v_padded_.data(), d, v_.data(), p.d_v, p.d_v, p.batch * p.h_kv * p.n_k, p.dtype, stream_);
    launch_forward(plan_.params, stream_);
    if (plan_.pad_v_o) copy_columns(out_.data(), p.d_v, o_padded_.data(), d, p.d_v, p.rows(), p.dtype, stream_);
  }

  // The device's O (d_v columns) and LSE, for a backward pass prepared on the device.
  const void* device_output() const { return out_.data(); }
  const float* device_lse() const { return static_cast<const float*>(lse_.data()); }
  void synchronize() const { cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  void download(Tensor& out, Tensor* lse) {
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    out_.download_into(out, plan_.problem.dtype, "cuda_fused", "O");
    if (lse) lse_.download_into(*lse, DType::f32, "cuda_fused", "the LSE");
  }

  void check_output() override {
    const Problem& p = plan_.problem;
    Tensor out = make_output(p), lse = make_lse(p);
    download(out, &lse);
    cuda::require_written_and_finite(p, out, lse, "cuda_fused");
  }

  std::size_t workspace_bytes() const override {
    return mask_.bytes() + 2 * (out_.guard_bytes() + lse_.guard_bytes()) + q_padded_.bytes() + k_padded_.bytes() + v_padded_.bytes() +
           o_padded_.bytes();
  }

 private:
  FusedPlan plan_;
  DeviceBuffer q_, k_, v_;
  DeviceBuffer q_padded_, k_padded_, v_padded_, o_padded_;  // only where the plan pads (pad_q_k, pad_v_o)
  DeviceMask mask_;
  GuardedBuffer out_, lse_;
  cudaStream_t stream_ = nullptr;
};

// A backward pass prepared on the device: Q, K, V, dO and the forward's O and LSE uploaded (for a
// prepared run without them, computed here by the forward pass, once and untimed), dQ, dK and dV
// poisoned between guard regions. Workspace: D and the base-2 LSE (8 bytes per query row), the
// zero-padded copies where the head dimensions have no kernel of their own, the key limits with
// padding (and the forward's own workspace when it ran here).
class FusedBackwardRun final : public DeviceRun {
 public:
  // O and LSE as the caller holds them (the forward's, or the reference's).
  FusedBackwardRun(FusedBackwardPlan plan, const CaseInputs& in, const Tensor& d_o, const Tensor& o, const Tensor& lse)
      : FusedBackwardRun(std::move(plan), in, d_o) {
    const Problem& p = plan_.problem;
    check_tensor(o, p.dtype, p.rows() * p.d_v, "O");
    check_tensor(lse, DType::f32, p.rows(), "the LSE");
    o_ = uploaded(o);
    lse_ = uploaded(lse);
    plan_.params.o = o_.data();
    plan_.params.lse = static_cast<const float*>(lse_.data());
  }

  // O and LSE from the forward pass on the device (`forward`: its plan for the same problem).
  FusedBackwardRun(FusedBackwardPlan plan, FusedPlan forward, const CaseInputs& in, const Tensor& d_o)
      : FusedBackwardRun(std::move(plan), in, d_o) {
    forward_ = std::make_unique<FusedRun>(std::move(forward), in);
    const Stream stream;
    forward_->enqueue(stream.get());
    forward_->synchronize();
    plan_.params.o = forward_->device_output();
    plan_.params.lse = forward_->device_lse();
  }

  void enqueue(void* stream) override {
    stream_ = static_cast<cudaStream_t>(stream);
    const Problem& p = plan_.problem;
    const std::int64_t d = plan_.params.head_dim, q_rows = p.rows(), k_rows = p.batch * p.h_kv * p.n_k;
    if (plan_.pad_q_k) {
      copy_columns(q_padded_.data(), d, q_.data(), p.d_k, p.d_k, q_rows, p.dtype, stream_);
      copy_columns(k_padded_.data(), d, k_.data(), p.d_k, p.d_k, k_rows, p.dtype, stream_);
    }
    if (plan_.pad_v) {
      copy_columns(v_padded_.data(), d, v_.data(), p.d_v, p.d_v, k_rows, p.dtype, stream_);
      copy_columns(d_o_padded_.data(), d, d_o_.data(), p.d_v, p.d_v, q_rows, p.dtype, stream_);
    }
    launch_backward(plan_.params, stream_);
    if (plan_.pad_q_k) {
      copy_columns(dq_.data(), p.d_k, dq_padded_.data(), d, p.d_k, q_rows, p.dtype, stream_);
      copy_columns(dk_.data(), p.d_k, dk_padded_.data(), d, p.d_k, k_rows, p.dtype, stream_);
    }
    if (plan_.pad_v) copy_columns(dv_.data(), p.d_v, dv_padded_.data(), d, p.d_v, k_rows, p.dtype, stream_);
  }

  void download(Tensor& dq, Tensor& dk, Tensor& dv) {
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    dq_.download_into(dq, plan_.problem.dtype, "cuda_fused", "dQ");
    dk_.download_into(dk, plan_.problem.dtype, "cuda_fused", "dK");
    dv_.download_into(dv, plan_.problem.dtype, "cuda_fused", "dV");
  }

  void check_output() override {
    const Problem& p = plan_.problem;
    Gradients g = make_gradients(p);
    download(g.dq, g.dk, g.dv);
    cuda::require_gradients_written_and_finite(p, g, "cuda_fused");
  }

  std::size_t workspace_bytes() const override {
    return delta_.bytes() + lse_log2_.bytes() + mask_.bytes() + 2 * (dq_.guard_bytes() + dk_.guard_bytes() + dv_.guard_bytes()) +
           q_padded_.bytes() + k_padded_.bytes() + v_padded_.bytes() + d_o_padded_.bytes() + dq_padded_.bytes() + dk_padded_.bytes() +
           dv_padded_.bytes() + (forward_ ? forward_->workspace_bytes() : 0);
  }

 private:
  FusedBackwardRun(FusedBackwardPlan plan, const CaseInputs& in, const Tensor& d_o)
      : plan_(std::move(plan)),
        dq_(std::size_t(plan_.problem.rows() * plan_.problem.d_k) * std::size_t(bytes_per_element(plan_.problem.dtype)), guard_bytes),
        dk_(std::size_t(plan_.problem.batch * plan_.problem.h_kv * plan_.problem.n_k * plan_.problem.d_k) *
                std::size_t(bytes_per_element(plan_.problem.dtype)),
            guard_bytes),
        dv_(std::size_t(plan_.problem.batch * plan_.problem.h_kv * plan_.problem.n_k * plan_.problem.d_v) *
                std::size_t(bytes_per_element(plan_.problem.dtype)),
            guard_bytes),
        delta_(std::size_t(plan_.problem.rows()) * sizeof(float)),
        lse_log2_(std::size_t(plan_.problem.rows()) * sizeof(float)) {
    const Problem& p = plan_.problem;
    const std::int64_t q_rows = p.rows(), k_rows = p.batch * p.h_kv * p.n_k;
    check_tensor(in.q, p.dtype, q_rows * p.d_k, "Q");
    check_tensor(in.k, p.dtype, k_rows * p.d_k, "K");
    check_tensor(in.v, p.dtype, k_rows * p.d_v, "V");
    check_tensor(d_o, p.dtype, q_rows * p.d_v, "dO");
    q_ = uploaded(in.q);
    k_ = uploaded(in.k);
    v_ = uploaded(in.v);
    d_o_ = uploaded(d_o);
    Gradients poisoned = make_gradients(p);  // an element the kernels leave unwritten comes back poisoned
    dq_.upload(poisoned.dq.data());
    dk_.upload(poisoned.dk.data());
    dv_.upload(poisoned.dv.data());

    BackwardParams& k = plan_.params;
    k.q = q_.data(), k.k = k_.data(), k.v = v_.data(), k.d_o = d_o_.data();
    k.dq = dq_.data(), k.dk = dk_.data(), k.dv = dv_.data();
    k.d_o_unpadded = d_o_.data();
    k.delta = static_cast<float*>(delta_.data());
    k.lse_log2 = static_cast<float*>(lse_log2_.data());
    // Head dimensions without a kernel of their own: zero-padded copies at the kernel's d, their
    // padding columns zeroed once; the outputs come back through poisoned padded buffers.
    const std::int64_t d = k.head_dim;
    const std::size_t eb = std::size_t(bytes_per_element(p.dtype));
    const auto poisoned_padded = [&](std::int64_t rows) {
      Tensor t(p.dtype, {rows, d});
      t.poison();
      return uploaded(t);
    };
    if (plan_.pad_q_k) {
      q_padded_ = zeroed(std::size_t(q_rows * d) * eb);
      k_padded_ = zeroed(std::size_t(k_rows * d) * eb);
      dq_padded_ = poisoned_padded(q_rows);
      dk_padded_ = poisoned_padded(k_rows);
      k.q = q_padded_.data(), k.k = k_padded_.data(), k.dq = dq_padded_.data(), k.dk = dk_padded_.data();
    }
    if (plan_.pad_v) {
      v_padded_ = zeroed(std::size_t(k_rows * d) * eb);
      d_o_padded_ = zeroed(std::size_t(q_rows * d) * eb);
      dv_padded_ = poisoned_padded(k_rows);
      k.v = v_padded_.data(), k.d_o = d_o_padded_.data(), k.dv = dv_padded_.data();
    }
    mask_ = upload_mask(p, in.mask, plan_.upload_key_limit, int(sizeof(float)), "cuda_fused");
    k.key_limit = static_cast<const std::int64_t*>(mask_.key_limit.data());
  }

  FusedBackwardPlan plan_;
  DeviceBuffer q_, k_, v_, d_o_, o_, lse_;  // o_, lse_: the caller's; otherwise forward_ holds them
  DeviceBuffer q_padded_, k_padded_, v_padded_, d_o_padded_, dq_padded_, dk_padded_, dv_padded_;  // where the plan pads
  DeviceMask mask_;
  GuardedBuffer dq_, dk_, dv_;
  DeviceBuffer delta_, lse_log2_;
  std::unique_ptr<FusedRun> forward_;
  cudaStream_t stream_ = nullptr;
};

class FusedAttention final : public Implementation {
 public:
  std::string name() const override { return "cuda_fused"; }

  Capabilities describe() const override {
    Capabilities c;
    c.summary = "fused flash-style kernel on the GPU: online softmax, K/V tiles through shared memory; f16/bf16 on tensor cores "
                "(wgmma on sm_90 at d = 128, mma.sync elsewhere; f32 accumulation), f32 on FMA units; kernels for d = 32, 64, 96, 128, "
                "256, other head dimensions and d_k != d_v zero-padded to the next one (the copies timed); backward FlashAttention-2 "
                "style (P from the LSE, dK/dV per key tile, dQ in a pass of its own), f16/bf16 at d <= 128, causal and padding masks";
    c.device = "cuda";
    // The backward computes a subset of what is declared here (supports() refuses the rest, naming it).
    c.operations = {Operation::forward, Operation::backward};
    c.dtypes = {DType::f32, DType::f16, DType::bf16};
    c.returns_lse = true;
    // No atomics in either pass: every row's keys are visited in one fixed order, each key tile's
    // dK and dV have one block, and dQ is a pass of its own rather than atomically added.
    c.deterministic = true;
    c.fully_masked = FullyMaskedPolicy::zeros;
    // One key limit per row: causal windows and padding, no lower bound.
    c.masks = {.causal_top_left = true, .causal_bottom_right = true, .padding_per_batch = true, .padding_per_query = true,
               .bool_mask = true, .bias = true};
    c.gqa = true;
    c.different_dk_dv = true;  // zero-padded to the larger head dimension
    c.max_head_dim = 256;     // the largest kernel; smaller head dimensions pad up to the next one
    return c;
  }

  Support supports(const Problem& p) const override {
    const DeviceStatus& device = cuda::device_status();
    if (!device.available) return Support::no(device.reason);
    if (device.sm_major < 8)
      return Support::no(fmt::format("{} is sm_{}{}: the fused kernel needs sm_80 or newer (cp.async, ldmatrix, bf16 mma)", device.name,
                                     device.sm_major, device.sm_minor));
    static const cudaError_t image = kernel_image_status();
    if (image != cudaSuccess)
      return Support::no(fmt::format("no kernel image for {} (sm_{}{}) in this build: {}", device.name, device.sm_major, device.sm_minor,
                                     cudaGetErrorName(image)));
    static const int smem_optin = [] {
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, cuda::device_status().device) != cudaSuccess) {
        cudaGetLastError();
        value = 48 * 1024;
      }
      return value;
    }();
    const auto fits = [&](int smem_bytes) {
      return smem_bytes <= smem_optin ? Support::yes()
                                      : Support::no(fmt::format("needs {} bytes of shared memory per block; {} allows {}", smem_bytes,
                                                                device.name, smem_optin));
    };
    if (p.operation == Operation::backward) {
      const FusedBackwardPlanResult plan = make_fused_backward_plan(p);
      if (!plan.plan) return Support::no(plan.reason);
      const Support dq = fits(plan.plan->params.dq_smem_bytes);
      return dq.ok ? fits(plan.plan->params.dk_dv_smem_bytes) : dq;
    }
    const FusedPlanResult plan = make_fused_plan(p, hopper());
    if (!plan.plan) return Support::no(plan.reason);
    return fits(plan.plan->params.smem_bytes);
  }

  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // device memory is the run's own

  void run(const RunArgs& args) const override {
    Stream stream;
    if (args.problem.operation == Operation::backward) {
      const Tensor* d_o = args.tensors.input(Role::d_o);
      const Tensor* o = args.tensors.input(Role::o);
      const Tensor* lse = args.tensors.input(Role::lse);
      if (d_o == nullptr || o == nullptr || lse == nullptr)
        throw std::logic_error("cuda_fused: a backward pass needs dO and the forward's O and LSE");
      FusedBackwardRun run(backward_plan_or_throw(args.problem), args.inputs, *d_o, *o, *lse);
      run.enqueue(stream.get());
      run.download(args.tensors.required_output(Role::dq), args.tensors.required_output(Role::dk), args.tensors.required_output(Role::dv));
      return;
    }
    FusedRun run(plan_or_throw(args.problem), args.inputs);
    run.enqueue(stream.get());
    run.download(args.tensors.required_output(Role::o), args.tensors.output(Role::lse));
  }

  // A backward problem's run enqueues the backward pass alone: its O and LSE come from one forward
  // pass at preparation, its dO is drawn as verify and bench draw it (generate_d_o).
  std::unique_ptr<DeviceRun> prepare_device_run(const Problem& problem, const CaseInputs& inputs) const override {
    if (problem.operation == Operation::backward) {
      Problem forward = problem;
      forward.operation = Operation::forward;
      return std::make_unique<FusedBackwardRun>(backward_plan_or_throw(problem), plan_or_throw(forward), inputs, generate_d_o(problem));
    }
    return std::make_unique<FusedRun>(plan_or_throw(problem), inputs);
  }

 private:
  // Whether the device runs the sm_90a wgmma kernel (asked once).
  static bool hopper() {
    static const bool yes = [] {
      const DeviceStatus& device = cuda::device_status();
      return device.available && device.sm_major == 9 && device.sm_minor == 0 && wgmma_image_status() == cudaSuccess;
    }();
    return yes;
  }

  static FusedPlan plan_or_throw(const Problem& p) {
    FusedPlanResult plan = make_fused_plan(p, hopper());
    if (!plan.plan) throw std::invalid_argument("cuda_fused: " + plan.reason);
    return std::move(*plan.plan);
  }
  static FusedBackwardPlan backward_plan_or_throw(const Problem& p) {
    FusedBackwardPlanResult plan = make_fused_backward_plan(p);
    if (!plan.plan) throw std::invalid_argument("cuda_fused: " + plan.reason);
    return std::move(*plan.plan);
  }
};

}  // namespace
}  // namespace cuda_fused

void register_cuda_fused(Registry& registry) { registry.add(std::make_unique<cuda_fused::FusedAttention>()); }

}  // namespace attn
