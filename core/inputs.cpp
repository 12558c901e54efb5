#include "core/inputs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"
#include "core/rng.hpp"

namespace attn {
namespace {

// Fills t[e] = round(draw(e, rng)) (draw_in_chunks: the same bits on any thread count).
template <class Draw>
void fill(Tensor& t, std::uint64_t seed, std::uint64_t stream, Draw draw) {
  draw_in_chunks(t.numel(), seed, stream, [&](std::int64_t e, Rng& rng) { t.set(e, draw(e, rng)); });
}

// Standard deviation of Q and K entries that gives scaled scores the wanted variance:
// var(scale * q.k) = scale^2 * d_k * sigma^4. sqrt is exact-rounded IEEE, unlike pow.
double qk_sigma(const Problem& p, double score_variance) {
  const double s = p.effective_scale();
  return std::sqrt(std::sqrt(score_variance / (s * s * double(p.d_k))));
}

double sparse_int(Rng& rng) {
  if (rng.uniform() < 0.6) return 0.0;
  constexpr double values[] = {-2.0, -1.0, 1.0, 2.0};
  return values[rng.below(4)];
}

}  // namespace

CaseInputs generate_inputs(const Problem& p) {
  CaseInputs in{Tensor(p.dtype_of(Role::q), {p.batch, p.h_q, p.n_q, p.d_k}), Tensor(p.dtype_of(Role::k), {p.batch, p.h_kv, p.n_k, p.d_k}),
                Tensor(p.dtype_of(Role::v), {p.batch, p.h_kv, p.n_k, p.d_v}), Mask(p)};
  const std::uint64_t seed = p.seed;
  auto normal = [](double sigma) { return [sigma](std::int64_t, Rng& rng) { return sigma * rng.normal(); }; };

  switch (p.regime) {
    case Regime::diffuse:
    case Regime::peaked: {
      const double sigma = qk_sigma(p, p.regime == Regime::diffuse ? 1.0 : 64.0);
      fill(in.q, seed, stream_q, normal(sigma));
      fill(in.k, seed, stream_k, normal(sigma));
      fill(in.v, seed, stream_v, normal(1.0));
      break;
    }
    case Regime::saturated: {
      // Per kv head, queries cluster around a direction u and one key j* is a multiple of u
      // whose score is about 24 above the others (which are unit-variance): weights near one-hot.
      const double sigma = qk_sigma(p, 1.0);
      const double gamma = 24.0 / std::sqrt(double(p.d_k));
      std::vector<double> u(static_cast<std::size_t>(p.batch * p.h_kv * p.d_k));
      std::vector<std::int64_t> dominant(static_cast<std::size_t>(p.batch * p.h_kv));
      Rng structure(seed, stream_structure);
      for (auto& x : u) x = sigma * structure.normal();
      for (auto& j : dominant) j = static_cast<std::int64_t>(structure.below(static_cast<std::uint64_t>(p.n_k)));
      fill(in.q, seed, stream_q, [&](std::int64_t e, Rng& rng) {
        const std::int64_t c = e % p.d_k, h = (e / (p.d_k * p.n_q)) % p.h_q, b = e / (p.d_k * p.n_q * p.h_q);
        return u[static_cast<std::size_t>((b * p.h_kv + p.kv_head(h)) * p.d_k + c)] + 0.25 * sigma * rng.normal();
      });
      fill(in.k, seed, stream_k, [&](std::int64_t e, Rng& rng) {
        const std::int64_t c = e % p.d_k, j = (e / p.d_k) % p.n_k, bg = e / (p.d_k * p.n_k);
        const double noise = sigma * rng.normal();  // drawn either way, so j* does not shift the stream
        return j == dominant[static_cast<std::size_t>(bg)] ? gamma * u[static_cast<std::size_t>(bg * p.d_k + c)] : noise;
      });
      fill(in.v, seed, stream_v, normal(1.0));
      break;
    }
    case Regime::large: {
      // Typical |q.k| of max_finite / 16 before scaling: scores far beyond exp's range, so a
      // kernel that does not subtract the row max (or computes scores in the input type) fails.
      // Of the narrower of Q's and K's dtypes, so that both hold the values.
      const double m = std::sqrt(std::min(max_finite(p.dtype_of(Role::q)), max_finite(p.dtype_of(Role::k))) / (16.0 * std::sqrt(double(p.d_k))));
      fill(in.q, seed, stream_q, normal(m));
      fill(in.k, seed, stream_k, normal(m));
      fill(in.v, seed, stream_v, normal(1.0));
      break;
    }
    case Regime::sparse_int: {
      auto draw = [](std::int64_t, Rng& rng) { return sparse_int(rng); };
      fill(in.q, seed, stream_q, draw);
      fill(in.k, seed, stream_k, draw);
      fill(in.v, seed, stream_v, draw);
      break;
    }
    case Regime::uniform01: {
      // The top significand_bits(dtype) random bits: a uniform grid of multiples of 2^-bits in
      // [0, 1), every point exactly representable. Rounding a finer draw to nearest would turn
      // draws just below 1 into 1.0 (in f16 about 1 in 4096, in bf16 about 1 in 512).
      // Each tensor on the grid of its own dtype.
      auto grid = [](const Tensor& t) {
        const int bits = significand_bits(t.dtype());
        const double step = std::ldexp(1.0, -bits);
        return [bits, step](std::int64_t, Rng& rng) { return static_cast<double>(rng.next() >> (64 - bits)) * step; };
      };
      fill(in.q, seed, stream_q, grid(in.q));
      fill(in.k, seed, stream_k, grid(in.k));
      fill(in.v, seed, stream_v, grid(in.v));
      break;
    }
  }
  return in;
}

Tensor generate_d_o(const Problem& p) {
  Tensor d_o(p.dtype_of(Role::d_o), {p.batch, p.h_q, p.n_q, p.d_v});
  // As V is drawn in the problem's regime: what O is made of, so dO meets O's scale.
  switch (p.regime) {
    case Regime::diffuse:
    case Regime::peaked:
    case Regime::saturated:
    case Regime::large: fill(d_o, p.seed, stream_d_o, [](std::int64_t, Rng& rng) { return rng.normal(); }); break;
    case Regime::sparse_int: fill(d_o, p.seed, stream_d_o, [](std::int64_t, Rng& rng) { return sparse_int(rng); }); break;
    case Regime::uniform01: {
      const int bits = significand_bits(d_o.dtype());
      const double step = std::ldexp(1.0, -bits);
      fill(d_o, p.seed, stream_d_o, [bits, step](std::int64_t, Rng& rng) { return static_cast<double>(rng.next() >> (64 - bits)) * step; });
      break;
    }
  }
  return d_o;
}

Tensor make_output(const Problem& p) {
  Tensor out(p.dtype_of(Role::o), {p.batch, p.h_q, p.n_q, p.d_v});
  out.poison();
  return out;
}

Tensor make_lse(const Problem& p) {
  Tensor lse(p.dtype_of(Role::lse), {p.batch, p.h_q, p.n_q, 1});
  lse.poison();
  return lse;
}

Gradients make_gradients(const Problem& p) {
  Gradients g{Tensor(p.dtype_of(Role::dq), {p.batch, p.h_q, p.n_q, p.d_k}), Tensor(p.dtype_of(Role::dk), {p.batch, p.h_kv, p.n_k, p.d_k}),
              Tensor(p.dtype_of(Role::dv), {p.batch, p.h_kv, p.n_k, p.d_v}), Tensor{}, Tensor{}};
  g.dq.poison(), g.dk.poison(), g.dv.poison();
  return g;
}

Gradients make_gradients(const Problem& p, const Mask& parameters) {
  Gradients g = make_gradients(p);
  if (parameters.has_sinks()) {
    g.d_sink = Tensor(parameters.sinks_tensor().dtype(), parameters.sinks_tensor().shape());
    g.d_sink.poison();
  }
  if (parameters.has_bias()) {
    g.d_bias = Tensor(parameters.bias_tensor().dtype(), parameters.bias_tensor().shape());
    g.d_bias.poison();
  }
  return g;
}

Tensor make_keep(const Problem& p) {
  Tensor keep(DType::f32, {p.batch, p.h_q, p.n_q, p.n_k});
  keep.poison();
  return keep;
}

void check_scores_in_range(const Problem& p, const CaseInputs& in, const std::function<std::string(const char*)>& name,
                           const std::string& scale_from) {
  const DType working = working_dtype(p.numerics());
  const double limit = working == DType::f64 ? std::numeric_limits<double>::max() : double(std::numeric_limits<float>::max());
  const double scale = std::abs(p.effective_scale());
  if (!(scale <= limit))
    throw InputError(fmt::format("{}: the scale {:g} is beyond the range of {} (the working precision of these inputs, at most {:g})",
                                 scale_from, p.effective_scale(), to_string(working), limit));
  const std::int64_t group = p.h_q / p.h_kv;
  auto row_norm = [](const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d) {
    double sum = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double x = t.get(t.offset(b, h, i, c));
      if (std::isfinite(x)) sum += x * x;  // non-finite ones are where no output reads them (checked before)
    }
    return std::sqrt(sum);
  };
  double q_norm = 0, k_norm = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) q_norm = std::max(q_norm, row_norm(in.q, b, h, i, p.d_k));
    for (std::int64_t h = 0; h < p.h_kv; ++h)
      for (std::int64_t j = 0; j < p.n_k; ++j) k_norm = std::max(k_norm, row_norm(in.k, b, h, j, p.d_k));
  }
  if (q_norm * k_norm * std::max(scale, 1.0) <= limit / 2) return;
  // Every visible score, from rows widened once per head: read element by element through
  // Tensor::get, this was an eighth of `validate`'s time on the default set (its large regime).
  std::vector<double> keys(static_cast<std::size_t>(p.n_k * p.d_k)), query(static_cast<std::size_t>(p.d_k));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      if (h % group == 0)
        for (std::int64_t j = 0; j < p.n_k; ++j) copy_as<double>(in.k, in.k.offset(b, h / group, j, 0), p.d_k, keys.data() + j * p.d_k);
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        copy_as<double>(in.q, in.q.offset(b, h, i, 0), p.d_k, query.data());
        const auto [lo, hi] = in.mask.key_range(b, i);
        for (std::int64_t j = lo; j < hi; ++j) {
          if (!in.mask.visible(b, h, i, j)) continue;
          const double* key = keys.data() + j * p.d_k;
          double dot = 0;
          for (std::int64_t c = 0; c < p.d_k; ++c) dot += query[static_cast<std::size_t>(c)] * key[c];
          if (std::abs(dot) > limit || std::abs(dot * scale) > limit)
            throw InputError(fmt::format("{} and {} with the scale from {}: the score of query ({}, {}, {}) and key {} is {:g} (q·k {:g}), beyond "
                                         "the range of {} (the working precision of these inputs, at most {:g}), where the pass rule's "
                                         "naive yardstick computes it",
                                         name("q"), name("k"), scale_from, b, h, i, j, dot * p.effective_scale(), dot, to_string(working),
                                         limit));
        }
      }
    }
}

}  // namespace attn
