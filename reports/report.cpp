#include "reports/report.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/result_file.hpp"
#include "reports/report_document.hpp"
#include "reports/report_sections.hpp"

namespace attn {

using namespace report_parts;

Report render_report(const MergedResults& m) {
  std::vector<std::string> bench_errors;
  const auto families = bench_families(m, bench_errors);
  std::vector<Section> sections;
  if (!m.incomplete_files.empty()) {  // first, in red: nothing below is a whole run's
    Section incomplete{"incomplete", "INCOMPLETE: a run did not finish", {}};
    for (const auto& path : m.incomplete_files)
      incomplete.blocks.emplace_back(Paragraph{fmt::format("`{}` is of a run that did not finish (\"complete\": false): the cases and "
                                                           "benchmarks it did not reach are missing, and this report is not a pass",
                                                           path),
                                               true});
    sections.push_back(std::move(incomplete));
  }
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