#pragma once
// Seeded, portable random numbers: the same seed gives the same bits on any machine and any
// thread count. Only integer operations, exact double scalings and IEEE-exact +, -, * are used
// (no libm), and every tensor is generated in fixed-size chunks, each with its own generator
// derived from (seed, stream, chunk).
#include <algorithm>
#include <cstdint>

#include "core/parallel.hpp"

namespace attn {

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna), seeded through splitmix64.
class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream, std::uint64_t chunk = 0) {
    std::uint64_t s = seed;
    s ^= splitmix64(s) + stream * 0xD1B54A32D192ED03ull;
    s ^= splitmix64(s) + chunk * 0x8CB92BA72F3D8DD7ull;
    for (auto& word : state_) word = splitmix64(s);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  // Integer in [0, n) (Lemire's multiply-high; bias below 2^-64 * n, irrelevant here).
  std::uint64_t below(std::uint64_t n) { return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  // Approximately standard normal (Irwin-Hall sum of 12 uniforms): mean 0, variance 1,
  // bounded by ±6. Exact arithmetic only, so it is bit-identical everywhere.
  double normal() {
    double sum = 0.0;
    for (int i = 0; i < 12; ++i) sum += uniform();
    return sum - 6.0;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

// Calls draw_at(e, rng) for every e in [0, n), chunk by chunk and chunks side by side: chunk c
// always draws from Rng(seed, stream, c), so the values do not depend on the number of threads.
// The chunk size is part of every drawn tensor's bits: changing it changes them all.
template <class DrawAt>  // DrawAt: void(std::int64_t e, Rng& rng)
void draw_in_chunks(std::int64_t n, std::uint64_t seed, std::uint64_t stream, DrawAt draw_at) {
  constexpr std::int64_t chunk_elements = 4096;
  const std::int64_t chunks = (n + chunk_elements - 1) / chunk_elements;
  parallel_for_ranges(chunks, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      Rng rng(seed, stream, static_cast<std::uint64_t>(c));
      for (std::int64_t e = c * chunk_elements; e < std::min(n, (c + 1) * chunk_elements); ++e) draw_at(e, rng);
    }
  });
}

// Streams: one per generated quantity, so adding one never shifts another's bits.
enum RngStream : std::uint64_t {
  stream_q = 1, stream_k, stream_v, stream_bool_mask, stream_bias, stream_structure, stream_row_sample, stream_sinks, stream_d_o,
};

}  // namespace attn
