#pragma once
// Reading a result record's fields for the report, and the figures as the report and the verify
// console print them.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "records/verify_record.hpp"

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
std::string format_ulps(const VerifyRecord& record);          // "-" where not measured, "nan" for NaN ulps
double ulps_value(const VerifyRecord& record);                // infinite for NaN ulps

}  // namespace report_parts
}  // namespace attn
