#include "benchmarks/peer_table.hpp"

#include <optional>
#include <algorithm>

#include <fmt/format.h>

namespace attn::bench {
namespace {

using json = nlohmann::json;

std::string validity_json_name(std::optional<bool> v) { return v ? (*v ? "valid" : "invalid") : "unchecked"; }

struct Column {  // a cell per row, with a header
  std::string header;
  bool left = false;
  std::vector<std::string> cells;
};

void print_columns(const std::vector<Column>& columns) {
  std::vector<std::size_t> widths;
  std::size_t rows = 0;
  for (const auto& c : columns) {
    std::size_t w = c.header.size();
    for (const auto& cell : c.cells) w = std::max(w, cell.size());
    widths.push_back(w);
    rows = std::max(rows, c.cells.size());
  }
  auto line = [&](auto&& text_of) {
    std::string out;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const std::string text = text_of(columns[i]);
      out += (i ? "  " : "") + (columns[i].left ? fmt::format("{:<{}}", text, widths[i]) : fmt::format("{:>{}}", text, widths[i]));
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    fmt::print("{}\n", out);
  };
  line([](const Column& c) { return c.header; });
  for (std::size_t r = 0; r < rows; ++r) line([r](const Column& c) { return r < c.cells.size() ? c.cells[r] : std::string(); });
}

// Milliseconds: three decimals from 1 ms, four below it, scientific below 1 µs (made-up times).
std::string ms_cell(double ms) {
  if (ms >= 1) return fmt::format("{:.3f}", ms);
  return ms >= 1e-3 ? fmt::format("{:.4f}", ms) : fmt::format("{:.2e}", ms);
}

}  // namespace

void print_comparison(const std::vector<OurTime>& ours, const PeerRecords& records,
                      const std::vector<std::string>& peer_order, const std::set<std::string>& invalid,
                      const std::vector<std::string>& skipped_records, PeersOutcome& outcome) {
  json& section = outcome.section;
  // Our rows: one per (dtype, d, mask, n), groups in the order they ran, implementations as columns.
  std::vector<std::string> impls, masks;
  std::vector<std::tuple<std::string, std::int64_t, std::string>> groups;  // (dtype, d, mask)
  for (const auto& o : ours) {
    if (std::find(impls.begin(), impls.end(), o.implementation) == impls.end()) impls.push_back(o.implementation);
    if (std::find(masks.begin(), masks.end(), o.mask) == masks.end()) masks.push_back(o.mask);
    const auto group = std::make_tuple(o.dtype, o.head_dim, o.mask);
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
  }
  struct Row {
    std::string dtype;
    std::int64_t head_dim = 0;
    std::string mask;
    std::optional<std::string> peer_mask;
    std::int64_t n = 0;
    std::map<std::string, double> ours_ms;
  };
  std::map<std::pair<std::size_t, std::int64_t>, Row> rows;
  for (const auto& o : ours) {
    const auto group = std::make_tuple(o.dtype, o.head_dim, o.mask);
    const std::size_t group_index = static_cast<std::size_t>(std::find(groups.begin(), groups.end(), group) - groups.begin());
    Row& row = rows[{group_index, o.n}];
    row.dtype = o.dtype;
    row.head_dim = o.head_dim;
    row.mask = o.mask;
    row.peer_mask = o.peer_mask;
    row.n = o.n;
    row.ours_ms.try_emplace(o.implementation, o.time_ms);
  }

  std::vector<Column> columns{{"dtype", true, {}}, {"d", false, {}}, {"mask", true, {}}, {"n", false, {}}};
  for (const auto& impl : impls) columns.push_back({impl + " ms", false, {}});
  for (const auto& peer : peer_order) columns.push_back({peer + " ms", false, {}});
  columns.push_back({"faster valid peer", true, {}});
  for (const auto& impl : impls) columns.push_back({"peer/" + impl, false, {}});

  json comparisons = json::array();
  std::vector<std::string> errors;
  bool any_unchecked_target = false, any_row_without_target = false;
  for (const auto& [key, row] : rows) {
    const std::string peer_mask = row.peer_mask.value_or("");  // "": no peer record matches
    std::size_t c = 0;
    columns[c++].cells.push_back(row.dtype);
    columns[c++].cells.push_back(std::to_string(row.head_dim));
    columns[c++].cells.push_back(row.mask);
    columns[c++].cells.push_back(std::to_string(row.n));
    for (const auto& impl : impls) {
      const auto it = row.ours_ms.find(impl);
      columns[c++].cells.push_back(it == row.ours_ms.end() ? "-" : ms_cell(it->second));
    }
    json peers_json = json::array();
    const PeerRecord* target = nullptr;
    std::string target_name;
    for (const auto& peer : peer_order) {
      const auto it = records.find({peer, row.dtype, row.head_dim, peer_mask, row.n});
      if (it == records.end()) {
        columns[c++].cells.push_back("-");
        continue;
      }
      const PeerRecord& rec = it->second;
      json pj{{"peer", peer}, {"peer_version", rec.version}, {"valid_target", rec.valid ? json(*rec.valid) : json(nullptr)}};
      if (rec.median_ms) {
        pj["median_ms"] = *rec.median_ms;
        columns[c++].cells.push_back(ms_cell(*rec.median_ms) + (rec.valid == false ? " (invalid)" : !rec.valid ? " (unchecked)" : ""));
        if (rec.valid != false && (target == nullptr || *rec.median_ms < *target->median_ms)) {
          target = &rec;
          target_name = peer;
        }
      } else {
        pj["error"] = rec.error;
        columns[c++].cells.push_back("error");
        errors.push_back(fmt::format("{} {} d{} {} n={}: {}", peer, row.dtype, row.head_dim, peer_mask, row.n, rec.error));
      }
      peers_json.push_back(std::move(pj));
    }
    if (target) {
      any_unchecked_target |= !target->valid.has_value();
      columns[c++].cells.push_back(target_name + (target->valid ? "" : " (unchecked)"));
    } else {
      any_row_without_target = true;
      columns[c++].cells.push_back("none valid");
    }
    json ours_json = json::array();
    for (const auto& impl : impls) {
      const auto it = row.ours_ms.find(impl);
      std::optional<double> ratio;
      if (it != row.ours_ms.end() && target && it->second > 0) ratio = *target->median_ms / it->second;
      columns[c++].cells.push_back(ratio ? fmt::format("{:.2f}", *ratio) : "-");
      if (it != row.ours_ms.end())
        ours_json.push_back({{"implementation", impl}, {"time_ms", it->second}, {"ratio", ratio ? json(*ratio) : json(nullptr)}});
    }
    json target_json = nullptr;
    if (target)
      target_json = {{"peer", target_name},
                     {"median_ms", *target->median_ms},
                     {"valid_target", target->valid ? json(*target->valid) : json(nullptr)},
                     {"checked", validity_json_name(target->valid)}};
    comparisons.push_back({{"dtype", row.dtype},
                           {"head_dim", row.head_dim},
                           {"mask", row.mask},
                           {"peer_mask", peer_mask},
                           {"n", row.n},
                           {"ours", std::move(ours_json)},
                           {"peers", std::move(peers_json)},
                           {"target", std::move(target_json)}});
  }

  fmt::print("\nSide by side with the peers (medians, same run)\n"
             "Times in ms. peer/IMPL = the faster valid peer's time / IMPL's time: >= 1.0 means ours is faster.\n"
             "A peer marked (invalid) failed its correctness checks and is never the target; (unchecked): its checks were\n"
             "skipped (valid_target null), so it may be the target, unverified.{}\n\n",
             std::find(masks.begin(), masks.end(), "causal_bottom_right") == masks.end()
                 ? ""
                 : "\nOur causal_bottom_right rows are compared with the peers' top-left causal (the same mask at n_q = n_k).");
  if (rows.empty()) {
    fmt::print("  (none of our implementations has a time to compare: every run failed or was filtered out)\n");
  } else {
    print_columns(columns);
  }
  if (any_unchecked_target) fmt::print("\n  note: some targets are unchecked: the peers ran with their correctness checks skipped\n");
  if (any_row_without_target && !rows.empty()) fmt::print("  note: rows with 'none valid' have no valid peer time: no ratio\n");
  if (!errors.empty()) {
    fmt::print("\n  peer errors ({}):\n", errors.size());
    for (const auto& e : errors) fmt::print("    {}\n", e);
  }
  if (!skipped_records.empty()) {
    fmt::print("\n  peer records left out ({}):\n", skipped_records.size());
    for (const auto& s : skipped_records) fmt::print("    {}\n", s);
  }
  if (!invalid.empty())
    fmt::print("\n  *** {} FAILED the peers' own correctness checks (valid_target false): shown, marked (invalid), never the\n"
               "  *** target. Not a failure of ours: the bench's exit code is unaffected. See the checks printed above.\n",
               fmt::join(invalid, ", "));

  section["comparisons"] = std::move(comparisons);
}

}  // namespace attn::bench
