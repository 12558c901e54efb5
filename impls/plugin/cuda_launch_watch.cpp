// The CUDA plugin's launch errors, from every runtime in the worker (cuda_launch_watch.hpp).
#include "impls/plugin/cuda_launch_watch.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#if __has_include(<cupti_callbacks.h>)
#include <cupti_callbacks.h>
#include <cupti_runtime_cbid.h>
#define ATTN_HAVE_CUPTI_HEADERS 1
#else
#define ATTN_HAVE_CUPTI_HEADERS 0
#endif

namespace attn::plugin::cuda_launch_watch {
namespace {

// A launch that returned an error on `thread`, with no cudaGetLastError on that thread since.
struct FailedLaunch {
  std::thread::id thread;
  int error = 0;
  std::string function;  // the runtime call (cudaLaunchKernel, cudaLaunchKernelExC, ...)
  std::string kernel;    // demangled, "" when CUPTI names none (a graph launch)
  int later_failures = 0;
};

constexpr std::size_t max_log_messages = 8, max_log_message_chars = 300;

struct State {
  std::atomic<bool> armed{false};
  std::mutex mutex;
  std::vector<FailedLaunch> pending;    // at most one per thread: the first failure
  std::vector<std::string> driver_log;  // the driver's messages while armed, bounded
  std::size_t driver_log_dropped = 0;
  // The plugin's own runtime, where its library exports one other than the worker's.
  cudaError_t (*plugin_get_last_error)() = nullptr;
  const char* (*plugin_error_name)(cudaError_t) = nullptr;
  const char* (*plugin_error_string)(cudaError_t) = nullptr;
};

// Never destroyed: CUPTI and the driver may call back while the process exits.
State& state() {
  static State* s = new State;
  return *s;
}

std::string demangled(const char* symbol) {
  if (symbol == nullptr) return "";
  int status = 0;
  char* name = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  std::string result = status == 0 && name != nullptr ? name : symbol;
  std::free(name);
  return result;
}

#if CUDART_VERSION >= 12090
void CUDA_CB on_driver_log(void*, CUlogLevel level, char* message, size_t length) {
  State& s = state();
  if (!s.armed.load(std::memory_order_acquire) || message == nullptr) return;
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  if (text.size() > max_log_message_chars) text = text.substr(0, max_log_message_chars) + "...";
  if (level == CU_LOG_LEVEL_WARNING) text = "warning: " + text;
  std::lock_guard lock(s.mutex);
  if (s.driver_log.size() < max_log_messages)
    s.driver_log.push_back(std::move(text));
  else
    ++s.driver_log_dropped;
}

void start_driver_log() {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuLogsRegisterCallback", &entry, 12090, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || entry == nullptr) {
    cudaGetLastError();  // an older driver: no log, and no error left behind for the first call to inherit
    return;
  }
  using Register = CUresult (*)(CUlogsCallback, void*, CUlogsCallbackHandle*);
  CUlogsCallbackHandle handle = nullptr;
  reinterpret_cast<Register>(entry)(on_driver_log, nullptr, &handle);
}
#else
void start_driver_log() {}
#endif

#if ATTN_HAVE_CUPTI_HEADERS
using Subscribe = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using EnableCallback = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);

// Every runtime call that enqueues work and can fail at the launch.
constexpr CUpti_CallbackId launches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
#if CUDART_VERSION >= 11060
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
#endif
#if CUDART_VERSION >= 13000
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
#endif
};

// Called by whichever copy of the runtime made the call, on the calling thread.
void CUPTIAPI on_runtime_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  State& s = state();
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || !s.armed.load(std::memory_order_acquire)) return;
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  if (call->callbackSite != CUPTI_API_EXIT) return;
  const std::thread::id thread = std::this_thread::get_id();
  const auto same_thread = [&](const FailedLaunch& f) { return f.thread == thread; };
  std::lock_guard lock(s.mutex);
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020) {  // reads and clears this thread's last error
    std::erase_if(s.pending, same_thread);
    return;
  }
  const int error = call->functionReturnValue != nullptr ? *static_cast<const int*>(call->functionReturnValue) : 0;
  if (error == 0) return;  // a launch that worked clears nothing
  for (auto& f : s.pending)
    if (same_thread(f)) {
      ++f.later_failures;
      return;
    }
  s.pending.push_back({thread, error, call->functionName != nullptr ? call->functionName : "a launch", demangled(call->symbolName), 0});
}

// libcupti of this CUDA major version: on the loader's path, beside the worker's libcudart (a
// flat layout), or in the toolkit's extras/CUPTI (the standard one).
void* open_cupti() {
  const std::string soname = fmt::format("libcupti.so.{}", CUDART_VERSION / 1000);
  std::vector<std::string> candidates{soname};
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetLastError), &where) != 0 && where.dli_fname != nullptr) {
    const std::string runtime = where.dli_fname;
    if (const auto slash = runtime.rfind('/'); slash != std::string::npos && runtime.find("libcudart", slash) != std::string::npos) {
      const std::string directory = runtime.substr(0, slash);
      candidates.push_back(directory + "/" + soname);
      candidates.push_back(directory + "/../extras/CUPTI/lib64/" + soname);
    }
  }
#ifdef ATTN_CUPTI_LIBRARY
  candidates.push_back(ATTN_CUPTI_LIBRARY);  // where the build found it
#endif
  for (const auto& path : candidates)
    if (void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  return nullptr;
}

void start_cupti() {
  // A profiler injected into this process (Nsight Systems, Nsight Compute) holds CUPTI's one
  // subscriber: leave it to the profiler.
  if (std::getenv("CUDA_INJECTION64_PATH") != nullptr) return;
  void* cupti = open_cupti();
  if (cupti == nullptr) return;
  const auto subscribe = reinterpret_cast<Subscribe>(dlsym(cupti, "cuptiSubscribe"));
  const auto enable = reinterpret_cast<EnableCallback>(dlsym(cupti, "cuptiEnableCallback"));
  if (subscribe == nullptr || enable == nullptr) return;
  CUpti_SubscriberHandle subscriber = nullptr;
  if (subscribe(&subscriber, on_runtime_call, nullptr) != CUPTI_SUCCESS) return;
  enable(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020);
  for (CUpti_CallbackId id : launches) enable(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);  // an id this CUPTI lacks is refused alone
}
#else
void start_cupti() {}
#endif

template <class T> T plugin_symbol(void* library, const char* name) { return reinterpret_cast<T>(dlsym(library, name)); }

std::string pending_in(const char* runtime, const char* name, const char* text) {
  return fmt::format("CUDA error after run() ({}): {}: {}", runtime, name, text);
}

}  // namespace

void start(void* plugin_library) {
  State& s = state();
  // dlsym on the plugin's handle searches the plugin and the libraries it loaded: a shared
  // runtime other than the worker's is found; a static one's symbols are local, never found.
  if (auto get = plugin_symbol<cudaError_t (*)()>(plugin_library, "cudaGetLastError");
      get != nullptr && reinterpret_cast<void*>(get) != reinterpret_cast<void*>(&cudaGetLastError)) {
    s.plugin_get_last_error = get;
    s.plugin_error_name = plugin_symbol<const char* (*)(cudaError_t)>(plugin_library, "cudaGetErrorName");
    s.plugin_error_string = plugin_symbol<const char* (*)(cudaError_t)>(plugin_library, "cudaGetErrorString");
  }
  start_cupti();
  start_driver_log();
}

void arm() {
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    s.pending.clear();
    s.driver_log.clear();
    s.driver_log_dropped = 0;
  }
  s.armed.store(true, std::memory_order_release);
}

std::string take() {
  State& s = state();
  s.armed.store(false, std::memory_order_release);  // before the worker's own cudaGetLastError below, which CUPTI also reports
  std::vector<FailedLaunch> pending;
  std::vector<std::string> log;
  std::size_t dropped = 0;
  {
    std::lock_guard lock(s.mutex);
    pending.swap(s.pending);
    log.swap(s.driver_log);
    dropped = s.driver_log_dropped;
  }
  std::string failure;
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) failure = pending_in("a launch", cudaGetErrorName(e), cudaGetErrorString(e));
  if (s.plugin_get_last_error != nullptr)
    if (const cudaError_t e = s.plugin_get_last_error(); e != cudaSuccess && failure.empty()) {
      const std::string code = fmt::format("CUDA error {}", int(e));
      failure = pending_in("a launch left pending in the plugin's own CUDA runtime", s.plugin_error_name != nullptr ? s.plugin_error_name(e) : code.c_str(),
                           s.plugin_error_string != nullptr ? s.plugin_error_string(e) : "");
    }
  if (!pending.empty()) {
    const FailedLaunch& f = pending.front();
    const std::string what = fmt::format("{}{} failed{} and the plugin did not call cudaGetLastError after it", f.function,
                                         f.kernel.empty() ? "" : " of " + f.kernel,
                                         f.later_failures > 0 ? fmt::format(" (then {} more call(s) on that thread)", f.later_failures) : "");
    // The error code is the runtime's enum, the same in every copy of the runtime.
    const auto code = static_cast<cudaError_t>(f.error);
    if (failure.empty())
      failure = pending_in("a launch left pending in the plugin's own CUDA runtime", cudaGetErrorName(code), cudaGetErrorString(code)) + " (" + what + ")";
    else
      failure += " (" + what + ")";
  }
  if (failure.empty()) return failure;  // errors the plugin handled itself are its business, logged or not
  if (!log.empty())
    failure += fmt::format("; the CUDA driver logged: {}{}", fmt::join(log, "; "), dropped > 0 ? fmt::format(" (and {} more)", dropped) : "");
  return failure;
}

}  // namespace attn::plugin::cuda_launch_watch
