#pragma once
// `attnbench report`: merged results (results.hpp) as a Markdown summary fit for a CI job
// summary and one self-contained HTML file (inline CSS and SVG, no script, no network).
// Sections: context and inputs; verdicts per implementation x dtype x mask; the worst errors with
// their repro strings; the property summary; throughput per family and n with the measured
// peaks; the fitted exponents; the peers side by side; why the scale is 1/sqrt(d_k) (computed
// here, scale_study.hpp) and the regime each accuracy case was measured in. The HTML adds
// charts: time vs n (log-log, per implementation, fitted slope in the legend), throughput vs n
// under the measured peak, max error in ulps vs n per dtype, workspace vs n.
#include <string>

#include "reports/results.hpp"

namespace attn {

struct Report {
  std::string markdown;
  std::string html;
};

Report render_report(const MergedResults& results);

// Writes DIR/report.md and DIR/report.html (creating DIR); throws InputError naming the path
// that could not be written. Returns the two paths.
std::pair<std::string, std::string> write_report(const Report& report, const std::string& dir);

}  // namespace attn
