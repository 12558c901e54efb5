// The GPU peak probes (see gpu_peaks.hpp). CUDA builds only; plain C++ against the CUDA runtime
// and cuBLAS.
#include "benchmarks/gpu_peaks.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "impls/cuda_support/cuda_support.hpp"
#include "impls/cuda_support/device_resources.hpp"

namespace attn::bench {
namespace {

using cuda::check;
using cuda::check_cublas;
using cuda::CublasHandle;

// Operand values of magnitude [1, 2) with random signs, as the dtype's bits: data that makes the
// tensor cores work as hard as real data does (zeros would flatter the clocks), and sums of
// 8192 products that stay far below f16's range.
std::vector<std::byte> operand_bits(DType dtype, std::size_t count) {
  std::vector<std::byte> bytes(count * static_cast<std::size_t>(bytes_per_element(dtype)));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t r = next();
    const bool negative = (r >> 63) != 0;
    switch (dtype) {
      case DType::f16: {
        const auto bits = static_cast<std::uint16_t>((negative ? 0x8000u : 0u) | 0x3C00u | (r & 0x03FFu));
        std::memcpy(&bytes[i * 2], &bits, 2);
        break;
      }
      case DType::bf16: {
        const auto bits = static_cast<std::uint16_t>((negative ? 0x8000u : 0u) | 0x3F80u | (r & 0x007Fu));
        std::memcpy(&bytes[i * 2], &bits, 2);
        break;
      }
      case DType::f32: {
        const float v = (negative ? -1.0f : 1.0f) * (1.0f + static_cast<float>(r & 0xFFFFFF) / 16777216.0f);
        std::memcpy(&bytes[i * 4], &v, 4);
        break;
      }
      case DType::f64: {
        const double v = (negative ? -1.0 : 1.0) * (1.0 + static_cast<double>(r & 0xFFFFFFFFFFFFull) / 281474976710656.0);
        std::memcpy(&bytes[i * 8], &v, 8);
        break;
      }
    }
  }
  return bytes;
}

struct GemmTypes {
  cudaDataType data;
  cublasComputeType_t compute;
  const char* description;
};

GemmTypes gemm_types(const GemmPrecision& precision) {
  if (precision.tf32) {
    if (precision.dtype != DType::f32) throw std::invalid_argument("TF32 GEMMs take f32 data");
    return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "f32 A, B, C; TF32 tensor-core products (CUBLAS_COMPUTE_32F_FAST_TF32)"};
  }
  switch (precision.dtype) {
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, "f16 A, B, C; f32 accumulation (CUBLAS_COMPUTE_32F)"};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16 A, B, C; f32 accumulation (CUBLAS_COMPUTE_32F)"};
    case DType::f32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F, "f32 A, B, C; CUBLAS_COMPUTE_32F, default math mode (no TF32)"};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, "f64 A, B, C; CUBLAS_COMPUTE_64F"};
  }
  throw std::invalid_argument("unknown dtype");
}

GpuGemmPeak measure_gemm(const GemmPrecision& precision, const GpuPeakSettings& s, const CublasHandle& handle, const cuda::Stream& stream) {
  const DType dtype = precision.dtype;
  const int m = s.gemm_size;
  const std::size_t count = static_cast<std::size_t>(m) * static_cast<std::size_t>(m);
  const std::vector<std::byte> host = operand_bits(dtype, count);
  cuda::DeviceBuffer a(host.size()), b(host.size()), c(host.size());
  a.upload(host.data());
  b.upload(host.data());
  const GemmTypes t = gemm_types(precision);
  const float alpha32 = 1, beta32 = 0;
  const double alpha64 = 1, beta64 = 0;
  const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = dtype == DType::f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  auto gemm = [&] {
    check_cublas(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, alpha, a.data(), t.data, m, b.data(), t.data, m, beta,
                              c.data(), t.data, m, t.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };
  for (int i = 0; i < s.warmup; ++i) gemm();
  cuda::Event start, stop;
  double best = 0;
  for (int i = 0; i < s.repetitions; ++i) {
    check(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
    gemm();
    check(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
    const double seconds = cuda::elapsed_seconds(start, stop);
    if (seconds > 0) best = std::max(best, 2.0 * m * static_cast<double>(m) * m / seconds / 1e9);
  }
  const char* tf32_override = std::getenv("NVIDIA_TF32_OVERRIDE");
  return {precision, best,
          fmt::format("cublasGemmEx {0}x{0}x{0}, {1}, CUBLAS_GEMM_DEFAULT; best of {2} after {3} warm-up{4}", m, t.description,
                      s.repetitions, s.warmup,
                      tf32_override ? fmt::format(" (NVIDIA_TF32_OVERRIDE={} in the environment)", tf32_override) : "")};
}

}  // namespace

GpuPeaks measure_gpu_peaks(const std::vector<GemmPrecision>& precisions, const GpuPeakSettings& s) {
  if (s.gemm_size < 1 || s.copy_bytes < 1 || s.warmup < 0 || s.repetitions < 1)
    throw std::invalid_argument("measure_gpu_peaks: sizes and repetitions must be positive");
  cuda::Stream stream;
  CublasHandle handle;
  check_cublas(cublasSetStream(handle.get(), stream.get()), "cublasSetStream");
  check_cublas(cublasSetMathMode(handle.get(), CUBLAS_DEFAULT_MATH), "cublasSetMathMode");

  GpuPeaks peaks;
  for (const GemmPrecision& precision : precisions) {
    if (peaks.gemm_gflops(precision) > 0) continue;  // measured already
    peaks.gemm.push_back(measure_gemm(precision, s, handle, stream));
  }

  cuda::DeviceBuffer src(s.copy_bytes), dst(s.copy_bytes);
  check(cudaMemsetAsync(src.data(), 1, s.copy_bytes, stream.get()), "cudaMemsetAsync");
  auto copy = [&] {
    check(cudaMemcpyAsync(dst.data(), src.data(), s.copy_bytes, cudaMemcpyDeviceToDevice, stream.get()), "cudaMemcpyAsync");
  };
  for (int i = 0; i < s.warmup; ++i) copy();
  cuda::Event start, stop;
  for (int i = 0; i < s.repetitions; ++i) {
    check(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
    copy();
    check(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
    const double seconds = cuda::elapsed_seconds(start, stop);
    if (seconds > 0) peaks.copy_gbytes_per_second = std::max(peaks.copy_gbytes_per_second, 2.0 * static_cast<double>(s.copy_bytes) / seconds / 1e9);
  }
  peaks.copy_method = fmt::format("cudaMemcpyAsync device to device of {:.0f} MiB, bytes read + written per second; best of {} after {} warm-up",
                                  static_cast<double>(s.copy_bytes) / (1 << 20), s.repetitions, s.warmup);
  check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  return peaks;
}

}  // namespace attn::bench
