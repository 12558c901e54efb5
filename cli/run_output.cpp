#include "cli/run_output.hpp"

#include <cstdio>
#include <iostream>

#include <fmt/format.h>

namespace attn::cli {

void VerifyConsole::started(const VerifyRequest& request) {
  print_verify_header(std::cout);
  if (options_.progress_label) progress_.emplace(*options_.progress_label, request.records(), stdout, Progress::stdout_is_terminal());
}

void VerifyConsole::record_made(const VerifyRun&, const Record& record) {
  if (progress_) progress_->clear();
  print_verify_row(std::cout, record);
  if (options_.extra) std::cout << options_.extra(record);
  std::cout.flush();
  if (progress_)
    progress_->step(options_.name_implementation ? fmt::format("{} case {}", record.implementation, record.context->index)
                                                 : fmt::format("case {}", record.context->index));
}

void VerifyConsole::finished(const VerifyRun&) {
  if (progress_) progress_->finish();
}

void VerifyResultsFile::case_finished(const VerifyRun& so_far) {
  if (file_.path().empty()) return;
  nlohmann::json document = to_json_(so_far);
  document["complete"] = false;  // true only in the save at the end: a killed run's file says it did not finish
  file_.save(document);
}

void VerifyResultsFile::finished(const VerifyRun& run) {
  if (!file_.path().empty()) file_.finish(to_json_(run));
}

void PropertiesResultsFile::verdict_made(const PropertyVerdict& verdict, const Property& property, const Implementation& impl) {
  results_.add(verdict, property, impl);
  if (!file_.path().empty()) file_.save(results_.to_json());
}

void PropertiesResultsFile::finished(const PropertiesOutcome&) {
  if (file_.path().empty()) return;
  results_.complete = true;
  file_.finish(results_.to_json());
}

}  // namespace attn::cli
