// A simple, correct CUDA attention plugin for attnbench: one warp per query row, keys streamed
// one at a time with an online softmax (running maximum and sum, the accumulator rescaled when
// the maximum grows), f32 arithmetic for f32 and f16 inputs. Any strides (BHSD, BSHD), every mask
// kind the ABI carries, GQA/MQA, d_k != d_v, head dims up to 256, the row log-sum-exp, fully
// masked rows written as zeros with an LSE of -inf. A teaching kernel, not a fast one: no shared
// memory tiling, no tensor cores.
//
// Build: nvcc -O2 -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I impls/plugin examples/plugins/cuda/cuda_plugin.cu -o cuda_plugin.so
// Check: attnbench validate --plugin ./cuda_plugin.so
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "attnbench_plugin.h"

namespace {

constexpr int max_head_dim = 256;
constexpr int warp = 32;
constexpr int per_lane = max_head_dim / warp;  // output columns each lane accumulates
constexpr int warps_per_block = 4;

struct View {
  const void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
  __device__ int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
};

struct Params {
  int64_t batch, h_q, h_kv, n_q, n_k, d_k, d_v;
  float scale;
  int causal, padding;
  const int64_t* valid_len;  // device copy, or null
  View q, k, v, out, lse, mask, bias;
  bool has_lse, has_mask, has_bias;
};

template <class T> __device__ float load(const View& t, int64_t i);
template <> __device__ float load<float>(const View& t, int64_t i) { return static_cast<const float*>(t.data)[i]; }
template <> __device__ float load<__half>(const View& t, int64_t i) { return __half2float(static_cast<const __half*>(t.data)[i]); }
template <class T> __device__ void store(const View& t, int64_t i, float x);
template <> __device__ void store<float>(const View& t, int64_t i, float x) { static_cast<float*>(const_cast<void*>(t.data))[i] = x; }
template <> __device__ void store<__half>(const View& t, int64_t i, float x) {
  static_cast<__half*>(const_cast<void*>(t.data))[i] = __float2half_rn(x);
}

__device__ int64_t key_limit(const Params& p, int64_t b, int64_t i) {
  int64_t limit = p.n_k;
  if (p.causal == ATTNBENCH_CAUSAL_TOP_LEFT) limit = min(limit, i + 1);
  if (p.causal == ATTNBENCH_CAUSAL_BOTTOM_RIGHT) limit = min(limit, i + 1 + p.n_k - p.n_q);
  if (p.padding == ATTNBENCH_PADDING_PER_BATCH) limit = min(limit, p.valid_len[b]);
  if (p.padding == ATTNBENCH_PADDING_PER_QUERY) limit = min(limit, p.valid_len[b * p.n_q + i]);
  return max(limit, int64_t(0));
}

template <class T>
__global__ void attention_rows(Params p) {
  const int lane = threadIdx.x % warp;
  const int64_t row = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / warp;
  if (row >= p.batch * p.h_q * p.n_q) return;
  const int64_t i = row % p.n_q, h = row / p.n_q % p.h_q, b = row / p.n_q / p.h_q;
  const int64_t g = h / (p.h_q / p.h_kv);
  const int64_t limit = key_limit(p, b, i);

  float running_max = -INFINITY, running_sum = 0;
  float acc[per_lane];
#pragma unroll
  for (int c = 0; c < per_lane; ++c) acc[c] = 0;
  for (int64_t j = 0; j < limit; ++j) {
    if (p.has_mask && static_cast<const unsigned char*>(p.mask.data)[p.mask.at(b, h, i, j)] == 0) continue;
    float partial = 0;
    for (int64_t x = lane; x < p.d_k; x += warp) partial += load<T>(p.q, p.q.at(b, h, i, x)) * load<T>(p.k, p.k.at(b, g, j, x));
#pragma unroll
    for (int offset = warp / 2; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    float score = partial * p.scale;
    if (p.has_bias) score += load<T>(p.bias, p.bias.at(b, h, i, j));
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);  // 0 for the first key, 1 while the maximum holds
    const float weight = expf(score - new_max);
    running_sum = running_sum * correction + weight;
#pragma unroll
    for (int c = 0; c < per_lane; ++c) {
      const int64_t x = lane + int64_t(c) * warp;
      if (x < p.d_v) acc[c] = acc[c] * correction + weight * load<T>(p.v, p.v.at(b, g, j, x));
    }
    running_max = new_max;
  }
  const bool fully_masked = running_sum == 0;
#pragma unroll
  for (int c = 0; c < per_lane; ++c) {
    const int64_t x = lane + int64_t(c) * warp;
    if (x < p.d_v) store<T>(p.out, p.out.at(b, h, i, x), fully_masked ? 0.0f : acc[c] / running_sum);
  }
  if (p.has_lse && lane == 0) store<float>(p.lse, p.lse.at(b, h, i, 0), fully_masked ? -INFINITY : running_max + logf(running_sum));
}

View view_of(const attnbench_tensor* t) {
  View v;
  if (t == nullptr) return v;
  v.data = t->data;
  for (int d = 0; d < 4; ++d) v.stride[d] = t->strides[d];
  return v;
}

int fail(char* error, size_t error_len, const char* what, cudaError_t e) {
  std::snprintf(error, error_len, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return 1;
}

int cuda_run(const attnbench_problem* problem, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
             const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask, const attnbench_tensor* bias,
             char* error, size_t error_len) {
  if (problem->d_k > max_head_dim || problem->d_v > max_head_dim) {
    std::snprintf(error, error_len, "head dims up to %d", max_head_dim);
    return 1;
  }
  Params p{};
  p.batch = problem->batch;
  p.h_q = problem->h_q;
  p.h_kv = problem->h_kv;
  p.n_q = problem->n_q;
  p.n_k = problem->n_k;
  p.d_k = problem->d_k;
  p.d_v = problem->d_v;
  p.scale = static_cast<float>(problem->scale);
  p.causal = problem->causal;
  p.padding = problem->padding;
  p.q = view_of(q);
  p.k = view_of(k);
  p.v = view_of(v);
  p.out = view_of(out);
  p.lse = view_of(lse);
  p.mask = view_of(mask);
  p.bias = view_of(bias);
  p.has_lse = lse != nullptr;
  p.has_mask = mask != nullptr;
  p.has_bias = bias != nullptr;
  auto stream = static_cast<cudaStream_t>(problem->cuda_stream);

  // valid_len arrives in host memory: a device copy for the kernel, freed in stream order.
  int64_t* valid_len = nullptr;
  if (problem->padding != ATTNBENCH_PADDING_NONE) {
    const size_t bytes = sizeof(int64_t) * static_cast<size_t>(problem->valid_len_count);
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&valid_len), bytes, stream); e != cudaSuccess)
      return fail(error, error_len, "cudaMallocAsync(valid_len)", e);
    if (cudaError_t e = cudaMemcpyAsync(valid_len, problem->valid_len, bytes, cudaMemcpyHostToDevice, stream); e != cudaSuccess)
      return fail(error, error_len, "cudaMemcpyAsync(valid_len)", e);
  }
  p.valid_len = valid_len;

  const int64_t rows = p.batch * p.h_q * p.n_q;
  const dim3 grid(static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block));
  const dim3 block(warp * warps_per_block);
  if (problem->dtype == ATTNBENCH_DTYPE_F16)
    attention_rows<__half><<<grid, block, 0, stream>>>(p);
  else
    attention_rows<float><<<grid, block, 0, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(error, error_len, "launching attention_rows", e);
  if (valid_len != nullptr)
    if (cudaError_t e = cudaFreeAsync(valid_len, stream); e != cudaSuccess) return fail(error, error_len, "cudaFreeAsync(valid_len)", e);
  return 0;
}

attnbench_plugin_v1 make_description() {
  attnbench_plugin_v1 d{};
  d.abi_version = ATTNBENCH_PLUGIN_ABI_VERSION;
  d.name = "cuda_warp_per_row";
  d.version = "1.0";
  d.description = "one warp per query row, online softmax in f32 registers (f32, f16 with f32 accumulation)";
  attnbench_capabilities& c = d.capabilities;
  c.dtypes = ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32) | ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F16);
  c.layouts = ATTNBENCH_LAYOUT_BHSD | ATTNBENCH_LAYOUT_BSHD | ATTNBENCH_LAYOUT_STRIDED;
  c.masks = ATTNBENCH_MASK_CAUSAL_TOP_LEFT | ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_MASK_PADDING_PER_BATCH |
            ATTNBENCH_MASK_PADDING_PER_QUERY | ATTNBENCH_MASK_BOOL | ATTNBENCH_MASK_BIAS;
  c.fully_masked_policy = ATTNBENCH_FULLY_MASKED_ZEROS;
  c.min_head_dim = 1;
  c.max_head_dim = max_head_dim;
  c.different_dk_dv = 1;
  c.gqa = 1;
  c.returns_lse = 1;
  c.deterministic = 1;  // one warp owns a row; the reduction order is fixed
  c.device_type = ATTNBENCH_DEVICE_CUDA;
  d.supports = nullptr;
  d.run = cuda_run;
  return d;
}

const attnbench_plugin_v1 description = make_description();

}  // namespace

extern "C" ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_PLUGIN_ABI_VERSION ? &description : nullptr;
}
