#pragma once
// The bench document (records/bench_record.hpp's schema) of timings taken in Python: one run per
// timed call, grouped into families with only n varying, each family's O(n^2) fit
// (benchmarks/scaling_fit.hpp) and, for callables on the CPU, the machine's FMA and SGEMM peaks
// measured in the same run (benchmarks/machine_peaks.hpp).
#include <string>

namespace attn::python {

// request: {"implementation", "device", "timer", "entries": [{"problem": repro, "times_ms": [...]}
// or {"problem", "error"}]}; returns the document's JSON text.
std::string bench_document(const std::string& request);

}  // namespace attn::python
