#pragma once
// RAII owners of what CUDA implementations, GPU tests and GPU benchmarks hold on the device:
// memory (optionally between guard regions), streams, events, a cuBLAS handle; and cuBLAS
// statuses checked like CUDA ones. Plain C++ against the CUDA runtime and cuBLAS; every failure
// throws attn::cuda::CudaError naming the call.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "impls/cuda_support/cuda_support.hpp"

namespace attn::cuda {

// Throws CudaError "CALL failed: CUBLAS_STATUS_NAME: description" unless status is success.
void check_cublas(cublasStatus_t status, const char* call);

// Throws std::invalid_argument "IMPLEMENTATION: NAME is DTYPE with N elements; the problem needs
// DTYPE with M" unless t holds `dtype` with `elements` elements: a host tensor handed to a run.
void require_tensor(const Tensor& t, DType dtype, std::int64_t elements, std::string_view implementation, const char* name);

// cudaMalloc'd memory, freed on destruction. Zero bytes: no allocation, data() null.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Synchronous copies of the whole buffer (bytes() bytes), and all bytes to zero.
  void upload(const void* host);
  void download(void* host) const;
  void zero();

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Device memory with guard regions before and after the payload, filled with a canary byte;
// check_guards reads them back and throws when a kernel wrote outside the payload.
class GuardedBuffer {
 public:
  static constexpr unsigned char canary = 0xA5;
  GuardedBuffer(std::size_t payload_bytes, std::size_t guard_bytes);  // guards filled on construction

  void* data() const { return static_cast<unsigned char*>(buffer_.data()) + guard_; }
  std::size_t bytes() const { return payload_; }
  std::size_t guard_bytes() const { return guard_; }
  void upload(const void* host);
  void download(void* host) const;
  // Synchronous. Throws "wrote past the end of NAME (N guard bytes changed after)" or
  // "wrote before the start of NAME (N guard bytes changed before)".
  void check_guards(const char* name) const;
  // What a run hands back: check_guards(name), then the payload into `to`, which must hold `dtype`
  // and the payload's number of elements (require_tensor). Call after the kernels are done.
  void download_into(Tensor& to, DType dtype, std::string_view implementation, const char* name) const;

 private:
  std::size_t payload_, guard_;
  DeviceBuffer buffer_;
};

class Stream {
 public:
  Stream();  // a non-blocking stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Seconds between two recorded events, after waiting for the second.
double elapsed_seconds(const Event& start, const Event& stop);

class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Tells compute-sanitizer's initcheck that a library (cuBLAS) wrote [ptr, ptr + bytes) on `stream`
// (NVTX memory API; a no-op without a tool attached). cuBLAS's f16/bf16 GEMMs on sm_90 store
// their output through the tensor memory accelerator, which initcheck does not see: a kernel that
// reads such a GEMM's output would otherwise be reported reading uninitialised memory (measured
// on an H200: every element of a bf16 -> f32 GEMM's output, none of an f32 one's).
void mark_written_by_library(void* ptr, std::size_t bytes, cudaStream_t stream);

// Throws unless every downloaded output element was written and is finite and every LSE value
// was written and is not NaN or +inf (-inf is a fully masked row's): a kernel that skips work is
// an error, not a fast result. `implementation` names it in the message.
void require_written_and_finite(const Problem& problem, const Tensor& out, const Tensor& lse, std::string_view implementation);
// The same for a backward pass: every element of dQ, dK and dV written and finite.
void require_gradients_written_and_finite(const Problem& problem, const Gradients& gradients, std::string_view implementation);

}  // namespace attn::cuda
