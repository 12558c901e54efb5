#pragma once
// What the plugin worker (plugin_host_main.cpp) sees of a CUDA plugin's kernel launches.
//
// A kernel launch that fails (too much dynamic shared memory without
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), a block too large, no
// kernel image for the device) does not run, and its error waits in the CUDA runtime's last
// error (per thread) until someone calls cudaGetLastError. nvcc links the runtime statically
// into a plugin by default (cudart_static): the plugin then has its own copy, whose last error
// the worker's runtime (the shared libcudart) never sees, and whose symbols are local to the
// plugin (`nm -D` lists none of them), so dlsym cannot reach them either. Such a failure used to
// read as a numeric one (every output still poison). The watch asks every source there is:
//
// - the worker's own runtime (a plugin linked with `-cudart shared` of this CUDA version shares
//   it);
// - the plugin's cudaGetLastError where its library exports a different one (dlsym on its
//   handle: a plugin linked with another CUDA version's shared runtime);
// - CUPTI's runtime API callbacks (libcupti, loaded at run time), which every copy of the runtime
//   in the process reports to, the static ones included: a launch that returned an error with
//   no cudaGetLastError on that thread after it (a pending error, as the plugin's runtime holds
//   it). Where libcupti is not found, or a profiler (CUDA_INJECTION64_PATH) holds CUPTI, this
//   source is missing and a static plugin's launch error still reads as unwritten outputs;
// - the driver's error log (cuLogsRegisterCallback, drivers of CUDA 12.9 and later), whose
//   messages name the cause ("Requested dynamic shared memory size of 65536 bytes exceeds
//   maximum dynamic shared memory size of 49152 bytes"): added to a failure, never one itself.
//
// Only what happens between arm() and take() (the plugin's run() calls) is recorded.
#include <string>

namespace attn::plugin::cuda_launch_watch {

// Once, for a CUDA plugin, after its library is loaded (its dlopen handle).
void start(void* plugin_library);
// Before each run().
void arm();
// After each run(): the launch error the plugin left pending, as the failure of the call
// ("CUDA error after run() (...): cudaErrorInvalidValue: invalid argument (...)"), or "" when
// none. Every runtime asked is cleared; the plugin's static runtime cannot be (only a fresh
// worker clears it, which is why every CUDA error restarts the worker).
std::string take();

}  // namespace attn::plugin::cuda_launch_watch
