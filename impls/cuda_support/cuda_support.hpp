#pragma once
// What every CUDA implementation, GPU test and GPU benchmark shares: CUDA runtime calls whose
// failure becomes an exception naming the call (a case's failure, never an abort of the
// harness), and whether a device is present, with the reason when it is not.
// Built only where CUDA is (ATTN_HAVE_CUDA); plain C++ against the CUDA runtime, no nvcc needed.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "core/device_status.hpp"

namespace attn::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError "CALL failed: cudaErrorName: description" unless status is cudaSuccess.
// Also clears the runtime's sticky last error so the next case starts clean where it can.
void check(cudaError_t status, const char* call);

// The same for a kernel launch: the launch's own error (cudaGetLastError), named after kernel.
void check_launch(const char* kernel);

// The device (core/device_status.hpp), queried once per process; never throws.
const DeviceStatus& device_status();

// CTest's SKIP_RETURN_CODE for GPU tests run where no device is (tests/CMakeLists.txt).
inline constexpr int skip_return_code = 77;

}  // namespace attn::cuda
