#pragma once
// A gate baseline file (schema "attnbench.gate-baseline", written by `attnbench gate
// --write-baseline`), typed: what the gate keeps of verify and bench results to compare later
// runs with (reports/gate.hpp), with its one writer and one reader. The file names its sources
// once, with their context; every record points at one by index.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

inline constexpr int gate_baseline_schema_version = 1;

struct BaselineSource {
  std::string file;                            // the result file the records came from
  std::map<std::string, std::string> context;  // its context block, as strings
};

struct BaselineAccuracy {  // one verify record, distilled
  std::string implementation, repro, label, status;  // status: pass, fail or skip
  std::string skip_reason;                           // skip only
  double max_ulps = 0, max_abs = 0;                  // not skip; infinite for a NaN or infinite error ("inf" in the file)
  std::size_t source = 0;                            // index into sources
};

struct BaselineSpeed {  // one benchmark: every repetition's times
  std::string name;
  std::vector<double> samples_ms, cpu_samples_ms;
  std::optional<std::string> error;
  std::size_t source = 0;
};

struct GateBaseline {
  std::vector<BaselineSource> sources;
  std::vector<BaselineAccuracy> accuracy;
  std::vector<BaselineSpeed> speed;
};

nlohmann::json to_json(const GateBaseline& baseline);
// Throws InputError naming `source` and the record at fault: a missing or mistyped field, an
// unknown status, a source index out of range, another schema version.
GateBaseline read_gate_baseline(const nlohmann::json& document, const std::string& source);

}  // namespace attn
