// attnbench._native: the C++ core bound for Python (nanobind). Nothing is computed here: each
// function hands its arguments to the library the CLI calls (core, reference, verification,
// properties, reports) and returns what it returns, as arrays or as the JSON documents the
// result files hold. attnbench/__init__.py wraps it in the package's documented API.
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/given_case.hpp"
#include "core/inputs.hpp"
#include "core/parallel.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "judge/judge.hpp"
#include "properties/run_properties.hpp"
#include "python/src/arrays.hpp"
#include "python/src/bench_document.hpp"
#include "python/src/callable_implementation.hpp"
#include "impls/sandbox/sandbox.hpp"
#include "records/context.hpp"
#include "reference/reference.hpp"
#include "reports/properties_report.hpp"
#include "reports/verify_report.hpp"
#include "verification/backward_mistakes.hpp"
#include "verification/given_outputs.hpp"
#include "verification/run.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace attn::python {
namespace {

// The settings of a user's own tensors, as the Python keywords give them.
struct Settings {
  std::optional<double> scale;
  std::string causal = "none";                          // none, top_left, bottom_right
  std::optional<std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>>> window;  // (left, right), None: unbounded
  std::string align = "top_left";                       // the window's diagonal
  std::optional<std::string> o_dtype;
  // The score modifications' settings by name (softcap, dropout_p, dropout_seed, ...:
  // core/score_pipeline.hpp), as the keywords give them.
  nb::dict score;
  std::vector<double> sinks;  // each query head's sink logit; empty: none
};

// The settings a dict names, each checked against its modification's table: an unknown name, or
// a value of the wrong kind, is an InputError naming it.
std::vector<NamedSetting> score_settings_of_dict(const nb::dict& given) {
  std::vector<NamedSetting> settings;
  for (auto [key, value] : given) {
    const std::string name = nb::cast<std::string>(nb::str(key));
    const ScoreSetting* setting = find_score_setting(name);
    if (setting == nullptr)
      throw InputError(fmt::format("unknown keyword {}= (the score modifications' settings: {})", name, score_setting_names()));
    if (value.is_none()) continue;
    if (setting->integer) {
      if (!nb::isinstance<nb::int_>(value) || nb::isinstance<nb::bool_>(value) || nb::cast<nb::int_>(value) < nb::int_(0))
        throw InputError(fmt::format("{} must be an unsigned integer (got {})", name, nb::cast<std::string>(nb::repr(value))));
      const auto n = nb::cast<std::uint64_t>(value);
      settings.push_back({setting, {double(n), n}});
    } else {
      if (!(nb::isinstance<nb::float_>(value) || nb::isinstance<nb::int_>(value)) || nb::isinstance<nb::bool_>(value))
        throw InputError(fmt::format("{} must be a number (got {})", name, nb::cast<std::string>(nb::repr(value))));
      settings.push_back({setting, {nb::cast<double>(value)}});
    }
  }
  return settings;
}

Window window_of(const Settings& s) {
  if (s.window) {
    if (s.causal != "none") throw InputError("window and causal: give one (causal is the window (None, 0))");
    Window w;
    w.left = s.window->first.value_or(Window::unbounded);
    w.right = s.window->second.value_or(Window::unbounded);
    if (s.align == "top_left") w.align = Align::top_left;
    else if (s.align == "bottom_right") w.align = Align::bottom_right;
    else throw InputError(fmt::format("align must be \"top_left\" or \"bottom_right\" (got \"{}\")", s.align));
    return w;
  }
  if (s.causal == "none") return Window{};
  if (s.causal == "top_left") return Window::of(Causal::top_left);
  if (s.causal == "bottom_right") return Window::of(Causal::bottom_right);
  throw InputError(fmt::format("causal must be \"none\", \"top_left\" or \"bottom_right\" (got \"{}\")", s.causal));
}

// The arrays the Python side passes: q, k, v, and the optional mask parts (None where absent).
struct GivenIn {
  InArray q, k, v;
  std::optional<InArray> mask, bias, valid_lens;
  bool bf16_bits = false;  // uint16 arrays hold bf16 bits (NumPy + ml_dtypes)
};

GivenArrays given_arrays(const GivenIn& in, const Settings& s) {
  GivenArrays a;
  a.q = borrow_tensor(in.q, in.bf16_bits, "q", "[b, h_q, n_q, d_k]");
  a.k = borrow_tensor(in.k, in.bf16_bits, "k", "[b, h_kv, n_k, d_k]");
  a.v = borrow_tensor(in.v, in.bf16_bits, "v", "[b, h_kv, n_k, d_v]");
  if (in.bias) a.bias = borrow_tensor(*in.bias, in.bf16_bits, "bias", "[1|b, 1|h_q, n_q, n_k]");
  if (in.mask) {
    const InArray& m = *in.mask;
    if (m.dtype() != nb::dtype<bool>()) throw InputError("mask: a boolean array is expected (True = the key is visible)");
    a.mask_shape = shape_of(m);
    if (a.mask_shape.size() != 4) throw InputError(fmt::format("mask: {} dimensions; expected 4: [1|b, 1|h_q, n_q, n_k]", a.mask_shape.size()));
    const auto* flags = static_cast<const std::uint8_t*>(m.data());
    a.mask.assign(flags, flags + m.size());
  }
  if (in.valid_lens) {
    const InArray& l = *in.valid_lens;
    a.valid_lens_shape = shape_of(l);
    if (l.dtype() == nb::dtype<std::int64_t>()) {
      const auto* v = static_cast<const std::int64_t*>(l.data());
      a.valid_lens.assign(v, v + l.size());
    } else if (l.dtype() == nb::dtype<std::int32_t>()) {
      const auto* v = static_cast<const std::int32_t*>(l.data());
      a.valid_lens.assign(v, v + l.size());
    } else {
      throw InputError("valid_lens: an int64 or int32 array is expected");
    }
  }
  a.scale = s.scale;
  if (a.scale && !(std::isfinite(*a.scale) && *a.scale > 0)) throw InputError(fmt::format("scale must be a finite positive number (got {})", *a.scale));
  a.window = window_of(s);
  if (s.o_dtype) a.o_dtype = parse_dtype(*s.o_dtype);
  a.settings = score_settings_of_dict(s.score);
  a.sinks = s.sinks;
  return a;
}

nb::dict reference_of(const GivenIn& in, const Settings& s, int threads) {
  auto [problem, inputs] = given_case_of(given_arrays(in, s));
  // Dropout's output follows the keep mask a kernel drew, which is an output: judge() takes it.
  if (problem.dropout.enabled())
    throw InputError("dropout_p: dropout's output depends on the keep mask the kernel drew; judge(..., keep=) judges it against the reference");
  ReferenceOptions options;
  options.threads = threads;
  ReferenceResult r;
  {
    nb::gil_scoped_release release;
    r = compute_reference(problem, inputs, options);
  }
  Tensor o = make_output(problem);
  for (std::size_t e = 0; e < r.out.size(); ++e) o.set(std::int64_t(e), r.out[e]);
  Tensor lse(DType::f64, {problem.batch, problem.h_q, problem.n_q, 1});
  for (std::size_t e = 0; e < r.lse.size(); ++e) lse.set(std::int64_t(e), r.lse[e]);
  nb::dict d;
  d["o"] = to_numpy(std::move(o));
  d["lse"] = to_numpy(std::move(lse), {problem.batch, problem.h_q, problem.n_q});
  d["bound_max_abs"] = r.self_bound_max_abs;
  d["bound_max_ulps"] = r.self_bound_max_ulps;
  d["bound_lse_max_abs"] = r.self_bound_lse_max_abs;
  d["rows_float128"] = r.rows_fallback;
  d["repro"] = problem.repro();
  return d;
}

std::string judge_of(const GivenIn& in, const Settings& s, const InArray& out, const std::optional<InArray>& lse,
                     const std::optional<InArray>& keep, double k, double floor_ulps, int threads, const std::string& name,
                     const std::string& source) {
  GivenArrays arrays = given_arrays(in, s);
  std::vector<GivenCase> given;
  {
    if (!arrays.o_dtype) arrays.o_dtype = dtype_of(out, in.bf16_bits, "out");
    auto [problem, inputs] = given_case_of(std::move(arrays));
    Tensor o = borrow_tensor(out, in.bf16_bits, "out", "[b, h_q, n_q, d_v]");
    const Tensor::Shape want{problem.batch, problem.h_q, problem.n_q, problem.d_v};
    if (o.shape() != want)
      throw InputError(fmt::format("out: shape ({}) where [b, h_q, n_q, d_v] is ({})", fmt::join(o.shape(), ", "), fmt::join(want, ", ")));
    std::optional<Tensor> l;
    if (lse) {
      const DType lse_dtype = dtype_of(*lse, false, "lse");
      if (shape_of(*lse) != std::vector<std::int64_t>{problem.batch, problem.h_q, problem.n_q})
        throw InputError(fmt::format("lse: shape ({}) where [b, h_q, n_q] is ({}, {}, {})", fmt::join(shape_of(*lse), ", "), problem.batch,
                                     problem.h_q, problem.n_q));
      // The LSE is judged in its working precision's tensor (make_lse): f64 or f32 values, read exactly.
      Tensor want_lse = make_lse(problem);
      if (lse_dtype == want_lse.dtype()) {
        l = Tensor::borrow(lse_dtype, want_lse.shape(), lse->data(), nullptr);
      } else {
        const Tensor given_lse = Tensor::borrow(lse_dtype, want_lse.shape(), lse->data(), nullptr);
        for (std::int64_t e = 0; e < want_lse.numel(); ++e) want_lse.set(e, given_lse.get(e));
        l = std::move(want_lse);
      }
    }
    // Dropout's keep mask [b, h_q, n_q, n_k] (float32 0/1 from the Python side), required with dropout_p.
    std::optional<Tensor> z;
    if (problem.dropout.enabled() && !keep)
      throw InputError(fmt::format("keep: dropout_p={:g} needs the keep mask [b, h_q, n_q, n_k] the output was computed with (keep=)",
                                   problem.dropout.p));
    if (keep && !problem.dropout.enabled()) throw InputError("keep: a keep mask without dropout_p (give dropout_p= to judge a dropout output)");
    if (keep) {
      const std::vector<std::int64_t> want{problem.batch, problem.h_q, problem.n_q, problem.n_k};
      if (shape_of(*keep) != want)
        throw InputError(fmt::format("keep: shape ({}) where [b, h_q, n_q, n_k] is ({})", fmt::join(shape_of(*keep), ", "), fmt::join(want, ", ")));
      if (keep->dtype() != nb::dtype<float>()) throw InputError("keep: a float32 array is expected (1 kept, 0 dropped)");
      z = make_keep(problem);
      std::memcpy(z->data(), keep->data(), z->bytes());
    }
    given.push_back(GivenCase{problem, std::move(inputs), std::move(o), std::move(l), source, std::move(z)});
  }
  VerifyOptions options;
  options.rule = {k, floor_ulps};
  options.reference.threads = threads;
  options.diagnosis.threads = threads;
  const GivenOutputs outputs(given, name, "outputs given to attnbench.judge");
  const VerifyRequest request = given_outputs_request(outputs, options);
  check_case_memory(request.cases.front(), options.reference);
  nlohmann::json document;
  {
    nb::gil_scoped_release release;
    const VerifyRun run = run_verify(request);
    document = verify_to_json(run, request.options, run_context(threads > 0 ? threads : default_thread_count()), "judge");
  }
  return document.dump();
}

// A gradient the caller computed: a rank-4 array of its role's shape, borrowed where it lies.
Tensor borrow_gradient(const InArray& a, bool bf16_bits, const char* name, const char* layout, const Tensor::Shape& want) {
  Tensor t = borrow_tensor(a, bf16_bits, name, layout);
  if (t.shape() != want) throw InputError(fmt::format("{}: shape ({}) where {} is ({})", name, fmt::join(t.shape(), ", "), layout, fmt::join(want, ", ")));
  return t;
}

// judge_of for a backward pass: the given dQ, dK and dV of the given dO (and dσ, dBias where
// given) against the backward reference (judge/judge.hpp, judge_gradients) and diagnosed as verify
// diagnoses a backward case.
// Given outputs reach verify as a forward pass only (verification/given_outputs.hpp), so the one
// record is made here and written by verify's own writer.
std::string judge_backward_of(const GivenIn& in, const Settings& s, const InArray& d_o_in, const InArray& dq_in, const InArray& dk_in,
                              const InArray& dv_in, const std::optional<InArray>& d_sink_in, const std::optional<InArray>& d_bias_in,
                              const std::optional<InArray>& keep, double k, double floor_ulps, int threads, const std::string& name,
                              const std::string& source) {
  auto [p, inputs] = given_case_of(given_arrays(in, s));
  p.operation = Operation::backward;
  // Each gradient and dO in its own dtype, as o in judge(): the problem's where they agree.
  const std::pair<Role, const InArray*> given_roles[] = {{Role::d_o, &d_o_in}, {Role::dq, &dq_in}, {Role::dk, &dk_in}, {Role::dv, &dv_in}};
  for (const auto& [role, array] : given_roles) {
    const DType dtype = dtype_of(*array, in.bf16_bits, std::string(to_string(role)));
    if (dtype != p.dtype) p.role_dtypes[role] = dtype;
  }
  p.validate();
  const Tensor d_o = borrow_gradient(d_o_in, in.bf16_bits, "d_o", "[b, h_q, n_q, d_v]", {p.batch, p.h_q, p.n_q, p.d_v});
  Gradients given{borrow_gradient(dq_in, in.bf16_bits, "dq", "[b, h_q, n_q, d_k]", {p.batch, p.h_q, p.n_q, p.d_k}),
                        borrow_gradient(dk_in, in.bf16_bits, "dk", "[b, h_kv, n_k, d_k]", {p.batch, p.h_kv, p.n_k, p.d_k}),
                        borrow_gradient(dv_in, in.bf16_bits, "dv", "[b, h_kv, n_k, d_v]", {p.batch, p.h_kv, p.n_k, p.d_v}),
                        Tensor{}, Tensor{}};
  // The parameters' gradients, each judged in its own dtype: the sinks' [h_q], the bias's in its shape.
  if (d_sink_in) {
    if (!p.sinks.enabled) throw InputError("d_sink: given without sinks (give sinks= to judge their gradient)");
    const DType dtype = dtype_of(*d_sink_in, in.bf16_bits, "d_sink");
    if (shape_of(*d_sink_in) != std::vector<std::int64_t>{p.h_q})
      throw InputError(fmt::format("d_sink: shape ({}) where [h_q] is ({})", fmt::join(shape_of(*d_sink_in), ", "), p.h_q));
    given.d_sink = Tensor(dtype, {p.h_q, 1, 1, 1});
    std::memcpy(given.d_sink.data(), d_sink_in->data(), given.d_sink.bytes());
  }
  if (d_bias_in) {
    if (!inputs.mask.has_bias()) throw InputError("d_bias: given without a bias (give bias= to judge its gradient)");
    given.d_bias = borrow_gradient(*d_bias_in, in.bf16_bits, "d_bias", "the bias's [1|b, 1|h_q, n_q, n_k]", inputs.mask.bias_tensor().shape());
  }
  std::optional<Tensor> z;
  if (p.dropout.enabled() && !keep)
    throw InputError(fmt::format("keep: dropout_p={:g} needs the keep mask [b, h_q, n_q, n_k] the forward drew (keep=)", p.dropout.p));
  if (keep && !p.dropout.enabled()) throw InputError("keep: a keep mask without dropout_p (give dropout_p= to judge gradients with dropout)");
  if (keep) {
    const std::vector<std::int64_t> want{p.batch, p.h_q, p.n_q, p.n_k};
    if (shape_of(*keep) != want)
      throw InputError(fmt::format("keep: shape ({}) where [b, h_q, n_q, n_k] is ({})", fmt::join(shape_of(*keep), ", "), fmt::join(want, ", ")));
    if (keep->dtype() != nb::dtype<float>()) throw InputError("keep: a float32 array is expected (1 kept, 0 dropped)");
    z = make_keep(p);
    std::memcpy(z->data(), keep->data(), z->bytes());
  }
  check_case_memory(p, {});

  auto context = std::make_unique<CaseContext>();
  context->problem = p;
  context->rows_total = p.rows();
  context->rows_checked = p.rows();
  context->reference_computed = true;
  context->inputs_from = source;
  Record record;
  record.implementation = name;
  record.context = context.get();
  {
    nb::gil_scoped_release release;
    const auto start = std::chrono::steady_clock::now();
    std::optional<KeepJudgement> kept;
    std::optional<CaseInputs> with_keep;
    if (z) {
      kept = judge_keep(p, inputs.mask, *z);
      if (kept->usable) with_keep.emplace(with_reported_keep(inputs, *z));
    }
    if (kept && !kept->usable) {
      record.verdict.pass = false;
      add_keep_verdict(record.verdict, kept->verdict);
    } else {
      const CaseInputs& judged_in = with_keep ? *with_keep : inputs;
      const BackwardYardstick yardstick = make_backward_yardstick(p, judged_in, d_o, threads);
      context->reference_seconds = yardstick.reference_seconds;
      context->gradient_baseline = yardstick.baseline;
      for (const TensorErrors& e : yardstick.baseline) context->gradient_term_rounding.push_back(yardstick.term_rounding(e.role, p));
      JudgeOptions judging;
      judging.rule = {k, floor_ulps};
      GradientJudgement judged = judge_gradients(p, yardstick, given, judging);
      record.gradients = std::move(judged.errors);
      record.gradients_not_computed = std::move(judged.not_computed);
      record.verdict = std::move(judged.verdict);
      if (kept) add_keep_verdict(record.verdict, kept->verdict);
      if (!record.verdict.pass) record.diagnosis = diagnose_backward(p, judged_in, d_o, given, record.verdict, nullptr);
    }
    record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  record.status = record.verdict.pass ? Status::pass : Status::fail;
  VerifyRun run;
  run.named_cases = 1;
  run.cases.push_back(std::move(context));
  run.records.push_back(std::move(record));
  VerifyOptions options;
  options.rule = {k, floor_ulps};
  options.reference.threads = threads;
  return verify_to_json(run, options, run_context(threads > 0 ? threads : default_thread_count()), "judge").dump();
}

// Calls `on_record(record JSON text)` with the GIL as each record is made.
class RecordCallback final : public VerifyObserver {
 public:
  RecordCallback(nb::object callback, std::set<std::string> autograd) : callback_(std::move(callback)), autograd_(std::move(autograd)) {}
  void record_made(const VerifyRun&, const Record& record) override {
    nb::gil_scoped_acquire gil;
    if (callback_.is_none()) return;
    Record said = record;
    if (autograd_.count(said.implementation)) restate_isolation(said);
    callback_(to_json(verify_record(said)).dump());
  }

 private:
  nb::object callback_;
  std::set<std::string> autograd_;  // the implementations whose gradients are autograd's
};

// One Python callable as verify and the property suite see it: (invoke, name, declaration, limits).
using Kernel = std::tuple<nb::object, std::string, std::string, std::string>;

std::string verify_callables(const std::vector<Kernel>& kernels, const std::vector<Problem>& cases, double k, double floor_ulps, int threads,
                             bool project, nb::object on_record) {
  // One run for every callable: each case's reference and yardstick are computed once for all.
  std::vector<std::unique_ptr<CallableImplementation>> impls;
  std::set<std::string> autograd;
  VerifyRequest request{{}, cases, {}};
  for (const auto& [invoke, name, declaration, limits] : kernels) {
    impls.push_back(std::make_unique<CallableImplementation>(name, declaration, CallableImplementation::Limits::from_json(limits), invoke));
    request.implementations.push_back(impls.back().get());
    if (impls.back()->limits().autograd_backward) autograd.insert(name);
  }
  request.options.rule = {k, floor_ulps};
  request.options.reference.threads = threads;
  request.options.diagnosis.threads = threads;
  request.options.project = project;
  RecordCallback callback(std::move(on_record), autograd);
  nlohmann::json document;
  {
    nb::gil_scoped_release release;
    VerifyRun run = run_verify(request, {&callback});
    for (Record& record : run.records)
      if (autograd.count(record.implementation)) restate_isolation(record);
    document = verify_to_json(run, request.options, run_context(threads > 0 ? threads : default_thread_count()), "verify");
  }
  return document.dump();
}

std::string properties_of_callable(nb::object invoke, const std::string& name, const std::string& declaration, const std::string& limits,
                                   const std::vector<int>& numbers, int cases, std::uint64_t seed, bool shrink,
                                   const std::optional<Problem>& single_case) {
  CallableImplementation impl(name, declaration, CallableImplementation::Limits::from_json(limits), std::move(invoke));
  PropertiesRequest request;
  request.implementations = {&impl};
  request.properties = properties_numbered(numbers, "properties");
  request.options.cases = cases;
  request.options.seed = seed;
  request.options.shrink = shrink;
  request.single_case = single_case;
  PropertiesJson json(request.options, run_context(default_thread_count()));
  if (single_case) json.single_case = single_case->repro();
  struct Collect final : PropertiesObserver {
    PropertiesJson& json;
    explicit Collect(PropertiesJson& j) : json(j) {}
    void verdict_made(const PropertyVerdict& v, const Property& p, const Implementation& i) override { json.add(v, p, i); }
  } collect(json);
  {
    nb::gil_scoped_release release;
    run_properties(request, {&collect});
  }
  json.complete = true;
  return json.to_json().dump();
}

}  // namespace
}  // namespace attn::python

NB_MODULE(_native, m) {
  using namespace attn;
  using namespace attn::python;
  m.doc() = "attnbench's C++ core (nanobind); use the attnbench package, which wraps it";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<Problem>(m, "Problem", "One attention problem: shapes, masks, dtypes, data; prints as its repro string")
      .def("__init__", [](Problem* p, const std::string& repro) {
        new (p) Problem(parse_problem(repro));
        p->validate();
      }, "repro"_a, "The problem a repro string describes (as Problem.parse)")
      .def_static("parse", [](const std::string& repro) {
        Problem p = parse_problem(repro);
        p.validate();
        return p;
      }, "repro"_a, "The problem a repro string describes (every required field given; ValueError naming what is wrong)")
      .def_static("from_json", [](const std::string& text) {
        Problem p = nlohmann::json::parse(text).get<Problem>();
        p.validate();
        return p;
      }, "text"_a, "The problem a JSON document (to_json's) describes")
      .def("to_json", [](const Problem& p) { return nlohmann::json(p).dump(); }, "Every field as JSON text (the result files' `problem`)")
      .def("with_operation", [](Problem p, const std::string& operation) {
        p.operation = parse_operation(operation);
        p.validate();
        return p;
      }, "operation"_a, "The same problem for another operation (\"forward\" or \"backward\": op=backward in its repro string)")
      .def("repro", &Problem::repro, "The one-line repro string that `--case` and Problem.parse read back")
      .def("label", &Problem::label, "A short label for tables")
      .def("__str__", &Problem::repro)
      .def("__repr__", [](const Problem& p) { return "Problem.parse('" + p.repro() + "')"; })
      .def("__eq__", [](const Problem& a, const Problem& b) { return a == b; })
      .def("__hash__", [](const Problem& p) { return std::hash<std::string>{}(p.repro()); })
      .def_ro("batch", &Problem::batch)
      .def_ro("h_q", &Problem::h_q)
      .def_ro("h_kv", &Problem::h_kv)
      .def_ro("n_q", &Problem::n_q)
      .def_ro("n_k", &Problem::n_k)
      .def_ro("d_k", &Problem::d_k)
      .def_ro("d_v", &Problem::d_v)
      .def_ro("seed", &Problem::seed)
      .def_prop_ro("dtype", [](const Problem& p) { return std::string(to_string(p.dtype)); })
      .def("dtype_of", [](const Problem& p, const std::string& role) {
        const auto r = parse_role(role);
        if (!r) throw InputError(fmt::format("no role '{}' (q k v bias o)", role));
        return std::string(to_string(p.dtype_of(*r)));
      }, "role"_a,
           "The dtype of a role (q k v bias o), its own where the problem mixes dtypes")
      .def_prop_ro("scale", [](const Problem& p) { return p.scale; }, "The explicit scale, or None for 1/sqrt(d_k)")
      .def_prop_ro(
          "sinks", [](const Problem& p) { return p.sinks.enabled ? std::optional<std::vector<double>>(sink_logits(p)) : std::nullopt; },
          "Each query head's attention-sink logit (one more term of its rows' softmax denominator), or None")
      .def_prop_ro("settings", &settings_dict,
                   "The score modifications' settings the case uses, by name ({'softcap': 30.0}, {'dropout_p': 0.1, 'dropout_seed': 3}); "
                   "each is also an attribute (p.softcap), None where the case does not use it")
      .def("__getattr__", [](const Problem& p, const std::string& name) -> nb::object {
        if (find_score_setting(name) == nullptr) throw nb::attribute_error(fmt::format("'Problem' object has no attribute '{}'", name).c_str());
        const nb::dict settings = settings_dict(p);
        return settings.contains(name.c_str()) ? nb::object(settings[name.c_str()]) : nb::none();
      })
      .def_prop_ro("effective_scale", &Problem::effective_scale)
      .def_prop_ro("regime", [](const Problem& p) { return std::string(to_string(p.regime)); })
      .def_prop_ro("layout", [](const Problem& p) { return std::string(to_string(p.layout)); })
      .def_prop_ro("operation", [](const Problem& p) { return std::string(to_string(p.operation)); })
      .def_prop_ro("window", [](const Problem& p) -> nb::object {
        if (p.window.is_none()) return nb::none();
        auto side = [](std::int64_t n) -> nb::object { return n == Window::unbounded ? nb::none() : nb::cast(n); };
        return nb::make_tuple(side(p.window.left), side(p.window.right), std::string(to_string(p.window.align)));
      }, "None, or (left, right, align): query i sees key j iff i + d - left <= j <= i + d + right (None: unbounded)")
      .def_prop_ro("causal", [](const Problem& p) -> nb::object {
        const auto c = p.window.as_causal();
        return c ? nb::cast(std::string(to_string(*c))) : nb::none();
      }, "\"none\", \"top_left\" or \"bottom_right\"; None for another window")
      .def_prop_ro("rows", &Problem::rows)
      .def("visible_pairs", &Problem::visible_pairs, "Visible (query, key) pairs, counted exactly")
      .def("flops", &Problem::flops, "2 b h_q P (d_k + d_v), P the visible pairs")
      .def("flops_published", &Problem::flops_published, "4 b h n_q n_k d, halved for causal (the published convention)")
      .def("bytes_min", &Problem::bytes_min, "Q, K, V (and the mask) read once, O written once");

  m.def("cases", [](const std::string& name) { return load_cases(name); }, "name"_a,
        "A case set by name (\"default\", \"quick\") or a case file's path: one repro string per line");

  m.def("score_settings", [] {
    nb::list rows;
    for (const ScoreModificationRow& row : score_modification_rows)
      for (const ScoreSetting& setting : row.settings) {
        nb::dict d;
        d["name"] = std::string(setting.name);
        d["modification"] = std::string(row.name);
        d["description"] = std::string(row.description);
        d["integer"] = setting.integer;
        rows.append(d);
      }
    return rows;
  }, "The score modifications' settings (core/README.md, \"The score pipeline\"): each one's name (the keyword judge(), "
     "reference() and the conventions use), its modification, and whether it is an integer (a seed)");
  m.def("make_inputs", [](const Problem& p) {
    p.validate();
    check_case_memory(p, {});
    const CaseInputs in = generate_inputs(p);
    return inputs_dict(p, in);
  }, "problem"_a, "The problem's seeded inputs (the bits every implementation and the reference read) and its mask in parts");

  nb::class_<Settings>(m, "_Settings")
      .def(nb::init<>())
      .def_rw("scale", &Settings::scale)
      .def_rw("causal", &Settings::causal)
      .def_rw("window", &Settings::window)
      .def_rw("align", &Settings::align)
      .def_rw("o_dtype", &Settings::o_dtype)
      .def_rw("score", &Settings::score)
      .def_rw("sinks", &Settings::sinks);
  nb::class_<GivenIn>(m, "_Given")
      .def(nb::init<InArray, InArray, InArray, std::optional<InArray>, std::optional<InArray>, std::optional<InArray>, bool>(), "q"_a, "k"_a, "v"_a,
           "mask"_a.none(), "bias"_a.none(), "valid_lens"_a.none(), "bf16_bits"_a);

  m.def("_case_memory", [](const Problem& p) {
    const CaseMemory m = case_memory(p, {});
    nb::dict d;
    d["inputs"] = m.inputs, d["reference"] = m.reference, d["yardstick"] = m.yardstick, d["outputs"] = m.outputs, d["workspace"] = m.workspace;
    return d;
  }, "problem"_a, "What verifying the case holds at its peak, in bytes, by part (verification/verify.hpp's case_memory)");
  // What judging the arrays costs beyond the output's own reading: the reference and the naive
  // yardstick alone, computed and dropped (the zero-copy test's baseline).
  m.def("_yardstick_only", [](const GivenIn& in, const Settings& s, int threads) {
    auto [problem, inputs] = given_case_of(given_arrays(in, s));
    ReferenceOptions options;
    options.threads = threads;
    nb::gil_scoped_release release;
    (void)make_yardstick(problem, inputs, options);
  }, "given"_a, "settings"_a, "threads"_a);
  m.def("_reference", &reference_of, "given"_a, "settings"_a, "threads"_a);
  m.def("_judge", &judge_of, "given"_a, "settings"_a, "out"_a, "lse"_a.none(), "keep"_a.none(), "k"_a, "floor_ulps"_a, "threads"_a, "name"_a,
        "source"_a);
  m.def("_judge_backward", &judge_backward_of, "given"_a, "settings"_a, "d_o"_a, "dq"_a, "dk"_a, "dv"_a, "d_sink"_a.none(), "d_bias"_a.none(),
        "keep"_a.none(), "k"_a, "floor_ulps"_a, "threads"_a, "name"_a, "source"_a);
  m.def("_verify", &verify_callables, "kernels"_a, "cases"_a, "k"_a,
        "floor_ulps"_a, "threads"_a, "project"_a, "on_record"_a.none());
  m.def("_properties", &properties_of_callable, "invoke"_a, "name"_a, "declaration"_a, "limits"_a, "numbers"_a,
        "cases"_a, "seed"_a, "shrink"_a, "single_case"_a.none());
  m.def("_bench_document", &bench_document, "request"_a);
  // The sandbox of the isolate=True worker (impls/sandbox/README.md): a scratch directory made
  // and removed by the caller; in the forked worker, its namespaces (before the fork of the process
  // that calls), that process's /proc, Landlock and seccomp, each bound as (name, applied, detail);
  // the calls refused since the last ask.
  using BoundTuples = std::vector<std::tuple<std::string, bool, std::string>>;
  auto tuples = [](const std::vector<sandbox::Bound>& bounds) {
    BoundTuples out;
    for (const auto& b : bounds) out.emplace_back(b.name, b.applied, b.detail);
    return out;
  };
  m.def("_sandbox_scratch", &sandbox::make_scratch_directory);
  m.def("_sandbox_remove", &sandbox::remove_scratch_directory, "path"_a);
  // The forked worker is single-threaded: it may go on in the sandbox's process 2 without an exec.
  m.def("_sandbox_spawn", [tuples] {
    std::vector<sandbox::Bound> bounds;
    int status_fd = -1;
    const pid_t pid = sandbox::spawn_sandboxed(bounds, status_fd);
    return std::make_tuple(int(pid), status_fd, tuples(bounds));
  });
  m.def(
      "_sandbox_wait",
      [](int pid, int status_fd) { return sandbox::wait_for_worker(pid, status_fd); },
      "pid"_a, "status_fd"_a);
  m.def(
      "_sandbox_confine",
      [tuples](const std::string& scratch, int channel) {
        return tuples(sandbox::confine({scratch, channel, "callable", "isolate='no-sandbox'"}));
      },
      "scratch"_a, "channel"_a);
  m.def("_sandbox_refusals", &sandbox::take_refusals);
  m.def("_property_names", [] {
    std::vector<std::pair<int, std::string>> names;
    for (const Property& p : property_suite()) names.emplace_back(p.number, p.name);
    return names;
  });
}
