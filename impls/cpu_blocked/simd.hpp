#pragma once
// Fixed-width vectors through the GCC/Clang vector extensions: one 64-byte vector is one zmm
// register where AVX-512 is enabled (ATTN_NATIVE on such a machine), and the compiler splits it
// into narrower registers elsewhere, so one kernel source serves every x86-64 (or other) CPU.

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

namespace attn::simd {

template <class T>
struct Traits;
template <>
struct Traits<float> {
  typedef float Vec __attribute__((vector_size(64)));
  typedef std::int32_t Int __attribute__((vector_size(64)));
  using IntLane = std::int32_t;
  static constexpr int exponent_shift = 23, exponent_bias = 127;
  static constexpr float round_shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Below this, exp underflows to a subnormal; those weights are below 2^-126 of the row's
  // largest (which is 1), so they are returned as 0 rather than approximated.
  static constexpr float underflow = -87.33f;
  static constexpr float ln2_hi = 0.693359375f;  // few significant bits: n * ln2_hi is exact
  static constexpr float ln2_lo = -2.12194440e-4f;
  static constexpr int taylor_degree = 7;  // |r| <= ln2/2: the remainder term is < 0.1 ulp
};
template <>
struct Traits<double> {
  typedef double Vec __attribute__((vector_size(64)));
  typedef std::int64_t Int __attribute__((vector_size(64)));
  using IntLane = std::int64_t;
  static constexpr int exponent_shift = 52, exponent_bias = 1023;
  static constexpr double round_shifter = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double underflow = -708.39;
  static constexpr double ln2_hi = 6.93147180369123816490e-01;
  static constexpr double ln2_lo = 1.90821492927058770002e-10;
  static constexpr int taylor_degree = 13;
};

template <class T>
using Vec = typename Traits<T>::Vec;
template <class T>
constexpr int lanes = int(sizeof(Vec<T>) / sizeof(T));

// Unaligned loads and stores; memcpy is how C++ spells them without aliasing trouble, and
// compiles to one vector move.
template <class T>
inline Vec<T> load(const T* from) {
  Vec<T> v;
  std::memcpy(&v, from, sizeof v);
  return v;
}
template <class T>
inline void store(T* to, Vec<T> v) {
  std::memcpy(to, &v, sizeof v);
}
// Integer vectors of T's lane count (lane masks, indices compared lane by lane with T's values).
template <class T>
using Int = typename Traits<T>::Int;
template <class T>
using IntLane = typename Traits<T>::IntLane;
template <class T>
inline Int<T> load_int(const IntLane<T>* from) {
  Int<T> v;
  std::memcpy(&v, from, sizeof v);
  return v;
}

template <class T>
inline Vec<T> broadcast(T x) {
  // x - 0 is x for every x (x + 0 is not: -0 + 0 is +0), so this folds to a plain broadcast.
  return x - Vec<T>{};
}

template <class T>
inline Vec<T> max(Vec<T> a, Vec<T> b) {
  return a > b ? a : b;
}
// Horizontal reductions by halving (a fixed order, the same bits whatever the build's
// register width); the shuffles keep them in registers.
template <int Width, class T, std::size_t... Lane>
inline Vec<T> rotate_down(Vec<T> v, std::index_sequence<Lane...>) {
  return __builtin_shufflevector(v, v, int((Lane + Width) % lanes<T>)...);
}
template <class T, class Combine, int Width = lanes<T> / 2>
inline T reduce(Vec<T> v, Combine combine) {
  v = combine(v, rotate_down<Width, T>(v, std::make_index_sequence<lanes<T>>{}));
  if constexpr (Width == 1)
    return v[0];
  else
    return reduce<T, Combine, Width / 2>(v, combine);
}
template <class T>
inline T reduce_max(Vec<T> v) {
  return reduce<T>(v, [](Vec<T> a, Vec<T> b) { return max<T>(a, b); });
}
template <class T>
inline T reduce_sum(Vec<T> v) {
  return reduce<T>(v, [](Vec<T> a, Vec<T> b) { return a + b; });
}

// Whether `rows` rows of `width` elements (a multiple of the vector width), `stride` apart, are
// all finite: 0 * x is 0 for finite x and NaN for an infinity or a NaN. Four sums, not one:
// a single chain of dependent adds ran at a quarter of the loads' pace (a tile of Q and dO took a
// quarter of preparing its rows).
template <class T>
bool all_finite(const T* values, std::int64_t stride, std::int64_t rows, std::int64_t width) {
  constexpr std::int64_t L = lanes<T>;
  Vec<T> zeros[4] = {};
  for (std::int64_t j = 0; j < rows; ++j) {
    const T* row = values + j * stride;
    std::int64_t c = 0;
    for (; c + 4 * L <= width; c += 4 * L)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) zeros[k] += load(row + c + k * L) * T(0);
    for (; c < width; c += L) zeros[0] += load(row + c) * T(0);
  }
  return reduce_sum<T>((zeros[0] + zeros[1]) + (zeros[2] + zeros[3])) == T(0);
}

// Transposes a lanes x lanes block held as one vector per row: afterwards rows[c][r] is what
// rows[r][c] was. At block size s = lanes/2, lanes/4, ..., 1 the off-diagonal s x s blocks of
// every 2s x 2s block trade places; after the last step every element has crossed the diagonal.
template <class T, int Size, std::size_t... Lane>
inline void swap_off_diagonal(Vec<T>& upper, Vec<T>& lower, std::index_sequence<Lane...>) {
  constexpr int L = lanes<T>;
  const Vec<T> a = upper, b = lower;
  // Lane i of the upper row keeps a[i] in even blocks and takes b's even block in odd ones;
  // the lower row the mirror image.
  upper = __builtin_shufflevector(a, b, int((Lane / Size) % 2 == 0 ? Lane : L + Lane - Size)...);
  lower = __builtin_shufflevector(a, b, int((Lane / Size) % 2 == 0 ? Lane + Size : L + Lane)...);
}
template <class T, int Size = lanes<T> / 2>
inline void transpose(Vec<T> (&rows)[lanes<T>]) {
  for (int r = 0; r < lanes<T>; ++r)
    if ((r & Size) == 0) swap_off_diagonal<T, Size>(rows[r], rows[r + Size], std::make_index_sequence<lanes<T>>{});
  if constexpr (Size > 1) transpose<T, Size / 2>(rows);
}

// exp(x), accurate to about 1 ulp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite), Taylor
// series of e^r, times 2^n built in the exponent bits. Arguments below the underflow bound
// (including -inf) give exactly 0; NaN stays NaN. Callers pass x <= 0 (scores minus the row
// max), so overflow is not handled.
template <class T>
struct Taylor {
  // coefficient[k] = 1/k!
  static constexpr auto coefficients = [] {
    struct {
      T value[Traits<T>::taylor_degree + 1];
    } c{};
    c.value[0] = 1;
    for (int k = 1; k <= Traits<T>::taylor_degree; ++k) c.value[k] = c.value[k - 1] / T(k);
    return c;
  }();
};

template <class T>
inline Vec<T> exp(Vec<T> x) {
  using Tr = Traits<T>;
  using Int = typename Tr::Int;
  // Adding the shifter rounds x / ln2 to an integer n and leaves n + bias in the low mantissa
  // bits; shifted left into the exponent field those bits are 2^n (the shifter's own bits
  // fall off the top).
  constexpr T shifter = Tr::round_shifter + Tr::exponent_bias;
  const Vec<T> shifted = x * T(1.4426950408889634074) + shifter;
  const Vec<T> n = shifted - shifter;
  const Vec<T> r = (x - n * Tr::ln2_hi) - n * Tr::ln2_lo;
  Vec<T> p = broadcast<T>(Taylor<T>::coefficients.value[Tr::taylor_degree]);
  for (int k = Tr::taylor_degree - 1; k >= 0; --k) p = p * r + Taylor<T>::coefficients.value[k];
  Int bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits <<= Tr::exponent_shift;
  Vec<T> two_to_n;
  std::memcpy(&two_to_n, &bits, sizeof two_to_n);
  // Below the underflow bound n is out of range and the value above is garbage: it is
  // replaced by 0, which is also why no clamp is needed. NaN compares false and stays NaN.
  return x < broadcast<T>(Tr::underflow) ? Vec<T>{} : p * two_to_n;
}

}  // namespace attn::simd
