#pragma once
// The two register-blocked products of a key tile, written for the vector width in simd.hpp.
// Each keeps a rows x vectors block of results in registers and streams the shared operand
// past it once: the classic GEMM micro-kernel shape, which is what lets them run near the
// FMA peak where a general GEMM call on a 48 x 128 tile pays for packing and dispatch.

#include <cstdint>
#include <utility>

#include "impls/cpu_blocked/simd.hpp"

namespace attn::micro {

// Scores of `Rows` query rows against one panel of 2 vectors of keys, or its first `Vectors`:
//   s[r][c] = sum_e q[r][e] * panel[e][c]   for c < Vectors lanes, e < depth,
// the panel holding the keys transposed ([depth][2 lanes]). Each score is one FMA chain over
// e in order, as in the naive implementation. One vector is for the last keys a row block
// sees on a causal diagonal: half a panel of keys that no row sees is not worth computing.
template <class T, int Rows, int Vectors = 2>
inline void scores(const T* q, std::int64_t q_stride, const T* panel, std::int64_t depth, T* s, std::int64_t s_stride) {
  static_assert(Vectors == 1 || Vectors == 2);
  using V = simd::Vec<T>;
  constexpr int L = simd::lanes<T>;
  V acc[Rows][Vectors] = {};
  for (std::int64_t e = 0; e < depth; ++e) {
    V k[Vectors];
#pragma GCC unroll 2
    for (int c = 0; c < Vectors; ++c) k[c] = simd::load(panel + e * 2 * L + c * L);
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const V a = simd::broadcast(q[r * q_stride + e]);
#pragma GCC unroll 2
      for (int c = 0; c < Vectors; ++c) acc[r][c] += a * k[c];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int c = 0; c < Vectors; ++c) simd::store(s + r * s_stride + c * L, acc[r][c]);
}

// Output accumulation for `Rows` rows and `Vectors` vectors of value columns:
//   o[r][c] += sum_j p[r][j] * v[j][c]   for j < keys,
// keys summed in order, v read row by row in its natural [key][column] layout. KeyMajor: the
// weights stored the other way round, p[j][r] (one column per output row): what the backward
// pass's dQ = dS K takes from the key-major dS^T tile without transposing it.
template <class T, int Rows, int Vectors, bool KeyMajor = false>
inline void weighted_values(const T* p, std::int64_t p_stride, const T* v, std::int64_t v_stride, std::int64_t keys, T* o,
                            std::int64_t o_stride) {
  using V = simd::Vec<T>;
  constexpr int L = simd::lanes<T>;
  V acc[Rows][Vectors];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < Vectors; ++c) acc[r][c] = simd::load(o + r * o_stride + c * L);
  for (std::int64_t j = 0; j < keys; ++j) {
    V values[Vectors];
#pragma GCC unroll 4
    for (int c = 0; c < Vectors; ++c) values[c] = simd::load(v + j * v_stride + c * L);
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const V a = simd::broadcast(KeyMajor ? p[j * p_stride + r] : p[r * p_stride + j]);
#pragma GCC unroll 4
      for (int c = 0; c < Vectors; ++c) acc[r][c] += a * values[c];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < Vectors; ++c) simd::store(o + r * o_stride + c * L, acc[r][c]);
}

// Runs kernel.template operator()<R>(first_row) over [0, rows) in blocks of Rows rows and one
// last block of the remaining rows % Rows: the micro-kernels take their row count at compile time.
template <int Rows, class Kernel>
inline void over_row_blocks(std::int64_t rows, Kernel&& kernel) {
  std::int64_t r = 0;
  for (; r + Rows <= rows; r += Rows) kernel.template operator()<Rows>(r);
  if constexpr (Rows > 1) {
    if (r < rows) [&]<int... Remainder>(std::integer_sequence<int, Remainder...>) {
        ([&] {
          if (rows - r == Remainder + 1) kernel.template operator()<Remainder + 1>(r);
        }(), ...);
      }(std::make_integer_sequence<int, Rows - 1>{});
  }
}

}  // namespace attn::micro
