#pragma once
// The machine's measured peaks, taken in the same run as the benchmarks they bound:
//  - the fp32 FMA rate: independent FMA chains, enough of them to hide the FMA latency, on every
//    thread at once;
//  - Eigen's SGEMM rate: one single-threaded square float product stream per thread, all threads
//    at once, at a size whose operands stay in cache.
// The lower of the two is the roofline that "fraction of peak" divides by.
#include <string>

namespace attn::bench {

struct PeakMeasurement {
  double gflops = 0;   // aggregate over all threads, best of the repetitions
  int threads = 1;
  std::string method;  // one line: what ran, on how many threads
};

struct PeakSettings {
  int threads = 1;
  double seconds = 0.25;  // per repetition
  int repetitions = 3;    // the best one counts
  int sgemm_size = 512;   // m = n = k
};

// The instruction set the FMA probe was compiled for: "avx512f", "avx2+fma" or "generic".
std::string fma_probe_isa();

PeakMeasurement measure_fma_peak(const PeakSettings& settings);
PeakMeasurement measure_sgemm_peak(const PeakSettings& settings);

}  // namespace attn::bench
