#include "benchmarks/peer_cases.hpp"

#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/case_files.hpp"
#include "core/error.hpp"
#include "core/inputs.hpp"
#include "core/npy.hpp"
#include "core/result_file.hpp"

namespace attn::bench {

std::vector<Problem> peer_check_problems(std::span<const DType> dtypes, std::span<const std::int64_t> head_dims, std::int64_t heads) {
  std::vector<Problem> problems;
  for (const DType dtype : dtypes)
    for (const std::int64_t d : head_dims)
      for (const std::int64_t n : {64, 129})  // 129: a length no tile size divides
        for (const Causal causal : {Causal::none, Causal::top_left})
          for (const Regime regime : {Regime::diffuse, Regime::peaked, Regime::large}) {
            Problem p;
            p.batch = 1;
            p.h_q = p.h_kv = heads;
            p.n_q = p.n_k = n;
            p.d_k = p.d_v = d;
            p.dtype = dtype;
            p.window = Window::of(causal);
            p.regime = regime;
            p.seed = 7;
            problems.push_back(p);
          }
  return problems;
}

void check_peer_cases_dir(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) throw InputError(fmt::format("{}: exists and is not a directory", dir.string()));
  // Only an earlier peer-cases folder is written over (write_case_directory guards cases/ itself).
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name != "cases" && name != peer_cases_manifest)
      throw InputError(fmt::format("{}: holds {}, so it is not a peer-cases folder: refusing to write into it", dir.string(), name));
  }
  if (ec) throw InputError(fmt::format("{}: {}", dir.string(), ec.message()));
}

void write_peer_cases(const std::filesystem::path& dir, std::span<const PeerCase> cases) {
  namespace fs = std::filesystem;
  check_peer_cases_dir(dir);
  std::error_code ec;
  fs::remove(dir / peer_cases_manifest, ec);  // a folder cut short must not pass for a whole one
  std::vector<Problem> problems;
  for (const PeerCase& c : cases) problems.push_back(c.problem);
  nlohmann::json entries = nlohmann::json::array();
  write_case_directory(dir / "cases", problems, {}, [&](const CaseFileEntry& entry) {
    const PeerCase& c = cases[entry.index];
    const Problem& p = c.problem;
    entries.push_back({{"role", c.role == PeerCase::Role::check ? "check" : "timed"},
                       {"problem", p},
                       {"visible_pairs", p.visible_pairs()},
                       {"flops", p.flops()},
                       {"flops_published", p.flops_published()},
                       {"bytes_min", p.bytes_min()},
                       {"q", "cases/" + entry.q},
                       {"k", "cases/" + entry.k},
                       {"v", "cases/" + entry.v}});
    // A backward problem's upstream gradient, drawn as verify and bench draw it.
    if (p.operation == Operation::backward) {
      const std::string d_o = fmt::format("d_o_{:04}.npy", entry.index);
      npy::write_file(dir / "cases" / d_o, tensor_to_npy(generate_d_o(p)));
      entries.back()["d_o"] = "cases/" + d_o;
    }
  });
  const nlohmann::json manifest = {
      {"schema", "attnbench.peer_cases"},
      {"version", 1},
      {"layout", "q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v], C order; f64 <f8, f32 <f4, f16 <f2, "
                 "bf16 <f4 holding exactly the bf16 values (core/case_files.hpp)"},
      {"flops", "2*b*h_q*visible_pairs*(d_k+d_v) (Problem::flops)"},
      {"flops_published", "4*b*h*n_q*n_k*d with d=(d_k+d_v)/2, halved for causal (Problem::flops_published)"},
      {"bytes_min", "Q, K, V read once and O written once, at the dtype's element size (Problem::bytes_min)"},
      {"backward", "a case whose problem has operation backward (repro op=backward) is timed as the backward pass alone, its upstream "
                   "gradient in d_o (layout of q); flops 2*b*h_q*visible_pairs*(3*d_k+2*d_v), flops_published 2.5x the forward's, bytes_min "
                   "with dO, the LSE and dQ, dK, dV"},
      {"cases", entries},
  };
  write_result_file(dir / peer_cases_manifest, manifest.dump(1) + '\n');
}

}  // namespace attn::bench
