// The diagnosis' hypotheses about where data is read and written: K transposed, the kv head
// mapping, K/V at the query head's offset, BSHD read as BHSD, output rows permuted.
#include "verification/diagnostician.hpp"

namespace attn::diagnosis_detail {

// K's memory of each head read as [d_k, n_k] instead of [n_k, d_k].
void Diagnostician::key_layout_hypotheses() {
  if (p_.n_k < 2 || p_.d_k < 2) return;
  CaseInputs hin{in_.q, in_.k, in_.v, in_.mask};
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t g = 0; g < p_.h_kv; ++g) {
      const std::int64_t base = in_.k.offset(b, g, 0, 0);
      for (std::int64_t j = 0; j < p_.n_k; ++j)
        for (std::int64_t t = 0; t < p_.d_k; ++t) hin.k.set_bits(base + j * p_.d_k + t, in_.k.bits(base + t * p_.n_k + j));
    }
  consider(M::k_transposed, "the output matches K read transposed: each head's K memory taken as [d_k, n_k] instead of [n_k, d_k]",
           by_reference(p_, hin));
}

// Query head h reading kv head h % h_kv (the MHA habit) instead of h / (h_q / h_kv): the problem
// as MHA with K and V repeated in that order.
void Diagnostician::head_mapping_hypotheses() {
  if (!(1 < p_.h_kv && p_.h_kv < p_.h_q)) return;
  Problem hp = p_;
  hp.h_kv = p_.h_q;
  CaseInputs hin{in_.q, Tensor(in_.k.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_k}), Tensor(in_.v.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_v}),
                 in_.mask};
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t h = 0; h < p_.h_q; ++h) {
      const std::int64_t g = h % p_.h_kv;
      for (std::int64_t e = 0; e < p_.n_k * p_.d_k; ++e) hin.k.set_bits(hin.k.offset(b, h, 0, 0) + e, in_.k.bits(in_.k.offset(b, g, 0, 0) + e));
      for (std::int64_t e = 0; e < p_.n_k * p_.d_v; ++e) hin.v.set_bits(hin.v.offset(b, h, 0, 0) + e, in_.v.bits(in_.v.offset(b, g, 0, 0) + e));
    }
  consider(M::kv_head_mapping, "the output matches query head h reading kv head h % h_kv instead of h / (h_q / h_kv)",
           by_reference(hp, hin));
}

// Output rows written at the wrong place. The row the worst element is in is compared (long
// double) with the rows it most plausibly came from: the other query rows of its head, the same
// query of the other heads and of the other batches; the nearest one names a mapping (heads or
// batches shifted, rows reversed or shifted within a head), which the reference then confirms on
// every diagnosis row. O written in BSHD order is tried as well.
void Diagnostician::permutation_hypotheses() {
  struct Mapping {
    std::string name;  // explanation
    std::function<std::int64_t(std::int64_t)> source;
  };
  std::vector<Mapping> mappings;
  const std::int64_t worst = judging_.observed.max_abs_index >= 0 ? judging_.observed.max_abs_index / p_.d_v : -1;
  if (worst >= 0 && !row_shows_failure(worst)) {
    const auto [b, h, i] = split(p_, worst);
    Rows candidates;
    for (std::int64_t k = 0; k < p_.h_q; ++k)
      if (k != h) candidates.push_back(join(p_, b, k, i));
    for (std::int64_t k = 0; k < p_.batch; ++k)
      if (k != b) candidates.push_back(join(p_, k, h, i));
    const double per_row = double(p_.n_k) * double(p_.d_k + p_.d_v);
    const auto room = static_cast<std::int64_t>(4 * options_.max_work / std::max(per_row, 1.0));
    if (p_.n_q <= room) {
      for (std::int64_t k = 0; k < p_.n_q; ++k)
        if (k != i) candidates.push_back(join(p_, b, h, k));
    } else {
      for (const std::int64_t k : {p_.n_q - 1 - i, i - 1, i + 1, i - 2, i + 2})
        if (k >= 0 && k < p_.n_q && k != i) candidates.push_back(join(p_, b, h, k));
    }
    // The three nearest: rows that are alike (two heads of one kv head on a one-hot softmax)
    // can tie, and only the reference tells the mapping that holds everywhere.
    std::vector<std::pair<long double, std::int64_t>> nearest;
    std::vector<long double> o;
    for (const std::int64_t c : candidates) {
      if (!row_under<long double>(p_, in_, c, RowRule{}, o)) std::fill(o.begin(), o.end(), 0.0L);
      long double distance = 0;
      for (std::int64_t col = 0; col < p_.d_v; ++col) distance = std::max(distance, std::fabs(o[std::size_t(col)] - out_.get(worst * p_.d_v + col)));
      nearest.emplace_back(distance, c);
    }
    std::sort(nearest.begin(), nearest.end());
    if (nearest.size() > 3) nearest.resize(3);
    for (const auto& [distance, source] : nearest) {
      const auto [sb, sh, si] = split(p_, source);
      const Problem& p = p_;
      if (sh != h) {
        const std::int64_t shift = ((h - sh) % p.h_q + p.h_q) % p.h_q;
        mappings.push_back({fmt::format("the output rows are permuted: head h's rows were written at head (h + {}) % h_q", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, ((rh - shift) % p.h_q + p.h_q) % p.h_q, ri);
                            }});
      } else if (sb != b) {
        const std::int64_t shift = ((b - sb) % p.batch + p.batch) % p.batch;
        mappings.push_back({fmt::format("the output rows are permuted: batch b's rows were written at batch (b + {}) % batch", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, ((rb - shift) % p.batch + p.batch) % p.batch, rh, ri);
                            }});
      } else if (si == p.n_q - 1 - i) {
        mappings.push_back({"the output rows are permuted: each head's query rows are reversed (row i holds row n_q - 1 - i)",
                            [&p](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, rh, p.n_q - 1 - ri);
                            }});
      } else {
        const std::int64_t shift = ((i - si) % p.n_q + p.n_q) % p.n_q;
        mappings.push_back({fmt::format("the output rows are permuted: row i of each head holds row (i - {}) mod n_q", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, rh, ((ri - shift) % p.n_q + p.n_q) % p.n_q);
                            }});
      }
    }
  }
  if (p_.h_q > 1 && p_.n_q > 1) {
    const Problem& p = p_;
    mappings.push_back({"the output matches O written in [b, n_q, h_q, d_v] (BSHD) order into the [b, h_q, n_q, d_v] (BHSD) output",
                        [&p](std::int64_t r) {
                          const auto [rb, rh, ri] = split(p, r);
                          const std::int64_t local = rh * p.n_q + ri;  // the position within the batch, read as BSHD
                          return join(p, rb, local % p.h_q, local / p.h_q);
                        }});
  }
  std::set<std::string> tried;
  for (const Mapping& m : mappings) {
    if (!tried.insert(m.name).second) continue;
    Rows source(rows_.size());
    std::transform(rows_.begin(), rows_.end(), source.begin(), m.source);
    if (consider(M::output_rows_permuted, m.name, by_reference(p_, in_, source))) break;
  }
}

// Query head h reading K and V at its own offset, as if they had h_q heads (GQA ignored): the
// flat block b * h_q + h of the dense [b, h_kv, n_k, d] tensors, which is block (b', g') =
// ((b h_q + h) / h_kv, (b h_q + h) % h_kv) while inside them, and past their end otherwise
// (those rows are not compared: what lies there is not the harness's). Tried when the h % h_kv
// mapping (which predicts every row) did not match and some compared row reads another block
// than its own.
void Diagnostician::kv_offset_hypothesis() {
  if (!(p_.h_kv < p_.h_q) || matched(M::kv_head_mapping)) return;
  const std::int64_t blocks = p_.batch * p_.h_kv;
  Problem hp = p_;
  hp.h_kv = p_.h_q;
  CaseInputs hin{in_.q, Tensor(in_.k.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_k}), Tensor(in_.v.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_v}),
                 in_.mask};
  bool differs = false;
  std::int64_t past_end = 0;
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t h = 0; h < p_.h_q; ++h) {
      const std::int64_t block = b * p_.h_q + h;
      if (block >= blocks) {
        ++past_end;
        continue;
      }
      differs |= block != b * p_.h_kv + p_.kv_head(h);
      for (std::int64_t e = 0; e < p_.n_k * p_.d_k; ++e) hin.k.set_bits(hin.k.offset(b, h, 0, 0) + e, in_.k.bits(block * p_.n_k * p_.d_k + e));
      for (std::int64_t e = 0; e < p_.n_k * p_.d_v; ++e) hin.v.set_bits(hin.v.offset(b, h, 0, 0) + e, in_.v.bits(block * p_.n_k * p_.d_v + e));
    }
  if (!differs) return;
  Prediction pr = by_reference(hp, hin);
  pr.uncompared.assign(rows_.size(), 0);
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const auto [b, h, i] = split(p_, rows_[r]);
    pr.uncompared[r] = b * p_.h_q + h >= blocks;
  }
  consider(M::kv_head_as_query_head,
           fmt::format("the output matches query head h reading K and V at head h's own offset, as if they had h_q = {} heads (GQA "
                       "ignored): heads from h_kv = {} on read other heads' or batches' K/V{}; read kv head h / (h_q / h_kv)",
                       p_.h_q, p_.h_kv,
                       past_end ? fmt::format(", and {} of the {} (b, h) read past the end of K and V (not compared)", past_end, p_.batch * p_.h_q)
                                : ""),
           pr);
}

// A tensor handed over as [b, s, h, d] (BSHD) read back as if it were [b, h, s, d]: what a kernel
// sees that declares BSHD but indexes BHSD.
Tensor read_as_bhsd(const Tensor& t) {
  const Tensor::Shape& shape = t.shape();  // logical [b, h, s, d]
  const std::int64_t heads = shape[1], length = shape[2], dim = shape[3];
  Tensor seen(t.dtype(), shape);
  for (std::int64_t f = 0; f < t.numel(); ++f) {
    const std::int64_t d = f % dim, h = (f / dim) % heads, s = (f / (dim * heads)) % length, b = f / (dim * heads * length);
    seen.set_bits(f, t.bits(t.offset(b, h, s, d)));
  }
  return seen;
}

// The tensors came in BSHD and the kernel read and wrote them as BHSD: it computed attention on
// the reinterpreted Q, K, V, and its BHSD output row (b', h', i') lands where the harness reads
// BSHD row (b, h, i) with (b * n_q + i) * h_q + h = (b' * h_q + h') * n_q + i'.
void Diagnostician::layout_hypothesis() {
  if (p_.layout != Layout::bshd) return;
  const CaseInputs hin{read_as_bhsd(in_.q), read_as_bhsd(in_.k), read_as_bhsd(in_.v), in_.mask};
  Rows source;
  for (const std::int64_t row : rows_) {
    const auto [b, h, i] = split(p_, row);
    source.push_back((b * p_.n_q + i) * p_.h_q + h);
  }
  consider(M::layout_ignored,
           "the output matches a kernel that reads and writes [b, h, s, d] (BHSD) although the tensors came as [b, s, h, d] (BSHD), a "
           "layout it declares: index through the strides it is given, or declare BHSD only",
           by_reference(p_, hin, source));
}

}  // namespace attn::diagnosis_detail
