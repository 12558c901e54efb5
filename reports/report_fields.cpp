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

std::string format_ulps(const VerifyRecord& r) {
  // Every compared output lies near zero, where ulps are not measured (core/metrics.hpp).
  if (!r.measured() || !r.ulps_measured()) return "-";
  if (std::isnan(r.max_ulps())) return "nan";
  return r.max_ulps() > 999999 ? fmt::format("{:.1e}", r.max_ulps()) : fmt_num(r.max_ulps(), 7);
}

double ulps_value(const VerifyRecord& r) { return std::isnan(r.max_ulps()) ? INFINITY : r.max_ulps(); }

}  // namespace report_parts
}  // namespace attn
