#include "records/verify_record.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {
namespace {

using nlohmann::json;

std::string text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string{};
}

// The mask of a record's problem block, in words.
std::string mask_in_words(const json& problem) {
  std::vector<std::string> parts;
  const std::string causal = text(problem, "causal");
  if (!causal.empty() && causal != "none") parts.push_back("causal " + causal);
  if (problem.is_object() && problem.contains("padding")) parts.push_back("pad " + text(problem["padding"], "kind"));
  if (problem.is_object() && problem.contains("bool_mask")) parts.push_back("bool");
  if (problem.is_object() && problem.contains("bias")) parts.push_back("bias");
  if (parts.empty()) return "none";
  std::string out = parts.front();
  for (std::size_t i = 1; i < parts.size(); ++i) out += " + " + parts[i];
  return out;
}

}  // namespace

VerifyRecord read_verify_record(const json& r, std::size_t index, const std::string& source) {
  const std::string which = fmt::format("{}: records[{}]", source, index);
  if (!r.is_object()) throw InputError(which + " is not an object");
  const std::string named = fmt::format("{} ({}, case {})", which, text(r, "implementation"), r.contains("case_index") ? r["case_index"].dump() : "?");
  auto fail = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", named, what)); };
  auto required = [&](const char* key) {
    if (!r.contains(key)) fail(fmt::format("no {}", key));
    if (!r[key].is_string()) fail(fmt::format("\"{}\" is not a string", key));
    return r[key].get<std::string>();
  };
  // A figure verify writes as a number, or as "nan"/"inf"/"-inf".
  auto figure = [&](const json& v, const std::string& where) {
    if (v.is_number()) return v.get<double>();
    if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (v == "inf") return std::numeric_limits<double>::infinity();
    if (v == "-inf") return -std::numeric_limits<double>::infinity();
    fail(fmt::format("{} is not a number: {}", where, v.dump()));
    return 0.0;
  };
  VerifyRecord v;
  v.status = r.contains("status") && r["status"].is_string() ? r["status"].get<std::string>() : "";
  if (v.status.empty()) fail("no status (expected fail, pass, skip)");
  if (v.status != "pass" && v.status != "fail" && v.status != "skip") fail(fmt::format("unknown status '{}' (expected fail, pass, skip)", v.status));
  v.implementation = required("implementation");
  v.repro = required("repro");
  v.label = r.contains("label") && r["label"].is_string() ? r["label"].get<std::string>() : v.repro;
  if (r.contains("case_index") && r["case_index"].is_number_integer()) v.case_index = r["case_index"].get<std::int64_t>();
  if (r.contains("reasons") && r["reasons"].is_array())
    for (const auto& why : r["reasons"]) v.reasons.push_back(why.is_string() ? why.get<std::string>() : why.dump());
  v.skip_reason = text(r, "skip_reason");
  if (v.measured()) {
    if (!r.contains("metrics") || !r["metrics"].is_object()) fail("missing \"metrics\"");
    const json& m = r["metrics"];
    for (const char* key : {"max_abs", "max_ulps"})
      if (!m.contains(key)) fail(fmt::format("metrics: missing \"{}\"", key));
    v.max_abs = figure(m["max_abs"], "metrics.max_abs");
    const json& u = m["max_ulps"];
    v.max_ulps = u.is_number_unsigned() && u.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max()
                     ? std::numeric_limits<double>::quiet_NaN()
                     : figure(u, "metrics.max_ulps");
    v.ulps_measured = !(m.contains("max_ulps_at") && m["max_ulps_at"] == "-");
  }
  if (r.contains("budget_used")) v.budget_used = figure(r["budget_used"], "budget_used");
  v.projected = r.contains("projected_from");
  v.sampled = r.contains("reference") && r["reference"].is_object() && r["reference"].value("sampled", false);
  if (r.contains("diagnosis") && r["diagnosis"].is_object()) v.diagnosis = text(r["diagnosis"], "summary");
  if (r.contains("baseline") && r["baseline"].is_object() && r["baseline"].contains("metrics") && r["baseline"]["metrics"].is_object() &&
      r["baseline"]["metrics"].contains("max_ulps")) {
    const json& u = r["baseline"]["metrics"]["max_ulps"];
    v.baseline_max_ulps = u.is_number_unsigned() && u.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max()
                              ? std::numeric_limits<double>::quiet_NaN()
                              : (u.is_number() ? u.get<double>() : std::numeric_limits<double>::quiet_NaN());
  }
  if (r.contains("problem") && r["problem"].is_object()) {
    const json& p = r["problem"];
    v.dtype = text(p, "dtype");
    v.mask = mask_in_words(p);
    if (p.contains("n_k") && p["n_k"].is_number()) v.n_k = p["n_k"].get<double>();
  } else {
    v.mask = "none";
  }
  return v;
}

}  // namespace attn
