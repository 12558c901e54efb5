// Property checks 17 to 19: the score pipeline's variants against their explicit forms. A window
// is a set of keys per query, ALiBi a bias per head, and a sink one more key of zero value whose
// score is the sink's logit: the same problem with those keys given as a boolean mask, that bias
// as a plain additive bias, or that key appended, is the same function.
// The variant's output is judged against the explicit form's reference, which computes neither
// the window nor ALiBi, so these hold an implementation to the variant's definition rather than
// to the reference's own window, ALiBi and sink code (property 12).
#include <cmath>

#include <fmt/format.h>

#include "core/mask.hpp"
#include "properties/property_detail.hpp"

namespace attn::property_detail {
namespace {

// The case's boolean flags ([1|b, 1|h_q, n_q, n_k], all visible when it has none) with `keep`
// applied to each (b, h, i, j) as well.
template <class Keep>
std::vector<std::uint8_t> flags_also_keeping(const Problem& p, const Mask& mask, Broadcast broadcast, Keep&& keep) {
  const bool per_batch = varies_over_batch(broadcast), per_head = varies_over_head(broadcast);
  const std::int64_t batches = per_batch ? p.batch : 1, heads = per_head ? p.h_q : 1;
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(batches * heads * p.n_q * p.n_k));
  const auto& drawn = mask.bool_flags();
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          const auto e = static_cast<std::size_t>(((b * heads + h) * p.n_q + i) * p.n_k + j);
          flags[e] = (drawn.empty() || drawn[e]) && keep(i, j) ? 1 : 0;
        }
  return flags;
}

// The explicit form's problem and inputs run too: a failure there is the explicit form's, said
// as such, so that a wrong window is not confused with a wrong boolean-mask path.
std::string judge_against_explicit_form(const Implementation& impl, const Problem& variant, const CaseInputs& in, const Problem& form,
                                        const CaseInputs& form_in, const std::string& what) {
  const Outputs o = run(impl, variant, in);
  if (!o.error.empty()) return o.error;
  const Outputs explicit_run = run(impl, form, form_in);
  if (!explicit_run.error.empty()) return explicit_run.error;
  if (std::string f = verdict_failure(judge_against_reference(impl, form, form_in, o), what.c_str()); !f.empty()) return f;
  return verdict_failure(judge_against_reference(impl, form, form_in, explicit_run), ("the explicit form itself (" + form.repro() + ")").c_str());
}

}  // namespace

std::string a_window_equals_its_keys_as_a_boolean_mask(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  Problem form = p;
  form.window = Window{};
  form.bool_mask = {true, 0.5, p.bool_mask.enabled ? p.bool_mask.broadcast : Broadcast::shared};
  // ALiBi's bias is materialised with the window's diagonal; given as a plain bias it stays put.
  if (form.bias.enabled && form.bias.kind == BiasSpec::Kind::alibi) form.bias = {true, 1.0, Broadcast::per_head, BiasSpec::Kind::normal};
  auto flags = flags_also_keeping(p, in.mask, form.bool_mask.broadcast, [&](std::int64_t i, std::int64_t j) {
    const auto [lo, hi] = p.window.key_range(i, p.n_q, p.n_k);
    return lo <= j && j < hi;
  });
  const CaseInputs form_in{in.q, in.k, in.v,
                           Mask::given(form, std::move(flags), varies_over_batch(form.bool_mask.broadcast),
                                       varies_over_head(form.bool_mask.broadcast), in.mask.bias_tensor())};
  return judge_against_explicit_form(impl, p, in, form, form_in,
                                     fmt::format("window {} judged against its keys given as a boolean mask", to_string(p.window)));
}

std::string alibi_equals_its_bias_given_explicitly(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  Problem form = p;
  form.bias = {true, 1.0, Broadcast::per_head, BiasSpec::Kind::normal};
  std::vector<std::uint8_t> flags = in.mask.bool_flags();
  const CaseInputs form_in{in.q, in.k, in.v,
                           Mask::given(form, std::move(flags), p.bool_mask.enabled && varies_over_batch(p.bool_mask.broadcast),
                                       p.bool_mask.enabled && varies_over_head(p.bool_mask.broadcast), in.mask.bias_tensor())};
  return judge_against_explicit_form(impl, p, in, form, form_in, "ALiBi judged against its bias given as a plain per-head bias");
}

std::string a_sink_equals_one_more_key_of_zero_value(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const std::vector<double> sinks = sink_logits(p);
  // The form: key n_k appended, K and V rows of zeros (its product, capped or not, is exactly 0),
  // its score the sink's logit through a bias, seen by every row that sees a key (a row that sees
  // none stays fully masked, as with the sink). Every other part of the mask becomes the boolean
  // mask and the bias, per batch and head; the bias in f32 at least, which holds every logit.
  Problem form = p;
  form.n_k = p.n_k + 1;
  form.window = Window{};
  form.padding = {};
  form.sinks = {};
  form.bool_mask = {true, 0.5, Broadcast::per_batch_head};
  form.bias = {true, 1.0, Broadcast::per_batch_head, BiasSpec::Kind::normal};
  if (p.dtype_of(Role::bias) != DType::f64) form.role_dtypes[Role::bias] = DType::f32;
  std::erase_if(form.role_dtypes, [&](const auto& entry) { return entry.second == form.dtype; });
  auto appended = [&](const Tensor& t, std::int64_t d) {
    Tensor wider(t.dtype(), {p.batch, p.h_kv, form.n_k, d});
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t g = 0; g < p.h_kv; ++g)
        for (std::int64_t j = 0; j < form.n_k; ++j)
          for (std::int64_t c = 0; c < d; ++c)
            wider.set(wider.offset(b, g, j, c), j < p.n_k ? t.get(t.offset(b, g, j, c)) : 0.0);
    return wider;
  };
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(p.batch * p.h_q * p.n_q * form.n_k));
  Tensor bias(form.dtype_of(Role::bias), {p.batch, p.h_q, p.n_q, form.n_k});
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const bool sees_a_key = !in.mask.row_fully_masked(b, h, i);
        for (std::int64_t j = 0; j < form.n_k; ++j) {
          const bool extra = j == p.n_k;
          flags[static_cast<std::size_t>(((b * p.h_q + h) * p.n_q + i) * form.n_k + j)] = (extra ? sees_a_key : in.mask.visible(b, h, i, j)) ? 1 : 0;
          bias.set(bias.offset(b, h, i, j), extra ? sinks[static_cast<std::size_t>(h)] : in.mask.bias(b, h, i, j));
        }
      }
  const CaseInputs form_in{in.q, appended(in.k, p.d_k), appended(in.v, p.d_v), Mask::given(form, std::move(flags), true, true, std::move(bias))};
  return judge_against_explicit_form(impl, p, in, form, form_in, "the sinks judged against one more key of zero value scored by the sink's logit");
}

// Dropout is judged given the keep mask it reports (property 12's verdict, with the keep mask's
// own: every visible entry 0 or 1, the kept count inside the binomial band at 1e-6); then its
// stream is checked against its seed: the same seed again gives the same mask, and another seed a
// different one on the visible pairs (asked only where two independent masks would agree by chance
// less than once in a million: (p^2 + (1 - p)^2)^N < 1e-6 over N visible pairs).
std::string dropout_keeps_at_its_rate_and_follows_its_seed(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  if (std::string failed = verdict_failure(judge_against_reference(impl, p, in, o), "given its keep mask"); !failed.empty()) return failed;
  // The first visible pair where two keep masks differ, as "(b, h, i, j)"; "" where none does.
  std::int64_t visible = 0;
  auto first_difference = [&](const Tensor& a, const Tensor& b) -> std::string {
    visible = 0;
    std::string where;
    for (std::int64_t bb = 0; bb < p.batch; ++bb)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j) {
            if (!in.mask.visible(bb, h, i, j)) continue;
            ++visible;
            const std::int64_t e = a.offset(bb, h, i, j);
            if (where.empty() && a.get(e) != b.get(e)) where = fmt::format("(b={}, h={}, i={}, j={}): {} then {}", bb, h, i, j, a.get(e), b.get(e));
          }
    return where;
  };
  const Outputs again = run(impl, p, in);
  if (!again.error.empty()) return again.error;
  if (std::string where = first_difference(o.keep, again.keep); !where.empty())
    return fmt::format("the same dropout seed {} gave another keep mask: first at {}", dropout_seed(p), where);
  const double agree = p.dropout.p * p.dropout.p + (1 - p.dropout.p) * (1 - p.dropout.p);
  if (!(double(visible) * std::log(agree) < std::log(1e-6))) return "";  // too few pairs to tell two seeds apart
  Problem other = p;
  other.dropout.seed = dropout_seed(p) + 1 + check_rng(p, 20).below(1000);
  const Outputs reseeded = run(impl, other, in);
  if (!reseeded.error.empty()) return reseeded.error;
  if (first_difference(o.keep, reseeded.keep).empty())
    return fmt::format("dropout seeds {} and {} gave the same keep mask on all {} visible pairs (by chance: (p^2 + (1 - p)^2)^{} = {:.2g}): "
                       "the stream ignores its seed",
                       dropout_seed(p), *other.dropout.seed, visible, visible, std::pow(agree, double(visible)));
  return "";
}

}  // namespace attn::property_detail
