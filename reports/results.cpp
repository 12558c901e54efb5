#include "reports/results.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace attn {
namespace {

using nlohmann::json;

std::string kind_of_schema(std::string_view schema) {
  if (schema == schema_verify) return "verify";
  if (schema == schema_bench) return "bench";
  if (schema == schema_properties) return "properties";
  if (schema == schema_peers) return "peers";
  return {};
}

// The commit a revision string names: `git describe --always --dirty` ("1a2b3c4d5e6f",
// "v1.2-3-g1a2b3c4d5e6f-dirty") or a full SHA from the peers scripts; "" when unknown.
std::string commit_of(const json& context) {
  if (!context.is_object() || !context.contains("git_revision") || !context["git_revision"].is_string()) return {};
  std::string r = context["git_revision"].get<std::string>();
  if (r.size() > 6 && r.ends_with("-dirty")) r.resize(r.size() - 6);
  if (const auto g = r.rfind("-g"); g != std::string::npos) r = r.substr(g + 2);
  if (r == "unknown") return {};
  return r;
}

bool same_commit(const std::string& a, const std::string& b) {
  const std::size_t n = std::min(a.size(), b.size());
  return n >= 7 && a.compare(0, n, b, 0, n) == 0;
}

std::string string_field(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string{};
}

std::string number_text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key].dump() : std::string{};
}

// Adds records keyed by key(record), keeping the first of duplicates; returns how many were dropped.
template <class Key>
int add_unique(json& into, std::set<std::string>& seen, const json& records, Key key) {
  int duplicates = 0;
  for (const auto& r : records) {
    if (!r.is_object()) continue;
    if (!seen.insert(key(r)).second) {
      ++duplicates;
      continue;
    }
    into.push_back(r);
  }
  return duplicates;
}

}  // namespace

ResultFile parse_result_file(const std::string& path, const std::string& text) {
  ResultFile file{path, {}, {}, std::nullopt, json::object(), {}, {}, {}, std::nullopt, std::nullopt};
  try {
    file.doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  const json& doc = file.doc;
  const std::string schema = recognise_schema(doc, path);
  if (schema == schema_gate_baseline || schema == schema_gate_config || schema == schema_cases)
    throw NotAResult(fmt::format("{}: {} (schema {}), not a result file", path,
                                 schema == schema_cases         ? "a cases directory's manifest (attnbench cases)"
                                 : schema == schema_gate_config ? "a gate configuration (attnbench gate --config)"
                                                                : "a gate baseline (attnbench gate --write-baseline)",
                                 schema));
  file.kind = kind_of_schema(schema);

  const char* needed = file.kind == "bench" ? "benchmarks" : file.kind == "peers" ? "results" : "records";
  if (!doc.contains(needed) || !doc[needed].is_array())
    throw InputError(fmt::format("{}: a {} result needs an array '{}'", path, file.kind, needed));

  // A record whose status is unknown would be counted as neither passed nor failed: the gate
  // refuses it, and so does the report (a verify record through its one reader).
  if (file.kind == "verify") {
    std::vector<VerifyRecord> records;
    for (std::size_t i = 0; i < doc["records"].size(); ++i) records.push_back(read_verify_record(doc["records"][i], i, path));
    file.verify_records = std::move(records);
  }
  if (file.kind == "properties")
    for (std::size_t i = 0; i < doc["records"].size(); ++i) file.property_records.push_back(read_property_record(doc["records"][i], i, path));
  file.command = string_field(doc, "command");
  if (doc.contains("shard")) {
    const json& s = doc["shard"];
    if (!s.is_object() || !s.contains("index") || !s.contains("count") || !s["index"].is_number_integer() || !s["count"].is_number_integer())
      throw InputError(fmt::format("{}: 'shard' must be {{\"index\": I, \"count\": N}}", path));
    file.shard = Shard{s["index"].get<int>(), s["count"].get<int>()};
    if (file.shard->count < 1 || file.shard->index < 1 || file.shard->index > file.shard->count)
      throw InputError(fmt::format("{}: shard {}/{} is not 1 <= I <= N", path, file.shard->index, file.shard->count));
  }
  if (file.kind == "bench") file.bench = read_bench_document(doc, path);
  const json* completion = file.kind == "bench" ? (doc.contains("attnbench") && doc["attnbench"].is_object() ? &doc["attnbench"] : nullptr) : &doc;
  if (completion != nullptr && completion->contains("complete")) {
    if (!(*completion)["complete"].is_boolean()) throw InputError(fmt::format("{}: 'complete' must be true or false", path));
    file.complete = (*completion)["complete"].get<bool>();
  }
  if (file.kind == "peers") file.peers = read_peers_document(doc, path);
  if (file.kind == "bench" && doc.contains("attnbench") && doc["attnbench"].is_object() && doc["attnbench"].contains("context") &&
      doc["attnbench"]["context"].is_object())
    file.context = doc["attnbench"]["context"];
  else if (doc.contains("context") && doc["context"].is_object())
    file.context = doc["context"];
  return file;
}

ResultFile load_result_file(const std::string& path) {
  return parse_result_file(path, read_input_file(path));
}

bool MergedResults::has(std::string_view kind) const { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); }

MergedResults merge_results(const std::vector<ResultFile>& files, const MergeOptions& options) {
  MergedResults m;
  // Revisions first: merging measurements of different code is refused unless asked for.
  std::vector<std::pair<std::string, std::string>> revisions;  // (commit, file)
  for (const auto& f : files) {
    const std::string c = commit_of(f.context);
    if (!c.empty()) revisions.emplace_back(c, f.path);
  }
  for (const auto& [commit, path] : revisions)
    if (!same_commit(commit, revisions.front().first)) {
      const std::string what = fmt::format("{} was measured at git revision {} but {} at {}", path, commit, revisions.front().second,
                                           revisions.front().first);
      if (!options.allow_mixed_revisions)
        throw InputError(what + "; refusing to merge results of different code (--allow-mixed-revisions merges them anyway)");
      m.warnings.push_back(what + " (merged: --allow-mixed-revisions)");
      break;
    }

  std::set<std::string> verify_seen, property_seen, run_seen, fit_seen, comparison_seen, peer_seen;
  std::map<std::string, std::map<int, std::set<int>>> shards;  // kind -> count -> indices
  std::map<std::string, int> unsharded, duplicates;
  for (const auto& f : files) {
    m.files.push_back(f.path);
    m.contexts.push_back(f.context);
    // Which command wrote a verify-shaped file shows: check's and validate's are not verify's.
    m.file_kinds.push_back(f.command.empty() || f.command == f.kind ? f.kind : fmt::format("{} ({})", f.kind, f.command));
    m.file_shards.push_back(f.shard ? fmt::format("{}/{}", f.shard->index, f.shard->count) : std::string{});
    if (!m.has(f.kind)) m.kinds.push_back(f.kind);
    if (!f.complete) {
      m.incomplete_files.push_back(f.path);
      m.warnings.push_back(fmt::format("INCOMPLETE: {} is of a {} run that did not finish (\"complete\": false): what it did not reach is "
                                       "missing, and what it holds is not a pass",
                                       f.path, f.kind));
    }
    if (f.shard)
      shards[f.kind][f.shard->count].insert(f.shard->index);
    else
      ++unsharded[f.kind];
    const json& doc = f.doc;
    if (f.kind == "verify") {
      if (m.pass_rule.is_null() && doc.contains("pass_rule")) m.pass_rule = doc["pass_rule"];
      for (const VerifyRecord& r : f.verify_records)
        if (verify_seen.insert(fmt::format("{}\x1f{}\x1f{}", r.implementation, r.case_index, r.repro)).second)
          m.verify_records.push_back(r);
        else
          ++duplicates[f.kind];
    } else if (f.kind == "properties") {
      for (const PropertyRecord& r : f.property_records)
        if (property_seen.insert(fmt::format("{}\x1f{}", r.property, r.implementation)).second)
          m.property_records.push_back(r);
        else
          ++duplicates[f.kind];
    } else if (f.kind == "bench") {
      const BenchDocument& bench = *f.bench;
      for (const BenchRun& r : bench.runs)
        if (run_seen.insert(fmt::format("{}\x1f{}\x1f{}", r.name, r.aggregate, r.repetition_index)).second)
          m.bench_runs.push_back(r);
        else
          ++duplicates[f.kind];
      for (const BenchFit& fit : bench.attnbench.fits)
        if (fit_seen.insert(fit.family).second) m.bench_fits.push_back(fit);
      if (doc.contains("attnbench") && doc["attnbench"].is_object() && doc["attnbench"].contains("peaks")) {
        MergedResults::Peaks p{f.path, bench.attnbench.peaks, {}};
        const json& gpu = bench.attnbench.gpu;
        if (gpu.is_object() && gpu.contains("peaks") && gpu["peaks"].is_object() && gpu["peaks"].contains("gemm") && gpu["peaks"]["gemm"].is_array())
          for (const json& g : gpu["peaks"]["gemm"])
            if (g.is_object() && g.contains("gflops") && g["gflops"].is_number()) p.gpu_gemm.emplace_back(string_field(g, "precision"), g["gflops"].get<double>());
        m.bench_peaks.push_back(std::move(p));
        const json& a = doc["attnbench"];
        if (a.contains("peers") && a["peers"].is_object() && a["peers"].contains("comparisons") && a["peers"]["comparisons"].is_array())
          add_unique(m.peer_comparisons, comparison_seen, a["peers"]["comparisons"], [](const json& r) {
            return string_field(r, "dtype") + '\x1f' + number_text(r, "head_dim") + '\x1f' + string_field(r, "mask") + '\x1f' + number_text(r, "n");
          });
      }
    } else if (f.kind == "peers") {
      for (const PeerResult& r : f.peers->results)
        if (peer_seen.insert(fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", r.peer, r.dtype, r.d_k, r.causal, r.n_q, r.repro)).second)
          m.peer_results.push_back(r);
    }
  }
  std::stable_sort(m.verify_records.begin(), m.verify_records.end(),
                   [](const VerifyRecord& a, const VerifyRecord& b) { return a.case_index < b.case_index; });
  std::stable_sort(m.property_records.begin(), m.property_records.end(),
                   [](const PropertyRecord& a, const PropertyRecord& b) { return a.property < b.property; });
  for (const auto& [kind, counts] : shards) {
    if (counts.size() > 1 || unsharded[kind] > 0)
      m.warnings.push_back(fmt::format("{}: files from different splits (shard counts and unsharded runs) were merged", kind));
    for (const auto& [count, indices] : counts) {
      std::vector<int> missing;
      for (int i = 1; i <= count; ++i)
        if (!indices.count(i)) missing.push_back(i);
      if (!missing.empty())
        m.warnings.push_back(fmt::format("{}: shard(s) {} of {} missing: these results are incomplete", kind, fmt::join(missing, ", "), count));
    }
  }
  for (const auto& [kind, n] : duplicates)
    if (n > 0) m.warnings.push_back(fmt::format("{}: {} duplicate record(s) (the same case in two files) were counted once", kind, n));
  return m;
}

}  // namespace attn
