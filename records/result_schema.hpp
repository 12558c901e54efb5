#pragma once
// The schemas of attnbench's JSON files and the one recogniser of them: every file carries
// top-level "schema" and "schema_version"; files written before the field are recognised by
// their shape. The report and the gate both classify their inputs here.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attn {

inline constexpr std::string_view schema_verify = "attnbench.verify";
inline constexpr std::string_view schema_bench = "attnbench.bench";
inline constexpr std::string_view schema_properties = "attnbench.properties";
inline constexpr std::string_view schema_peers = "attnbench.peers";
// attnbench's files that are not results.
inline constexpr std::string_view schema_gate_baseline = "attnbench.gate-baseline";
inline constexpr std::string_view schema_gate_config = "attnbench.gate-config";
inline constexpr std::string_view schema_cases = "attnbench.cases";
// The version this build writes and the newest it reads, of every schema above.
inline constexpr int result_schema_version = 1;

// The schema `document` declares or, without the field, is recognised as: Google Benchmark's
// JSON ("benchmarks" with "context" or "attnbench") is attnbench.bench, a peers script's
// ("results" and "peers") attnbench.peers. Throws InputError naming `source` when the document
// is not an object, "schema" is not a string or not one of the above, nothing is recognised, or
// "schema_version" is not an integer or is newer than this build reads.
std::string recognise_schema(const nlohmann::json& document, const std::string& source);

// JSON has no NaN or Inf: a figure the file holds as a number is written "nan", "inf" or "-inf"
// when it is not finite (verify's records, the gate baseline's errors, which read "nan" as inf).
nlohmann::json figure_json(double x);

// j[key] when j is an object holding a string there, else "": for the readers' optional text fields.
std::string text_or_empty(const nlohmann::json& j, const char* key);

}  // namespace attn
