// core/mask.hpp: visibility of each mask kind on small hand-drawn cases, their intersection,
// fully masked rows, the seeded boolean mask and bias (determinism, density, broadcast,
// rounding), and count_visible against a brute-force count.
// Over 500 lines: one suite for Mask; the hand-drawn cases are most of its length.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.hpp"
#include "core/mask.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

void PrintTo(const Problem& p, std::ostream* os) { *os << p.repro(); }

namespace {

using Range = std::pair<std::int64_t, std::int64_t>;

// The visibility of one (batch, head) as rows of '0'/'1', one row per query, rows joined by '\n'.
std::string render(const Mask& m, const Problem& p, std::int64_t b, std::int64_t h) {
  std::string s;
  for (std::int64_t i = 0; i < p.n_q; ++i) {
    if (i) s += '\n';
    for (std::int64_t j = 0; j < p.n_k; ++j) s += m.visible(b, h, i, j) ? '1' : '0';
  }
  return s;
}

Problem shape(std::int64_t n_q, std::int64_t n_k, std::int64_t batch = 1, std::int64_t h_q = 1) {
  Problem p;
  p.batch = batch, p.h_q = h_q, p.h_kv = 1, p.n_q = n_q, p.n_k = n_k, p.d_k = 8, p.d_v = 8;
  return p;
}

std::int64_t brute_force_count(const Mask& m, const Problem& p) {
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) n += m.visible(b, h, i, j);
  return n;
}

// row_fully_masked must agree with "no key visible" on every row.
void expect_fully_masked_rows_consistent(const Mask& m, const Problem& p) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        bool any = false;
        for (std::int64_t j = 0; j < p.n_k; ++j) any = any || m.visible(b, h, i, j);
        ASSERT_EQ(m.row_fully_masked(b, h, i), !any) << "b " << b << " h " << h << " i " << i;
      }
}

// ---------------------------------------------------------------------------------------
// Each kind alone, drawn by hand.

TEST(MaskVisibility, NoMaskSeesEverything) {
  const Problem p = shape(2, 3);
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0), "111\n111");
  EXPECT_FALSE(m.has_bias());
  EXPECT_EQ(m.bias(0, 0, 1, 2), 0.0);
  EXPECT_TRUE(m.bool_flags().empty());
}

// Top-left: query i sees keys 0..i, whatever n_k is (PyTorch is_causal).
TEST(MaskVisibility, CausalTopLeftWithFewerQueriesThanKeys) {
  Problem p = shape(3, 5);
  p.window = Window::of(Causal::top_left);
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "10000\n"
            "11000\n"
            "11100");
  EXPECT_EQ(m.key_range(0, 0), Range(0, 1));
  EXPECT_EQ(m.key_range(0, 2), Range(0, 3));
}

TEST(MaskVisibility, CausalTopLeftWithMoreQueriesThanKeys) {
  Problem p = shape(5, 3);
  p.window = Window::of(Causal::top_left);
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "100\n"
            "110\n"
            "111\n"
            "111\n"
            "111");
  EXPECT_EQ(m.key_range(0, 4), Range(0, 3));  // clamped to n_k
}

// Bottom-right: the diagonal ends in the bottom-right corner; query i sees j <= i + (n_k - n_q)
// (FlashAttention >= 2.1). With n_q < n_k the last query sees every key.
TEST(MaskVisibility, CausalBottomRightWithFewerQueriesThanKeys) {
  Problem p = shape(3, 5);
  p.window = Window::of(Causal::bottom_right);
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "11100\n"
            "11110\n"
            "11111");
}

// With n_q > n_k the first n_q - n_k rows see no key at all: fully masked rows.
TEST(MaskVisibility, CausalBottomRightWithMoreQueriesThanKeysMasksLeadingRows) {
  Problem p = shape(5, 3);
  p.window = Window::of(Causal::bottom_right);
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "000\n"
            "000\n"
            "100\n"
            "110\n"
            "111");
  EXPECT_TRUE(m.row_fully_masked(0, 0, 0));
  EXPECT_TRUE(m.row_fully_masked(0, 0, 1));
  EXPECT_FALSE(m.row_fully_masked(0, 0, 2));
  EXPECT_FALSE(m.row_fully_masked(0, 0, 4));
  EXPECT_EQ(m.key_range(0, 0), Range(0, 0));  // never negative
  EXPECT_EQ(m.count_visible(), 6);
}

TEST(MaskVisibility, CausalAlignmentsAgreeWhenSquare) {
  Problem tl = shape(4, 4), br = shape(4, 4);
  tl.window = Window::of(Causal::top_left);
  br.window = Window::of(Causal::bottom_right);
  EXPECT_EQ(render(Mask(tl), tl, 0, 0), "1000\n1100\n1110\n1111");
  EXPECT_EQ(render(Mask(br), br, 0, 0), "1000\n1100\n1110\n1111");
}

TEST(MaskVisibility, KeyPaddingPerBatch) {
  Problem p = shape(2, 4, /*batch=*/3, /*h_q=*/2);
  p.padding = {KeyPadding::Kind::per_batch, {3, 0, 4}};
  const Mask m(p);
  for (std::int64_t h = 0; h < 2; ++h) {  // padding is the same for every head
    EXPECT_EQ(render(m, p, 0, h), "1110\n1110");
    EXPECT_EQ(render(m, p, 1, h), "0000\n0000");  // valid length 0: every row fully masked
    EXPECT_EQ(render(m, p, 2, h), "1111\n1111");
    EXPECT_TRUE(m.row_fully_masked(1, h, 0));
    EXPECT_TRUE(m.row_fully_masked(1, h, 1));
    EXPECT_FALSE(m.row_fully_masked(0, h, 0));
  }
  EXPECT_EQ(m.count_visible(), 2 * (2 * 3 + 0 + 2 * 4));
}

TEST(MaskVisibility, KeyPaddingPerQuery) {
  Problem p = shape(3, 4, /*batch=*/2);
  p.padding = {KeyPadding::Kind::per_query, {4, 0, 2, 1, 3, 0}};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "1111\n"
            "0000\n"
            "1100");
  EXPECT_EQ(render(m, p, 1, 0),
            "1000\n"
            "1110\n"
            "0000");
  EXPECT_TRUE(m.row_fully_masked(0, 0, 1));
  EXPECT_TRUE(m.row_fully_masked(1, 0, 2));
  EXPECT_FALSE(m.row_fully_masked(1, 0, 0));
}

// ---------------------------------------------------------------------------------------
// Intersections: every part can only remove keys.

TEST(MaskIntersection, CausalTopLeftAndPerBatchPadding) {
  Problem p = shape(4, 4, /*batch=*/2);
  p.window = Window::of(Causal::top_left);
  p.padding = {KeyPadding::Kind::per_batch, {2, 4}};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0), "1000\n1100\n1100\n1100");
  EXPECT_EQ(render(m, p, 1, 0), "1000\n1100\n1110\n1111");
}

TEST(MaskIntersection, CausalBottomRightAndPerQueryPadding) {
  Problem p = shape(2, 4);
  p.window = Window::of(Causal::bottom_right);  // alone: "1110\n1111"
  p.padding = {KeyPadding::Kind::per_query, {1, 4}};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0), "1000\n1111");
}

TEST(MaskIntersection, CausalBottomRightAndPaddingCanEmptyARow) {
  Problem p = shape(4, 3);
  p.window = Window::of(Causal::bottom_right);  // alone: "000\n100\n110\n111"
  p.padding = {KeyPadding::Kind::per_query, {3, 3, 0, 2}};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0), "000\n100\n000\n110");
  EXPECT_TRUE(m.row_fully_masked(0, 0, 0));
  EXPECT_TRUE(m.row_fully_masked(0, 0, 2));
  EXPECT_FALSE(m.row_fully_masked(0, 0, 3));
}

TEST(MaskIntersection, BoolMaskOnlyRemovesKeysThatCausalityAndPaddingAllow) {
  Problem p = shape(16, 20, /*batch=*/2, /*h_q=*/3);
  p.window = Window::of(Causal::top_left);
  p.padding = {KeyPadding::Kind::per_batch, {20, 9}};
  p.bool_mask = {true, 0.5, Broadcast::per_batch_head};
  Problem structural = p;
  structural.bool_mask = {};
  const Mask m(p), s(structural);
  std::int64_t removed = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t i = 0; i < 16; ++i)
        for (std::int64_t j = 0; j < 20; ++j) {
          if (m.visible(b, h, i, j)) {
            ASSERT_TRUE(s.visible(b, h, i, j)) << b << h << i << j;
          }
          removed += s.visible(b, h, i, j) && !m.visible(b, h, i, j);
        }
  EXPECT_GT(removed, 0);  // and it does remove some
  expect_fully_masked_rows_consistent(m, p);
}

// ---------------------------------------------------------------------------------------
// The seeded boolean mask.

TEST(MaskBool, IsDeterministicForASeedAndChangesWithIt) {
  Problem p = shape(33, 65, 2, 2);
  p.bool_mask = {true, 0.5, Broadcast::per_batch_head};
  p.seed = 77;
  EXPECT_EQ(Mask(p).bool_flags(), Mask(p).bool_flags());
  Problem other = p;
  other.seed = 78;
  EXPECT_NE(Mask(p).bool_flags(), Mask(other).bool_flags());
}

TEST(MaskBool, DensityIsCloseToKeep) {
  for (double keep : {0.05, 0.3, 0.5, 0.9}) {
    Problem p = shape(128, 128);  // 16384 flags over four generation chunks
    p.bool_mask = {true, keep, Broadcast::shared};
    p.seed = 5;
    const Mask m(p);
    const double density = double(m.count_visible()) / double(128 * 128);
    // Binomial standard deviation is at most 0.004 here; 0.02 is five of them.
    EXPECT_NEAR(density, keep, 0.02) << "keep " << keep;
  }
}

TEST(MaskBool, KeepZeroMasksEverythingAndKeepOneNothing) {
  Problem p = shape(7, 9, 2, 2);
  p.bool_mask = {true, 0.0, Broadcast::per_batch_head};
  const Mask none(p);
  EXPECT_EQ(none.count_visible(), 0);
  for (std::int64_t i = 0; i < 7; ++i) EXPECT_TRUE(none.row_fully_masked(1, 1, i));
  p.bool_mask.keep = 1.0;
  EXPECT_EQ(Mask(p).count_visible(), 2 * 2 * 7 * 9);
}

// Which dimensions a generated mask varies over, as stated by its broadcast.
struct Variation {
  bool over_batch, over_head;
};

Variation variation_of(const Mask& m, const Problem& p) {
  auto same = [&](std::int64_t b0, std::int64_t h0, std::int64_t b1, std::int64_t h1) {
    for (std::int64_t i = 0; i < p.n_q; ++i)
      for (std::int64_t j = 0; j < p.n_k; ++j)
        if (m.visible(b0, h0, i, j) != m.visible(b1, h1, i, j)) return false;
    return true;
  };
  Variation v{false, false};
  for (std::int64_t b = 1; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h) v.over_batch = v.over_batch || !same(0, h, b, h);
  for (std::int64_t h = 1; h < p.h_q; ++h)
    for (std::int64_t b = 0; b < p.batch; ++b) v.over_head = v.over_head || !same(b, 0, b, h);
  return v;
}

TEST(MaskBool, RespectsItsBroadcast) {
  struct Case {
    Broadcast broadcast;
    bool over_batch, over_head;
    std::size_t flags;  // materialised size: [bb, hh, n_q, n_k]
  };
  const Case cases[] = {{Broadcast::shared, false, false, 12 * 10},
                        {Broadcast::per_batch, true, false, 3 * 12 * 10},
                        {Broadcast::per_head, false, true, 4 * 12 * 10},
                        {Broadcast::per_batch_head, true, true, 3 * 4 * 12 * 10}};
  for (const auto& c : cases) {
    Problem p = shape(12, 10, /*batch=*/3, /*h_q=*/4);
    p.h_kv = 2;  // broadcast is over query heads, not kv heads
    p.bool_mask = {true, 0.5, c.broadcast};
    p.seed = 11;
    SCOPED_TRACE(std::string(to_string(c.broadcast)));
    const Mask m(p);
    EXPECT_EQ(m.bool_flags().size(), c.flags);
    const Variation v = variation_of(m, p);
    EXPECT_EQ(v.over_batch, c.over_batch);
    EXPECT_EQ(v.over_head, c.over_head);
    EXPECT_EQ(m.count_visible(), brute_force_count(m, p));
  }
}

// ---------------------------------------------------------------------------------------
// The seeded bias.

TEST(MaskBias, IsRoundedToTheDTypeAndHasTheRequestedSpread) {
  for (DType d : {DType::f16, DType::bf16, DType::f32}) {
    Problem p = shape(64, 64, 1, 2);
    p.dtype = d;
    p.bias = {true, 3.0, Broadcast::per_head};
    p.seed = 3;
    const Mask m(p);
    SCOPED_TRACE(std::string(to_string(d)));
    ASSERT_TRUE(m.has_bias());
    EXPECT_EQ(m.bias_tensor().dtype(), d);
    double sum = 0, sum_sq = 0;
    bool finer_than_f16 = false;  // for f32: the values are not secretly on a coarser grid
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 64; ++i)
        for (std::int64_t j = 0; j < 64; ++j) {
          const double x = m.bias(0, h, i, j);
          ASSERT_TRUE(std::isfinite(x));
          ASSERT_EQ(round_to(d, x), x) << "bias not representable in the dtype";
          finer_than_f16 = finer_than_f16 || round_to(DType::f16, x) != x;
          sum += x, sum_sq += x * x;
        }
    const double n = 2 * 64 * 64, mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.15);
    EXPECT_NEAR(sd, 3.0, 0.3);
    if (d == DType::f32) {
      EXPECT_TRUE(finer_than_f16) << "f32 bias is suspiciously coarse";
    }
  }
}

TEST(MaskBias, BroadcastsOverBatchAndHeadAsRequested) {
  struct Case {
    Broadcast broadcast;
    bool over_batch, over_head;
  };
  const Case cases[] = {{Broadcast::shared, false, false},
                        {Broadcast::per_batch, true, false},
                        {Broadcast::per_head, false, true},
                        {Broadcast::per_batch_head, true, true}};
  for (const auto& c : cases) {
    Problem p = shape(6, 7, /*batch=*/2, /*h_q=*/3);
    p.dtype = DType::f16;
    p.bias = {true, 1.0, c.broadcast};
    SCOPED_TRACE(std::string(to_string(c.broadcast)));
    const Mask m(p);
    const Tensor::Shape expected_shape{c.over_batch ? 2 : 1, c.over_head ? 3 : 1, 6, 7};
    EXPECT_EQ(m.bias_tensor().shape(), expected_shape);
    bool varies_b = false, varies_h = false;
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < 3; ++h)
        for (std::int64_t i = 0; i < 6; ++i)
          for (std::int64_t j = 0; j < 7; ++j) {
            varies_b = varies_b || m.bias(b, h, i, j) != m.bias(0, h, i, j);
            varies_h = varies_h || m.bias(b, h, i, j) != m.bias(b, 0, i, j);
          }
    EXPECT_EQ(varies_b, c.over_batch);
    EXPECT_EQ(varies_h, c.over_head);
    EXPECT_EQ(m.count_visible(), 2 * 3 * 6 * 7);  // a bias hides nothing
  }
}

TEST(MaskBias, IsDeterministicAndIndependentOfTheBoolMask) {
  Problem p = shape(9, 11, 2, 2);
  p.dtype = DType::bf16;
  p.bias = {true, 2.0, Broadcast::per_batch_head};
  p.seed = 99;
  EXPECT_EQ(Mask(p).bias_tensor(), Mask(p).bias_tensor());
  Problem with_bool = p;  // adding a bool mask must not shift the bias's random stream
  with_bool.bool_mask = {true, 0.5, Broadcast::shared};
  EXPECT_EQ(Mask(p).bias_tensor(), Mask(with_bool).bias_tensor());
  Problem other = p;
  other.seed = 100;
  EXPECT_NE(Mask(p).bias_tensor(), Mask(other).bias_tensor());
}

// ---------------------------------------------------------------------------------------
// count_visible against brute force, on compositions of everything.

TEST(MaskCount, MatchesABruteForceCount) {
  std::vector<Problem> problems;
  {
    Problem p = shape(13, 29, 2, 4);
    p.h_kv = 2;
    p.window = Window::of(Causal::bottom_right);
    p.padding.kind = KeyPadding::Kind::per_query;
    for (int k = 0; k < 26; ++k) p.padding.valid_len.push_back((k * 11) % 30);
    p.bool_mask = {true, 0.4, Broadcast::per_batch_head};
    problems.push_back(p);
  }
  {
    Problem p = shape(31, 7, 3, 2);
    p.window = Window::of(Causal::top_left);
    p.padding = {KeyPadding::Kind::per_batch, {7, 0, 3}};
    p.bool_mask = {true, 0.7, Broadcast::per_head};
    problems.push_back(p);
  }
  {
    Problem p = shape(31, 7, 3, 2);
    p.window = Window::of(Causal::bottom_right);
    p.padding = {KeyPadding::Kind::per_batch, {7, 0, 3}};
    problems.push_back(p);
  }
  {
    Problem p = shape(64, 64, 1, 1);
    p.window = Window::of(Causal::top_left);
    p.bool_mask = {true, 0.05, Broadcast::shared};
    problems.push_back(p);
  }
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.repro());
    ASSERT_NO_THROW(p.validate());
    const Mask m(p);
    const std::int64_t count = brute_force_count(m, p);
    EXPECT_GT(count, 0);
    EXPECT_EQ(m.count_visible(), count);
    EXPECT_EQ(p.visible_pairs(), count);
    expect_fully_masked_rows_consistent(m, p);
  }
}


// A user's own mask and bias (check --inputs): the flags and bias are read where their extents
// say (1 broadcasts), intersected with causality and padding from the problem; nothing is drawn.
TEST(MaskGiven, BroadcastsTheGivenTensorsAndIntersectsCausalityAndPadding) {
  Problem p;
  p.batch = 2, p.h_q = 3, p.h_kv = 1, p.n_q = 2, p.n_k = 4, p.d_k = p.d_v = 8;
  p.window = Window::of(Causal::bottom_right);
  p.padding.kind = KeyPadding::Kind::per_batch;
  p.padding.valid_len = {4, 3};
  // flags [1, h_q, n_q, n_k]: head h hides key h.
  std::vector<std::uint8_t> flags;
  for (std::int64_t h = 0; h < 3; ++h)
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < 4; ++j) flags.push_back(j == h ? 0 : 1);
  Tensor bias(DType::f32, {2, 1, 2, 4});  // [b, 1, n_q, n_k]
  for (std::int64_t e = 0; e < bias.numel(); ++e) bias.set(e, double(e));
  const Mask m = Mask::given(p, flags, false, true, bias);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t i = 0; i < 2; ++i)
        for (std::int64_t j = 0; j < 4; ++j) {
          const bool want = j != h && j <= i + 2 && j < p.padding.valid_len[std::size_t(b)];
          EXPECT_EQ(m.visible(b, h, i, j), want) << b << h << i << j;
          EXPECT_EQ(m.bias(b, h, i, j), double((b * 2 + i) * 4 + j)) << b << h << i << j;
        }
  // Nothing given: causality and padding alone, no bias, whatever the problem's seeded specs say.
  p.bool_mask.enabled = true;
  p.bool_mask.keep = 0.0;
  const Mask plain = Mask::given(p, {}, false, false, {});
  EXPECT_FALSE(plain.has_bias());
  EXPECT_TRUE(plain.visible(1, 2, 1, 2));
  EXPECT_FALSE(plain.visible(1, 2, 1, 3));
  // Extents that are not the problem's are refused.
  EXPECT_THROW(Mask::given(p, std::vector<std::uint8_t>(5, 1), false, false, {}), std::invalid_argument);
  EXPECT_THROW(Mask::given(p, {}, false, false, Tensor(DType::f32, {2, 1, 3, 4})), std::invalid_argument);
  EXPECT_THROW(Mask::given(p, {}, false, false, Tensor(DType::f64, {2, 1, 2, 4})), std::invalid_argument);
}

// A sliding window of 2 keys back, top-left: query i sees keys i - 2 .. i (Mistral's window).
TEST(MaskWindow, SlidingWindowTopLeft) {
  Problem p = shape(5, 6);
  p.window = {2, 0, Align::top_left};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "100000\n"
            "110000\n"
            "111000\n"
            "011100\n"
            "001110");
  EXPECT_EQ(m.key_range(0, 0), Range(0, 1));
  EXPECT_EQ(m.key_range(0, 4), Range(2, 5));
  EXPECT_EQ(m.count_visible(), 12);
}

// Bottom-right shifts the diagonal by n_k - n_q = 2; a right side of 1 lets a query see one key
// past it (clipped at n_k).
TEST(MaskWindow, WindowBottomRightWithBothSides) {
  Problem p = shape(3, 5);
  p.window = {1, 1, Align::bottom_right};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "01110\n"
            "00111\n"
            "00011");
  EXPECT_EQ(m.key_range(0, 2), Range(3, 5));
}

// Only a lower bound: query i sees keys from i - 1 on, every key after.
TEST(MaskWindow, LeftBoundOnly) {
  Problem p = shape(4, 4);
  p.window = {1, Window::unbounded, Align::top_left};
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "1111\n"
            "1111\n"
            "0111\n"
            "0011");
}

// A window wholly before key 0 or past n_k leaves the row empty: lo == hi, fully masked.
TEST(MaskWindow, RowsOutsideTheKeysAreEmpty) {
  Problem p = shape(4, 2);
  p.window = {0, 0, Align::bottom_right};  // the diagonal only, delta = -2
  const Mask m(p);
  EXPECT_EQ(render(m, p, 0, 0),
            "00\n"
            "00\n"
            "10\n"
            "01");
  EXPECT_EQ(m.key_range(0, 0).first, m.key_range(0, 0).second);
  EXPECT_TRUE(m.row_fully_masked(0, 0, 1));
  EXPECT_EQ(m.count_visible(), 2);
}

// Causal is the window {unbounded, 0}: the same visibility as the causal shorthand.
TEST(MaskWindow, CausalIsTheWindowUnboundedZero) {
  for (Align a : {Align::top_left, Align::bottom_right})
    for (auto [n_q, n_k] : {Range{3, 5}, Range{5, 3}, Range{4, 4}}) {
      Problem w = shape(n_q, n_k), c = shape(n_q, n_k);
      w.window = {Window::unbounded, 0, a};
      c.window = Window::of(a == Align::top_left ? Causal::top_left : Causal::bottom_right);
      EXPECT_EQ(render(Mask(w), w, 0, 0), render(Mask(c), c, 0, 0));
    }
}

// The window, padding and boolean mask intersect; count_visible (and so visible_pairs and flops)
// counts exactly what visible() shows.
TEST(MaskWindow, IntersectsWithPaddingAndBoolMaskAndCountsExactly) {
  for (Align a : {Align::top_left, Align::bottom_right})
    for (std::int64_t left : {std::int64_t{0}, std::int64_t{3}, Window::unbounded})
      for (std::int64_t right : {std::int64_t{0}, std::int64_t{2}, Window::unbounded})
        for (bool with_bool : {false, true}) {
          Problem p = shape(7, 9, 2, 2);
          p.window = {left, right, a};
          p.padding = {KeyPadding::Kind::per_batch, {5, 9}};
          if (with_bool) p.bool_mask = {true, 0.5, Broadcast::per_batch_head};
          p.seed = 3;
          p.validate();
          const Mask m(p);
          const std::int64_t delta = a == Align::bottom_right ? 2 : 0;
          for (std::int64_t b = 0; b < 2; ++b)
            for (std::int64_t i = 0; i < 7; ++i)
              for (std::int64_t j = 0; j < 9; ++j) {
                const bool in_window = (left == Window::unbounded || j >= i + delta - left) && (right == Window::unbounded || j <= i + delta + right);
                const bool expected_range = in_window && j < p.padding.valid_len[std::size_t(b)];
                const auto [lo, hi] = m.key_range(b, i);
                EXPECT_EQ(j >= lo && j < hi, expected_range) << p.repro() << " b=" << b << " i=" << i << " j=" << j;
                if (!expected_range) {
                  EXPECT_FALSE(m.visible(b, 0, i, j));
                }
              }
          EXPECT_EQ(m.count_visible(), brute_force_count(m, p)) << p.repro();
          EXPECT_EQ(p.visible_pairs(), brute_force_count(m, p)) << p.repro();
          EXPECT_DOUBLE_EQ(p.flops(), 2.0 * double(brute_force_count(m, p)) * double(p.d_k + p.d_v)) << p.repro();
        }
}

}  // namespace
}  // namespace attn
