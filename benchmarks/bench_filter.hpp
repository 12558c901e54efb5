#pragma once
// Google Benchmark's flags, passed through (--benchmark_*), and which sizes of a family its
// --benchmark_filter selects: the bench needs to know before the run which families will run
// (their peaks, their complexity fits, the progress total).
#include <cstddef>
#include <string>
#include <vector>

#include "benchmarks/problem_list.hpp"

namespace attn::bench {

// Turns the pass-through flags into Google Benchmark's state. Throws InputError on anything it
// does not recognise (and on --benchmark_out*, which --json replaces), naming it. Except in a
// smoke run, each size is measured as timed_repetitions repetitions of at least
// repetition_seconds, in random order among every benchmark's (the flags given override this).
inline constexpr int timed_repetitions = 3;
inline constexpr double repetition_seconds = 0.2;
void initialise_benchmark_library(const std::vector<std::string>& benchmark_flags, bool smoke);

// How many sizes of a family Google Benchmark's --benchmark_filter selects. Mirrors its
// matching (an extended regular expression searched in the instance name, a leading '-'
// negates, "" and "all" select everything); when unsure (a pattern std::regex refuses), all.
std::size_t selected_sizes(const FamilySpec& family, bool smoke);
inline bool filter_selects(const FamilySpec& family, bool smoke) { return selected_sizes(family, smoke) > 0; }

}  // namespace attn::bench
