#include "records/peers_record.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "records/result_schema.hpp"

namespace attn {
namespace {

using nlohmann::json;

// valid_target: true, false, or null (checks skipped; a missing key reads as null).
std::optional<bool> validity(const json& j) {
  if (j.is_object() && j.contains("valid_target") && j["valid_target"].is_boolean()) return j["valid_target"].get<bool>();
  return std::nullopt;
}

PeerResult read_result(const json& r) {
  PeerResult p;
  p.peer = text_or_empty(r, "peer");
  p.peer_version = text_or_empty(r, "peer_version");
  p.valid_target = validity(r);
  if (r.is_object() && r.contains("problem") && r["problem"].is_object()) p.problem = r["problem"];
  const json& q = p.problem;
  p.dtype = text_or_empty(q, "dtype");
  p.causal = text_or_empty(q, "causal");
  p.repro = text_or_empty(q, "repro");
  if (q.contains("operation") && q["operation"].is_string()) p.operation = q["operation"].get<std::string>();
  if (q.contains("d_k") && q["d_k"].is_number_integer()) p.d_k = q["d_k"].get<std::int64_t>();
  if (p.peer.empty() || !q.contains("causal") || !q["causal"].is_string() || !q.contains("n_q") || !q["n_q"].is_number_integer())
    p.unplaced = fmt::format("a record without peer, problem.causal or problem.n_q: {:.120}", r.dump());
  else
    p.n_q = q["n_q"].get<std::int64_t>();
  if (r.is_object() && r.contains("error")) {
    p.error = r["error"].is_string() ? r["error"].get<std::string>() : r["error"].dump();
  } else if (r.is_object() && r.contains("median_seconds") && r["median_seconds"].is_number() &&
             std::isfinite(r["median_seconds"].get<double>()) && r["median_seconds"].get<double>() > 0) {
    p.median_ms = r["median_seconds"].get<double>() * 1e3;
  } else {
    p.untimed = fmt::format("{} {}: neither a positive median_seconds nor an error", p.peer, p.repro);
  }
  return p;
}

}  // namespace

PeersDocument read_peers_document(const json& doc, const std::string& source) {
  if (!doc.is_object()) throw InputError(fmt::format("{} is not a JSON object", source));
  if (!doc.contains("results") || !doc["results"].is_array()) throw InputError(fmt::format("{} has no \"results\" array", source));
  if (doc.contains("peers") && !doc["peers"].is_array()) throw InputError(fmt::format("{}: \"peers\" is not an array", source));
  PeersDocument d;
  if (doc.contains("context") && doc["context"].is_object()) d.context = doc["context"];
  if (doc.contains("peers"))
    for (const json& p : doc["peers"]) {
      PeerStatus s{text_or_empty(p, "peer"), std::nullopt, validity(p)};
      if (p.is_object() && p.contains("skipped")) s.skipped = p["skipped"].is_string() ? p["skipped"].get<std::string>() : p["skipped"].dump();
      d.peers.push_back(std::move(s));
    }
  for (const json& r : doc["results"]) d.results.push_back(read_result(r));
  return d;
}

}  // namespace attn
