#include "reports/report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/problem.hpp"
#include "core/result_file.hpp"
#include "impls/capability_space.hpp"
#include "reports/scale_study.hpp"
#include "reports/svg_chart.hpp"

namespace attn {
namespace {

using nlohmann::json;

// --- a small document model, rendered to Markdown and to HTML ---------------------------------------

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::set<std::size_t> code_columns;  // shown as code (repro strings, commands)
  std::set<std::size_t> numeric_columns;
};
struct Paragraph {
  std::string text;
};
struct Details {  // a collapsible table (Markdown: <details>, which GitHub renders)
  std::string summary;
  Table table;
};
struct Chart {  // HTML only
  svg::Chart chart;
};
using Block = std::variant<Paragraph, Table, Details, Chart>;

struct Section {
  std::string id, title;
  std::vector<Block> blocks;
};

std::string md_cell(const std::string& text, bool code) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return code && !out.empty() ? "`" + out + "`" : out;
}

std::string md_table(const Table& t) {
  std::string out = "|";
  // Appended piece by piece: " " + std::string&& trips GCC 12's -Wrestrict at -O3 (a false
  // positive, and the release build's only warning).
  for (const auto& h : t.header) out.append(" ").append(md_cell(h, false)).append(" |");
  out += "\n|";
  for (std::size_t i = 0; i < t.header.size(); ++i) out += t.numeric_columns.count(i) ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (std::size_t i = 0; i < row.size(); ++i) out.append(" ").append(md_cell(row[i], t.code_columns.count(i) > 0)).append(" |");
    out += "\n";
  }
  return out;
}

std::string html_table(const Table& t) {
  std::string out = "<table>\n<thead><tr>";
  for (const auto& h : t.header) out += "<th>" + svg::escape(h) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::string cell = svg::escape(row[i]);
      out += t.numeric_columns.count(i) ? "<td class=\"num\">" : "<td>";
      out += t.code_columns.count(i) && !row[i].empty() ? "<code>" + cell + "</code>" : cell;
      out += "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

std::string render_markdown(const std::string& title, const std::vector<Section>& sections) {
  std::string out = "# " + title + "\n\n";
  for (const auto& s : sections) {
    out += "## " + s.title + "\n\n";
    for (const auto& b : s.blocks) {
      if (const auto* p = std::get_if<Paragraph>(&b)) out += p->text + "\n\n";
      if (const auto* t = std::get_if<Table>(&b)) out += t->rows.empty() ? "(none)\n\n" : md_table(*t) + "\n";
      if (const auto* d = std::get_if<Details>(&b))
        out += "<details><summary>" + svg::escape(d->summary) + "</summary>\n\n" + md_table(d->table) + "\n</details>\n\n";
    }
  }
  return out;
}

// Markdown's `code` spans and **bold** in paragraphs become <code> and <strong> in the HTML;
// everything else is escaped.
std::string html_paragraph(const std::string& text) {
  std::string out;
  bool code = false;
  std::string piece;
  auto flush = [&] {
    out += code ? "<code>" + svg::escape(piece) + "</code>" : svg::escape(piece);
    piece.clear();
  };
  bool strong = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '`') {
      flush();
      code = !code;
    } else if (!code && c == '*' && i + 1 < text.size() && text[i + 1] == '*') {  // **bold**
      flush();
      out += strong ? "</strong>" : "<strong>";
      strong = !strong;
      ++i;
    } else {
      piece += c;
    }
  }
  flush();
  if (strong) out += "</strong>";
  return "<p>" + out + "</p>\n";
}

constexpr const char* css = R"(body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}tbody tr:nth-child(even){background:#fafafa}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;background:#f4f4f4;padding:0 .2em;word-break:break-all}
.charts{display:flex;flex-wrap:wrap;gap:1em}svg.chart{border:1px solid #ddd;max-width:100%;height:auto}
nav ul{columns:2;font-size:.9em}.warn{color:#8a4b00}.fail{color:#b00020;font-weight:bold}details{margin:.5em 0}
)";

std::string render_html(const std::string& title, const std::vector<Section>& sections) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + svg::escape(title) + "</title>\n<style>\n" + css + "</style>\n</head>\n<body>\n<h1>" + svg::escape(title) + "</h1>\n";
  out += "<nav><ul>\n";
  for (const auto& s : sections) out += "<li><a href=\"#" + s.id + "\">" + svg::escape(s.title) + "</a></li>\n";
  out += "</ul></nav>\n";
  for (const auto& s : sections) {
    out += "<section id=\"" + s.id + "\">\n<h2>" + svg::escape(s.title) + "</h2>\n";
    bool in_charts = false;
    for (const auto& b : s.blocks) {
      const bool chart = std::holds_alternative<Chart>(b);
      if (chart && !in_charts) out += "<div class=\"charts\">\n";
      if (!chart && in_charts) out += "</div>\n";
      in_charts = chart;
      if (const auto* p = std::get_if<Paragraph>(&b)) out += html_paragraph(p->text);
      if (const auto* t = std::get_if<Table>(&b)) out += t->rows.empty() ? "<p>(none)</p>\n" : html_table(*t);
      if (const auto* d = std::get_if<Details>(&b))
        out += "<details><summary>" + svg::escape(d->summary) + "</summary>\n" + html_table(d->table) + "</details>\n";
      if (const auto* c = std::get_if<Chart>(&b)) out += svg::render(c->chart);
    }
    if (in_charts) out += "</div>\n";
    out += "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

// --- reading fields ------------------------------------------------------------------------------

// A number, or "inf"/"nan" strings (how verify writes non-finite figures); NaN otherwise.
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

std::string fmt_num(double x, int digits = 3) {
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
// A case's error over its tolerance (verify's budget_used): 100% is the pass line.
std::string fmt_budget(double used) {
  if (std::isnan(used)) return "-";
  if (std::isinf(used)) return ">>100%";
  return used >= 10 ? fmt::format("{:.0f}x", used) : fmt::format("{:.0f}%", 100 * used);
}
double ulps_value(const json& metrics) {
  if (!metrics.is_object() || !metrics.contains("max_ulps")) return NAN;
  const json& u = metrics["max_ulps"];
  if (u.is_number_unsigned() && u.get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max()) return INFINITY;
  return as_double(u);
}

// The mask of a verify record's problem, in words: "none", "top_left", "bottom_right + pad", "bool", ...
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

// --- bench runs ----------------------------------------------------------------------------------

struct FamilyPoint {
  std::int64_t n = 0;
  double time_ms = NAN, gflops_exact = NAN, workspace = NAN;
};
struct BenchFamily {
  std::string name, implementation;
  std::vector<FamilyPoint> points;  // ascending n
  const BenchFit* fit = nullptr;
};

// The families of the merged runs, each with its median run per n (records/bench_record.hpp).
std::vector<BenchFamily> bench_families(const MergedResults& m, std::vector<std::string>& errors) {
  for (const BenchRun& r : m.bench_runs)
    if (r.error) errors.push_back(fmt::format("{}: {}", r.name, *r.error));
  std::vector<BenchFamily> families;
  for (const BenchPoint& p : median_points(m.bench_runs)) {
    if (families.empty() || families.back().name != p.family) {
      const auto fit = std::find_if(m.bench_fits.begin(), m.bench_fits.end(), [&](const BenchFit& f) { return f.family == p.family; });
      families.push_back({p.family, p.family.substr(0, p.family.find('/')), {}, fit == m.bench_fits.end() ? nullptr : &*fit});
    }
    families.back().points.push_back({p.n, p.time_ms(), p.run->counter("gflops_exact"), p.run->counter("workspace_bytes")});
  }
  return families;
}

std::string n_label(std::int64_t n) { return std::to_string(n); }

// --- sections ------------------------------------------------------------------------------------

Section context_section(const MergedResults& m) {
  Section s{"context", "Where it was measured", {}};
  Table inputs{{"file", "kind", "shard", "git revision", "date"}, {}, {0}, {}};
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const json& c = m.contexts[i];
    inputs.rows.push_back({m.files[i], m.file_kinds.size() > i ? m.file_kinds[i] : "", m.file_shards.size() > i ? m.file_shards[i] : "",
                           text(c, "git_revision"), text(c, "date")});
  }
  s.blocks.emplace_back(std::move(inputs));
  // Each context field with its distinct values over the files.
  const std::vector<std::pair<std::string, std::string>> keys{
      {"git_revision", "git revision"}, {"build_type", "build type"}, {"compiler", "compiler"}, {"compiler_flags", "compiler flags"},
      {"cpu_model", "CPU model"},       {"cpu_cores", "CPU cores"},   {"cpu_mhz", "CPU clock (MHz, at start)"}, {"threads", "threads"},
      {"date", "date (UTC)"}};
  Table ctx{{"field", "value"}, {}, {}, {}};
  for (const auto& [key, label] : keys) {
    std::vector<std::string> values;
    for (const auto& c : m.contexts) {
      const std::string v = text(c, key.c_str());
      if (!v.empty() && std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    if (!values.empty()) ctx.rows.push_back({label, fmt::format("{}", fmt::join(values, "; "))});
  }
  std::vector<std::string> gpus;
  for (const auto& c : m.contexts) {
    if (!c.is_object() || !c.contains("gpu") || !c["gpu"].is_object()) continue;
    const json& g = c["gpu"];
    std::string v = g.value("available", false)
                        ? fmt::format("{} (sm {}, {} SMs, max SM clock {} MHz, memory clock {} MHz; NVIDIA driver {}; CUDA driver {}, runtime {})",
                                      text(g, "name"), text(g, "compute_capability"), text(g, "sm_count"), text(g, "max_sm_clock_mhz"),
                                      text(g, "memory_clock_mhz"), text(g, "nvidia_driver"), text(g, "cuda_driver_version"),
                                      text(g, "cuda_runtime_version"))
                        : "no device: " + text(g, "reason");
    if (std::find(gpus.begin(), gpus.end(), v) == gpus.end()) gpus.push_back(v);
  }
  if (gpus.empty())
    for (const auto& c : m.contexts)
      if (!text(c, "gpu_name").empty()) gpus.push_back(text(c, "gpu_name"));  // Google Benchmark context of a GPU run
  ctx.rows.push_back({"GPU", gpus.empty() ? "not recorded" : fmt::format("{}", fmt::join(gpus, "; "))});
  s.blocks.emplace_back(std::move(ctx));
  for (const auto& w : m.warnings) s.blocks.emplace_back(Paragraph{"Warning: " + w});
  return s;
}

Section verdict_section(const MergedResults& m) {
  Section s{"verdicts", "Verdicts per implementation × dtype × mask", {}};
  if (!m.has("verify")) {
    s.blocks.emplace_back(Paragraph{"No verify results among the inputs."});
    return s;
  }
  struct Cell {
    int pass = 0, fail = 0, skip = 0;
    double worst_ulps = -1, worst_budget = -1;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Cell> cells;
  int pass = 0, fail = 0, skip = 0;
  for (const auto& r : m.verify_records) {
    const json problem = r.contains("problem") ? r["problem"] : json::object();
    Cell& c = cells[{text(r, "implementation"), text(problem, "dtype"), mask_name(problem)}];
    const std::string status = text(r, "status");
    if (status == "pass") ++c.pass, ++pass;
    else if (status == "fail") ++c.fail, ++fail;
    else ++c.skip, ++skip;
    if (status == "pass" || status == "fail") {
      const double u = r.contains("metrics") ? ulps_value(r["metrics"]) : NAN;
      const double budget = field(r, "budget_used");
      if (!(u <= c.worst_ulps)) c.worst_ulps = std::isnan(u) ? INFINITY : u;
      if (!(budget <= c.worst_budget)) c.worst_budget = std::isnan(budget) ? INFINITY : budget;
    }
  }
  std::string rule;
  if (m.pass_rule.is_object())
    rule = fmt::format(" Pass rule: max abs error ≤ {} × the naive algorithm's error in the same precision + {} ulps.", text(m.pass_rule, "k"),
                       text(m.pass_rule, "floor_ulps"));
  s.blocks.emplace_back(Paragraph{fmt::format("**{} passed, {} failed, {} skipped** over {} records.{}", pass, fail, skip,
                                              m.verify_records.size(), rule)});
  Table t{{"implementation", "dtype", "mask", "verdict", "pass", "fail", "skip", "worst ulps", "worst budget used"}, {}, {}, {4, 5, 6, 7, 8}};
  for (const auto& [key, c] : cells) {
    const auto& [impl, dtype, mask] = key;
    const std::string verdict = c.fail > 0 ? "FAIL" : c.pass > 0 ? "pass" : "skipped";
    t.rows.push_back({impl, dtype, mask, verdict, std::to_string(c.pass), std::to_string(c.fail), std::to_string(c.skip),
                      c.worst_ulps < 0 ? "-" : fmt_num(c.worst_ulps, 7), c.worst_budget < 0 ? "-" : fmt_budget(c.worst_budget)});
  }
  s.blocks.emplace_back(std::move(t));
  return s;
}

// What the verify records exercised, per implementation: cases run and projected, rows compared
// by sampling, and the features of the problems that ran (impls/capability_space.hpp).
Section coverage_section(const MergedResults& m) {
  Section s{"coverage", "Coverage per implementation", {}};
  struct Count {
    int ran = 0, projected = 0, skipped = 0, sampled = 0;
    std::map<std::string, int> features;
  };
  std::map<std::string, Count> counts;
  std::set<std::string> every_feature;
  for (const auto& r : m.verify_records) {
    Count& c = counts[text(r, "implementation")];
    if (text(r, "status") == "skip") {
      ++c.skipped;
      continue;
    }
    ++c.ran;
    if (r.contains("projected_from")) ++c.projected;
    if (r.contains("reference") && r["reference"].value("sampled", false)) ++c.sampled;
    try {
      for (const std::string& f : features_of(parse_problem(text(r, "repro")))) ++c.features[f], every_feature.insert(f);
    } catch (const std::exception&) {
      // An older file's repro string this build cannot read: its features are not counted.
    }
  }
  s.blocks.emplace_back(Paragraph{
      "A case an implementation does not support runs as its projection onto what it declares (impls/README.md). Sampled: cases whose "
      "rows were compared on a sample only (an explicit option for huge problems). Not exercised: features some other implementation's "
      "cases exercised in these results."});
  Table t{{"implementation", "ran", "projected", "skipped", "sampled", "exercised (cases)", "not exercised"}, {}, {}, {1, 2, 3, 4}};
  for (const auto& [impl, c] : counts) {
    std::vector<std::string> exercised, missing;
    for (const auto& [f, n] : c.features) exercised.push_back(fmt::format("{} ({})", f, n));
    for (const auto& f : every_feature)
      if (!c.features.count(f)) missing.push_back(f);
    t.rows.push_back({impl, std::to_string(c.ran), std::to_string(c.projected), std::to_string(c.skipped), std::to_string(c.sampled),
                      fmt::format("{}", fmt::join(exercised, ", ")), fmt::format("{}", fmt::join(missing, ", "))});
  }
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section worst_section(const MergedResults& m, std::size_t limit) {
  Section s{"worst", "Worst errors (with repro strings)", {}};
  std::vector<const json*> measured;
  for (const auto& r : m.verify_records)
    if (text(r, "status") == "pass" || text(r, "status") == "fail") measured.push_back(&r);
  auto key = [](const json* r) {
    const double budget = field(*r, "budget_used");
    return std::make_tuple(text(*r, "status") == "fail", std::isnan(budget) ? INFINITY : budget, r->contains("metrics") ? ulps_value((*r)["metrics"]) : 0.0);
  };
  std::stable_sort(measured.begin(), measured.end(), [&](const json* a, const json* b) { return key(a) > key(b); });
  if (measured.size() > limit) measured.resize(limit);
  s.blocks.emplace_back(Paragraph{fmt::format(
      "The {} records with the largest share of their error budget used (max abs error over the tolerance; 100% is the pass line), failures first. Rerun one with "
      "`attnbench verify --impl IMPL --case 'REPRO'`.",
      measured.size())});
  Table t{{"implementation", "case", "problem", "max abs", "max ulps", "budget used", "verdict", "repro", "diagnosis"}, {}, {7}, {1, 3, 4, 5}};
  std::vector<std::string> reasons;
  for (const json* r : measured) {
    const json metrics = r->contains("metrics") ? (*r)["metrics"] : json::object();
    // Written by verify for a diagnosed failure (reports/README.md); older files have none.
    const std::string diagnosis = r->contains("diagnosis") && (*r)["diagnosis"].is_object() ? text((*r)["diagnosis"], "summary") : "";
    t.rows.push_back({text(*r, "implementation"), text(*r, "case_index"), text(*r, "label"), fmt_num(field(metrics, "max_abs")), fmt_ulps(metrics),
                      fmt_budget(field(*r, "budget_used")), text(*r, "status") == "fail" ? "FAIL" : "pass", text(*r, "repro"),
                      diagnosis});
    if (text(*r, "status") == "fail" && r->contains("reasons") && (*r)["reasons"].is_array())
      for (const auto& why : (*r)["reasons"])
        reasons.push_back(fmt::format("{} case {}: {}", text(*r, "implementation"), text(*r, "case_index"), why.is_string() ? why.get<std::string>() : why.dump()));
    if (!diagnosis.empty()) reasons.push_back(fmt::format("{} case {}: diagnosis: {}", text(*r, "implementation"), text(*r, "case_index"), diagnosis));
  }
  s.blocks.emplace_back(std::move(t));
  for (const auto& why : reasons) s.blocks.emplace_back(Paragraph{"FAIL " + why});
  return s;
}

Section property_section(const MergedResults& m) {
  Section s{"properties", "Properties (RapidCheck)", {}};
  Table t{{"#", "property", "implementation", "verdict", "cases", "seed", "message / counterexample"}, {}, {}, {0, 4}};
  int held = 0, failed = 0, findings = 0, gave_up = 0, other = 0;
  for (const auto& r : m.property_records) {
    const std::string verdict = text(r, "verdict");
    if (verdict == "held") ++held;
    else if (verdict == "failed") ++failed;
    else if (verdict == "finding") ++findings;
    else if (verdict == "gave_up") ++gave_up;
    else ++other;
    std::string message = text(r, "message");
    if (!text(r, "repro").empty()) message += (message.empty() ? "" : "; repro: ") + text(r, "repro");
    t.rows.push_back({text(r, "property"), text(r, "name"), text(r, "implementation"), verdict, text(r, "cases"), text(r, "seed"), message});
  }
  // A finding is shown but fails nothing; gave up is neither a pass nor a failure.
  s.blocks.emplace_back(Paragraph{fmt::format("{} held, {} failed, {} finding(s), {} gave up, {} not applicable.", held, failed, findings,
                                              gave_up, other)});
  s.blocks.emplace_back(std::move(t));
  return s;
}

std::vector<std::int64_t> all_sizes(const std::vector<BenchFamily>& families) {
  std::set<std::int64_t> sizes;
  for (const auto& f : families)
    for (const auto& p : f.points) sizes.insert(p.n);
  return {sizes.begin(), sizes.end()};
}

std::string fit_slope(const BenchFit* fit) {
  if (fit == nullptr || !fit->exponent) return "no fit";
  return fmt::format("slope {:.2f}", *fit->exponent);
}

Section bench_section(const MergedResults& m, const std::vector<BenchFamily>& families, const std::vector<std::string>& errors) {
  Section s{"throughput", "Throughput", {}};
  if (families.empty()) {
    s.blocks.emplace_back(Paragraph{"No bench results among the inputs."});
    return s;
  }
  std::vector<std::string> peaks;
  for (const auto& p : m.bench_peaks)
    peaks.push_back(fmt::format("fp32 FMA {:.1f}, Eigen SGEMM {:.1f}, roofline {:.1f} GFLOP/s ({})", p.cpu.fma_gflops, p.cpu.sgemm_gflops,
                                p.cpu.roofline_gflops, p.file));
  s.blocks.emplace_back(Paragraph{fmt::format(
      "Median run per size. GFLOP/s count the visible (query, key) pairs exactly: 2·b·h·P·(d_k + d_v). Measured peaks: {}.",
      peaks.empty() ? "not recorded" : fmt::format("{}", fmt::join(peaks, "; ")))});
  const auto sizes = all_sizes(families);
  Table gflops{{"family"}, {}, {}, {}}, times{{"family"}, {}, {}, {}};
  for (std::int64_t n : sizes) {
    gflops.numeric_columns.insert(gflops.header.size());
    times.numeric_columns.insert(times.header.size());
    gflops.header.push_back("n=" + n_label(n));
    times.header.push_back("n=" + n_label(n));
  }
  for (const auto& f : families) {
    std::vector<std::string> g{f.name}, t{f.name};
    for (std::int64_t n : sizes) {
      const auto it = std::find_if(f.points.begin(), f.points.end(), [&](const FamilyPoint& p) { return p.n == n; });
      g.push_back(it == f.points.end() ? "" : fmt_num(it->gflops_exact));
      t.push_back(it == f.points.end() ? "" : fmt_num(it->time_ms));
    }
    gflops.rows.push_back(std::move(g));
    times.rows.push_back(std::move(t));
  }
  s.blocks.emplace_back(Paragraph{"GFLOP/s (exact FLOP count):"});
  s.blocks.emplace_back(std::move(gflops));
  s.blocks.emplace_back(Details{"time per run (ms)", std::move(times)});
  for (const auto& e : errors) s.blocks.emplace_back(Paragraph{"Benchmark error: " + e});
  return s;
}

Section fit_section(const std::vector<BenchFamily>& families) {
  Section s{"scaling", "Fitted exponents (time = c·n^p)", {}};
  Table t{{"family", "exponent p", "R²", "n used", "workspace at n=16384 (MiB)"}, {}, {}, {1, 2, 4}};
  for (const auto& f : families) {
    std::string used = "-";
    const std::vector<std::int64_t> ns = f.fit ? f.fit->sizes_used() : std::vector<std::int64_t>{};
    if (!ns.empty()) used = fmt::format("{}..{}", ns.front(), ns.back());
    auto number = [](const std::optional<double>& x) { return x ? *x : NAN; };
    t.rows.push_back({f.name, fmt_fixed(f.fit ? number(f.fit->exponent) : NAN, 3), fmt_fixed(f.fit ? number(f.fit->r_squared) : NAN, 4), used,
                      fmt_fixed(f.fit ? static_cast<double>(f.fit->workspace_bytes_at_16384) / (1024.0 * 1024.0) : NAN, 1)});
  }
  s.blocks.emplace_back(Paragraph{"Least squares of log time on log n; attention is O(n²), so p near 2 at large n is expected, and "
                                  "p well below 2 means the sizes are too small to leave the overheads behind."});
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section peers_section(const MergedResults& m) {
  Section s{"peers", "Peers side by side (medians, same run)", {}};
  Table t{{"dtype", "d", "mask", "n", "ours (ms)", "peers (ms)", "target"}, {}, {}, {1, 3}};
  for (const auto& c : m.peer_comparisons) {
    std::vector<std::string> ours, peers;
    if (c.contains("ours") && c["ours"].is_array())
      for (const auto& o : c["ours"])
        ours.push_back(fmt::format("{} {} (peer/ours {})", text(o, "implementation"), fmt_num(field(o, "time_ms")), fmt_fixed(field(o, "ratio"), 2)));
    if (c.contains("peers") && c["peers"].is_array())
      for (const auto& p : c["peers"])
        peers.push_back(fmt::format("{} {}", text(p, "peer"), p.contains("median_ms") ? fmt_num(field(p, "median_ms")) : "error"));
    const json target = c.contains("target") ? c["target"] : json();
    t.rows.push_back({text(c, "dtype"), text(c, "head_dim"), text(c, "mask"), text(c, "n"), fmt::format("{}", fmt::join(ours, "; ")),
                      fmt::format("{}", fmt::join(peers, "; ")), target.is_object() ? text(target, "peer") : "none valid"});
  }
  for (const auto& r : m.peer_results) {
    const json problem = r.contains("problem") ? r["problem"] : json::object();
    t.rows.push_back({text(problem, "dtype"), text(problem, "d_k"), text(problem, "causal"), text(problem, "n_q"), "",
                      fmt::format("{} {}", text(r, "peer"), r.contains("median_ms") ? fmt_num(field(r, "median_ms")) : text(r, "error")), ""});
  }
  s.blocks.emplace_back(Paragraph{"ratio = peer time / ours: at least 1.0 means ours is faster."});
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section scale_section(const MergedResults& m) {
  Section s{"scale", "Why the scale is 1/√d_k", {}};
  const ScaleStudy study = scale_study();
  s.blocks.emplace_back(Paragraph{fmt::format(
      "Computed now by attnbench's own code: Q and K with unit-variance entries drawn by core's seeded generation (diffuse regime, "
      "seed {}), n_q = {} queries against n_k = {} keys, scores q·k in float, softmax per row. A raw score is a sum of d_k products "
      "of unit variance, so its variance is d_k: the softmax saturates onto one key (entropy near 0, largest weight near 1) and its "
      "gradient vanishes. Dividing by √d_k keeps the variance at 1 for every d_k, and the weights stay spread (uniform weights "
      "have entropy ln n_k = {:.3f} nats).",
      study.seed, study.n_q, study.n_k, study.uniform_entropy)});
  Table t{{"d_k", "var(raw)", "var(scaled)", "entropy raw (nats)", "entropy scaled (nats)", "largest weight raw", "largest weight scaled"},
          {}, {}, {0, 1, 2, 3, 4, 5, 6}};
  for (const auto& r : study.rows)
    t.rows.push_back({std::to_string(r.d_k), fmt_fixed(r.raw_variance, 2), fmt_fixed(r.scaled_variance, 3), fmt_fixed(r.raw_entropy, 3),
                      fmt_fixed(r.scaled_entropy, 3), fmt_fixed(r.raw_max_weight, 3), fmt_fixed(r.scaled_max_weight, 3)});
  s.blocks.emplace_back(std::move(t));

  // The regime of each accuracy case, in the same terms, from the case's own inputs.
  std::map<std::string, const json*> cases;  // by repro, first record of each
  std::vector<std::string> order;
  for (const auto& r : m.verify_records) {
    const std::string repro = text(r, "repro");
    if (repro.empty() || cases.count(repro)) continue;
    cases[repro] = &r;
    order.push_back(repro);
  }
  if (order.empty()) return s;
  Table regimes{{"case", "regime", "dtype", "problem", "score std", "max |score|", "entropy / ln(visible)", "largest weight"}, {}, {}, {0, 4, 5, 6, 7}};
  std::map<std::string, std::vector<CaseRegime>> by_regime;
  for (const auto& repro : order) {
    const json& r = *cases[repro];
    try {
      const Problem p = parse_problem(repro);
      const CaseRegime c = case_regime(p);
      by_regime[c.regime].push_back(c);
      regimes.rows.push_back({text(r, "case_index"), c.regime, std::string(to_string(p.dtype)), text(r, "label"), fmt_num(c.score_std),
                              fmt_num(c.max_abs_score), c.rows > 0 ? fmt_fixed(c.entropy_fraction, 3) : "-", c.rows > 0 ? fmt_fixed(c.max_weight, 3) : "-"});
    } catch (const std::exception& e) {
      regimes.rows.push_back({text(r, "case_index"), "?", "", repro, e.what(), "", "", ""});
    }
  }
  Table summary{{"regime", "cases", "median score std", "mean entropy / ln(visible)", "mean largest weight"}, {}, {}, {1, 2, 3, 4}};
  for (auto& [regime, list] : by_regime) {
    std::vector<double> stds;
    double e = 0, w = 0;
    int rows = 0;
    for (const auto& c : list) {
      stds.push_back(c.score_std);
      if (c.rows > 0) e += c.entropy_fraction, w += c.max_weight, ++rows;
    }
    std::sort(stds.begin(), stds.end());
    summary.rows.push_back({regime, std::to_string(list.size()), fmt_num(stds[stds.size() / 2]), rows ? fmt_fixed(e / rows, 3) : "-",
                            rows ? fmt_fixed(w / rows, 3) : "-"});
  }
  s.blocks.emplace_back(Paragraph{"The accuracy cases, measured in these terms on their own inputs (scaled scores, with each case's mask, "
                                  "bias and scale; up to 16 rows per case): diffuse cases sit at score std 1 like the scaled column above, "
                                  "peaked ones at 8 like unscaled d_k = 64, saturated ones put nearly all weight on one key."});
  s.blocks.emplace_back(std::move(summary));
  s.blocks.emplace_back(Details{fmt::format("the regime of each of the {} accuracy cases", order.size()), std::move(regimes)});
  return s;
}

// --- charts --------------------------------------------------------------------------------------

Section chart_section(const MergedResults& m, const std::vector<BenchFamily>& families) {
  Section s{"charts", "Charts", {}};
  // Time vs n per implementation, log-log, fitted slope in the legend.
  std::vector<std::string> impls;
  for (const auto& f : families)
    if (std::find(impls.begin(), impls.end(), f.implementation) == impls.end()) impls.push_back(f.implementation);
  for (const auto& impl : impls) {
    svg::Chart c{impl + ": time vs n", "n (= n_q = n_k)", "time per run (ms)", true, true, 2, 0, "legend: family, fitted slope p", {}, {}};
    for (const auto& f : families) {
      if (f.implementation != impl) continue;
      svg::Series series{f.name.substr(impl.size() + 1) + ": " + fit_slope(f.fit), {}, true};
      for (const auto& p : f.points) series.points.emplace_back(double(p.n), p.time_ms);
      c.series.push_back(std::move(series));
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // Throughput vs n under the measured peak.
  if (!families.empty()) {
    svg::Chart c{"Throughput vs n under the measured peak", "n (= n_q = n_k)", "GFLOP/s (exact count)", true, false, 2, 0, "", {}, {}};
    for (const auto& f : families) {
      svg::Series series{f.name, {}, true};
      for (const auto& p : f.points) series.points.emplace_back(double(p.n), p.gflops_exact);
      c.series.push_back(std::move(series));
    }
    std::set<std::string> drawn;
    for (const auto& p : m.bench_peaks) {
      const double roof = p.cpu.roofline_gflops;
      const std::string label = fmt::format("measured CPU peak (roofline) {:.1f} GFLOP/s", roof);
      if (std::isfinite(roof) && drawn.insert(label).second) c.lines.push_back({roof, label});
      for (const auto& [precision, gflops] : p.gpu_gemm) {
        const std::string gl = fmt::format("cuBLAS GEMM {} {:.0f} GFLOP/s", precision, gflops);
        if (drawn.insert(gl).second) c.lines.push_back({gflops, gl});
      }
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // Max error in ulps vs n per dtype (verify), with the naive yardstick.
  std::map<std::string, std::map<std::string, svg::Series>> by_dtype;
  for (const auto& r : m.verify_records) {
    const std::string status = text(r, "status");
    if (status != "pass" && status != "fail") continue;
    const json problem = r.contains("problem") ? r["problem"] : json::object();
    const double n = field(problem, "n_k"), u = r.contains("metrics") ? ulps_value(r["metrics"]) : NAN;
    auto& series = by_dtype[text(problem, "dtype")];
    auto& mine = series[text(r, "implementation")];
    mine.name = text(r, "implementation");
    mine.joined = false;
    if (std::isfinite(u)) mine.points.emplace_back(n, u);
    if (r.contains("baseline") && r["baseline"].is_object() && r["baseline"].contains("metrics")) {
      auto& naive = series["~naive yardstick"];
      naive.name = "naive in the same precision (yardstick)";
      naive.joined = false;
      const double b = ulps_value(r["baseline"]["metrics"]);
      if (std::isfinite(b)) naive.points.emplace_back(n, b);
    }
  }
  for (auto& [dtype, series] : by_dtype) {
    svg::Chart c{"Max error vs n, " + dtype, "n_k", "max error (ulps of " + dtype + ")", true, true, 2, 0.5, "", {}, {}};
    for (auto& [name, sr] : series) c.series.push_back(std::move(sr));
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // Workspace vs n.
  if (!families.empty()) {
    svg::Chart c{"Workspace vs n", "n (= n_q = n_k)", "workspace (bytes)", true, true, 2, 1, "", {}, {}};
    for (const auto& f : families) {
      svg::Series series{f.name, {}, true};
      for (const auto& p : f.points)
        if (std::isfinite(p.workspace)) series.points.emplace_back(double(p.n), p.workspace);
      c.series.push_back(std::move(series));
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  if (s.blocks.empty()) s.blocks.emplace_back(Paragraph{"No bench or verify results to chart."});
  return s;
}

}  // namespace

Report render_report(const MergedResults& m) {
  std::vector<std::string> bench_errors;
  const auto families = bench_families(m, bench_errors);
  std::vector<Section> sections;
  sections.push_back(context_section(m));
  sections.push_back(verdict_section(m));
  if (m.has("verify")) sections.push_back(coverage_section(m));
  if (m.has("verify")) sections.push_back(worst_section(m, 10));
  if (m.has("properties")) sections.push_back(property_section(m));
  sections.push_back(bench_section(m, families, bench_errors));
  if (!families.empty()) sections.push_back(fit_section(families));
  if (!m.peer_comparisons.empty() || !m.peer_results.empty()) sections.push_back(peers_section(m));
  sections.push_back(scale_section(m));
  Report report;
  const std::string title = "attnbench report";
  report.markdown = render_markdown(title, sections);  // charts are HTML only
  sections.push_back(chart_section(m, families));
  // The charts come right after the tables they draw (before the √d_k section) in the HTML.
  std::rotate(sections.end() - 2, sections.end() - 1, sections.end());
  report.html = render_html(title, sections);
  return report;
}

std::pair<std::string, std::string> write_report(const Report& report, const std::string& dir) {
  const std::filesystem::path d(dir);
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) throw InputError(fmt::format("--out {}: cannot create the directory: {}", dir, ec.message()));
  auto write = [](const std::filesystem::path& path, const std::string& content) {
    write_result_file(path, content, "--out");
    return path.string();
  };
  return {write(d / "report.md", report.markdown), write(d / "report.html", report.html)};
}

}  // namespace attn
