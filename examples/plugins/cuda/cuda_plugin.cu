// A simple, correct CUDA attention plugin for attnbench (ABI version 2): one warp per query row, keys streamed
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
  int64_t window_left, window_right, diagonal_offset;  // the window, -1 unbounded; n_k - n_q when bottom-right
  int padding;
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

// Keys outside [first, limit) are hidden by the window or the padding (the boolean mask may hide more).
__device__ void key_range(const Params& p, int64_t b, int64_t i, int64_t& first, int64_t& limit) {
  const int64_t diagonal = i + p.diagonal_offset;
  first = p.window_left >= 0 ? max(int64_t(0), diagonal - p.window_left) : 0;
  limit = p.window_right >= 0 ? min(p.n_k, diagonal + p.window_right + 1) : p.n_k;
  if (p.padding == ATTNBENCH_KEY_PADDING_PER_BATCH) limit = min(limit, p.valid_len[b]);
  if (p.padding == ATTNBENCH_KEY_PADDING_PER_QUERY) limit = min(limit, p.valid_len[b * p.n_q + i]);
  limit = max(limit, first);
}

template <class T>
__global__ void attention_rows(Params p) {
  const int lane = threadIdx.x % warp;
  const int64_t row = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / warp;
  if (row >= p.batch * p.h_q * p.n_q) return;
  const int64_t i = row % p.n_q, h = row / p.n_q % p.h_q, b = row / p.n_q / p.h_q;
  const int64_t g = h / (p.h_q / p.h_kv);
  int64_t first, limit;
  key_range(p, b, i, first, limit);

  float running_max = -INFINITY, running_sum = 0;
  float acc[per_lane];
#pragma unroll
  for (int c = 0; c < per_lane; ++c) acc[c] = 0;
  for (int64_t j = first; j < limit; ++j) {
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

View view_of(const attnbench_dl_tensor* t) {
  View v;
  if (t == nullptr) return v;
  v.data = t->data;
  for (int d = 0; d < t->ndim && d < 4; ++d) v.stride[d] = t->strides[d];  // the 3-D LSE's 4th index is always 0
  return v;
}

int fail(char* error, size_t error_len, const char* what, cudaError_t e) {
  std::snprintf(error, error_len, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return 1;
}

int cuda_run(const attnbench_call* problem, char* error, size_t error_len) {
  if (problem->operation != ATTNBENCH_OP_FORWARD) {
    std::snprintf(error, error_len, "only the forward pass is implemented");
    return 1;
  }
  const attnbench_dl_tensor* q = attnbench_call_tensor(problem, ATTNBENCH_ROLE_Q);
  const attnbench_dl_tensor* lse = attnbench_call_tensor(problem, ATTNBENCH_ROLE_LSE);
  const attnbench_dl_tensor* mask = attnbench_call_tensor(problem, ATTNBENCH_ROLE_MASK);
  const attnbench_dl_tensor* bias = attnbench_call_tensor(problem, ATTNBENCH_ROLE_BIAS);
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
  p.window_left = problem->window.left;
  p.window_right = problem->window.right;
  p.diagonal_offset = problem->window.align == ATTNBENCH_ALIGN_BOTTOM_RIGHT ? problem->n_k - problem->n_q : 0;
  p.padding = problem->key_padding;
  p.q = view_of(q);
  p.k = view_of(attnbench_call_tensor(problem, ATTNBENCH_ROLE_K));
  p.v = view_of(attnbench_call_tensor(problem, ATTNBENCH_ROLE_V));
  p.out = view_of(attnbench_call_tensor(problem, ATTNBENCH_ROLE_O));
  p.lse = view_of(lse);
  p.mask = view_of(mask);
  p.bias = view_of(bias);
  p.has_lse = lse != nullptr;
  p.has_mask = mask != nullptr;
  p.has_bias = bias != nullptr;
  auto stream = static_cast<cudaStream_t>(problem->cuda_stream);

  // valid_len arrives in host memory: a device copy for the kernel, freed in stream order.
  int64_t* valid_len = nullptr;
  if (problem->key_padding != ATTNBENCH_KEY_PADDING_NONE) {
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
  if (q->dtype.code == ATTNBENCH_DL_FLOAT && q->dtype.bits == 16)
    attention_rows<__half><<<grid, block, 0, stream>>>(p);
  else
    attention_rows<float><<<grid, block, 0, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(error, error_len, "launching attention_rows", e);
  if (valid_len != nullptr)
    if (cudaError_t e = cudaFreeAsync(valid_len, stream); e != cudaSuccess) return fail(error, error_len, "cudaFreeAsync(valid_len)", e);
  return 0;
}

// q, k, v, o and the bias in f32 or f16 (the LSE is f32 for both).
const attnbench_role_dtype dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}, {ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 16, 1}}};

attnbench_plugin_v2 make_description() {
  attnbench_plugin_v2 d{};
  d.abi_version = ATTNBENCH_ABI_VERSION;
  d.struct_size = sizeof(attnbench_plugin_v2);
  d.name = "cuda_warp_per_row";
  d.version = "2.0";
  d.description = "one warp per query row, online softmax in f32 registers (f32, f16 with f32 accumulation)";
  attnbench_plugin_caps& c = d.capabilities;
  c.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  c.dtypes = dtypes;
  c.dtype_count = 2;
  c.layouts = ATTNBENCH_ACCEPTS_BHSD | ATTNBENCH_ACCEPTS_BSHD | ATTNBENCH_ACCEPTS_STRIDED;
  // Deterministic: one warp owns a row, and the reduction order is fixed.
  c.features = ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_FEATURE_PADDING_PER_BATCH |
               ATTNBENCH_FEATURE_PADDING_PER_QUERY | ATTNBENCH_FEATURE_BOOL_MASK | ATTNBENCH_FEATURE_BIAS | ATTNBENCH_FEATURE_GQA |
               ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_LSE | ATTNBENCH_FEATURE_DETERMINISTIC;
  c.fully_masked_policy = ATTNBENCH_FULLY_MASKED_AS_ZEROS;
  c.min_head_dim = 1;
  c.max_head_dim = max_head_dim;
  c.device_type = ATTNBENCH_DL_CUDA;
  d.supports = nullptr;
  d.run = cuda_run;
  return d;
}

const attnbench_plugin_v2 description = make_description();

}  // namespace

extern "C" ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &description : nullptr;
}
