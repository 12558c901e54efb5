#pragma once
// Verify results as JSON (schema "attnbench.verify", version 1: each record through
// records/verify_record.hpp, the one writer) and as a console table.
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "records/verify_record.hpp"
#include "verification/verify.hpp"

namespace attn {

// A run's record as the file holds it (records/verify_record.hpp writes it).
VerifyRecord verify_record(const Record& record);
// `command` (verify, check, validate) is written beside the schema: a report merging a glob of
// files says which were the file route's or a plugin's. "complete" is true: the run this is of
// ended (a file saved during the run is marked false by its writer, cli/run_output.hpp).
nlohmann::json verify_to_json(const VerifyRun& run, const VerifyOptions& options, const nlohmann::json& context,
                              std::string_view command = "verify");
// Writes atomically (temporary file, then rename), so a reader never sees half a file; only a
// regular file is ever replaced (core/result_file.hpp).
void write_json_file(const std::string& path, const nlohmann::json& document);

// A run's results file, saved after every case: the path was checked before the run, but may
// turn into a link, a device or a full disk while it goes on. Such a failed save does not end the
// run (it is reported once); the last save, if it fails too, puts the results in a new file
// beside the path (or in the temporary folder) and throws InputError naming both, so nothing
// measured is lost.
class ResultsFile {
 public:
  explicit ResultsFile(std::string path) : path_(std::move(path)) {}
  void save(const nlohmann::json& document);    // during the run
  void finish(const nlohmann::json& document);  // at the end
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool warned_ = false;
};

void print_verify_header(std::ostream& os);
void print_verify_row(std::ostream& os, const Record& record);
// Totals, then each failure with its reasons and the command that reruns it: rerun_command gives
// it for a failed record (check and validate rerun differently); unset, `attnbench verify --case`.
void print_verify_summary(std::ostream& os, const VerifyRun& run,
                          const std::function<std::string(const Record&)>& rerun_command = {});

}  // namespace attn
