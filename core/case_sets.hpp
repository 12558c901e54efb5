#pragma once
// Built-in case sets and case files. A case file holds one repro string per line; blank lines
// and lines starting with '#' are ignored.
#include <string>
#include <string_view>
#include <vector>

#include "core/problem.hpp"

namespace attn {

// Every input regime, every mask kind (and intersections), edge shapes (length 1, tile +- 1,
// primes, n_q != n_k both ways, d_k != d_v, GQA and MQA) in f64, f32, f16 and bf16.
std::vector<Problem> default_cases();
// A small subset of the same coverage, for quick checks.
std::vector<Problem> quick_cases();
// "default", "quick", or a path to a case file. Throws InputError naming the file and line.
std::vector<Problem> load_cases(std::string_view name_or_path);

}  // namespace attn
