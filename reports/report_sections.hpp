#pragma once
// The report's sections (report.cpp puts them in order): what the merged results hold, as the
// document model of report_document.hpp. Verify, properties and the 1/sqrt(d_k) study in
// report_verify_sections.cpp; bench, fits, peers and the charts in report_bench_sections.cpp.
#include <cstddef>
#include <string>
#include <vector>

#include "reports/report_document.hpp"
#include "reports/results.hpp"

namespace attn::report_parts {

struct FamilyPoint {
  std::int64_t n = 0;
  double time_ms = NAN, gflops_exact = NAN, workspace = NAN;
};
struct BenchFamily {
  std::string name, implementation;
  std::vector<FamilyPoint> points;  // ascending n
  const BenchFit* fit = nullptr;
};

// The families of the merged runs, each with its median run per n (records/bench_record.hpp);
// the runs' errors go to `errors`.
std::vector<BenchFamily> bench_families(const MergedResults& m, std::vector<std::string>& errors);

Section context_section(const MergedResults& m);
Section verdict_section(const MergedResults& m);
Section coverage_section(const MergedResults& m);
Section worst_section(const MergedResults& m, std::size_t limit);
Section property_section(const MergedResults& m);
Section scale_section(const MergedResults& m);
Section bench_section(const MergedResults& m, const std::vector<BenchFamily>& families, const std::vector<std::string>& errors);
Section fit_section(const std::vector<BenchFamily>& families);
Section peers_section(const MergedResults& m);
Section chart_section(const MergedResults& m, const std::vector<BenchFamily>& families);

}  // namespace attn::report_parts
