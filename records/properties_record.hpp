#pragma once
// A record of a properties result file (schema "attnbench.properties"), typed: one (property,
// implementation) verdict, with its one writer (to_json) and one reader. reports/README.md
// documents the fields; the document around the records is reports/properties_report.hpp's.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

struct PropertyRecord {
  int property = 0;            // the property's number
  std::string name;            // the property as a sentence
  std::string implementation;
  std::string verdict;         // held, failed, finding, not_applicable, gave_up (only failed fails a run)
  std::int64_t cases = 0, projected = 0, discarded = 0;
  std::uint64_t seed = 0;      // the RapidCheck seed
  std::string message;
  std::string repro, rerun;    // a failure's or finding's counterexample and the command that reruns it ("" otherwise)
};

nlohmann::json to_json(const PropertyRecord& record);
// Reads records[index]; throws InputError naming `source` and the record ("records[I] (IMPL,
// property P)") on a verdict it does not know, or a field of the wrong type.
PropertyRecord read_property_record(const nlohmann::json& record, std::size_t index, const std::string& source);

}  // namespace attn
