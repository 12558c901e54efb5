#include "records/properties_record.hpp"

#include <set>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

using nlohmann::json;

json to_json(const PropertyRecord& r) {
  json j{{"property", r.property}, {"name", r.name},           {"implementation", r.implementation},
         {"verdict", r.verdict},   {"cases", r.cases},         {"projected", r.projected},
         {"discarded", r.discarded}, {"seed", r.seed},         {"message", r.message}};
  if (!r.repro.empty()) {
    j["repro"] = r.repro;
    j["rerun"] = r.rerun;
  }
  return j;
}

PropertyRecord read_property_record(const json& j, std::size_t index, const std::string& source) {
  const std::string which = fmt::format("{}: records[{}]", source, index);
  if (!j.is_object()) throw InputError(which + " is not an object");
  auto text = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string{}; };
  const std::string named = fmt::format("{} ({}, property {})", which, text("implementation"), j.contains("property") ? j["property"].dump() : "?");
  auto fail = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", named, what)); };
  auto integer = [&](const char* key) -> std::int64_t {
    if (!j.contains(key) || j[key].is_null()) return 0;
    if (!j[key].is_number_integer()) fail(fmt::format("\"{}\" is not an integer", key));
    return j[key].get<std::int64_t>();
  };
  static const std::set<std::string> known{"failed", "finding", "gave_up", "held", "not_applicable"};
  PropertyRecord r;
  r.verdict = text("verdict");
  if (!known.count(r.verdict))
    fail(fmt::format("{} (expected {})", r.verdict.empty() ? std::string("no verdict") : fmt::format("unknown verdict '{}'", r.verdict),
                     fmt::join(known, ", ")));
  r.property = static_cast<int>(integer("property"));
  r.name = text("name");
  r.implementation = text("implementation");
  r.cases = integer("cases");
  r.projected = integer("projected");
  r.discarded = integer("discarded");
  if (j.contains("seed") && j["seed"].is_number_unsigned()) r.seed = j["seed"].get<std::uint64_t>();
  r.message = text("message");
  r.repro = text("repro");
  r.rerun = text("rerun");
  return r;
}

}  // namespace attn
