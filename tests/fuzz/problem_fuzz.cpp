// libFuzzer target: the repro-string parser (attn::parse_problem) and Problem::validate on
// arbitrary text. Every input must either give a valid problem or be refused with
// attn::InputError; a valid problem's repro string must parse back to an equal problem, and its
// O(1) derived figures and JSON must not fail. Any other exception, a crash, a sanitizer report, a
// leak or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/problem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  attn::Problem problem;
  try {
    problem = attn::parse_problem(text);
    problem.validate();
  } catch (const attn::InputError&) {
    return 0;
  }
  if (!(attn::parse_problem(problem.repro()) == problem)) __builtin_trap();
  const nlohmann::json j = problem;
  if (!(j.get<attn::Problem>() == problem)) __builtin_trap();
  // flops() is left out: it counts the visible pairs through the mask, work proportional to the
  // problem (a valid b = 2^27 takes seconds), which is not the parser's to bound.
  (void)problem.label();
  (void)problem.flops_published();
  (void)problem.bytes_min();
  return 0;
}
