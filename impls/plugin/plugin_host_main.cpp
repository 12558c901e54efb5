// attnbench-plugin-host: the worker process that loads a plugin and makes its calls, so that a
// crash, an abort or a hang takes down this process and never the harness. Started by
// PluginImplementation (plugin_implementation.hpp) as `attnbench-plugin-host PLUGIN.so` with a
// Unix socket on descriptor 3; it answers one hello (the plugin's description, or why it could
// not be loaded), then one reply per request until the socket closes.
//
// The plugin speaks ABI version 2 (attnbench_plugin.h), or version 1 through the shim
// (abi_v1_shim.hpp); either way this file calls version 2 entry points.
//
// Requests (JSON, worker_channel.hpp): {"op": "supports", "call", "tensors"} and {"op": "run",
// "call", "tensors", "layout", "warmup", "iterations"} with the shared arena's descriptor; "call"
// and "tensors" are the problem as data (call_description.hpp), never a string parsed back. A run maps
// the arena, makes its guard pages PROT_NONE and calls the plugin on views into it (a CUDA
// plugin: on device copies with canaries around every buffer, copied back after the call). With
// iterations > 0 it makes `warmup` then `iterations` calls and times the latter itself (CUDA:
// events on the stream), so a benchmark measures the plugin and not this process's messages or
// copies.
//
// Bounds (impls/plugin/README.md, "Isolation"): the worker is its process group's leader and the
// subreaper of everything the plugin starts, so after each call it finds and kills any process the
// plugin left running (that call fails, naming them); with --memory-limit it limits its own
// address space (RLIMIT_AS) once the plugin is loaded; its stdout and stderr are a pipe the
// harness drains into a bounded buffer, flushed after each call so the output of a call arrives
// before its reply.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "impls/plugin/abi_v1_shim.hpp"
#include "impls/plugin/call_description.hpp"
#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "impls/plugin/worker_channel.hpp"
#include "impls/plugin/worker_process.hpp"
#include "impls/sandbox/sandbox.hpp"

#if ATTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "impls/plugin/cuda_launch_watch.hpp"
#endif

namespace {

using attn::plugin::ArenaLayout;
using attn::plugin::Phase;
using attn::plugin::StatusPage;
using nlohmann::json;

constexpr int socket_fd = 3;
constexpr int exit_load_failed = 3;

// What the fault handler needs, set around each run.
std::byte* volatile arena_base = nullptr;
volatile std::size_t arena_size = 0;

// VmPeak of this process in KiB, read with system calls alone: it runs in signal handlers.
std::uint64_t read_vm_peak_kib() {
  static char text[16384];
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t n = 0;
  for (ssize_t got; n + 1 < sizeof text && (got = ::read(fd, text + n, sizeof text - 1 - n)) > 0;) n += std::size_t(got);
  ::close(fd);
  static const char key[] = "VmPeak:";
  for (std::size_t i = 0; i + sizeof key < n; ++i) {
    if (std::memcmp(text + i, key, sizeof key - 1) != 0) continue;
    std::size_t j = i + sizeof key - 1;
    while (j < n && (text[j] == ' ' || text[j] == '\t')) ++j;
    std::uint64_t kib = 0;
    while (j < n && text[j] >= '0' && text[j] <= '9') kib = kib * 10 + std::uint64_t(text[j++] - '0');
    return kib;
  }
  return 0;
}

// Into the status page, where the harness reads it when the call failed: how close the worker
// came to its memory limit.
void record_vm_peak() {
  std::byte* base = arena_base;
  if (base != nullptr) reinterpret_cast<StatusPage*>(base)->vm_peak_kib = read_vm_peak_kib();
}

// operator new failed (the memory limit, usually): recorded, then the usual std::bad_alloc.
void on_allocation_failure() {
  std::byte* base = arena_base;
  if (base != nullptr) reinterpret_cast<StatusPage*>(base)->allocation_failed = 1;
  record_vm_peak();
  throw std::bad_alloc();
}

void on_abort(int signal) {
  record_vm_peak();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

void on_fault(int signal, siginfo_t* info, void* context) {
  std::byte* base = arena_base;
  record_vm_peak();
  if (base != nullptr) {
    auto* status = reinterpret_cast<StatusPage*>(base);
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const auto start = reinterpret_cast<std::uintptr_t>(base);
    if (address >= start && address < start + arena_size) {
      status->fault.offset = address - start;
      status->fault.access = 0;
#if defined(__x86_64__) && defined(REG_ERR)
      // The page-fault error code: bit 1 set for a write.
      status->fault.access = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? 2 : 1;
#else
      (void)context;
#endif
      status->fault.signal = signal;
      status->fault.magic = attn::plugin::FaultRecord::valid;
    }
  }
  // Die of the same signal: the default action, delivered when this handler returns (a fault
  // also repeats when the instruction does).
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

void install_fault_handlers() {
  static std::vector<char> alternate_stack(1 << 16);  // a stack overflow still reaches the handler
  stack_t ss{};
  ss.ss_sp = alternate_stack.data();
  ss.ss_size = alternate_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  // A failed allocation often ends in abort() (an uncaught std::bad_alloc) or exit().
  struct sigaction abort_action{};
  abort_action.sa_handler = on_abort;
  abort_action.sa_flags = SA_ONSTACK;
  sigemptyset(&abort_action.sa_mask);
  sigaction(SIGABRT, &abort_action, nullptr);
  std::atexit(record_vm_peak);
  std::set_new_handler(on_allocation_failure);
}

// The processes a call left running, killed and reaped: the worker is the subreaper of what the
// plugin starts, so a grandchild whose parent exited, or a child that left the process group
// (setsid), is a child of the worker here. Returns the failure ("" when none was left): a
// process that outlives the call it was started in is beyond the harness's reach once the
// worker is gone, and keeps what it holds (a CPU, memory, a device).
std::string kill_leftovers(const char* after) {
  // The usual case costs one system call: no child at all (ECHILD). Otherwise zombies are reaped,
  // and a 0 says some child still runs; only then is /proc scanned.
  pid_t reaped;
  while ((reaped = waitpid(-1, nullptr, WNOHANG)) > 0) {
  }
  if (reaped < 0) return "";
  std::vector<pid_t> live = attn::plugin::children_of(getpid());
  if (live.empty()) return "";
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < live.size() && i < 3; ++i) shown.push_back(attn::plugin::describe_process(live[i]));
  std::size_t killed = 0;
  for (int round = 0; round < 100 && !live.empty(); ++round) {
    for (pid_t p : live) ::kill(p, SIGKILL);
    for (pid_t p : live) waitpid(p, nullptr, 0);
    killed += live.size();
    // The children of those just killed are the worker's now.
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    live = attn::plugin::children_of(getpid());
  }
  return fmt::format("the plugin left {} process(es) running after {}: {}{} (killed; a plugin must wait for every process it starts "
                     "before its call returns)",
                     killed, after, fmt::join(shown, ", "), killed > shown.size() ? ", ..." : "");
}

// The output a call produced, in the pipe before the reply that ends the call.
void flush_output() {
  std::fflush(stdout);
  std::fflush(stderr);
}

void reply(const json& message) {
  if (!attn::plugin::send_message(socket_fd, message.dump())) std::_Exit(0);  // the harness is gone
}

std::string terminated(const char* buffer, std::size_t size) { return std::string(buffer, strnlen(buffer, size)); }

// One run's call and, per tensor, its role and arena buffer.
struct Call {
  attn::plugin::AbiCall& abi;
  std::vector<std::pair<std::int32_t, const attn::plugin::ArenaBuffer*>> buffers;
};

// A plain run is one call; a timed batch is `warmup` untimed calls then `iterations` timed ones,
// the last call's output being the one the harness checks.
int calls(int warmup, int iterations) { return iterations > 0 ? warmup + iterations : 1; }

int call_plugin(const attnbench_plugin_v2& plugin, Call& call, char* error, std::size_t error_len) {
  return plugin.run(&call.abi.call(), error, error_len);
}

#if ATTN_HAVE_CUDA
std::string cuda_failure(cudaError_t e, const char* what) {
  return fmt::format("CUDA error {}: {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// The device side of a run: buffers with canary regions, inputs and poisoned outputs copied up,
// the call, a synchronisation, canaries checked, everything copied back into the arena (inputs
// too, so that the harness's unchanged-input check covers device memory). A CUDA error is
// sticky for this process: the reply says so and the worker exits after it. A launch error the
// plugin left pending (cuda_launch_watch.hpp: in the worker's runtime, the plugin's own, or seen
// by CUPTI) is the call's failure too; the device is still usable then, so the synchronisation,
// the canaries and the copy back still happen, and the worker still restarts (a static runtime
// in the plugin keeps its error, which no one outside it can clear).
json run_on_device(const attnbench_plugin_v2& plugin, Call& call, std::byte* base, int warmup, int iterations) {
  constexpr std::size_t canary = 256;
  json result = {{"status", 0}, {"error", ""}, {"problems", json::array()}, {"times", json::array()}};
  std::vector<void*> allocations(call.buffers.size(), nullptr);
  cudaStream_t stream = nullptr;
  std::string failure;
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && failure.empty()) failure = cuda_failure(e, what);
    return e == cudaSuccess;
  };
  bool ok = check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
  for (std::size_t t = 0; ok && t < call.buffers.size(); ++t) {
    const auto& b = *call.buffers[t].second;
    ok = check(cudaMalloc(&allocations[t], b.bytes + 2 * canary), "allocating device memory") &&
         check(cudaMemset(allocations[t], attn::plugin::canary_byte, b.bytes + 2 * canary), "filling canaries") &&
         check(cudaMemcpy(static_cast<char*>(allocations[t]) + canary, base + b.offset, b.bytes, cudaMemcpyHostToDevice), "copying up");
    attnbench_dl_tensor* view = call.abi.tensor(call.buffers[t].first);
    view->data = static_cast<char*>(allocations[t]) + canary;
    view->device = {ATTNBENCH_DL_CUDA, 0};
  }
  // The copies up ran on the legacy default stream, and from pageable memory cudaMemcpy may return
  // before they land: the plugin's non-blocking stream would not wait for them.
  ok = ok && check(cudaStreamSynchronize(cudaStreamLegacy), "waiting for the copies up");
  call.abi.call().cuda_stream = stream;
  char error[1024] = {};
  auto* status = reinterpret_cast<StatusPage*>(base);
  if (ok) {
    // Each call between two events on the plugin's stream: the time is the work it enqueued.
    cudaEvent_t start = nullptr, stop = nullptr;
    ok = check(cudaEventCreate(&start), "creating an event") && check(cudaEventCreate(&stop), "creating an event");
    status->phase = iterations > 0 ? Phase::bench : Phase::run;
    for (int i = 0; ok && i < calls(warmup, iterations); ++i) {
      ok = check(cudaEventRecord(start, stream), "recording an event");
      attn::plugin::cuda_launch_watch::arm();
      const int rc = call_plugin(plugin, call, error, sizeof error);
      std::string launch = attn::plugin::cuda_launch_watch::take();
      if (!launch.empty() && iterations > 0) launch = fmt::format("call {} of a timed batch: {}", i, launch);
      if (!launch.empty() && failure.empty()) failure = launch;
      ok = ok && check(cudaEventRecord(stop, stream), "recording an event") &&
           check(cudaStreamSynchronize(stream), "after run() (synchronising its stream)") &&
           check(cudaDeviceSynchronize(), "after run() (synchronising the device)");
      float ms = 0;
      ok = ok && check(cudaEventElapsedTime(&ms, start, stop), "reading an event");
      if (rc != 0) {
        result["status"] = rc;
        result["error"] = iterations > 0 ? fmt::format("call {} of a timed batch: {}", i, terminated(error, sizeof error)) : terminated(error, sizeof error);
        break;
      }
      if (!launch.empty()) break;  // the case has failed: no more calls, its buffers still checked and copied back
      if (ok && iterations > 0 && i >= warmup) result["times"].push_back(double(ms) * 1e-3);
    }
    status->phase = Phase::idle;
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
  std::vector<unsigned char> host;
  for (std::size_t t = 0; ok && t < call.buffers.size(); ++t) {
    const auto& b = *call.buffers[t].second;
    host.resize(b.bytes + 2 * canary);
    if (!check(cudaMemcpy(host.data(), allocations[t], host.size(), cudaMemcpyDeviceToHost), "copying back")) break;
    for (std::size_t i = canary; i-- > 0;)
      if (host[i] != attn::plugin::canary_byte) {
        result["problems"].push_back(fmt::format("wrote before the start of {} on the device: canary byte {} bytes before its first element changed",
                                                 b.name, canary - i));
        break;
      }
    for (std::size_t i = 0; i < canary; ++i)
      if (host[canary + b.bytes + i] != attn::plugin::canary_byte) {
        result["problems"].push_back(fmt::format("wrote past the end of {} on the device: canary byte at byte offset +{} after its last element changed",
                                                 b.name, i));
        break;
      }
    std::memcpy(base + b.offset, host.data() + canary, b.bytes);
  }
  for (void* p : allocations)
    if (p != nullptr) cudaFree(p);
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (!failure.empty()) {
    result["cuda_error"] = failure;
    result["restart"] = true;
  }
  return result;
}
#endif

// The previous call's arena stays mapped until the next call: a thread of that call that still
// writes into its output then writes where the harness sees it (and names it), not into an
// unmapped page that would crash the next, innocent call.
std::byte* previous_arena = nullptr;
std::size_t previous_arena_bytes = 0;

// Threads of this process now (entries of /proc/self/task).
int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  int n = 0;
  while (const dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

json run_request(const attnbench_plugin_v2& plugin, const attn::plugin::PluginInfo& info, const json& request, int fd) {
  arena_base = nullptr;  // the previous call's: no longer watched
  if (previous_arena != nullptr) munmap(previous_arena, previous_arena_bytes);
  previous_arena = nullptr;
  if (fd < 0) return {{"status", -1}, {"error", "attnbench-plugin-host: a run request came without its arena"}};
  const ArenaLayout layout = request.at("layout").get<ArenaLayout>();
  void* mapped = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED)  // the worker's own mapping, before the plugin runs: not the plugin's failure
    return {{"status", -1}, {"harness_error", true},
            {"error", fmt::format("attnbench-plugin-host: mapping the case's {} bytes of buffers failed: {}", layout.total, std::strerror(errno))}};
  auto* base = static_cast<std::byte*>(mapped);
  for (std::size_t g : layout.guards) mprotect(base + g, layout.page, PROT_NONE);

  const auto specs = request.at("tensors").get<std::vector<attn::plugin::TensorSpec>>();
  attn::plugin::AbiCall abi(request.at("call").get<attn::plugin::CallDescription>(), specs, plugin.context);
  Call call{abi, {}};
  for (const auto& spec : specs) {
    const auto& buffer = layout.buffer(spec.name);
    abi.tensor(spec.role)->data = base + buffer.offset;
    call.buffers.emplace_back(spec.role, &buffer);
  }
  const int warmup = request.value("warmup", 0), iterations = request.value("iterations", 0);

  json result;
  auto* status_page = reinterpret_cast<StatusPage*>(base);
  attn::sandbox::mirror_refusals(status_page->refusals, sizeof status_page->refusals);
#if ATTN_HAVE_CUDA
  if (info.cuda) result = run_on_device(plugin, call, base, warmup, iterations);
#endif
  if (!info.cuda) {
    arena_size = layout.total;
    arena_base = base;
    auto* status = reinterpret_cast<StatusPage*>(base);
    char error[1024] = {};
    result = {{"status", 0}, {"error", ""}, {"problems", json::array()}, {"times", json::array()}};
    status->phase = iterations > 0 ? Phase::bench : Phase::run;
    const int threads_before = thread_count();
    for (int i = 0; i < calls(warmup, iterations); ++i) {
      const auto start = std::chrono::steady_clock::now();
      const int rc = call_plugin(plugin, call, error, sizeof error);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (rc != 0) {
        result["status"] = rc;
        result["error"] = iterations > 0 ? fmt::format("call {} of a timed batch: {}", i, terminated(error, sizeof error)) : terminated(error, sizeof error);
        break;
      }
      if (iterations > 0 && i >= warmup) result["times"].push_back(seconds);
    }
    record_vm_peak();
    // The buffers read-only from here on (the guard pages stay inaccessible): a thread of the call
    // still writing faults, and the fault handler records it in this arena's status page, where
    // the harness finds it (arena_base stays set until the next call).
    status->phase = Phase::returned;
    mprotect(base + layout.page, layout.total - layout.page, PROT_READ);
    for (std::size_t g : layout.guards) mprotect(base + g, layout.page, PROT_NONE);
    if (const int left = thread_count() - threads_before; left > 0) result["threads_left"] = left;
  }
  flush_output();
  attn::sandbox::mirror_refusals(nullptr, 0);
  for (const std::string& refused : attn::sandbox::take_refusals()) result["problems"].push_back(refused);
  if (std::string left = kill_leftovers(iterations > 0 ? "a timed run()" : "run()"); !left.empty()) result["problems"].push_back(left);
  previous_arena = base;
  previous_arena_bytes = layout.total;
  return result;
}

json cuda_status() {
#if ATTN_HAVE_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return {{"available", false}, {"reason", fmt::format("no CUDA device: {}: {}", cudaGetErrorName(e), cudaGetErrorString(e))}};
  if (count == 0) return {{"available", false}, {"reason", "no CUDA device"}};
  return {{"available", true}, {"reason", ""}};
#else
  return {{"available", false}, {"reason", "this attnbench was built without CUDA (ATTN_CUDA=OFF or no nvcc)"}};
#endif
}

}  // namespace

// RLIMIT_AS on this process (and so on whatever the plugin forks), applied after the plugin is
// loaded: a CUDA plugin is known only then, and the CUDA driver reserves virtual address space
// beyond any useful limit. Both the soft and the hard limit, so the plugin cannot raise it.
json apply_memory_limit(std::uint64_t bytes, bool cuda) {
  json memory = {{"bytes", 0}, {"note", ""}};
  if (bytes == 0) return memory;
  if (const char* why = attn::plugin::address_space_limit_unavailable()) {
    memory["note"] = fmt::format("not applied: this is {}", why);
  } else if (cuda) {
    memory["note"] = "not applied: a CUDA plugin (the CUDA driver reserves more address space than any useful limit)";
  } else {
    // What this process (the worker and the loaded plugin) already holds: the limit has to leave
    // room above it for each case's buffers, which the worker maps before the plugin runs.
    memory["in_use_bytes"] = read_vm_peak_kib() * 1024;
    const rlimit limit{rlim_t(bytes), rlim_t(bytes)};
    if (setrlimit(RLIMIT_AS, &limit) != 0)
      memory["note"] = fmt::format("not applied: setrlimit(RLIMIT_AS) failed: {}", std::strerror(errno));
    else
      memory["bytes"] = bytes;
  }
  return memory;
}

int main(int argc, char** argv) {
  std::uint64_t memory_limit = 0;
  const char* scratch = nullptr;  // --sandbox: confined to it (impls/sandbox)
  bool usage_ok = argc >= 2;
  for (int i = 2; usage_ok && i < argc; i += 2) {
    if (i + 1 >= argc)
      usage_ok = false;
    else if (std::strcmp(argv[i], "--memory-limit") == 0)
      memory_limit = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--sandbox") == 0)
      scratch = argv[i + 1];
    else
      usage_ok = false;
  }
  if (!usage_ok) {
    std::fprintf(stderr, "usage: attnbench-plugin-host PLUGIN.so [--memory-limit BYTES] [--sandbox SCRATCH_DIR] (started by attnbench, with "
                         "its socket on descriptor 3)\n");
    return 2;
  }
  install_fault_handlers();
  // Whatever the plugin starts stays below this process even when its parent exits first, so
  // kill_leftovers finds it.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Not inherited by what the plugin executes: a program that held the socket open would hide
  // this worker's death from the harness until the timeout.
  fcntl(socket_fd, F_SETFD, FD_CLOEXEC);
  const std::string path = argv[1];
  auto fail = [&](const std::string& why) {
    flush_output();
    reply({{"ok", false}, {"error", why}});
    return exit_load_failed;
  };
  // Confined before the plugin's first instruction (its constructors run in dlopen).
  json sandbox_bounds = json::array();
  if (scratch != nullptr)
    for (const auto& b : attn::sandbox::confine({scratch, socket_fd}))
      sandbox_bounds.push_back({{"name", b.name}, {"applied", b.applied}, {"detail", b.detail}});
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return fail(fmt::format("dlopen failed: {}", dlerror()));
  void* symbol = dlsym(library, ATTNBENCH_PLUGIN_ENTRY_POINT);
  if (symbol == nullptr)
    return fail(fmt::format("no entry point: the library does not export {} ({})", ATTNBENCH_PLUGIN_ENTRY_POINT, dlerror()));
  // The newest version first; a plugin that does not speak it answers NULL and is asked for
  // version 1. What comes back says which it is by its first field (both versions start with
  // abi_version), so a plugin that ignores the argument is still read right.
  using Entry = const void* (*)(uint32_t);
  const auto entry = reinterpret_cast<Entry>(symbol);
  const void* answer = entry(ATTNBENCH_ABI_VERSION);
  if (answer == nullptr) answer = entry(attn::plugin::abi_version_1);
  if (answer == nullptr)
    return fail(fmt::format("ABI version mismatch: {}({}) and {}({}) returned NULL: the plugin speaks neither ABI version this attnbench speaks",
                            ATTNBENCH_PLUGIN_ENTRY_POINT, ATTNBENCH_ABI_VERSION, ATTNBENCH_PLUGIN_ENTRY_POINT, attn::plugin::abi_version_1));
  const std::uint32_t version = *static_cast<const std::uint32_t*>(answer);
  std::optional<attn::plugin::V1Shim> shim;
  const attnbench_plugin_v2* plugin = nullptr;
  if (version == ATTNBENCH_ABI_VERSION) {
    plugin = static_cast<const attnbench_plugin_v2*>(answer);
  } else if (version == attn::plugin::abi_version_1) {
    plugin = &shim.emplace(*static_cast<const attnbench_plugin_v1*>(answer)).plugin();
  } else {
    return fail(fmt::format("ABI version mismatch: the plugin describes itself as ABI version {}; this attnbench speaks versions {} and {}",
                            version, ATTNBENCH_ABI_VERSION, attn::plugin::abi_version_1));
  }
  attn::plugin::PluginInfo info;
  try {
    // The optional exported list of score modifications by name (attnbench_plugin.h).
    info = attn::plugin::read_plugin_info(*plugin, path, static_cast<const char*>(dlsym(library, ATTNBENCH_SCORE_MODIFICATIONS_SYMBOL)));
  } catch (const std::exception& e) {
    return fail(fmt::format("bad description: {}", e.what()));
  }
#if ATTN_HAVE_CUDA
  if (info.cuda) attn::plugin::cuda_launch_watch::start(library);
#endif
  const json memory = apply_memory_limit(memory_limit, info.cuda);
  const json cuda = info.cuda ? cuda_status() : json{{"available", false}, {"reason", ""}};
  if (const auto refused = attn::sandbox::take_refusals(); !refused.empty())
    return fail(fmt::format("while loading: {}", fmt::join(refused, "; ")));
  flush_output();
  reply({{"ok", true}, {"info", info}, {"cuda", cuda}, {"memory_limit", memory}, {"sandbox", sandbox_bounds}});

  for (;;) {
    std::string text;
    int fd = -1;
    const auto got = attn::plugin::receive_message(socket_fd, -1, text, &fd);
    if (got != attn::plugin::Received::message) return 0;
    json response;
    try {
      const json request = json::parse(text);
      const std::string op = request.at("op");
      if (op == "supports") {
        const attn::plugin::AbiCall abi(request.at("call").get<attn::plugin::CallDescription>(),
                                        request.at("tensors").get<std::vector<attn::plugin::TensorSpec>>(), plugin->context);
        char why[1024] = {};
        const int ok = plugin->supports != nullptr ? plugin->supports(&abi.call(), why, sizeof why) : 1;
        response = {{"supported", ok != 0}, {"why", terminated(why, sizeof why)}};
        flush_output();
        std::vector<std::string> failures = attn::sandbox::take_refusals();
        if (std::string left = kill_leftovers("supports()"); !left.empty()) failures.push_back(left);
        if (!failures.empty()) response["leftover"] = fmt::format("in supports(): {}", fmt::join(failures, "; "));
      } else if (op == "run") {
        response = run_request(*plugin, info, request, fd);
        fd = -1;
      } else {
        response = {{"status", -1}, {"error", fmt::format("attnbench-plugin-host: unknown request '{}'", op)}};
      }
    } catch (const std::exception& e) {
      response = {{"status", -1}, {"error", fmt::format("attnbench-plugin-host: bad request: {}", e.what())}};
    }
    if (fd >= 0) ::close(fd);
    reply(response);
    if (response.value("restart", false)) return 0;  // a sticky CUDA error: the harness starts a fresh worker
  }
}
