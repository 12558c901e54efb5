#include "impls/cuda_support/cuda_support.hpp"

#include <fmt/format.h>

namespace attn::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error; a sticky one (a device fault) stays, as it must
  throw CudaError(fmt::format("{} failed: {}: {}", call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw CudaError(fmt::format("launch of {} failed: {}: {}", kernel, cudaGetErrorName(status), cudaGetErrorString(status)));
}

namespace {

DeviceStatus query() {
  DeviceStatus s;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    s.reason = fmt::format("no CUDA device: cudaGetDeviceCount: {} ({})", cudaGetErrorName(status), cudaGetErrorString(status));
    cudaGetLastError();
    return s;
  }
  if (count == 0) {
    s.reason = "no CUDA device: the driver reports none";
    return s;
  }
  cudaDeviceProp prop{};
  if (cudaGetDevice(&s.device) != cudaSuccess || cudaGetDeviceProperties(&prop, s.device) != cudaSuccess) {
    s.reason = "no CUDA device: its properties cannot be read";
    cudaGetLastError();
    return s;
  }
  s.available = true;
  s.name = prop.name;
  s.sm_major = prop.major;
  s.sm_minor = prop.minor;
  s.multiprocessors = prop.multiProcessorCount;
  s.memory_gib = double(prop.totalGlobalMem) / double(1ull << 30);
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, s.device) == cudaSuccess) s.sm_clock_mhz = khz / 1000.0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, s.device) == cudaSuccess) s.memory_clock_mhz = khz / 1000.0;
  int l2 = 0;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, s.device) == cudaSuccess) s.l2_bytes = l2;
  cudaDriverGetVersion(&s.driver_version);
  cudaRuntimeGetVersion(&s.runtime_version);
  cudaGetLastError();
  return s;
}

}  // namespace

const DeviceStatus& device_status() {
  static const DeviceStatus status = query();
  return status;
}

}  // namespace attn::cuda
