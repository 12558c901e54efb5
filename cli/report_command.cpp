#include "cli/report_command.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/result_file.hpp"
#include "reports/report.hpp"
#include "reports/results.hpp"

namespace attn::cli {

ReportCommand::ReportCommand(CLI::App& app)
    : command_(app.add_subcommand("report", "Merge result files (verify, bench, properties, peers; shards too) into DIR/report.md "
                                            "(for a CI job summary) and DIR/report.html (self-contained, SVG charts)")) {
  command_->add_option("results", result_paths_, "Result files written by verify, bench, properties (--json) or a peers script")
      ->required();
  command_->add_option("--out", out_dir_, "Directory for report.md and report.html")->capture_default_str();
  command_->add_flag("--allow-incomplete", allow_incomplete_,
                     "Exit 0 even when a file is of a run that did not finish (\"complete\": false; the report marks it in red either way)");
  command_->add_flag("--allow-mixed-revisions", allow_mixed_revisions_,
                     "Merge results measured at different git revisions (refused by default), with a warning in the report");
}

int ReportCommand::run() const {
  // The outputs first: a report that cannot be written is refused before any input is read.
  prepare_result_dir(out_dir_, "--out");
  for (const char* file : {"report.md", "report.html"}) prepare_result_path(std::filesystem::path(out_dir_) / file, "--out");
  std::vector<ResultFile> files;
  // Files are taken by their schema, not their name: attnbench's other JSON files that a glob
  // such as results/*.json picks up (gate baselines, cases manifests) are skipped, saying so.
  for (const auto& path : result_paths_) {
    try {
      files.push_back(load_result_file(path));
    } catch (const NotAResult& e) {
      fmt::print(stderr, "attnbench report: note: skipped {}\n", e.what());
      continue;
    }
    if (files.back().command == "check")
      fmt::print(stderr, "attnbench report: note: {} holds `attnbench check` results (the file route: outputs a program wrote), "
                         "merged as their own implementation\n",
                 path);
  }
  if (files.empty()) throw InputError("none of the files given is a result file (verify, bench, properties or peers)");
  const MergedResults merged = merge_results(files, {allow_mixed_revisions_});
  for (const auto& warning : merged.warnings) fmt::print(stderr, "attnbench report: warning: {}\n", warning);
  const auto [markdown, html] = write_report(render_report(merged), out_dir_);
  fmt::print("report (Markdown): {}\nreport (HTML):     {}\n", markdown, html);
  // The report is written either way (nothing measured is lost); an unfinished run is not a pass.
  if (!merged.incomplete_files.empty() && !allow_incomplete_) {
    fmt::print(stderr, "attnbench report: INCOMPLETE: {} {} of a run that did not finish (--allow-incomplete exits 0 anyway)\n",
               fmt::join(merged.incomplete_files, ", "), merged.incomplete_files.size() > 1 ? "are" : "is");
    return 1;
  }
  return 0;
}

}  // namespace attn::cli
