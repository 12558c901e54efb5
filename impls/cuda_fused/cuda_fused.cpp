#include "impls/cuda_fused/cuda_fused.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

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

void check_tensor(const Tensor& t, DType dtype, std::int64_t elements, const char* name) {
  if (t.dtype() != dtype || t.numel() != elements)
    throw std::invalid_argument(fmt::format("cuda_fused: {} is {} with {} elements; the problem needs {} with {}", name,
                                            to_string(t.dtype()), t.numel(), to_string(dtype), elements));
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
    if (plan_.pad_q_k) {
      copy_columns(q_padded_, plan_.params.head_dim, q_, p.d_k, p.batch * p.h_q * p.n_q);
      copy_columns(k_padded_, plan_.params.head_dim, k_, p.d_k, p.batch * p.h_kv * p.n_k);
    }
    if (plan_.pad_v_o) copy_columns(v_padded_, plan_.params.head_dim, v_, p.d_v, p.batch * p.h_kv * p.n_k);
    launch_forward(plan_.params, stream_);
    if (plan_.pad_v_o) copy_columns(out_.data(), p.d_v, o_padded_.data(), plan_.params.head_dim, p.d_v, p.rows());
  }

  void download(Tensor& out, Tensor* lse) {
    const Problem& p = plan_.problem;
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    out_.check_guards("O");
    lse_.check_guards("the LSE");
    check_tensor(out, p.dtype, p.rows() * p.d_v, "the output");
    out_.download(out.data());
    if (lse) {
      check_tensor(*lse, DType::f32, p.rows(), "the LSE");
      lse_.download(lse->data());
    }
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
  static DeviceBuffer zeroed(std::size_t bytes) {
    DeviceBuffer buffer(bytes);
    buffer.zero();
    return buffer;
  }
  // rows rows of `columns` elements from a buffer of row length `from_width` into one of row
  // length `to_width` (elements), on the run's stream.
  void copy_columns(void* to, std::int64_t to_width, const void* from, std::int64_t from_width, std::int64_t columns, std::int64_t rows) {
    const std::size_t eb = std::size_t(bytes_per_element(plan_.problem.dtype));
    cuda::check(cudaMemcpy2DAsync(to, std::size_t(to_width) * eb, from, std::size_t(from_width) * eb, std::size_t(columns) * eb,
                                  std::size_t(rows), cudaMemcpyDeviceToDevice, stream_),
                "cudaMemcpy2DAsync");
  }
  void copy_columns(DeviceBuffer& to, std::int64_t to_width, const DeviceBuffer& from, std::int64_t width, std::int64_t rows) {
    copy_columns(to.data(), to_width, from.data(), width, width, rows);
  }

  FusedPlan plan_;
  DeviceBuffer q_, k_, v_;
  DeviceBuffer q_padded_, k_padded_, v_padded_, o_padded_;  // only where the plan pads (pad_q_k, pad_v_o)
  DeviceMask mask_;
  GuardedBuffer out_, lse_;
  cudaStream_t stream_ = nullptr;
};

class FusedAttention final : public Implementation {
 public:
  std::string name() const override { return "cuda_fused"; }

  Capabilities describe() const override {
    Capabilities c;
    c.summary = "fused flash-style kernel on the GPU: online softmax, K/V tiles through shared memory; f16/bf16 on tensor cores "
                "(wgmma on sm_90 at d = 128, mma.sync elsewhere; f32 accumulation), f32 on FMA units; kernels for d = 32, 64, 96, 128, "
                "256, other head dimensions and d_k != d_v zero-padded to the next one (the copies timed)";
    c.device = "cuda";
    c.dtypes = {DType::f32, DType::f16, DType::bf16};
    c.returns_lse = true;
    c.deterministic = true;  // no atomics; every row's keys are visited in one fixed order
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
    const FusedPlanResult plan = make_fused_plan(p, hopper());
    if (!plan.plan) return Support::no(plan.reason);
    static const int smem_optin = [] {
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, cuda::device_status().device) != cudaSuccess) {
        cudaGetLastError();
        value = 48 * 1024;
      }
      return value;
    }();
    if (plan.plan->params.smem_bytes > smem_optin)
      return Support::no(fmt::format("needs {} bytes of shared memory per block; {} allows {}", plan.plan->params.smem_bytes, device.name,
                                     smem_optin));
    return Support::yes();
  }

  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // device memory is the run's own

  void run(const RunArgs& args) const override {
    FusedRun run(plan_or_throw(args.problem), args.inputs);
    Stream stream;
    run.enqueue(stream.get());
    run.download(args.tensors.required_output(Role::o), args.tensors.output(Role::lse));
  }

  std::unique_ptr<DeviceRun> prepare_device_run(const Problem& problem, const CaseInputs& inputs) const override {
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
};

}  // namespace
}  // namespace cuda_fused

void register_cuda_fused(Registry& registry) { registry.add(std::make_unique<cuda_fused::FusedAttention>()); }

}  // namespace attn
