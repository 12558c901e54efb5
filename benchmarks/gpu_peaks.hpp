#pragma once
// The GPU's measured peaks, taken in the same run as the GPU families they bound (only when one
// is to run):
//  - the cuBLAS GEMM rate in each dtype under test: C = A·B, square, column-major, no
//    transposes; f16 and bf16 through cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F,
//    the tensor cores), f32 through cublasGemmEx with CUBLAS_COMPUTE_32F and the default math
//    mode (no TF32), f64 with CUBLAS_COMPUTE_64F. The GEMM rate of a family's dtype is its
//    roofline ("of peak").
//  - device-to-device copy bandwidth: cudaMemcpyAsync of copy_bytes, bytes read + written per
//    second.
// Each is timed with CUDA events on a dedicated stream after warm-up; the best repetition counts.
// No CUDA types here: gpu_peaks.cpp where CUDA is built, gpu_unavailable.cpp (throws) elsewhere.
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"

namespace attn::bench {

struct GpuPeakSettings {
  int gemm_size = 8192;                        // m = n = k
  std::size_t copy_bytes = std::size_t{1} << 30;
  int warmup = 2;                              // untimed calls before the timed ones
  int repetitions = 5;                         // timed calls; the best counts
};

struct GpuGemmPeak {
  DType dtype = DType::f32;
  double gflops = 0;
  std::string method;  // one line: the call, size, types, compute type
};

struct GpuPeaks {
  std::vector<GpuGemmPeak> gemm;  // one per dtype asked for, in that order
  double copy_gbytes_per_second = 0;
  std::string copy_method;
  // The GEMM rate of a dtype, or 0 when it was not measured.
  double gemm_gflops(DType dtype) const {
    for (const auto& g : gemm)
      if (g.dtype == dtype) return g.gflops;
    return 0;
  }
  nlohmann::json to_json() const {
    nlohmann::json j{{"gemm", nlohmann::json::array()}, {"copy_gbytes_per_second", copy_gbytes_per_second}, {"copy_method", copy_method}};
    for (const auto& g : gemm) j["gemm"].push_back({{"dtype", to_string(g.dtype)}, {"gflops", g.gflops}, {"method", g.method}});
    return j;
  }
};

// Throws naming the failed CUDA or cuBLAS call, or std::invalid_argument on bad settings.
GpuPeaks measure_gpu_peaks(const std::vector<DType>& dtypes, const GpuPeakSettings& settings);

}  // namespace attn::bench
