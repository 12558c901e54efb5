#include "cli/report_command.hpp"

#include <fmt/format.h>

#include "reports/report.hpp"
#include "reports/results.hpp"

namespace attn::cli {

ReportCommand::ReportCommand(CLI::App& app)
    : command_(app.add_subcommand("report", "Merge result files (verify, bench, properties, peers; shards too) into DIR/report.md "
                                            "(for a CI job summary) and DIR/report.html (self-contained, SVG charts)")) {
  command_->add_option("results", result_paths_, "Result files written by verify, bench, properties (--json) or a peers script")
      ->required();
  command_->add_option("--out", out_dir_, "Directory for report.md and report.html")->capture_default_str();
  command_->add_flag("--allow-mixed-revisions", allow_mixed_revisions_,
                     "Merge results measured at different git revisions (refused by default), with a warning in the report");
}

int ReportCommand::run() const {
  std::vector<ResultFile> files;
  for (const auto& path : result_paths_) files.push_back(load_result_file(path));
  const MergedResults merged = merge_results(files, {allow_mixed_revisions_});
  for (const auto& warning : merged.warnings) fmt::print(stderr, "attnbench report: warning: {}\n", warning);
  const auto [markdown, html] = write_report(render_report(merged), out_dir_);
  fmt::print("report (Markdown): {}\nreport (HTML):     {}\n", markdown, html);
  return 0;
}

}  // namespace attn::cli
