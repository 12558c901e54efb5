#pragma once
// Reading a result record's fields for the report, and the figures as the report and the verify
// console print them.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

// The share of its error budget a case used (verify's budget_used: the worst error over its
// tolerance) as the console and the report print it: "37%", "12x"; not finite: ">>100%" (a NaN
// error is over any budget). 100% is the pass line.
std::string format_budget(double used);

namespace report_parts {

// A number, or "inf"/"-inf" strings (how verify writes non-finite figures); NaN otherwise.
double as_double(const nlohmann::json& j);
double field(const nlohmann::json& j, const char* key);       // NaN when absent
std::string text(const nlohmann::json& j, const char* key);   // "" when absent or null; numbers as JSON
std::string fmt_num(double x, int digits = 3);                // "-" for NaN
std::string fmt_fixed(double x, int decimals);
std::string fmt_ulps(const nlohmann::json& metrics);
double ulps_value(const nlohmann::json& metrics);             // infinite for NaN ulps
// The mask of a verify record's problem, in words: "none", "causal top_left", "causal bottom_right + pad", "bool", ...
std::string mask_name(const nlohmann::json& problem);

}  // namespace report_parts
}  // namespace attn
