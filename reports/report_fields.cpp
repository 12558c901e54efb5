#include "reports/report_fields.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace attn {

using nlohmann::json;

std::string format_budget(double used) {
  if (!std::isfinite(used)) return ">>100%";
  return used >= 10 ? fmt::format("{:.0f}x", used) : fmt::format("{:.0f}%", 100 * used);
}

namespace report_parts {

double as_double(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return NAN;
}
double field(const json& j, const char* key) { return j.is_object() && j.contains(key) ? as_double(j[key]) : NAN; }
std::string text(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return {};
  return j[key].is_string() ? j[key].get<std::string>() : (j[key].is_null() ? std::string{} : j[key].dump());
}

std::string fmt_num(double x, int digits) {
  if (std::isnan(x)) return "-";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{:.{}g}", x, digits);
}
std::string fmt_fixed(double x, int decimals) { return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : fmt_num(x); }

std::string fmt_ulps(const json& metrics) {
  if (!metrics.is_object() || !metrics.contains("max_ulps")) return "-";
  // Every compared output lies near zero, where ulps are not measured (core/metrics.hpp).
  if (metrics.contains("max_ulps_at") && metrics["max_ulps_at"] == "-") return "-";
  const json& u = metrics["max_ulps"];
  if (u.is_number_unsigned() && u.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max()) return "nan";
  const double v = as_double(u);
  return v > 999999 ? fmt::format("{:.1e}", v) : fmt_num(v, 7);
}
double ulps_value(const json& metrics) {
  if (!metrics.is_object() || !metrics.contains("max_ulps")) return NAN;
  const json& u = metrics["max_ulps"];
  if (u.is_number_unsigned() && u.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max()) return INFINITY;
  return as_double(u);
}

std::string mask_name(const json& problem) {
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
}  // namespace report_parts
}  // namespace attn
