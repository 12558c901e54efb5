#include "benchmarks/problem_list.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "benchmarks/device_plan.hpp"
#include "core/error.hpp"
#include "impls/capability_space.hpp"

namespace attn::bench {
namespace {

bool is_power_of_two(std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::string FamilySpec::mask_name() const {
  std::string name;
  if (const auto causal = window.as_causal()) {
    switch (*causal) {
      case Causal::none: name = "none"; break;
      case Causal::top_left: name = "causal"; break;
      case Causal::bottom_right: name = "causal_bottom_right"; break;
    }
  } else {
    name = fmt::format("sliding_{}{}", window.left, window.align == Align::bottom_right ? "_bottom_right" : "");
  }
  return softcap ? fmt::format("{}_softcap{:g}", name, *softcap) : name;
}

std::optional<std::string> FamilySpec::peer_mask() const {
  if (softcap || pass == Pass::forward_backward) return std::nullopt;  // the peers compute no soft-cap, and time one pass alone
  const std::string suffix = pass == Pass::backward ? "/backward" : "";
  if (window.is_none()) return "none" + suffix;
  if (window.is_causal()) return "top_left" + suffix;
  return std::nullopt;
}

std::string_view to_string(Pass pass) {
  switch (pass) {
    case Pass::forward: return "forward";
    case Pass::backward: return "backward";
    case Pass::forward_backward: return "forward_backward";
  }
  return "?";
}

Pass parse_pass(const std::string& text) {
  for (Pass pass : {Pass::forward, Pass::backward, Pass::forward_backward})
    if (text == to_string(pass)) return pass;
  throw InputError(fmt::format("unknown pass '{}' (known: forward, backward, forward_backward)", text));
}

std::string FamilySpec::name() const {
  return fmt::format("{}/{}/d{}/{}{}{}", implementation->name(), to_string(dtype), head_dim, mask_name(),
                     pass == Pass::forward ? "" : "/" + std::string(to_string(pass)), variant.empty() ? "" : "/" + variant);
}

namespace {

// One of a problem's figures for one call of the family: the forward's, the backward's, or both's.
double per_call(const FamilySpec& family, std::int64_t n, double (Problem::*figure)() const) {
  Problem p = family.problem(n);
  const double backward = family.pass == Pass::forward ? 0.0 : (p.*figure)();
  p.operation = Operation::forward;
  return (family.pass == Pass::backward ? 0.0 : (p.*figure)()) + backward;
}

}  // namespace

double FamilySpec::flops(std::int64_t n) const { return per_call(*this, n, &Problem::flops); }
double FamilySpec::flops_published(std::int64_t n) const { return per_call(*this, n, &Problem::flops_published); }
double FamilySpec::bytes_min(std::int64_t n) const { return per_call(*this, n, &Problem::bytes_min); }

std::size_t FamilySpec::workspace_bytes(std::int64_t n) const {
  Problem p = problem(n);
  const std::size_t backward = pass == Pass::forward ? 0 : implementation->workspace_bytes(p);
  p.operation = Operation::forward;
  return std::max(pass == Pass::backward ? 0 : implementation->workspace_bytes(p), backward);
}


Problem FamilySpec::problem(std::int64_t n) const {
  Problem p;
  p.batch = batch;
  p.h_q = p.h_kv = heads;
  p.n_q = p.n_k = n;
  p.d_k = p.d_v = head_dim;
  p.dtype = dtype;
  p.window = window;
  p.softcap = softcap;
  p.regime = Regime::diffuse;
  p.seed = 1;
  if (pass != Pass::forward) p.operation = Operation::backward;
  return p;
}

std::vector<std::int64_t> powers_of_two(std::int64_t min_n, std::int64_t max_n) {
  if (!is_power_of_two(min_n)) throw InputError(fmt::format("--min-n {} is not a power of two", min_n));
  if (!is_power_of_two(max_n)) throw InputError(fmt::format("--max-n {} is not a power of two", max_n));
  if (min_n > max_n) throw InputError(fmt::format("--min-n {} is larger than --max-n {}", min_n, max_n));
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = min_n; n <= max_n; n *= 2) sizes.push_back(n);
  return sizes;
}

namespace {

Window parse_window(const std::string& text) {
  if (text == "none") return Window{};
  if (text == "causal" || text == "top_left") return Window::of(Causal::top_left);
  if (text == "bottom_right") return Window::of(Causal::bottom_right);
  if (text.rfind("sliding:", 0) == 0) {
    const std::string w = text.substr(8);
    std::size_t used = 0;
    long long keys = -1;
    try {
      keys = std::stoll(w, &used);
    } catch (const std::exception&) {
    }
    if (w.empty() || used != w.size() || keys < 0)
      throw InputError(fmt::format("mask '{}': sliding:W needs W, the keys before the diagonal each query sees, as a whole number >= 0", text));
    return Window{keys, 0, Align::top_left};
  }
  throw InputError(fmt::format("unknown mask '{}' (known: none, causal, top_left, bottom_right, sliding:W, each with +softcap:C)", text));
}

}  // namespace

FamilyMask parse_mask(const std::string& text) {
  const auto plus = text.find('+');
  FamilyMask mask{parse_window(text.substr(0, plus)), {}};
  if (plus == std::string::npos) return mask;
  const std::string modifier = text.substr(plus + 1);
  double cap = 0;
  std::size_t used = 0;
  if (modifier.rfind("softcap:", 0) == 0) try {
      cap = std::stod(modifier.substr(8), &used);
    } catch (const std::exception&) {
    }
  if (modifier.rfind("softcap:", 0) != 0 || used == 0 || used != modifier.size() - 8 || !std::isfinite(cap) || !(cap > 0))
    throw InputError(fmt::format("mask '{}': after '+' expected softcap:C, C a finite positive number (scores s become C tanh(s / C))", text));
  mask.softcap = cap;
  return mask;
}

ProblemList curated_problem_list(std::span<const Implementation* const> implementations, const ProblemListOptions& o) {
  const std::vector<std::int64_t> all_sizes = o.smoke ? std::vector<std::int64_t>{16, 32, 64} : powers_of_two(o.min_n, o.max_n);
  if (o.batch < 1 || o.heads < 1) throw InputError("--batch and --heads must be positive");
  for (auto d : o.head_dims)
    if (d < 1) throw InputError(fmt::format("head dimension {} must be positive", d));
  if (o.masks.empty()) throw InputError("no masks to benchmark");

  ProblemList list;
  for (const Implementation* impl : implementations) {
    const Capabilities caps = impl->describe();
    const std::string variant = runs_on_gpu(*impl) ? o.gpu_variant : std::string();
    std::vector<DType> dtypes = o.dtypes;
    if (dtypes.empty()) dtypes = o.smoke ? caps.dtypes : std::vector<DType>{DType::f32};

    std::vector<std::int64_t> sizes = all_sizes;
    if (!o.smoke) {
      if (auto cap = o.max_n_for.find(impl->name()); cap != o.max_n_for.end() && cap->second < sizes.back()) {
        std::erase_if(sizes, [&](std::int64_t n) { return n > cap->second; });
        list.notes.push_back(fmt::format("{}: n capped at {} (its single-threaded cost would dominate the run)", impl->name(), cap->second));
      }
    }

    for (DType dtype : dtypes) {
      if (std::find(caps.dtypes.begin(), caps.dtypes.end(), dtype) == caps.dtypes.end()) {
        list.notes.push_back(fmt::format("{}: skipped {} (not among its dtypes)", impl->name(), to_string(dtype)));
        continue;
      }
      for (std::int64_t d : o.head_dims) {
        for (const FamilyMask& mask : o.masks)
        for (const Pass pass : o.passes) {
          FamilySpec family{impl, dtype, o.batch, o.heads, d, mask.window, mask.softcap, {}, variant, pass};
          if (pass != Pass::forward && (impl->times_itself() || runs_on_gpu(*impl))) {
            list.notes.push_back(fmt::format("{}: not timed: the {} pass is timed for CPU implementations run in-process only", family.name(),
                                             to_string(pass)));
            continue;
          }
          if (pass != Pass::forward && std::find(caps.operations.begin(), caps.operations.end(), Operation::backward) == caps.operations.end()) {
            list.notes.push_back(fmt::format("{}: not timed: {} declares no backward pass", family.name(), impl->name()));
            continue;
          }
          for (std::int64_t n : sizes) {
            const Problem problem = family.problem(n);
            Support support = covers(caps, problem);
            if (support.ok) support = impl->supports(problem);
            if (support.ok)
              family.sizes.push_back(n);
            else
              list.notes.push_back(fmt::format("{}: n={} unsupported: {}", family.name(), n, support.reason));
          }
          if (family.sizes.empty()) {
            if (sizes.empty()) list.notes.push_back(fmt::format("{}: no sizes left in [{}, {}]", family.name(), all_sizes.front(), all_sizes.back()));
            continue;
          }
          list.families.push_back(std::move(family));
        }
      }
    }
  }
  return list;
}

}  // namespace attn::bench
