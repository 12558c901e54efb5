#include "benchmarks/machine_peaks.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define EIGEN_DONT_PARALLELIZE  // one product per thread; Eigen must not start threads of its own
#include <Eigen/Core>
#include <fmt/format.h>

namespace attn::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Runs work(thread_index) on `threads` threads released together; returns the wall time from
// the release to the last thread's end, in seconds.
double run_concurrently(int threads, const std::function<void(int)>& work) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> finished(static_cast<std::size_t>(threads));
  Clock::time_point start;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      work(t);
      finished[static_cast<std::size_t>(t)] = std::chrono::duration<double>(Clock::now() - start).count();
    });
  while (ready.load() < threads) std::this_thread::yield();
  start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return *std::max_element(finished.begin(), finished.end());
}

// 16 independent accumulator chains: FMA latency (4 cycles) x issue rate (2 per cycle) = 8
// chains keep both FMA ports busy; 16 leaves headroom and still fits the register file.
constexpr int chains = 16;

#if defined(__AVX512F__)
constexpr int lanes = 16;
constexpr const char* isa_name = "avx512f";
using Vec = __m512;
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float reduce(Vec v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float s = 0;
  for (float e : x) s += e;
  return s;
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int lanes = 8;
constexpr const char* isa_name = "avx2+fma";
using Vec = __m256;
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float reduce(Vec v) {
  alignas(32) float x[8];
  _mm256_store_ps(x, v);
  float s = 0;
  for (float e : x) s += e;
  return s;
}
#else
constexpr int lanes = 4;
constexpr const char* isa_name = "generic";
typedef float Vec __attribute__((vector_size(16)));
inline Vec splat(float x) { return Vec{x, x, x, x}; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }  // two flops whether or not contracted
inline float reduce(Vec v) { return v[0] + v[1] + v[2] + v[3]; }
#endif

// Each iteration is `chains` vector FMAs: chains * lanes * 2 flops. The multiplier and addend
// come through volatiles so the compiler cannot fold the chains.
__attribute__((noinline)) float fma_chains(std::int64_t iterations) {
  volatile float seed_mul = 0.999999f, seed_add = 1e-7f;
  const Vec mul = splat(seed_mul), add = splat(seed_add);
  Vec acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = splat(1.0f + 0.001f * static_cast<float>(c));
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < chains; ++c) acc[c] = fma(acc[c], mul, add);
  }
  Vec sum = acc[0];
  for (int c = 1; c < chains; ++c) sum += acc[c];
  return reduce(sum);
}

constexpr double flops_per_fma_iteration = 2.0 * chains * lanes;

// Picks a per-thread amount of work that takes about `seconds` on one thread, by timing a
// short run (doubling until it is long enough to time).
template <class Work>
std::int64_t calibrate(double seconds, std::int64_t start, Work work) {
  std::int64_t units = start;
  for (;;) {
    const auto t0 = Clock::now();
    work(units);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    if (took >= 0.01 || units > (std::int64_t{1} << 40)) return std::max<std::int64_t>(1, static_cast<std::int64_t>(double(units) * seconds / took));
    units *= 2;
  }
}

}  // namespace

std::string fma_probe_isa() { return isa_name; }

PeakMeasurement measure_fma_peak(const PeakSettings& s) {
  if (s.threads < 1) throw std::invalid_argument("measure_fma_peak: threads must be positive");
  volatile float sink = 0;
  const std::int64_t iterations = calibrate(s.seconds, 1 << 12, [&](std::int64_t n) { sink = sink + fma_chains(n); });
  double best = 0;
  for (int r = 0; r < std::max(1, s.repetitions); ++r) {
    std::vector<float> results(static_cast<std::size_t>(s.threads));
    const double wall = run_concurrently(s.threads, [&](int t) { results[static_cast<std::size_t>(t)] = fma_chains(iterations); });
    for (float x : results) sink = sink + x;
    best = std::max(best, flops_per_fma_iteration * double(iterations) * s.threads / wall / 1e9);
  }
  return {best, s.threads,
          fmt::format("{} independent {} FMA chains of {} floats per thread, {} thread(s) at once", chains, isa_name, lanes, s.threads)};
}

PeakMeasurement measure_sgemm_peak(const PeakSettings& s) {
  if (s.threads < 1) throw std::invalid_argument("measure_sgemm_peak: threads must be positive");
  if (s.sgemm_size < 1) throw std::invalid_argument("measure_sgemm_peak: size must be positive");
  const Eigen::Index n = s.sgemm_size;
  struct Operands {
    Eigen::MatrixXf a, b, c;
  };
  std::vector<Operands> ops(static_cast<std::size_t>(s.threads));
  for (auto& o : ops) {
    o.a = Eigen::MatrixXf::Random(n, n);
    o.b = Eigen::MatrixXf::Random(n, n);
    o.c = Eigen::MatrixXf::Zero(n, n);
  }
  auto products = [&](Operands& o, std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) o.c.noalias() = o.a * o.b;
  };
  const std::int64_t count = calibrate(s.seconds, 1, [&](std::int64_t k) { products(ops[0], k); });
  const double flops_per_product = 2.0 * double(n) * double(n) * double(n);
  double best = 0;
  for (int r = 0; r < std::max(1, s.repetitions); ++r) {
    const double wall = run_concurrently(s.threads, [&](int t) { products(ops[static_cast<std::size_t>(t)], count); });
    best = std::max(best, flops_per_product * double(count) * s.threads / wall / 1e9);
  }
  return {best, s.threads,
          fmt::format("Eigen {}.{}.{} C = A*B, {}x{}x{} float, single-threaded, one product stream per thread, {} thread(s) at once",
                      EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, n, n, n, s.threads)};
}

}  // namespace attn::bench
