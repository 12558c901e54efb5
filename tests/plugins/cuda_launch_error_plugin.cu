// A CUDA plugin (ABI version 2) whose kernel never runs: it asks for 64 KiB of dynamic shared
// memory, more than the 48 KiB a kernel gets without opting in with
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), so every launch fails with
// cudaErrorInvalidValue; and it never calls cudaGetLastError, so the error is left pending in
// its CUDA runtime, a static copy (nvcc's default, as users build), which the worker's runtime
// does not share. tests/plugin_cuda_launch_error.sh checks that `attnbench validate` names the
// launch error instead of reporting unwritten outputs. Built with CUDA_LAUNCH_OPT_IN=1 it makes
// that call and is a correct plugin (the test's control: the same kernel passes).
//
// The kernel: one block per query row, the row's scores in shared memory (up to 16384 keys),
// softmax in f32, then each thread one or more output columns. f32, no masks, MHA, d_k = d_v.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "attnbench_plugin.h"

#ifndef CUDA_LAUNCH_OPT_IN
#define CUDA_LAUNCH_OPT_IN 0
#endif

namespace {

constexpr int max_keys = 16384;
constexpr int threads = 128;
constexpr int warp = 32;
constexpr size_t scores_bytes = max_keys * sizeof(float);  // 64 KiB

struct View {
  float* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
  __device__ float& at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return data[a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3]];
  }
};

struct Params {
  int64_t h, n_q, n_k, d;
  float scale;
  View q, k, v, out;
};

// The block's maximum (or sum) of x, every thread getting it.
__device__ float block_reduce(float x, bool maximum, float* partial) {
  for (int offset = warp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = maximum ? fmaxf(x, other) : x + other;
  }
  if (threadIdx.x % warp == 0) partial[threadIdx.x / warp] = x;
  __syncthreads();
  float r = partial[0];
  for (int w = 1; w < threads / warp; ++w) r = maximum ? fmaxf(r, partial[w]) : r + partial[w];
  __syncthreads();
  return r;
}

__global__ void attention_row(Params p) {
  extern __shared__ float scores[];
  __shared__ float partial[threads / warp];
  const int64_t row = blockIdx.x, i = row % p.n_q, h = row / p.n_q % p.h, b = row / p.n_q / p.h;
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < p.n_k; j += threads) {
    float s = 0;
    for (int64_t x = 0; x < p.d; ++x) s += p.q.at(b, h, i, x) * p.k.at(b, h, j, x);
    scores[j] = s * p.scale;
    local_max = fmaxf(local_max, scores[j]);
  }
  const float m = block_reduce(local_max, true, partial);
  float local_sum = 0;
  for (int64_t j = threadIdx.x; j < p.n_k; j += threads) {
    scores[j] = expf(scores[j] - m);
    local_sum += scores[j];
  }
  const float sum = block_reduce(local_sum, false, partial);  // its barriers publish every score
  for (int64_t c = threadIdx.x; c < p.d; c += threads) {
    float acc = 0;
    for (int64_t j = 0; j < p.n_k; ++j) acc += scores[j] * p.v.at(b, h, j, c);
    p.out.at(b, h, i, c) = acc / sum;
  }
}

View view_of(const attnbench_dl_tensor* t) {
  View v;
  v.data = static_cast<float*>(t->data);
  for (int d = 0; d < 4; ++d) v.stride[d] = t->strides[d];
  return v;
}

int launch_supports(const attnbench_call* call, char* why, size_t why_len) {
  if (call->n_k > max_keys) {
    std::snprintf(why, why_len, "at most %d keys (one row of scores in shared memory)", max_keys);
    return 0;
  }
  return 1;
}

int launch_run(const attnbench_call* call, char* error, size_t error_len) {
  if (call->operation != ATTNBENCH_OP_FORWARD || call->n_k > max_keys) {
    std::snprintf(error, error_len, "only the forward pass, at most %d keys", max_keys);
    return 1;
  }
  Params p{};
  p.h = call->h_q;
  p.n_q = call->n_q;
  p.n_k = call->n_k;
  p.d = call->d_k;
  p.scale = static_cast<float>(call->scale);
  p.q = view_of(attnbench_call_tensor(call, ATTNBENCH_ROLE_Q));
  p.k = view_of(attnbench_call_tensor(call, ATTNBENCH_ROLE_K));
  p.v = view_of(attnbench_call_tensor(call, ATTNBENCH_ROLE_V));
  p.out = view_of(attnbench_call_tensor(call, ATTNBENCH_ROLE_O));
#if CUDA_LAUNCH_OPT_IN
  if (cudaError_t e = cudaFuncSetAttribute(attention_row, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scores_bytes)); e != cudaSuccess) {
    std::snprintf(error, error_len, "cudaFuncSetAttribute: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
  }
#endif
  const auto rows = static_cast<unsigned>(call->batch * call->h_q * call->n_q);
  attention_row<<<rows, threads, scores_bytes, static_cast<cudaStream_t>(call->cuda_stream)>>>(p);
  return 0;  // the planted defect: the launch's error is never read
}

const attnbench_role_dtype dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};

attnbench_plugin_v2 make_description() {
  attnbench_plugin_v2 d{};
  d.abi_version = ATTNBENCH_ABI_VERSION;
  d.struct_size = sizeof(attnbench_plugin_v2);
  d.name = CUDA_LAUNCH_OPT_IN ? "cuda_scores_in_smem_opt_in" : "cuda_scores_in_smem";
  d.version = "1.0";
  d.description = "one block per query row, its scores in 64 KiB of dynamic shared memory (f32, no masks)";
  attnbench_plugin_caps& c = d.capabilities;
  c.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  c.dtypes = dtypes;
  c.dtype_count = 1;
  c.layouts = ATTNBENCH_ACCEPTS_BHSD | ATTNBENCH_ACCEPTS_BSHD | ATTNBENCH_ACCEPTS_STRIDED;
  c.features = ATTNBENCH_FEATURE_DETERMINISTIC;
  c.fully_masked_policy = ATTNBENCH_FULLY_MASKED_AS_ZEROS;
  c.min_head_dim = 1;
  c.max_head_dim = 256;
  c.device_type = ATTNBENCH_DL_CUDA;
  d.supports = launch_supports;
  d.run = launch_run;
  return d;
}

const attnbench_plugin_v2 description = make_description();

}  // namespace

extern "C" ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &description : nullptr;
}
