#include "impls/cuda_cublas/cuda_cublas.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "impls/cuda_cublas/cublas_plan.hpp"
#include "impls/cuda_cublas/kernels.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/cuda_support/device_mask.hpp"
#include "impls/cuda_support/device_resources.hpp"

namespace attn {
namespace cuda_cublas {
namespace {

using cuda::check_cublas;
using cuda::CublasHandle;
using cuda::DeviceBuffer;
using cuda::DeviceMask;
using cuda::upload_mask;
using cuda::GuardedBuffer;
using cuda::Stream;


std::size_t bytes_of(std::int64_t elements, int element_bytes) { return std::size_t(elements) * std::size_t(element_bytes); }

// Host tensors are copied to and from the device as their own storage: dtype and size must match.
// A host tensor handed to a run, checked: the problem's dtype and element count.
void check_tensor(const Tensor& t, DType dtype, std::int64_t elements, const char* name) { cuda::require_tensor(t, dtype, elements, "cuda_cublas", name); }

// One cublasGemmStridedBatchedEx from the plan's arguments (alpha and beta as the compute type
// wants them: double for CUBLAS_COMPUTE_64F, float otherwise).
void gemm(cublasHandle_t handle, const GemmArgs& g, const void* a, const void* b, void* c, const char* call) {
  const float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  const double alpha_d = g.alpha, beta_d = g.beta;
  const bool f64 = g.compute == CUBLAS_COMPUTE_64F;
  check_cublas(cublasGemmStridedBatchedEx(handle, g.trans_a, g.trans_b, int(g.m), int(g.n), int(g.k),
                                          f64 ? static_cast<const void*>(&alpha_d) : &alpha_f, a, g.a_type, int(g.lda),
                                          g.stride_a, b, g.b_type, int(g.ldb), g.stride_b,
                                          f64 ? static_cast<const void*>(&beta_d) : &beta_f, c, g.c_type, int(g.ldc), g.stride_c,
                                          int(g.batch_count), g.compute, CUBLAS_GEMM_DEFAULT),
               call);
}

// Deterministic cuBLAS: the dtype's own precision unless the compute type asks for TF32, no
// reduced-precision reductions, no atomics; the workspace is set again on each enqueue
// (cublasSetStream resets it to the default pool).
void make_deterministic(cublasHandle_t handle) {
  check_cublas(cublasSetMathMode(handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
               "cublasSetMathMode");
  check_cublas(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
}

// The kernels' shapes and launch, from the plan.
void set_shape(KernelParams& k, const CublasAttentionPlan& plan) {
  const Problem& p = plan.problem;
  k.batch = p.batch, k.h_q = p.h_q, k.h_kv = p.h_kv, k.n_q = p.n_q, k.n_k = p.n_k, k.d_k = p.d_k, k.d_v = p.d_v;
  k.rows = plan.softmax.rows;
  k.grid_x = plan.softmax.grid_x;
  k.threads_per_block = plan.softmax.threads_per_block;
  k.rows_per_block = plan.softmax.rows_per_block;
}

// The mask on the device: each row's key limit (causality and padding), the boolean flags and the
// bias in the scores' type, with zero strides where broadcast; the kernels' view of it in `k`.
DeviceMask upload_mask_for(const CublasAttentionPlan& plan, const Mask& mask, KernelParams& k) {
  const Problem& p = plan.problem;
  DeviceMask d = upload_mask(p, mask, !p.window.is_none() || p.padding.kind != KeyPadding::Kind::none, plan.score_bytes, "cuda_cublas");
  k.key_limit = static_cast<const std::int64_t*>(d.key_limit.data());
  k.bool_flags = static_cast<const std::uint8_t*>(d.flags.data());
  k.flags_batch_stride = d.flags_strides.batch;
  k.flags_head_stride = d.flags_strides.head;
  k.bias = d.bias.data();
  k.bias_batch_stride = d.bias_strides.batch;
  k.bias_head_stride = d.bias_strides.head;
  return d;
}

// A forward pass prepared on the device: inputs and mask uploaded, every buffer allocated, the
// outputs poisoned and guarded.
class CublasRun final : public DeviceRun {
 public:
  CublasRun(CublasAttentionPlan plan, const CaseInputs& in)
      : plan_(std::move(plan)),
        out_(bytes_of(plan_.o_elements, plan_.element_bytes), guard_bytes),
        lse_(bytes_of(plan_.lse_elements, plan_.score_bytes), guard_bytes) {
    const Problem& p = plan_.problem;
    const int eb = plan_.element_bytes, sb = plan_.score_bytes;
    q_ = DeviceBuffer(bytes_of(plan_.q_elements, eb));
    k_ = DeviceBuffer(bytes_of(plan_.k_elements, eb));
    v_ = DeviceBuffer(bytes_of(plan_.v_elements, eb));
    check_tensor(in.q, p.dtype, plan_.q_elements, "Q");
    check_tensor(in.k, p.dtype, plan_.k_elements, "K");
    check_tensor(in.v, p.dtype, plan_.v_elements, "V");
    q_.upload(in.q.data());
    k_.upload(in.k.data());
    v_.upload(in.v.data());
    v_finite_ = DeviceBuffer(bytes_of(plan_.v_elements, eb));
    v_nonfinite_ = DeviceBuffer(std::size_t(p.batch * p.h_kv) * sizeof(int));
    scores_ = DeviceBuffer(bytes_of(plan_.score_elements, sb));
    weights_ = DeviceBuffer(bytes_of(plan_.score_elements, eb));
    workspace_ = DeviceBuffer(cublas_workspace_bytes);
    // Poisoned outputs: an element the run leaves unwritten still holds the poison afterwards.
    out_.upload(make_output(p).data());
    lse_.upload(make_lse(p).data());

    KernelParams& k = params_;
    set_shape(k, plan_);
    k.v = v_.data();
    k.v_finite = v_finite_.data();
    k.v_nonfinite = static_cast<int*>(v_nonfinite_.data());
    k.scores = scores_.data();
    k.weights = weights_.data();
    k.lse = lse_.data();
    k.out = out_.data();
    mask_ = upload_mask_for(plan_, in.mask, k);
    make_deterministic(handle_.get());
  }

  void enqueue(void* stream_ptr) override {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    const DType dtype = plan_.problem.dtype;
    check_cublas(cublasSetStream(handle_.get(), stream), "cublasSetStream");
    check_cublas(cublasSetWorkspace(handle_.get(), workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
    cuda::check(cudaMemsetAsync(v_nonfinite_.data(), 0, v_nonfinite_.bytes(), stream), "cudaMemsetAsync (non-finite V flags)");
    launch_stage(Stage::finite_values, dtype, params_, stream);
    gemm(handle_.get(), plan_.scores, k_.data(), q_.data(), scores_.data(), "cublasGemmStridedBatchedEx (S = scale * Q K^T)");
    cuda::mark_written_by_library(scores_.data(), scores_.bytes(), stream);  // every element, beta = 0
    launch_stage(Stage::masked_softmax, dtype, params_, stream);
    gemm(handle_.get(), plan_.output, v_finite_.data(), weights_.data(), out_.data(), "cublasGemmStridedBatchedEx (O = P V)");
    cuda::mark_written_by_library(out_.data(), bytes_of(plan_.o_elements, plan_.element_bytes), stream);
    launch_stage(Stage::nonfinite_values, dtype, params_, stream);
    stream_ = stream;
  }

  // Synchronises, checks the guards and copies O (and the LSE, when wanted) into host tensors.
  void download(Tensor& out, Tensor* lse) {
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    out_.download_into(out, plan_.problem.dtype, "cuda_cublas", "O");
    if (lse) lse_.download_into(*lse, plan_.score_bytes == 8 ? DType::f64 : DType::f32, "cuda_cublas", "the LSE");
  }

  void check_output() override {
    const Problem& p = plan_.problem;
    Tensor out = make_output(p), lse = make_lse(p);
    download(out, &lse);
    cuda::require_written_and_finite(p, out, lse, "cuda_cublas");
  }

  std::size_t workspace_bytes() const override {
    return v_finite_.bytes() + v_nonfinite_.bytes() + scores_.bytes() + weights_.bytes() + workspace_.bytes() + mask_.bytes() +
           2 * (out_.guard_bytes() + lse_.guard_bytes());
  }

 private:
  CublasAttentionPlan plan_;
  CublasHandle handle_;
  DeviceBuffer q_, k_, v_, v_finite_, v_nonfinite_, scores_, weights_, workspace_;
  DeviceMask mask_;
  GuardedBuffer out_, lse_;
  KernelParams params_;
  cudaStream_t stream_ = nullptr;  // of the last enqueue (null: the legacy default stream)
};

// A backward pass prepared on the device: Q, K, V, dO, the forward's LSE and the mask uploaded,
// every buffer allocated, dQ, dK and dV poisoned and guarded. The forward's O is not needed: D is
// the row sum of P dP (softmax_backward_kernel says why).
class CublasBackwardRun final : public DeviceRun {
 public:
  CublasBackwardRun(CublasAttentionPlan plan, const CaseInputs& in, const Tensor& d_o, const Tensor& lse)
      : plan_(std::move(plan)),
        dq_(bytes_of(plan_.q_elements, plan_.element_bytes), guard_bytes),
        dk_(bytes_of(plan_.k_elements, plan_.element_bytes), guard_bytes),
        dv_(bytes_of(plan_.v_elements, plan_.element_bytes), guard_bytes) {
    const Problem& p = plan_.problem;
    const int eb = plan_.element_bytes, sb = plan_.score_bytes;
    check_tensor(in.q, p.dtype, plan_.q_elements, "Q");
    check_tensor(in.k, p.dtype, plan_.k_elements, "K");
    check_tensor(in.v, p.dtype, plan_.v_elements, "V");
    check_tensor(d_o, p.dtype, plan_.o_elements, "dO");
    check_tensor(lse, sb == 8 ? DType::f64 : DType::f32, plan_.lse_elements, "the LSE");
    q_ = DeviceBuffer(bytes_of(plan_.q_elements, eb));
    k_ = DeviceBuffer(bytes_of(plan_.k_elements, eb));
    v_ = DeviceBuffer(bytes_of(plan_.v_elements, eb));
    d_o_ = DeviceBuffer(bytes_of(plan_.o_elements, eb));
    lse_ = DeviceBuffer(bytes_of(plan_.lse_elements, sb));
    q_.upload(in.q.data());
    k_.upload(in.k.data());
    v_.upload(in.v.data());
    d_o_.upload(d_o.data());
    lse_.upload(lse.data());
    k_finite_ = DeviceBuffer(bytes_of(plan_.k_elements, sb));
    scores_ = DeviceBuffer(bytes_of(plan_.score_elements, sb));
    d_weights_ = DeviceBuffer(bytes_of(plan_.score_elements, sb));
    if (plan_.widened_operands) {
      q_wide_ = DeviceBuffer(bytes_of(plan_.q_elements, sb));
      d_o_wide_ = DeviceBuffer(bytes_of(plan_.o_elements, sb));
      dq_wide_ = DeviceBuffer(bytes_of(plan_.q_elements, sb));
      dk_wide_ = DeviceBuffer(bytes_of(plan_.k_elements, sb));
      dv_wide_ = DeviceBuffer(bytes_of(plan_.v_elements, sb));
    }
    workspace_ = DeviceBuffer(cublas_workspace_bytes);
    // Poisoned gradients: an element the run leaves unwritten still holds the poison afterwards.
    const Gradients poisoned = make_gradients(p);
    dq_.upload(poisoned.dq.data());
    dk_.upload(poisoned.dk.data());
    dv_.upload(poisoned.dv.data());

    KernelParams& k = params_;
    set_shape(k, plan_);
    k.q = q_.data();
    k.k = k_.data();
    k.d_o = d_o_.data();
    k.k_finite = k_finite_.data();
    k.q_wide = q_wide_.data();  // null unless widened
    k.d_o_wide = d_o_wide_.data();
    k.scores_then_weights = scores_.data();
    k.d_weights_then_d_scores = d_weights_.data();
    k.dq_wide = dq_wide_.data();
    k.dk_wide = dk_wide_.data();
    k.dv_wide = dv_wide_.data();
    k.dq = dq_.data();
    k.dk = dk_.data();
    k.dv = dv_.data();
    k.lse = lse_.data();
    mask_ = upload_mask_for(plan_, in.mask, k);
    make_deterministic(handle_.get());
  }

  void enqueue(void* stream_ptr) override {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    const DType dtype = plan_.problem.dtype;
    const BackwardGemms& g = plan_.backward;
    const bool wide = plan_.widened_operands;
    // The gradients' GEMMs read Q and dO, and write the gradients, in the scores' type.
    void* q = wide ? q_wide_.data() : q_.data();
    void* d_o = wide ? d_o_wide_.data() : d_o_.data();
    void* dq = wide ? dq_wide_.data() : dq_.data();
    void* dk = wide ? dk_wide_.data() : dk_.data();
    void* dv = wide ? dv_wide_.data() : dv_.data();
    const auto gradient_bytes = [&](std::int64_t elements) { return bytes_of(elements, plan_.score_bytes); };
    check_cublas(cublasSetStream(handle_.get(), stream), "cublasSetStream");
    check_cublas(cublasSetWorkspace(handle_.get(), workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
    launch_stage(Stage::widen_operands, dtype, params_, stream);
    gemm(handle_.get(), plan_.scores, k_.data(), q_.data(), scores_.data(), "cublasGemmStridedBatchedEx (S = scale * Q K^T)");
    cuda::mark_written_by_library(scores_.data(), scores_.bytes(), stream);  // every element, beta = 0
    gemm(handle_.get(), g.d_weights, v_.data(), d_o_.data(), d_weights_.data(), "cublasGemmStridedBatchedEx (dP = dO V^T)");
    cuda::mark_written_by_library(d_weights_.data(), d_weights_.bytes(), stream);
    launch_stage(Stage::softmax_backward, dtype, params_, stream);
    gemm(handle_.get(), g.d_values, d_o, scores_.data(), dv, "cublasGemmStridedBatchedEx (dV = P^T dO)");
    cuda::mark_written_by_library(dv, gradient_bytes(plan_.v_elements), stream);
    gemm(handle_.get(), g.d_queries, k_finite_.data(), d_weights_.data(), dq, "cublasGemmStridedBatchedEx (dQ = scale * dS K')");
    cuda::mark_written_by_library(dq, gradient_bytes(plan_.q_elements), stream);
    gemm(handle_.get(), g.d_keys, q, d_weights_.data(), dk, "cublasGemmStridedBatchedEx (dK = scale * dS^T Q)");
    cuda::mark_written_by_library(dk, gradient_bytes(plan_.k_elements), stream);
    if (wide) launch_stage(Stage::narrow_gradients, dtype, params_, stream);
    stream_ = stream;
  }

  // Synchronises, checks the guards and copies the gradients into host tensors.
  void download(Tensor& dq, Tensor& dk, Tensor& dv) {
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    dq_.download_into(dq, plan_.problem.dtype, "cuda_cublas", "dQ");
    dk_.download_into(dk, plan_.problem.dtype, "cuda_cublas", "dK");
    dv_.download_into(dv, plan_.problem.dtype, "cuda_cublas", "dV");
  }

  void check_output() override {
    Gradients g = make_gradients(plan_.problem);
    download(g.dq, g.dk, g.dv);
    cuda::require_gradients_written_and_finite(plan_.problem, g, "cuda_cublas");
  }

  // Beyond the inputs (Q, K, V, dO, the LSE) and the gradients.
  std::size_t workspace_bytes() const override {
    return k_finite_.bytes() + scores_.bytes() + d_weights_.bytes() + q_wide_.bytes() + d_o_wide_.bytes() + dq_wide_.bytes() +
           dk_wide_.bytes() + dv_wide_.bytes() + workspace_.bytes() + mask_.bytes() +
           2 * (dq_.guard_bytes() + dk_.guard_bytes() + dv_.guard_bytes());
  }

 private:
  CublasAttentionPlan plan_;
  CublasHandle handle_;
  DeviceBuffer q_, k_, v_, d_o_, lse_, k_finite_, scores_, d_weights_, workspace_;
  DeviceBuffer q_wide_, d_o_wide_, dq_wide_, dk_wide_, dv_wide_;  // empty unless widened
  DeviceMask mask_;
  GuardedBuffer dq_, dk_, dv_;
  KernelParams params_;
  cudaStream_t stream_ = nullptr;  // of the last enqueue (null: the legacy default stream)
};

class CublasAttention final : public Implementation {
 public:
  explicit CublasAttention(MatmulPrecision precision) : precision_(precision) {}

  std::string name() const override { return precision_ == MatmulPrecision::tf32 ? "cuda_cublas_tf32" : "cuda_cublas"; }

  Capabilities describe() const override {
    Capabilities c;
    c.device = "cuda";
    // The backward (CublasBackwardRun) computes everything the forward declares: each mask kind,
    // GQA, d_k != d_v, every dtype of the variant; under TF32 its f32 GEMMs are TF32's too, judged
    // by the same scaled rule.
    c.operations = {Operation::forward, Operation::backward};
    c.returns_lse = true;
    c.deterministic = true;  // fixed cuBLAS workspace, no atomics, no split-k reductions across streams
    c.fully_masked = FullyMaskedPolicy::zeros;
    // The softmax kernel takes one key limit per row: causal windows and padding, no lower bound.
    c.masks = {.causal_top_left = true, .causal_bottom_right = true, .padding_per_batch = true, .padding_per_query = true,
               .bool_mask = true, .bias = true};
    c.gqa = true;
    c.different_dk_dv = true;
    if (precision_ == MatmulPrecision::tf32) {
      c.summary = "unfused on the GPU: cuBLAS GEMMs with TF32 tensor-core products (f32 inputs), masked softmax in f32; backward: "
                  "P recomputed from the LSE, dP, dV, dQ, dK by TF32 GEMMs";
      c.dtypes = {DType::f32};
      c.matmul_precision = MatmulPrecision::tf32;
    } else {
      c.summary = "unfused on the GPU: cuBLAS GEMMs (S = scale QK^T in f32, f64 for f64), masked softmax kernel, P in the dtype, O = PV; "
                  "backward: P recomputed from the LSE, dP = dO V^T, a softmax-backward kernel, dV, dQ, dK by f32 GEMMs (f64 for f64)";
      c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    }
    return c;
  }

  Support supports(const Problem& p) const override {
    const DeviceStatus& device = cuda::device_status();
    if (!device.available) return Support::no(device.reason);
    static const cudaError_t image = [] {
      const cudaError_t status = kernel_image_status();
      cudaGetLastError();
      return status;
    }();
    if (image != cudaSuccess)
      return Support::no(fmt::format("no kernel image for {} (sm_{}{}) in this build: {}", device.name, device.sm_major, device.sm_minor,
                                     cudaGetErrorName(image)));
    const auto dtypes = describe().dtypes;
    if (std::find(dtypes.begin(), dtypes.end(), p.dtype) == dtypes.end())
      return Support::no(fmt::format("dtype {} not supported", to_string(p.dtype)));
    const PlanResult plan = make_cublas_plan(p, precision_);
    if (!plan.plan) return Support::no(plan.reason);
    const double available = 0.9 * device.memory_gib * double(1ull << 30);
    if (plan.plan->device_bytes > available)
      return Support::no(fmt::format("needs {:.2f} GiB of device memory ({} materialised); {} has {:.1f} GiB",
                                     plan.plan->device_bytes / double(1ull << 30),
                                     p.operation == Operation::backward ? "S and dP, in place P and dS, are" : "the score matrix and P are",
                                     device.name, device.memory_gib));
    return Support::yes();
  }

  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // device memory is the run's own

  void run(const RunArgs& args) const override {
    if (args.problem.operation == Operation::backward) {
      const Tensor* d_o = args.tensors.input(Role::d_o);
      const Tensor* lse = args.tensors.input(Role::lse);
      if (d_o == nullptr || lse == nullptr)
        throw std::invalid_argument(fmt::format("{}: a backward pass needs dO and the forward's LSE (P is recomputed as exp(S - LSE))", name()));
      CublasBackwardRun run(plan_or_throw(args.problem), args.inputs, *d_o, *lse);
      Stream stream;
      run.enqueue(stream.get());
      run.download(args.tensors.required_output(Role::dq), args.tensors.required_output(Role::dk), args.tensors.required_output(Role::dv));
      return;
    }
    CublasRun run(plan_or_throw(args.problem), args.inputs);
    Stream stream;
    run.enqueue(stream.get());
    run.download(args.tensors.required_output(Role::o), args.tensors.output(Role::lse));
  }

  // A backward problem is timed alone, as training's backward is: its LSE comes from one forward
  // pass run here, untimed (and freed before the backward allocates), and dO is the harness's
  // draw (generate_d_o, what verify and the CPU benchmarks feed).
  std::unique_ptr<DeviceRun> prepare_device_run(const Problem& problem, const CaseInputs& inputs) const override {
    if (problem.operation != Operation::backward) return std::make_unique<CublasRun>(plan_or_throw(problem), inputs);
    CublasAttentionPlan plan = plan_or_throw(problem);
    Problem forward = problem;
    forward.operation = Operation::forward;
    Tensor lse = make_lse(forward);
    {
      CublasRun run(plan_or_throw(forward), inputs);
      Stream stream;
      run.enqueue(stream.get());
      Tensor out = make_output(forward);
      run.download(out, &lse);
    }
    return std::make_unique<CublasBackwardRun>(std::move(plan), inputs, generate_d_o(problem), lse);
  }

 private:
  CublasAttentionPlan plan_or_throw(const Problem& p) const {
    PlanResult plan = make_cublas_plan(p, precision_);
    if (!plan.plan) throw std::invalid_argument(fmt::format("{}: {}", name(), plan.reason));
    return std::move(*plan.plan);
  }

  MatmulPrecision precision_;
};

}  // namespace
}  // namespace cuda_cublas

void register_cuda_cublas(Registry& registry) {
  registry.add(std::make_unique<cuda_cublas::CublasAttention>(MatmulPrecision::working));
  registry.add(std::make_unique<cuda_cublas::CublasAttention>(MatmulPrecision::tf32));
}

}  // namespace attn
