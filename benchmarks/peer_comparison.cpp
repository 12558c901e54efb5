#include "benchmarks/peer_comparison.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "benchmarks/bench.hpp"
#include "benchmarks/device_plan.hpp"
#include "benchmarks/problem_list.hpp"
#include "core/dtype.hpp"
#include "benchmarks/peer_table.hpp"
#include "core/error.hpp"
#include "impls/sandbox/sandbox.hpp"
#include "records/peers_record.hpp"

namespace attn::bench {
namespace {

using json = nlohmann::json;

// The exit code with which a peers script says its peer cannot run here (torch_sdpa.py without
// PyTorch or a CUDA device): reported as "peer unavailable", not as a failure.
constexpr int peer_unavailable_exit_code = 3;

std::string describe_list(const PeersPlan& plan) {
  return fmt::format("the problem list: batch {}, heads {}, d {}, dtype {}", plan.batch, plan.heads, fmt::join(plan.head_dims, ","),
                     fmt::join(plan.dtypes, ","));
}

std::string shell_quote(const std::string& s) {
  static const char* plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,=:+@%";
  if (!s.empty() && s.find_first_not_of(plain) == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

using Termination = sandbox::ProgramEnd;

std::string describe(const Termination& t) {
  if (!t.start_error.empty()) return fmt::format("could not be started: {}", t.start_error);
  if (t.signal) return fmt::format("was ended by signal {}", *t.signal);
  std::string text = fmt::format("exited {}", *t.exit_code);
  if (*t.exit_code == 127) text += " (the shell did not find the command)";
  if (*t.exit_code == 126) text += " (the shell could not execute the command)";
  if (*t.exit_code == 2) text += " (the peers script's bad usage, e.g. a dtype it does not support, or no peer could run)";
  if (*t.exit_code > 128 && *t.exit_code < 160) text += fmt::format(" (as the shell reports signal {})", *t.exit_code - 128);
  return text;
}

// Reads and parses the peers JSON, and reads it as a peers document (records/peers_record.hpp, the
// one reader of the schema); returns an error message, or an empty string.
std::string read_peers_json(const std::string& path, json& doc, PeersDocument& peers) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return fmt::format("it did not write {}", path);
  std::ifstream in(path);
  if (!in) return fmt::format("cannot read {}", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    doc = json::parse(python_json_to_strict(text.str()));
  } catch (const json::exception& e) {
    return fmt::format("{} is not valid JSON: {}", path, e.what());
  }
  try {
    peers = read_peers_document(doc, path);
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

std::string python_json_to_strict(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, token.size(), token) == 0) {
        out += "null";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

std::string peers_json_path(const std::string& bench_json_path) {
  if (bench_json_path.empty()) return {};
  std::filesystem::path path(bench_json_path);
  if (path.extension() == ".json") return path.replace_extension(".peers.json").string();
  return bench_json_path + ".peers.json";
}

std::string PeersPlan::arguments(const std::string& cases_dir) const {
  std::string text = fmt::format("--cases {} --threads {}", shell_quote(cases_dir), threads);
  if (!l2.empty()) text += " --l2 " + l2;
  return text;
}

std::vector<Problem> PeersPlan::timed_problems() const {
  std::vector<Problem> problems;
  for (const auto& dtype : dtypes)
    for (const std::int64_t d : head_dims)
      for (const auto& mask : script_masks) {
        for (const Pass pass : passes) {
          FamilySpec family;
          family.dtype = parse_dtype(dtype);
          family.batch = batch;
          family.heads = heads;
          family.head_dim = d;
          family.window = Window::of(mask == "none" ? Causal::none : Causal::top_left);
          family.pass = pass;
          for (std::int64_t n = min_n; n >= 1 && n <= max_n; n *= 2) problems.push_back(family.problem(n));
        }
      }
  return problems;
}

std::vector<PeerCase> PeersPlan::cases() const {
  std::vector<DType> types;
  for (const auto& dtype : dtypes) types.push_back(parse_dtype(dtype));
  std::vector<PeerCase> list;
  for (const Pass pass : passes)  // a backward's checks are the same problems as backward ones (with their dO)
    for (Problem p : peer_check_problems(types, head_dims, heads)) {
      if (pass == Pass::backward) p.operation = Operation::backward;
      list.push_back({PeerCase::Role::check, p});
    }
  for (const Problem& p : timed_problems()) list.push_back({PeerCase::Role::timed, p});
  return list;
}

PeersPlan plan_peers(const BenchOptions& o, int threads, std::span<const FamilySpec> families) {
  PeersPlan plan;
  plan.command = o.peers_command.value_or("");
  if (plan.command.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError("--peers needs a command, e.g. --peers '.venv/bin/python benchmarks/peers/cpu_peers.py'");
  if (o.dtypes.empty() && o.smoke)
    throw InputError("--peers with --smoke needs --dtype f32 (or another list: --smoke benchmarks every dtype each implementation "
                     "accepts, and the peers need the dtypes named)");
  for (const auto& m : o.masks) {
    const FamilyMask mask = parse_mask(m);
    const Window& w = mask.window;
    if (!w.as_causal() || mask.softcap) {
      plan.notes.push_back(fmt::format("{}: the peers run no sliding window and no soft-cap; its rows show no peer", m));
      continue;
    }
    const std::string name = w.is_none() ? "none" : "causal";
    if (w == Window::of(Causal::bottom_right))
      plan.notes.push_back("bottom_right is compared with the peers' causal (top-left): with n_q = n_k they are the same mask");
    if (std::find(plan.script_masks.begin(), plan.script_masks.end(), name) == plan.script_masks.end())
      plan.script_masks.push_back(name);
  }
  if (plan.script_masks.empty())
    throw InputError(fmt::format("--peers: the peers run none of the masks {} (they run none, causal, top_left, bottom_right)", fmt::join(o.masks, ",")));
  auto add = [](auto& list, const auto& value) {
    if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
  };
  bool gpu = false;
  plan.min_n = o.min_n;
  plan.max_n = o.max_n;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const FamilySpec& f = families[i];
    if (f.sizes.empty()) continue;
    if (i == 0 || f.sizes.front() < plan.min_n) plan.min_n = f.sizes.front();
    if (i == 0 || f.sizes.back() > plan.max_n) plan.max_n = f.sizes.back();
    add(plan.dtypes, std::string(to_string(f.dtype)));
    add(plan.head_dims, f.head_dim);
    gpu |= runs_on_gpu(*f.implementation);
  }
  if (plan.dtypes.empty()) {  // no family: the options' list
    for (const auto& d : o.dtypes) add(plan.dtypes, std::string(to_string(parse_dtype(d))));
    if (plan.dtypes.empty()) plan.dtypes.push_back("f32");
    for (const auto d : o.head_dims) add(plan.head_dims, d);
    if (o.smoke) {
      plan.min_n = 16;
      plan.max_n = 64;
    }
  }
  plan.batch = o.batch;
  plan.heads = o.heads;
  // The peers time a pass alone: forward, and backward where a family times it (forward_backward
  // rows show no peer).
  plan.passes.clear();
  for (const auto& pass : o.passes)
    if (const Pass parsed = parse_pass(pass); parsed != Pass::forward_backward) add(plan.passes, parsed);
  if (plan.passes.empty()) plan.passes.push_back(Pass::forward);
  if (gpu) plan.l2 = to_string(parse_l2_mode(o.l2));
  plan.threads = threads;
  plan.out_path = peers_json_path(o.json_path);
  plan.cases_dir = o.peers_cases_dir;
  plan.sandboxed = o.peers_sandboxed;
  if (!plan.cases_dir.empty()) check_peer_cases_dir(plan.cases_dir);  // before anything runs
  return plan;
}

PeersOutcome run_peers(const PeersPlan& plan, const std::vector<OurTime>& ours) {
  PeersOutcome outcome;
  json& section = outcome.section;
  section["command"] = plan.command;
  auto fail = [&](std::string why) {
    if (plan.sandboxed && section.contains("sandbox"))  // it ran: the sandbox may be what it tripped on
      why += "; it ran in the sandbox (no network; writes only to its scratch directory, where TMPDIR points; "
             "impls/sandbox/README.md): --sandbox=off runs it with the harness's rights";
    outcome.failed = true;
    outcome.failure = why;
    section["status"] = "failed";
    section["failure"] = why;
    fmt::print("\nattnbench bench: the peers command failed: {}\n", why);
    return outcome;
  };

  // The peers' cases go to a temporary directory removed afterwards (unless --peers-cases keeps
  // them); so does their JSON when there is no bench JSON to write it beside.
  std::filesystem::path temp_dir;
  {
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "attnbench-peers-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return fail(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
    temp_dir = pattern;
  }
  struct TempCleanup {
    std::filesystem::path dir;
    ~TempCleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{temp_dir};
  std::string out_path = plan.out_path;
  const bool temporary_out = out_path.empty();
  if (temporary_out) {
    out_path = (temp_dir / "scratch" / "peers.json").string();
  } else {
    std::error_code ec;
    // A stale file must not pass for this run's; only a regular one is removed (never a link or device).
    if (std::filesystem::exists(std::filesystem::symlink_status(out_path, ec)) && !std::filesystem::is_regular_file(std::filesystem::symlink_status(out_path, ec)))
      return fail(fmt::format("{} is not a regular file: the peers' results are not written there", out_path));
    std::filesystem::remove(out_path, ec);
  }

  const std::filesystem::path cases_dir = plan.cases_dir.empty() ? temp_dir / "peer-cases" : std::filesystem::path(plan.cases_dir);
  const std::vector<PeerCase> cases = plan.cases();
  std::set<std::string> timed;  // the repro strings a record may carry
  for (const PeerCase& c : cases)
    if (c.role == PeerCase::Role::timed) timed.insert(c.problem.repro());
  try {
    write_peer_cases(cases_dir, cases);
  } catch (const std::exception& e) {
    return fail(fmt::format("cannot write the peers' cases to {}: {}", cases_dir.string(), e.what()));
  }

  // The command writes only into a scratch directory of its own (in the sandbox, nowhere else);
  // its JSON is copied from there to the JSON's place.
  const std::filesystem::path scratch = temp_dir / "scratch";
  if (std::error_code ec; !std::filesystem::create_directory(scratch, ec))
    return fail(fmt::format("cannot create the peers' scratch directory {}: {}", scratch.string(), ec.message()));
  const std::string written_path = (scratch / "peers.json").string();
  const std::string arguments = fmt::format("{} --out {}", plan.arguments(cases_dir.string()), shell_quote(written_path));
  const std::string full = plan.command + " " + arguments;
  section["arguments"] = arguments;
  section["json"] = temporary_out ? json(nullptr) : json(out_path);
  section["cases"] = {{"check", cases.size() - timed.size()}, {"timed", timed.size()}};
  fmt::print("\nattnbench bench: running the peers on the same problem list ({} timed problems and {} checks, with our inputs): {}\n\n",
             timed.size(), cases.size() - timed.size(), full);
  for (const auto& note : plan.notes) fmt::print("  note: {}\n", note);

  std::vector<sandbox::Bound> bounds;
  const Termination t = sandbox::run_program(full, scratch.string(), plan.sandboxed, bounds);
  const std::string bounds_text = plan.sandboxed ? sandbox::describe(bounds) : "off (--sandbox=off)";
  section["sandbox"] = {{"summary", bounds_text}, {"bounds", json::array()}};
  for (const auto& b : bounds) section["sandbox"]["bounds"].push_back({{"name", b.name}, {"applied", b.applied}, {"detail", b.detail}});
  fmt::print("  sandbox: {}\n", bounds_text);
  section["exit_code"] = t.exit_code ? json(*t.exit_code) : json(nullptr);
  if (!temporary_out) {
    std::error_code ec;
    const auto written = std::filesystem::symlink_status(written_path, ec);
    if (std::filesystem::exists(written) && !std::filesystem::is_regular_file(written))
      return fail(fmt::format("{} is not a regular file (a link?): not taken as the peers' results", written_path));
    if (std::filesystem::exists(written) && !std::filesystem::copy_file(written_path, out_path, ec))
      return fail(fmt::format("cannot copy the peers' JSON {} to {}: {}", written_path, out_path, ec.message()));
  }
  if (t.signal) section["signal"] = *t.signal;
  if (!t.start_error.empty()) return fail(fmt::format("'{}' {}", plan.command, describe(t)));

  json doc;
  PeersDocument peers_doc;
  const std::string read_error = read_peers_json(out_path, doc, peers_doc);
  if (std::error_code ec; !temporary_out && !std::filesystem::exists(out_path, ec)) section["json"] = nullptr;
  if (read_error.empty()) {
    if (doc.contains("context")) section["context"] = doc["context"];
    if (doc.contains("peers")) section["peers"] = doc["peers"];
    section["results"] = doc["results"];
  }


  // Skipped peers (not installed, broken) say why, whatever the exit code.
  std::vector<std::string> peer_order;
  std::set<std::string> invalid;
  for (const PeerStatus& p : peers_doc.peers) {
    if (p.peer.empty()) continue;
    if (p.skipped) {
      fmt::print("  peer {}: skipped ({})\n", p.peer, *p.skipped);
      continue;
    }
    if (std::find(peer_order.begin(), peer_order.end(), p.peer) == peer_order.end()) peer_order.push_back(p.peer);
    if (p.valid_target == false) invalid.insert(p.peer);
  }

  if (t.exit_code == peer_unavailable_exit_code) {
    // The script's peer cannot run here (no PyTorch, no GPU): said, kept in the JSON, not a failure.
    std::vector<std::string> reasons;
    for (const PeerStatus& p : peers_doc.peers)
      if (p.skipped) reasons.push_back(fmt::format("{}: {}", p.peer.empty() ? "?" : p.peer, *p.skipped));
    outcome.unavailable = true;
    outcome.unavailable_reason = reasons.empty() ? fmt::format("'{}' exited {} (its peer cannot run here; see its output above)",
                                                               plan.command, peer_unavailable_exit_code)
                                                 : fmt::format("{}", fmt::join(reasons, "; "));
    section["status"] = "unavailable";
    section["unavailable"] = outcome.unavailable_reason;
    fmt::print("\nattnbench bench: peer unavailable: {}\n(no side-by-side table; not a failure)\n", outcome.unavailable_reason);
    return outcome;
  }
  if (t.signal || (t.exit_code && *t.exit_code != 0 && *t.exit_code != 1)) {
    return fail(fmt::format("'{}' {}{}", plan.command, describe(t),
                            read_error.empty() ? "" : fmt::format("; and {}", read_error)));
  }
  if (!read_error.empty()) return fail(fmt::format("'{}' {}, but {}", plan.command, describe(t), read_error));

  // The records, by (peer, dtype, d, mask, n); the first of each counts.
  PeerRecords records;
  std::vector<std::string> skipped_records;
  for (const PeerResult& r : peers_doc.results) {
    if (!r.unplaced.empty()) {
      skipped_records.push_back(r.unplaced);
      continue;
    }
    const std::string& name = r.peer;
    if (!timed.contains(r.repro)) {
      skipped_records.push_back(fmt::format("{} {}: not one of the {} problems it was given ({})", name, r.repro, timed.size(), describe_list(plan)));
      continue;
    }
    if (!r.untimed.empty()) {
      skipped_records.push_back(r.untimed);
      continue;
    }
    PeerRecord rec;
    rec.version = r.peer_version;
    rec.valid = r.valid_target;
    rec.median_ms = r.median_ms;
    if (r.error) rec.error = *r.error;
    if (rec.valid == false) invalid.insert(name);
    if (std::find(peer_order.begin(), peer_order.end(), name) == peer_order.end()) peer_order.push_back(name);
    // A backward record compares with our backward families (FamilySpec::peer_mask: "top_left/backward").
    records.try_emplace({name, r.dtype, r.d_k, r.operation == "forward" ? r.causal : r.causal + "/" + r.operation, r.n_q}, rec);
  }
  outcome.invalid_peers.assign(invalid.begin(), invalid.end());

  if (t.exit_code == 1 && invalid.empty())
    return fail(fmt::format("'{}' exited 1, but its JSON records no peer that failed its correctness checks (did it crash?)",
                            plan.command));
  if (records.empty()) return fail(fmt::format("{} holds no usable timing or error record", out_path));

  print_comparison(ours, records, peer_order, invalid, skipped_records, outcome);
  outcome.table_built = true;
  section["status"] = invalid.empty() ? "ok" : "peer_checks_failed";
  section["invalid_peers"] = outcome.invalid_peers;
  section["left_out_records"] = skipped_records;
  section["ratio"] = "faster valid peer's median time / our time; >= 1.0: ours is faster";
  return outcome;
}

}  // namespace attn::bench
