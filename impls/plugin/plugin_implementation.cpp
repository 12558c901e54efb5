#include "impls/plugin/plugin_implementation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "impls/plugin/arena_tensors.hpp"
#include "impls/plugin/call_description.hpp"
#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/worker_handle.hpp"
#include "impls/plugin/worker_process.hpp"
#include "impls/registry.hpp"

namespace attn::plugin {

using nlohmann::json;

namespace {

std::string seconds_text(double s) { return fmt::format("{:g} s", s); }

bool executable(const std::filesystem::path& p) { return ::access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p); }

std::string phase_name(Phase phase) {
  switch (phase) {
    case Phase::supports: return "supports()";
    case Phase::run: return "run()";
    case Phase::bench: return "a timed run()";
    case Phase::returned: return "the worker, after run() returned";
    case Phase::idle: break;
  }
  return "the worker";
}

}  // namespace

std::string find_plugin_host() {
  if (const char* env = std::getenv("ATTNBENCH_PLUGIN_HOST"); env != nullptr && *env != '\0') {
    if (!executable(env)) throw InputError(fmt::format("ATTNBENCH_PLUGIN_HOST={}: not an executable file", env));
    return env;
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "attnbench-plugin-host";
    if (executable(beside)) return beside.string();
  }
#ifdef ATTN_PLUGIN_HOST_PATH
  if (executable(ATTN_PLUGIN_HOST_PATH)) return ATTN_PLUGIN_HOST_PATH;
#endif
  throw InputError("cannot find the plugin worker attnbench-plugin-host (looked next to this executable and where the build put it; "
                   "set ATTNBENCH_PLUGIN_HOST to its path)");
}

namespace {

// A fault the status page recorded after run() returned, in a call's read-only buffers: a thread
// of that call outlived it. "" for any other fault.
std::string late_access(const ArenaLayout& layout, const std::vector<TensorSpec>& specs, const StatusPage& status,
                        const std::string& repro) {
  if (status.phase != Phase::returned || status.fault.magic != FaultRecord::valid) return "";
  auto output = [&](const std::string& name) {
    return std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == name && t.output; });
  };
  std::string where = fmt::format("byte {} of the call's buffers", status.fault.offset);
  for (const ArenaBuffer& b : layout.buffers)
    if (status.fault.offset >= b.offset && status.fault.offset < b.offset + std::max<std::size_t>(b.bytes, 1))
      where = fmt::format("its {} '{}' (element {})", output(b.name) ? "output" : "buffer", b.name,
                          (status.fault.offset - b.offset) / std::max<std::size_t>(b.element_bytes, 1));
  return fmt::format("the plugin {} {} after its run() returned (the call of case '{}'): a thread of that call outlived it; the worker, "
                     "which keeps a returned call's buffers read-only, died of it and was restarted",
                     status.fault.access == 1 ? "read" : "wrote into", where, repro);
}

}  // namespace


std::unique_ptr<PluginImplementation> PluginImplementation::load(const std::string& path, const PluginOptions& options) {
  if (!(options.timeout_seconds > 0)) throw InputError("the plugin timeout must be positive");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(fmt::format("plugin {}: no such file", path));
  if (std::filesystem::is_directory(path, ec)) throw InputError(fmt::format("plugin {}: is a directory, not a shared library", path));
  std::unique_ptr<PluginImplementation> impl(new PluginImplementation(std::filesystem::absolute(path).string(), options));
  if (impl->options_.host_path.empty()) impl->options_.host_path = find_plugin_host();
  std::string limit_basis = "--plugin-memory-limit";
  if (!impl->options_.memory_limit_bytes) {
    const DefaultMemoryLimit d = default_memory_limit();
    impl->options_.memory_limit_bytes = d.bytes;
    limit_basis = d.basis + "; --plugin-memory-limit sets it";
  }
  auto worker = std::make_unique<Worker>(impl->options_.host_path, impl->path_, *impl->options_.memory_limit_bytes, impl->options_.sandbox);
  std::string text;
  const auto got = worker->wait_for_message(options.timeout_seconds, text);
  if (got == Received::timed_out)
    throw InputError(with_output(fmt::format("plugin {}: loading it timed out after {}", path, seconds_text(options.timeout_seconds)), worker->output()));
  if (got != Received::message) {
    const std::string death = worker->reap();
    throw InputError(with_output(fmt::format("plugin {}: the worker {} while loading it{}", path, death,
                                             death.find("127") != std::string::npos ? fmt::format(" (could not execute {})", impl->options_.host_path) : ""),
                                 worker->output()));
  }
  json hello;
  try {
    hello = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("plugin {}: malformed hello from the worker: {}", path, e.what()));
  }
  if (!hello.value("ok", false))
    throw InputError(with_output(fmt::format("plugin {}: cannot be loaded: {}", path, hello.value("error", std::string("?"))), worker->output()));
  impl->info_ = hello.at("info").get<PluginInfo>();
  impl->info_.path = impl->path_;
  // Results are keyed by implementation name everywhere (verify.json, the report's merge, bench
  // families, gate): a plugin under a built-in's name would merge with it there.
  const auto& builtin = builtin_implementation_names();
  if (std::find(builtin.begin(), builtin.end(), impl->info_.name) != builtin.end())
    throw InputError(fmt::format("plugin {}: its name '{}' is a built-in implementation's; results are keyed by implementation name, so "
                                 "its records would merge with the built-in's in reports: give the plugin another name "
                                 "(the name in its description; reserved: {})",
                                 path, impl->info_.name, fmt::join(builtin, ", ")));
  if (impl->info_.cuda && !hello.at("cuda").value("available", false)) impl->unavailable_ = hello.at("cuda").value("reason", std::string("no CUDA device"));
  const json memory = hello.value("memory_limit", json::object());
  impl->memory_limit_ = memory.value("bytes", std::uint64_t{0});
  // A limit at or below what the worker already holds leaves no room for any case's buffers: the
  // harness's own mappings would fail, and every case would read as the plugin's failure.
  const std::uint64_t in_use = memory.value("in_use_bytes", std::uint64_t{0});
  constexpr std::uint64_t room = std::uint64_t{64} << 20;
  if (impl->memory_limit_ > 0 && in_use > 0 && impl->memory_limit_ < in_use + room)
    throw InputError(fmt::format("plugin {}: --plugin-memory-limit {} leaves the worker no room: it already holds {} of address space "
                                 "with the plugin loaded, and each case's buffers are mapped on top of that; give it at least {}",
                                 path, format_bytes(impl->memory_limit_), format_bytes(in_use), format_bytes(in_use + room)));
  if (impl->memory_limit_ > 0)
    impl->memory_description_ = fmt::format("{} of address space per worker (RLIMIT_AS; {})", format_bytes(impl->memory_limit_), limit_basis);
  else if (*impl->options_.memory_limit_bytes == 0)
    impl->memory_description_ = "none (--plugin-memory-limit none)";
  else
    impl->memory_description_ = fmt::format("none: {}", memory.value("note", std::string("the worker did not apply it")));
  // The sandbox: the namespaces the harness made, then what the worker set up inside them.
  impl->sandbox_bounds_ = worker->spawn_bounds();
  for (const json& b : hello.value("sandbox", json::array()))
    impl->sandbox_bounds_.push_back({b.value("name", std::string()), b.value("applied", false), b.value("detail", std::string())});
  impl->worker_ = std::move(worker);
  impl->workers_started_ = 1;
  return impl;
}

std::string PluginImplementation::sandbox_description() const {
  if (!options_.sandbox) return "off (--sandbox=off: the plugin runs with the harness's rights, processes and network)";
  return sandbox::describe(sandbox_bounds_);
}

json PluginImplementation::sandbox_json() const {
  json bounds = json::array();
  for (const auto& b : sandbox_bounds_) bounds.push_back({{"bound", b.name}, {"applied", b.applied}, {"detail", b.detail}});
  return {{"enabled", options_.sandbox}, {"bounds", bounds}};
}

PluginImplementation::PluginImplementation(std::string path, PluginOptions options) : path_(std::move(path)), options_(std::move(options)) {}
PluginImplementation::~PluginImplementation() = default;

std::string PluginImplementation::given_up_reason() const {
  std::lock_guard lock(mutex_);
  return given_up_;
}

int PluginImplementation::timed_out_calls() const {
  std::lock_guard lock(mutex_);
  return timeouts_;
}

// Called with the mutex held, for each call cut off by the timeout (a load, supports() or run()).
// A plugin that hangs on every call would otherwise cost a timeout per case and per property
// draw: two in a row, and it gets no more calls.
void PluginImplementation::count_timeout(const std::string& where) const {
  ++timeouts_;
  if (++consecutive_timeouts_ >= timeouts_before_giving_up && given_up_.empty())
    given_up_ = fmt::format("the plugin timed out on {} consecutive calls ({} each; the last in {}): it gets no more calls",
                            consecutive_timeouts_, seconds_text(options_.timeout_seconds), where);
}

// The evidence that a failed call ran into the worker's memory limit: an operator new refused,
// or a peak address space within an eighth of the limit (a runaway allocation reaches the limit
// in steps, and fails at the step that would cross it).
std::string PluginImplementation::memory_note(std::int32_t allocation_failed, std::uint64_t vm_peak_kib) const {
  if (memory_limit_ == 0) return "";
  const std::uint64_t peak = vm_peak_kib * 1024;
  if (allocation_failed == 0 && peak + memory_limit_ / 8 < memory_limit_) return "";
  const std::string peak_text = peak > 0 ? fmt::format(", peak {}", format_bytes(peak)) : "";
  if (allocation_failed != 0)
    return fmt::format("an allocation (operator new) was refused: the worker is limited to {} of address space (RLIMIT_AS; "
                       "--plugin-memory-limit sets it){}",
                       format_bytes(memory_limit_), peak_text);
  return fmt::format("the worker was at its memory limit of {} of address space (RLIMIT_AS; --plugin-memory-limit sets it){}",
                     format_bytes(memory_limit_), peak_text);
}

Worker& PluginImplementation::worker() const {
  if (worker_) return *worker_;
  if (!given_up_.empty()) throw std::runtime_error(given_up_);
  auto w = std::make_unique<Worker>(options_.host_path, path_, *options_.memory_limit_bytes, options_.sandbox);
  std::string text;
  const auto got = w->wait_for_message(options_.timeout_seconds, text);
  if (got != Received::message) {
    if (got == Received::timed_out) count_timeout("loading the plugin");
    const std::string death = got == Received::timed_out ? "timed out loading" : w->reap();
    throw std::runtime_error(with_output(fmt::format("restarting the plugin worker failed: it {}", death), w->output()));
  }
  const json hello = json::parse(text);
  if (!hello.value("ok", false))
    throw std::runtime_error(with_output(fmt::format("restarting the plugin worker failed: {}", hello.value("error", std::string("?"))), w->output()));
  worker_ = std::move(w);
  ++workers_started_;
  return *worker_;
}

Capabilities PluginImplementation::describe() const {
  Capabilities caps = to_capabilities(info_);
  caps.masked_nonfinite_safe = caps.masked_nonfinite_safe || options_.masked_nonfinite_safe;
  if (options_.matmul_precision) caps.matmul_precision = *options_.matmul_precision;
  if (options_.accumulation_precision) caps.accumulation_precision = *options_.accumulation_precision;
  return caps;
}

Support PluginImplementation::supports(const Problem& problem) const {
  if (!unavailable_.empty()) return Support::no(unavailable_);
  {
    std::lock_guard lock(mutex_);
    if (!given_up_.empty()) return Support::no(given_up_);
  }
  if (Support s = check_capabilities(info_, problem); !s.ok) return s;
  if (!info_.has_supports) return Support::yes();
  std::lock_guard lock(mutex_);
  try {
    const json request = {{"op", "supports"},
                          {"call", describe_call(problem)},
                          {"tensors", plan_tensors(problem, *handover_layout(info_, problem), info_.has(ATTNBENCH_FEATURE_LSE))}};
    Exchange x = exchange(worker(), request, -1, options_.timeout_seconds);
    if (x.kind == Exchange::Kind::reply) {
      consecutive_timeouts_ = 0;
      Support answer = Support::yes();
      if (!x.reply.value("supported", false)) {
        const std::string why = x.reply.value("why", std::string());
        answer = Support::no(why.empty() ? "the plugin's supports() declined (no reason given)" : "plugin: " + why);
      }
      // Processes left running are a defect of the plugin, not of the problem: the case fails.
      if (x.reply.contains("leftover")) pending_failure_ = with_output(x.reply.at("leftover").get<std::string>(), x.output);
      return answer;
    }
    worker_.reset();
    // Not a skip: a supports() that crashes is a defect, reported by the run that follows.
    if (x.kind == Exchange::Kind::timed_out) {
      count_timeout("supports()");
      pending_failure_ = with_output(fmt::format("the plugin's supports() timed out after {} (worker killed with its process group){}",
                                                 seconds_text(options_.timeout_seconds),
                                                 given_up_.empty() ? "" : "; a second consecutive timeout: the plugin gets no more calls"),
                                     x.output);
    } else {
      consecutive_timeouts_ = 0;
      pending_failure_ = with_output(fmt::format("the plugin's supports() {}", x.death), x.output);
    }
  } catch (const std::exception& e) {
    pending_failure_ = e.what();
  }
  return Support::yes();
}

void PluginImplementation::run(const RunArgs& args) const { call(args, 0, 0); }

std::vector<double> PluginImplementation::timed_runs(const Problem& problem, const CaseInputs& inputs, int warmup, int iterations) const {
  Tensor out = make_output(problem), lse = make_lse(problem);
  return call(RunArgs{problem, inputs, RoleTensors::forward(inputs, out, info_.has(ATTNBENCH_FEATURE_LSE) ? &lse : nullptr), {}},
              std::max(warmup, 0), std::max(iterations, 1));
}

std::vector<double> PluginImplementation::call(const RunArgs& given, int warmup, int iterations) const {
  std::lock_guard lock(mutex_);
  if (!pending_failure_.empty()) {
    const std::string failure = std::move(pending_failure_);
    pending_failure_.clear();
    throw std::runtime_error(failure);
  }
  if (!unavailable_.empty()) throw std::runtime_error(unavailable_);
  if (!given_up_.empty()) throw std::runtime_error(given_up_);
  if (std::string late = written_after_return(); !late.empty()) {
    worker_.reset();  // with the thread that wrote
    last_call_.reset();
    throw std::runtime_error(fmt::format("before this call: {} (this case did not run)", late));
  }
  last_call_.reset();
  const Problem& p = given.problem;
  const bool forward = p.operation == Operation::forward;
  // A plugin that declares dropout writes its keep mask in every forward call with dropout_p > 0:
  // one is handed to it whether the caller asked for it or not (then into a scratch tensor).
  Tensor scratch_keep;
  RunArgs a{given.problem, given.inputs, given.tensors, given.workspace, given.threads};
  if (forward && p.dropout.enabled() && a.tensors.output(Role::keep) == nullptr) {
    scratch_keep = make_keep(p);
    a.tensors.set_output(Role::keep, &scratch_keep);
  }
  const std::optional<Layout> layout = handover_layout(info_, p);
  if (!layout) throw std::runtime_error("the plugin declares no layout attnbench can pass (BHSD, BSHD or strided)");
  // The forward's LSE is written when the plugin fills one and it is wanted; a backward is handed
  // the LSE its forward returned, when it returned one.
  const bool with_lse =
      forward ? info_.has(ATTNBENCH_FEATURE_LSE) && a.tensors.output(Role::lse) != nullptr : a.tensors.input(Role::lse) != nullptr;
  const std::vector<TensorSpec> specs = plan_tensors(p, *layout, with_lse);
  const std::vector<Item> items = call_items(specs, a);

  std::vector<ArenaBuffer> wanted;
  for (const auto& it : items) wanted.push_back({it.name, 0, item_bytes(it), 0, it.element});
  auto arena_owner = std::make_unique<SharedArena>(ArenaLayout::plan(wanted, std::size_t(sysconf(_SC_PAGESIZE))));
  SharedArena& arena = *arena_owner;
  for (const auto& it : items) copy_in(it, arena.data(arena.layout().buffer(it.name)));
  const json request = {{"op", "run"},        {"call", describe_call(p)}, {"tensors", specs}, {"layout", arena.layout()},
                        {"warmup", warmup},   {"iterations", iterations}};
  Exchange x = exchange(worker(), request, arena.fd(), options_.timeout_seconds);
  // Where it was when it died or hung, as the worker last recorded it.
  const std::string where = phase_name(arena.status().phase);
  const StatusPage& status = arena.status();
  if (x.kind == Exchange::Kind::timed_out) {
    worker_.reset();
    count_timeout(where);
    throw std::runtime_error(with_output(fmt::format("the plugin timed out after {} in {} (worker killed with its process group; {})",
                                                     seconds_text(options_.timeout_seconds), where,
                                                     given_up_.empty() ? "the next call starts a new one"
                                                                       : "a second consecutive timeout: the plugin gets no more calls"),
                                         x.output));
  }
  consecutive_timeouts_ = 0;
  const std::string memory = memory_note(status.allocation_failed, status.vm_peak_kib);
  if (x.kind == Exchange::Kind::died) {
    worker_.reset();
    // A thread of this very call that wrote after run() returned, before the worker replied (the
    // buffers are read-only from the return on): named as such, like a late write seen later.
    if (std::string late = late_access(arena.layout(), specs, status, p.repro()); !late.empty())
      throw std::runtime_error(with_output(late, x.output));
    std::string message = fmt::format("the plugin {} in {}", x.death, where);
    const FaultRecord& fault = status.fault;
    if (fault.magic == FaultRecord::valid) {
      if (auto d = arena.layout().describe_fault(fault.offset, fault.access))
        message += ": " + *d;
      else
        message += fmt::format(": faulted inside the arena at byte {} (not a guard page)", fault.offset);
    }
    if (!memory.empty()) message += "; " + memory;
    if (const std::string refused(status.refusals, strnlen(status.refusals, sizeof status.refusals)); !refused.empty())
      message += "; before that, " + refused;
    throw std::runtime_error(with_output(message, x.output));
  }

  std::vector<std::string> problems;
  if (x.reply.contains("cuda_error")) {
    problems.push_back(x.reply.at("cuda_error").get<std::string>() + " (the worker restarts)");
    worker_.reset();
  }
  if (x.reply.value("harness_error", false))
    problems.push_back(fmt::format("the harness could not run the plugin on this case (the plugin did not run): {}{}",
                                   x.reply.value("error", std::string()),
                                   memory_limit_ > 0 ? fmt::format("; raise --plugin-memory-limit ({} now)", format_bytes(memory_limit_)) : ""));
  else if (const int status = x.reply.value("status", -1); status != 0)
    problems.push_back(fmt::format("the plugin's run() returned status {}: {}", status,
                                   x.reply.value("error", std::string()).empty() ? "(no message)" : x.reply.value("error", std::string())));
  for (const auto& message : x.reply.value("problems", json::array())) problems.push_back(message.get<std::string>());
  for (const auto& it : items) {
    const ArenaBuffer& b = arena.layout().buffer(it.name);
    if (auto slack = arena.layout().check_slack(arena.base(), b)) problems.push_back(*slack);
    if (it.destination == nullptr) {
      if (std::string changed = compare_input(it, arena.data(b)); !changed.empty()) problems.push_back(changed);
    } else {
      copy_out(it, arena.data(b));
    }
  }
  if (problems.empty())  // unwritten elements are meaningful only when the call claims success
    for (const auto& it : items) {
      if (it.destination == nullptr) continue;
      const Tensor& out = *a.tensors.output(it.role);
      if (std::string u = it.role == Role::keep ? unwritten_keep(p, a.inputs.mask, out) : unwritten_output(out, it.role, it.name); !u.empty())
        problems.push_back(u);
    }
  if (!problems.empty()) {
    if (!memory.empty()) problems.push_back(memory);
    throw std::runtime_error(with_output(fmt::format("{}", fmt::join(problems, "; ")), x.output));
  }
  last_call_ = LastCall{std::move(arena_owner), specs, p.repro(), x.reply.value("threads_left", 0) > 0};
  std::vector<double> times;
  for (const auto& t : x.reply.value("times", json::array())) times.push_back(t.get<double>());
  return times;
}


std::string PluginImplementation::written_after_return() const {
  if (!last_call_) return "";
  return late_access(last_call_->arena->layout(), last_call_->specs, last_call_->arena->status(), last_call_->repro);
}

std::string PluginImplementation::late_problems() const {
  std::lock_guard lock(mutex_);
  // A call that left threads of its own running (a thread pool's first call, or a thread still
  // at work) gets a moment for a late write to show.
  if (last_call_ && last_call_->threads_left)
    for (int i = 0; i < 20 && written_after_return().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::string late = written_after_return();
  if (!late.empty()) {
    worker_.reset();
    last_call_.reset();
  }
  return late;
}

}  // namespace attn::plugin
