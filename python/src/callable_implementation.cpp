#include "python/src/callable_implementation.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "impls/capability_declaration.hpp"
#include "impls/capability_space.hpp"
#include "python/src/arrays.hpp"

namespace attn::python {

CallableImplementation::CallableImplementation(std::string name, const std::string& declaration, Limits limits, nb::object invoke)
    : name_(std::move(name)),
      caps_(capabilities_from_json(nlohmann::json::parse(declaration), "the convention's declaration")),
      limits_(limits),
      invoke_(new nb::object(std::move(invoke))) {}

CallableImplementation::~CallableImplementation() {
  if (Py_IsInitialized()) {
    nb::gil_scoped_acquire gil;
    delete invoke_;
  }
}

CallableImplementation::Limits CallableImplementation::Limits::from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  Limits l;
  l.alibi_only = j.value("alibi_only", false);
  if (j.contains("alignment") && !j.at("alignment").is_null()) {
    const std::string a = j.at("alignment").get<std::string>();
    if (a == "top_left") l.alignment = Align::top_left;
    else if (a == "bottom_right") l.alignment = Align::bottom_right;
    else throw InputError(fmt::format("the convention's alignment must be \"top_left\" or \"bottom_right\" (got \"{}\")", a));
  }
  l.autograd_backward = j.value("autograd_backward", false);
  return l;
}

Support CallableImplementation::supports(const Problem& problem) const {
  if (limits_.alibi_only && problem.bias.enabled && problem.bias.kind != BiasSpec::Kind::alibi)
    return Support::no("a bias other than ALiBi: the convention passes ALiBi slopes only");
  if (limits_.alignment && !problem.window.is_none() && problem.window.align != *limits_.alignment && problem.n_q != problem.n_k)
    return Support::no(fmt::format("a {} window with n_q != n_k: the convention aligns windows {}", to_string(problem.window.align),
                                   to_string(*limits_.alignment)));
  return covers(caps_, problem);
}

nb::dict settings_dict(const Problem& p) {
  nb::dict d;
  for (const NamedSetting& s : score_settings_of(p))
    d[std::string(s.setting->name).c_str()] = s.setting->integer ? nb::cast(s.value.integer) : nb::cast(s.value.real);
  return d;
}

nb::dict inputs_dict(const Problem& p, const CaseInputs& in) {
  nb::dict d;
  d["q"] = to_numpy(in.q);
  d["k"] = to_numpy(in.k);
  d["v"] = to_numpy(in.v);
  d["scale"] = p.scale ? nb::cast(*p.scale) : nb::none();  // None: the default, 1/sqrt(d_k)
  d["effective_scale"] = p.effective_scale();
  // The score modifications' settings the case uses, by name ({"softcap": c}, {"dropout_p": p,
  // "dropout_seed": s}): the conventions pass them as keywords.
  d["settings"] = settings_dict(p);
  // Each query head's sink logit (f32 values), one more term of its rows' denominator, or none.
  d["sinks"] = p.sinks.enabled ? nb::cast(sink_logits(p)) : nb::none();
  if (p.window.is_none()) {
    d["window"] = nb::none();
  } else {
    auto side = [](std::int64_t n) -> nb::object { return n == Window::unbounded ? nb::none() : nb::cast(n); };
    d["window"] = nb::make_tuple(side(p.window.left), side(p.window.right), std::string(to_string(p.window.align)));
  }
  if (p.padding.kind == KeyPadding::Kind::none)
    d["valid_lens"] = nb::none();
  else
    d["valid_lens"] = to_numpy(p.padding.valid_len, p.padding.kind == KeyPadding::Kind::per_batch ? std::vector<std::int64_t>{p.batch}
                                                                                                   : std::vector<std::int64_t>{p.batch, p.n_q});
  if (!in.mask.bool_flags().empty()) {
    const std::int64_t per_bh = p.n_q * p.n_k, blocks = std::int64_t(in.mask.bool_flags().size()) / per_bh;
    const bool batch = varies_over_batch(p.bool_mask.broadcast), head = varies_over_head(p.bool_mask.broadcast);
    if (blocks != (batch ? p.batch : 1) * (head ? p.h_q : 1)) throw std::logic_error("inputs_dict: the mask's flags do not match its broadcast");
    d["mask"] = to_numpy(in.mask.bool_flags(), {batch ? p.batch : 1, head ? p.h_q : 1, p.n_q, p.n_k});
  } else {
    d["mask"] = nb::none();
  }
  d["bias"] = in.mask.has_bias() ? nb::cast(to_numpy(in.mask.bias_tensor())) : nb::none();
  if (p.bias.enabled && p.bias.kind == BiasSpec::Kind::alibi) {
    std::vector<double> slopes;
    for (std::int64_t h = 0; h < p.h_q; ++h) slopes.push_back(alibi_slope(h, p.h_q));
    d["alibi_slopes"] = nb::cast(slopes);
  } else {
    d["alibi_slopes"] = nb::none();
  }
  d["o_dtype"] = std::string(to_string(p.dtype_of(Role::o)));
  // The whole visibility as one boolean array [b|1, h_q|1, n_q, n_k], built by the harness's Mask
  // on demand (a convention whose kernel takes a dense mask asks for it; n_q x n_k bytes per block).
  const bool per_batch = p.padding.kind != KeyPadding::Kind::none || varies_over_batch(p.bool_mask.broadcast);
  const bool per_head = p.bool_mask.enabled && varies_over_head(p.bool_mask.broadcast);
  d["visibility"] = nb::cpp_function([mask = in.mask, p, per_batch, per_head]() {
    const std::int64_t bb = per_batch ? p.batch : 1, hh = per_head ? p.h_q : 1;
    std::vector<std::uint8_t> flags(static_cast<std::size_t>(bb * hh * p.n_q * p.n_k));
    std::size_t e = 0;
    for (std::int64_t b = 0; b < bb; ++b)
      for (std::int64_t h = 0; h < hh; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j) flags[e++] = mask.visible(b, h, i, j) ? 1 : 0;
    return to_numpy(std::move(flags), {bb, hh, p.n_q, p.n_k});
  });
  return d;
}

namespace {

// Copies what the callable returned into the harness's output tensor, refusing by name anything
// but its shape and dtype.
void copy_into(nb::handle returned, Tensor& target, const std::string& what, const std::vector<std::int64_t>& shape, const char* shape_text) {
  InArray a;
  if (!nb::try_cast(returned, a, false))
    throw std::runtime_error(fmt::format("{}: the callable returned {}, not a CPU array (after the convention's conversion)", what,
                                         nb::str(nb::handle(returned.type())).c_str()));
  const bool bf16_bits = target.dtype() == DType::bf16;
  const DType dtype = dtype_of(a, bf16_bits, what);
  if (shape_of(a) != shape)
    throw std::runtime_error(fmt::format("{}: the callable returned shape ({}) where {} is ({})", what, fmt::join(shape_of(a), ", "), shape_text,
                                         fmt::join(shape, ", ")));
  if (dtype != target.dtype())
    throw std::runtime_error(fmt::format("{}: the callable returned {} where the case asks {}", what, to_string(dtype), to_string(target.dtype())));
  std::memcpy(target.data(), a.data(), target.bytes());
}

// The exception's type and message: a case's reason is one line (the traceback stays in Python).
[[noreturn]] void throw_as_failure(const nb::python_error& e) {
  const std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__name__"));
  std::string message = nb::cast<std::string>(nb::str(e.value()));
  if (const auto cut = message.find('\n'); cut != std::string::npos) message = message.substr(0, cut);
  throw std::runtime_error(fmt::format("the callable raised {}: {}", type, message));
}

}  // namespace

void CallableImplementation::run(const RunArgs& args) const {
  if (args.tensors.output(Role::dq) != nullptr) return run_backward(args);
  const Problem& p = args.problem;
  Tensor& o = args.tensors.required_output(Role::o);
  Tensor* lse = args.tensors.output(Role::lse);
  Tensor* keep = args.tensors.output(Role::keep);
  nb::gil_scoped_acquire gil;
  try {
    nb::object result = (*invoke_)(p, inputs_dict(p, args.inputs), lse != nullptr);
    nb::object out = result, returned_lse = nb::none(), returned_keep = nb::none();
    if (nb::isinstance<nb::tuple>(result)) {
      nb::tuple t = nb::borrow<nb::tuple>(result);
      if (t.size() != 2 && t.size() != 3)
        throw std::runtime_error(fmt::format("the callable returned a tuple of {}; expected (o, lse) or (o, lse, keep)", t.size()));
      out = t[0];
      returned_lse = t[1];
      if (t.size() == 3) returned_keep = t[2];
    }
    copy_into(out, o, "o", {p.batch, p.h_q, p.n_q, p.d_v}, "[b, h_q, n_q, d_v]");
    if (lse != nullptr) {
      if (returned_lse.is_none()) throw std::runtime_error("lse: the convention declares an LSE and the callable returned none");
      copy_into(returned_lse, *lse, "lse", {p.batch, p.h_q, p.n_q}, "[b, h_q, n_q]");
    }
    if (keep != nullptr) {  // dropout: the keep mask the callable drew (float32 0/1 from the convention)
      if (returned_keep.is_none()) throw std::runtime_error(fmt::format("keep: a dropout case (dropout={:g}) and the callable reported no keep mask", p.dropout.p));
      copy_into(returned_keep, *keep, "keep", {p.batch, p.h_q, p.n_q, p.n_k}, "[b, h_q, n_q, n_k]");
    }
  } catch (nb::python_error& e) {
    throw_as_failure(e);
  }
}

void CallableImplementation::run_backward(const RunArgs& args) const {
  const Problem& p = args.problem;
  Tensor& dq = args.tensors.required_output(Role::dq);
  Tensor& dk = args.tensors.required_output(Role::dk);
  Tensor& dv = args.tensors.required_output(Role::dv);
  const Tensor* d_o = args.tensors.input(Role::d_o);
  const Tensor* o = args.tensors.input(Role::o);
  const Tensor* lse = args.tensors.input(Role::lse);
  if (d_o == nullptr || o == nullptr) throw std::logic_error("a backward pass without dO or the forward's O to feed it");
  nb::gil_scoped_acquire gil;
  try {
    nb::dict fed;
    fed["d_o"] = to_numpy(*d_o);
    fed["o"] = to_numpy(*o);
    fed["lse"] = lse != nullptr ? nb::cast(to_numpy(*lse, {p.batch, p.h_q, p.n_q})) : nb::none();
    // The parameter gradients asked for (declared, and the case has sinks or a bias).
    Tensor* d_sink = args.tensors.output(Role::d_sink);
    Tensor* d_bias = args.tensors.output(Role::d_bias);
    nb::list parameters;
    for (Role role : {Role::d_sink, Role::d_bias})
      if (args.tensors.output(role) != nullptr) parameters.append(std::string(to_string(role)));
    fed["parameters"] = parameters;
    nb::object result = (*invoke_)(p, inputs_dict(p, args.inputs), lse != nullptr, fed);
    if (!nb::isinstance<nb::tuple>(result) || (nb::len(result) != 3 && nb::len(result) != 5))
      throw std::runtime_error(fmt::format("the backward returned {}; expected (dq, dk, dv) or (dq, dk, dv, d_sink, d_bias)",
                                           nb::str(nb::handle(result.type())).c_str()));
    nb::tuple t = nb::borrow<nb::tuple>(result);
    copy_into(t[0], dq, "dq", {p.batch, p.h_q, p.n_q, p.d_k}, "[b, h_q, n_q, d_k]");
    copy_into(t[1], dk, "dk", {p.batch, p.h_kv, p.n_k, p.d_k}, "[b, h_kv, n_k, d_k]");
    copy_into(t[2], dv, "dv", {p.batch, p.h_kv, p.n_k, p.d_v}, "[b, h_kv, n_k, d_v]");
    auto parameter = [&](std::size_t at, Tensor* target, const char* name, const std::vector<std::int64_t>& shape, const char* shape_text) {
      if (target == nullptr) return;
      if (t.size() != 5 || t[at].is_none())
        throw std::runtime_error(fmt::format("{}: it declares parameter_gradients and the backward returned none", name));
      copy_into(t[at], *target, name, shape, shape_text);
    };
    parameter(3, d_sink, "d_sink", {p.h_q}, "[h_q]");
    if (d_bias != nullptr)
      parameter(4, d_bias, "d_bias", {d_bias->shape().begin(), d_bias->shape().end()}, "the bias's [1|b, 1|h_q, n_q, n_k]");
  } catch (nb::python_error& e) {
    throw_as_failure(e);
  }
}

void restate_isolation(Record& record) {
  if (record.isolation.empty()) return;
  const std::string restated =
      "its gradients come from autograd through its own forward, recomputed in each backward call: fed the reference's O and LSE it "
      "computes the same gradients, so no rerun tells a fault of its forward from one of its gradients (verify its forward, "
      "backward=False, for that)";
  for (std::string& reason : record.verdict.reasons)
    if (reason == record.isolation) reason = restated;
  record.isolation = restated;
}

}  // namespace attn::python
