#pragma once
// The GPU's measured peaks, taken in the same run as the GPU families they bound (only when one
// is to run):
//  - the cuBLAS GEMM rate in each precision under test: C = A·B, square, column-major, no
//    transposes; f16 and bf16 through cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F,
//    the tensor cores), f32 through cublasGemmEx with CUBLAS_COMPUTE_32F and the default math
//    mode (no TF32), tf32 (f32 data) with CUBLAS_COMPUTE_32F_FAST_TF32, f64 with
//    CUBLAS_COMPUTE_64F. The GEMM rate of a family's precision (roofline_precision: its dtype,
//    or tf32 for an implementation whose f32 products are TF32) is its roofline ("of peak").
//  - device-to-device copy bandwidth: cudaMemcpyAsync of copy_bytes, bytes read + written per
//    second.
// Each is timed with CUDA events on a dedicated stream after warm-up; the best repetition counts.
// No CUDA types here: gpu_peaks.cpp where CUDA is built, gpu_unavailable.cpp (throws) elsewhere.
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/device_plan.hpp"
#include "core/dtype.hpp"

namespace attn::bench {

struct GpuPeakSettings {
  int gemm_size = 8192;                        // m = n = k
  std::size_t copy_bytes = std::size_t{1} << 30;
  int warmup = 2;                              // untimed calls before the timed ones
  int repetitions = 5;                         // timed calls; the best counts
};

struct GpuGemmPeak {
  GemmPrecision precision;
  double gflops = 0;
  std::string method;  // one line: the call, size, types, compute type
};

struct GpuPeaks {
  std::vector<GpuGemmPeak> gemm;  // one per precision asked for, in that order
  double copy_gbytes_per_second = 0;
  std::string copy_method;
  // The GEMM rate of a precision, or 0 when it was not measured.
  double gemm_gflops(const GemmPrecision& precision) const {
    for (const auto& g : gemm)
      if (g.precision == precision) return g.gflops;
    return 0;
  }
  nlohmann::json to_json() const {
    nlohmann::json j{{"gemm", nlohmann::json::array()}, {"copy_gbytes_per_second", copy_gbytes_per_second}, {"copy_method", copy_method}};
    for (const auto& g : gemm) j["gemm"].push_back({{"precision", g.precision.name()}, {"gflops", g.gflops}, {"method", g.method}});
    return j;
  }
};

// Throws naming the failed CUDA or cuBLAS call, or std::invalid_argument on bad settings.
GpuPeaks measure_gpu_peaks(const std::vector<GemmPrecision>& precisions, const GpuPeakSettings& settings);

}  // namespace attn::bench
