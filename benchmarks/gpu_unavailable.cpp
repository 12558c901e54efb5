// Builds without CUDA (ATTN_HAVE_CUDA off): there is no device, the GPU families are skipped
// with this reason before anything would call the timer or the peak probes, which therefore
// only throw.
#include <stdexcept>

#include "benchmarks/gpu_peaks.hpp"
#include "benchmarks/gpu_timing.hpp"

namespace attn::bench {

namespace {
constexpr const char* without_cuda = "attnbench was built without CUDA (ATTN_HAVE_CUDA is off)";
}

struct GpuTimer::Resources {};

GpuTimer::GpuTimer(L2Mode) { throw std::runtime_error(without_cuda); }
GpuTimer::~GpuTimer() = default;
void GpuTimer::run(benchmark::State&, const FamilySpec&, double) { throw std::runtime_error(without_cuda); }
std::string GpuTimer::try_once(const FamilySpec&, std::int64_t) { return without_cuda; }
void GpuTimer::release() {}
std::string GpuTimer::method() const { return without_cuda; }

GpuPeaks measure_gpu_peaks(const std::vector<GemmPrecision>&, const GpuPeakSettings&) { throw std::runtime_error(without_cuda); }

}  // namespace attn::bench
