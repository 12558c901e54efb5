// A kernel author's program: it builds its own Q, K, V (and a causal, padded case), runs its own
// attention (a textbook one in float, standing in for a kernel), and asks attnbench's judge
// whether the output is right: the reference in 113 bits, the naive yardstick in the same
// precision, the pass rule. `consumer` exits 0 when it passes; `consumer --wrong` plants a
// mistake (scale 1/d_k instead of 1/sqrt(d_k)) and exits 1 when the judge catches it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "judge/judge.hpp"

namespace {

// The "kernel" under test: out[b, h, i, :] = softmax(q k^T * scale, keys j <= i and j < len[b]) v.
void my_attention(const attn::Problem& p, const attn::Tensor& q, const attn::Tensor& k, const attn::Tensor& v, attn::Tensor& out,
                  bool wrong) {
  const float scale = wrong ? 1.0f / float(p.d_k) : 1.0f / std::sqrt(float(p.d_k));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const std::int64_t kvh = p.kv_head(h);
        const std::int64_t limit = std::min<std::int64_t>(i + 1, p.padding.valid_len[std::size_t(b)]);
        std::vector<float> s(static_cast<std::size_t>(std::max<std::int64_t>(limit, 0)));
        float m = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < limit; ++j) {
          float dot = 0;
          for (std::int64_t c = 0; c < p.d_k; ++c) dot += float(q.get(q.offset(b, h, i, c))) * float(k.get(k.offset(b, kvh, j, c)));
          s[std::size_t(j)] = dot * scale;
          m = std::max(m, s[std::size_t(j)]);
        }
        float sum = 0;
        for (auto& x : s) sum += x = std::exp(x - m);
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          float acc = 0;
          for (std::int64_t j = 0; j < limit; ++j) acc += s[std::size_t(j)] * float(v.get(v.offset(b, kvh, j, c)));
          out.set(out.offset(b, h, i, c), limit > 0 ? acc / sum : 0.0);  // a row that sees no key: zeros
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  const bool wrong = argc > 1 && std::strcmp(argv[1], "--wrong") == 0;

  // What the case is: shapes, dtype, causal alignment, per-batch key padding.
  attn::Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = 33, p.n_k = 33, p.d_k = 64, p.d_v = 64;
  p.dtype = attn::DType::f32;
  p.window = attn::Window::of(attn::Causal::top_left);
  p.padding.kind = attn::KeyPadding::Kind::per_batch;
  p.padding.valid_len = {33, 20};

  // Our own tensors (from a model, in a real project), rounded to the dtype by Tensor::set.
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  attn::Tensor q(p.dtype, {p.batch, p.h_q, p.n_q, p.d_k}), k(p.dtype, {p.batch, p.h_kv, p.n_k, p.d_k}),
      v(p.dtype, {p.batch, p.h_kv, p.n_k, p.d_v});
  for (attn::Tensor* t : {&q, &k, &v})
    for (std::int64_t e = 0; e < t->numel(); ++e) t->set(e, normal(rng));
  // No boolean mask or bias tensors here: causality and padding come from the problem.
  attn::CaseInputs inputs{q, k, v, attn::Mask::given(p, {}, false, false, {})};

  attn::Tensor out(p.dtype, {p.batch, p.h_q, p.n_q, p.d_v});
  my_attention(p, q, k, v, out, wrong);

  const attn::Judgement j = attn::judge_case(p, inputs, out, nullptr);
  std::printf("case: %s\nmax abs error %.3g, tolerance %.3g: %s\n", p.label().c_str(), j.metrics.max_abs, j.verdict.tolerance(),
              j.verdict.pass ? "PASS" : "FAIL");
  for (const auto& reason : j.verdict.reasons) std::printf("  - %s\n", reason.c_str());
  return j.verdict.pass ? 0 : 1;
}
