#pragma once
// What `attnbench bench --peers` hands a peers script: the problems it asks the peer to run, as
// data, and their exact inputs, so that the peer's correctness checks and timings are of the bits
// our verify and bench see (generate_inputs), not of inputs the script draws itself.
//
// A peer-cases folder DIR holds:
//   DIR/cases/             a cases directory (core/case_files.hpp: q/k/v_NNNN.npy, BHSD, and the
//                          file route's manifest.json), so `attnbench check --cases DIR/cases`
//                          can judge any outputs a peer writes for them;
//   DIR/peer_cases.json    schema "attnbench.peer_cases": one entry per case, in order: its role
//                          ("check": a small case the peer is checked on before timing; "timed"),
//                          the problem's JSON (core/problem.hpp), the figures the peer's records
//                          divide by its time (flops, flops_published, bytes_min, from Problem's
//                          own methods) and the paths of its q, k, v files relative to DIR.
// benchmarks/peers/README.md documents the contract; benchmarks/peers/peer_problem.py reads it.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/problem.hpp"

namespace attn::bench {

struct PeerCase {
  enum class Role { check, timed };
  Role role = Role::timed;
  Problem problem;
};

// The manifest's file name inside a peer-cases folder.
inline constexpr const char* peer_cases_manifest = "peer_cases.json";

// The correctness checks a peer runs before timing, per dtype and head dimension: n in {64, 129},
// no mask and top-left causal, the diffuse, peaked and large regimes, b = 1, `heads` heads, seed 7.
std::vector<Problem> peer_check_problems(std::span<const DType> dtypes, std::span<const std::int64_t> head_dims, std::int64_t heads);

// Throws InputError unless DIR is missing, empty, or an earlier peer-cases folder (nothing else is
// written over).
void check_peer_cases_dir(const std::filesystem::path& dir);
// Writes DIR/cases and DIR/peer_cases.json (DIR is created; check_peer_cases_dir holds). Throws
// InputError naming the fault.
void write_peer_cases(const std::filesystem::path& dir, std::span<const PeerCase> cases);

}  // namespace attn::bench
