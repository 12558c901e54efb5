#pragma once
// What every CUDA implementation, GPU test and GPU benchmark shares: CUDA runtime calls whose
// failure becomes an exception naming the call (a case's failure, never an abort of the
// harness), and whether a device is present, with the reason when it is not.
// Built only where CUDA is (ATTN_HAVE_CUDA); plain C++ against the CUDA runtime, no nvcc needed.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

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

struct DeviceStatus {
  bool available = false;
  std::string reason;       // why not, when !available (no driver, no device, ...)
  int device = 0;           // the device used: CUDA_VISIBLE_DEVICES picks which
  std::string name;         // e.g. "NVIDIA H100 80GB HBM3"
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  double sm_clock_mhz = 0;  // the maximum SM clock the driver reports
  double memory_clock_mhz = 0;
  double memory_gib = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;
};

// Queried once per process; never throws.
const DeviceStatus& device_status();

// CTest's SKIP_RETURN_CODE for GPU tests run where no device is (tests/CMakeLists.txt).
inline constexpr int skip_return_code = 77;

}  // namespace attn::cuda
