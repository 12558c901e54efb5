#include "impls/cuda_support/device_resources.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>

#include "core/metrics.hpp"

namespace attn::cuda {

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  cudaGetLastError();  // as cuda::check: a non-sticky error does not outlive this case
  throw CudaError(fmt::format("{} failed: {}: {}", call, cublasGetStatusName(status), cublasGetStatusString(status)));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check(cudaMalloc(&data_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // an error here (a device fault already reported) cannot be thrown
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// From pageable host memory, cudaMemcpy may return once the bytes are staged, before the copy to
// the device lands; a cudaMemset of device memory is asynchronous too. Both run on the legacy
// default stream, which the implementations' non-blocking streams do not wait for: without this
// wait a kernel can read a buffer's previous contents (seen on an H200 under load: cuda_cublas and
// cuda_fused outputs wrong and "nondeterministic" in a process that had run other cases, right
// alone).
namespace {
void wait_for_legacy_stream(const char* after) { check(cudaStreamSynchronize(cudaStreamLegacy), after); }
}  // namespace

void DeviceBuffer::upload(const void* host) {
  if (bytes_ == 0) return;
  check(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
  wait_for_legacy_stream("cudaStreamSynchronize (after cudaMemcpy host to device)");
}

void DeviceBuffer::zero() {
  if (bytes_ == 0) return;
  check(cudaMemset(data_, 0, bytes_), "cudaMemset");
  wait_for_legacy_stream("cudaStreamSynchronize (after cudaMemset)");
}

void DeviceBuffer::download(void* host) const {
  if (bytes_ > 0) check(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
}

GuardedBuffer::GuardedBuffer(std::size_t payload_bytes, std::size_t guard_bytes)
    : payload_(payload_bytes), guard_(guard_bytes), buffer_(payload_bytes + 2 * guard_bytes) {
  check(cudaMemset(buffer_.data(), canary, buffer_.bytes()), "cudaMemset (guard canary)");
  wait_for_legacy_stream("cudaStreamSynchronize (after cudaMemset of the guard canary)");
}

void GuardedBuffer::upload(const void* host) {
  if (payload_ == 0) return;
  check(cudaMemcpy(data(), host, payload_, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
  wait_for_legacy_stream("cudaStreamSynchronize (after cudaMemcpy host to device)");
}

void GuardedBuffer::download(void* host) const {
  if (payload_ > 0) check(cudaMemcpy(host, data(), payload_, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
}

void require_tensor(const Tensor& t, DType dtype, std::int64_t elements, std::string_view implementation, const char* name) {
  if (t.dtype() != dtype || t.numel() != elements)
    throw std::invalid_argument(fmt::format("{}: {} is {} with {} elements; the problem needs {} with {}", implementation, name, to_string(t.dtype()),
                                            t.numel(), to_string(dtype), elements));
}

void GuardedBuffer::download_into(Tensor& to, DType dtype, std::string_view implementation, const char* name) const {
  check_guards(name);
  require_tensor(to, dtype, std::int64_t(payload_ / bytes_per_element(dtype)), implementation, name);
  download(to.data());
}

void GuardedBuffer::check_guards(const char* name) const {
  if (guard_ == 0) return;
  std::vector<unsigned char> before(guard_), after(guard_);
  const auto* base = static_cast<const unsigned char*>(buffer_.data());
  check(cudaMemcpy(before.data(), base, guard_, cudaMemcpyDeviceToHost), "cudaMemcpy (guard before)");
  check(cudaMemcpy(after.data(), base + guard_ + payload_, guard_, cudaMemcpyDeviceToHost), "cudaMemcpy (guard after)");
  std::size_t changed_before = 0, changed_after = 0;
  for (unsigned char c : before) changed_before += c != canary;
  for (unsigned char c : after) changed_after += c != canary;
  if (changed_after > 0) throw CudaError(fmt::format("wrote past the end of {} ({} guard bytes changed after)", name, changed_after));
  if (changed_before > 0)
    throw CudaError(fmt::format("wrote before the start of {} ({} guard bytes changed before)", name, changed_before));
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Event::Event() { check(cudaEventCreate(&event_), "cudaEventCreate"); }

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

double elapsed_seconds(const Event& start, const Event& stop) {
  check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1e3;
}

CublasHandle::CublasHandle() { check_cublas(cublasCreate(&handle_), "cublasCreate"); }

CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

void mark_written_by_library(void* ptr, std::size_t bytes, cudaStream_t stream) {
  if (ptr == nullptr || bytes == 0) return;
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("attnbench");
  nvtxMemVirtualRangeDesc_t range{bytes, ptr};
  nvtxMemMarkInitializedBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.regionDescCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(domain, stream, 0, &batch);
}

namespace {

struct Census {
  std::int64_t unwritten = 0, nonfinite = 0, first = -1;  // first: the first bad element's index
};

Census census(const Tensor& t) {
  Census c;
  for (std::int64_t e = 0; e < t.numel(); ++e) {
    if (t.is_poisoned(e))
      ++c.unwritten;
    else if (!std::isfinite(t.get(e)))
      ++c.nonfinite;
    else
      continue;
    if (c.first < 0) c.first = e;
  }
  return c;
}

}  // namespace

void require_gradients_written_and_finite(const Problem& p, const Gradients& g, std::string_view implementation) {
  for (Role role : {Role::dq, Role::dk, Role::dv}) {
    const Census c = census(g.of(role));
    if (c.unwritten + c.nonfinite > 0)
      throw std::runtime_error(fmt::format("{}: {} {} elements never written, {} not finite (first at {})", implementation, c.unwritten,
                                           to_string(role), c.nonfinite, tensor_coordinates(p, role, c.first)));
  }
}

void require_written_and_finite(const Problem& p, const Tensor& out, const Tensor& lse, std::string_view implementation) {
  const auto [unwritten, nonfinite, first] = census(out);
  std::int64_t bad_lse = 0;
  for (std::int64_t r = 0; r < lse.numel(); ++r) bad_lse += lse.is_poisoned(r) || std::isnan(lse.get(r)) || lse.get(r) == INFINITY;
  if (unwritten + nonfinite + bad_lse > 0)
    throw std::runtime_error(fmt::format("{}: {} output elements never written, {} not finite (first at {}), {} LSE values "
                                         "unwritten, NaN or +inf",
                                         implementation, unwritten, nonfinite, first >= 0 ? output_coordinates(p, first) : "-", bad_lse));
}

}  // namespace attn::cuda
