// cuda_fused's kernels side by side on its target problem (bf16, d = 128, b = 2, h = 16, n = 4096
// and 8192, no mask and causal), launched directly with CUDA events around each launch, median of
// 30 after 3 warm-ups: the mma.sync kernel and the wgmma kernel with S as one 128-key product or as
// two 64-key halves (the one the plan picks). Each wgmma output's max abs difference to the
// mma.sync kernel's (verified against the reference by `attnbench verify`) is printed beside it:
// a variant that disagrees beyond bf16 rounding is wrong, whatever its time. Needs an sm_90 GPU
// (H100, H200): exit 77 elsewhere; ci/gpu-suite.sh runs it. `cuda_fused_variants once`: n = 4096,
// no mask, one timed launch of each (for ncu).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "impls/cuda_fused/forward_kernel.cuh"
#include "impls/cuda_fused/forward_wgmma_kernel.cuh"

namespace {

using attn::DType;
using namespace attn::cuda_fused;

#define CHECK_CUDA(x)                                                                       \
  do {                                                                                      \
    const cudaError_t status = (x);                                                         \
    if (status != cudaSuccess) {                                                            \
      std::fprintf(stderr, "cuda_fused_variants: %s: %s\n", #x, cudaGetErrorString(status)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

FusedParams target_params(int b, int h, int n, bool causal, bool wgmma) {
  FusedParams p;
  p.batch = b, p.h_q = h, p.h_kv = h, p.n_q = n, p.n_k = n, p.head_dim = 128, p.group = 1;
  const std::int64_t d = 128;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = n * d;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = h * n * d;
  p.scale = 1.f / std::sqrt(128.f), p.scale_log2 = p.scale * 1.4426950408889634f;
  p.causal = causal ? CausalMode::top_left : CausalMode::none;
  p.key_limits = causal;
  p.dtype = DType::bf16;
  p.wgmma = wgmma;
  p.tile = wgmma ? wgmma_tile_shape() : mma_tile_shape(128);
  p.smem_bytes = wgmma ? wgmma_smem_bytes() : mma_smem_bytes(128);
  p.num_m_blocks = (n + p.tile.block_m - 1) / p.tile.block_m;
  p.total_blocks = std::int64_t(b) * h * p.num_m_blocks;
  p.grid = grid_shape(p.total_blocks);
  return p;
}

template <class Kernel>
float median_ms(Kernel kernel, const FusedParams& p, int reps) {
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes));
  const dim3 grid(unsigned(p.grid.x), unsigned(p.grid.y)), block(unsigned(p.tile.threads));
  for (int i = 0; i < 3; ++i) kernel<<<grid, block, p.smem_bytes>>>(p);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<std::size_t>(reps));
  for (float& t : ms) {
    CHECK_CUDA(cudaEventRecord(start));
    kernel<<<grid, block, p.smem_bytes>>>(p);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double max_abs_difference(const void* a, const void* b, std::size_t elements) {
  std::vector<__nv_bfloat16> x(elements), y(elements);
  CHECK_CUDA(cudaMemcpy(x.data(), a, elements * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(y.data(), b, elements * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (std::size_t i = 0; i < elements; ++i)
    worst = std::max(worst, std::fabs(double(__bfloat162float(x[i])) - double(__bfloat162float(y[i]))));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const bool once = argc > 1 && std::string_view(argv[1]) == "once";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda_fused_variants: no CUDA device\n");
    return 77;
  }
  int major = 0, minor = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  if (major != 9 || minor != 0) {
    std::printf("cuda_fused_variants: the wgmma kernels need sm_90 (this device is sm_%d%d)\n", major, minor);
    return 77;
  }
  const int b = 2, h = 16;
  std::printf("bf16 d=128 b=%d h=%d; median ms of %d launches; TFLOP/s = 4 b h n^2 d (halved causal) / time\n", b, h, once ? 1 : 30);
  for (int n : {8192, 4096}) {
    if (once && n != 4096) continue;
    const std::size_t elements = std::size_t(b) * h * n * 128;
    std::vector<__nv_bfloat16> host(3 * elements);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (auto& x : host) x = __float2bfloat16(uniform(rng));
    void *q, *k, *v, *o_mma, *o_halves, *o_whole;
    float *lse_mma, *lse_halves, *lse_whole;
    for (void** buffer : {&q, &k, &v, &o_mma, &o_halves, &o_whole}) CHECK_CUDA(cudaMalloc(buffer, elements * 2));
    for (float** buffer : {&lse_mma, &lse_halves, &lse_whole}) CHECK_CUDA(cudaMalloc(buffer, std::size_t(b) * h * n * 4));
    CHECK_CUDA(cudaMemcpy(q, host.data(), elements * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, host.data() + elements, elements * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, host.data() + 2 * elements, elements * 2, cudaMemcpyHostToDevice));
    for (bool causal : {false, true}) {
      if (once && causal) continue;
      const double flops = 4.0 * b * h * double(n) * n * 128 / (causal ? 2 : 1);
      auto with = [&](bool wgmma, void* o, float* lse) {
        FusedParams p = target_params(b, h, n, causal, wgmma);
        p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
        return p;
      };
      const int reps = once ? 1 : 30;
      const FusedParams mma = with(false, o_mma, lse_mma), halves = with(true, o_halves, lse_halves), whole = with(true, o_whole, lse_whole);
      const float t_mma = causal ? median_ms(fused_forward_mma_kernel<MmaTraits<DType::bf16, 128>, true, false>, mma, reps)
                                 : median_ms(fused_forward_mma_kernel<MmaTraits<DType::bf16, 128>, false, false>, mma, reps);
      const float t_halves = causal ? median_ms(fused_forward_wgmma_kernel<DType::bf16, true, 2>, halves, reps)
                                    : median_ms(fused_forward_wgmma_kernel<DType::bf16, false, 2>, halves, reps);
      const float t_whole = causal ? median_ms(fused_forward_wgmma_kernel<DType::bf16, true, 1>, whole, reps)
                                   : median_ms(fused_forward_wgmma_kernel<DType::bf16, false, 1>, whole, reps);
      std::printf("n=%5d %-6s mma.sync %7.3f ms %5.1f TF/s | wgmma 2 halves %7.3f ms %5.1f TF/s (max diff %.3g) | wgmma 1 product %7.3f ms %5.1f TF/s (max diff %.3g)\n",
                  n, causal ? "causal" : "none", t_mma, flops / t_mma / 1e9, t_halves, flops / t_halves / 1e9,
                  max_abs_difference(o_mma, o_halves, elements), t_whole, flops / t_whole / 1e9, max_abs_difference(o_mma, o_whole, elements));
    }
    for (void* buffer : {q, k, v, o_mma, o_halves, o_whole}) cudaFree(buffer);
    for (float* buffer : {lse_mma, lse_halves, lse_whole}) cudaFree(buffer);
  }
  return 0;
}
