#include "records/context.hpp"

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "records/device_info.hpp"
#include "git_revision.hpp"  // generated at build time

namespace attn {
namespace {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

// The first "cpu MHz" line of /proc/cpuinfo (the clock when the run started), or null.
nlohmann::json cpu_mhz() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      try {
        if (colon != std::string::npos) return std::stod(line.substr(colon + 1));
      } catch (const std::exception&) {
        return nullptr;
      }
    }
  return nullptr;
}

// The NVIDIA kernel driver's version ("550.54.15") from /proc/driver/nvidia/version, or null.
nlohmann::json nvidia_driver_version() {
  std::ifstream version("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(version, line)) return nullptr;
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
  const auto module = line.find("Kernel Module");
  if (module == std::string::npos) return nullptr;
  const auto begin = line.find_first_not_of(' ', module + 13);
  if (begin == std::string::npos) return nullptr;
  return line.substr(begin, line.find(' ', begin) - begin);
}

// The GPU part of the context: model, compute capability, clocks, CUDA driver and runtime
// versions, or why there is no device.
nlohmann::json gpu_context() {
  const DeviceStatus d = gpu_device_info();
  if (!d.available) return {{"available", false}, {"reason", d.reason}, {"nvidia_driver", nvidia_driver_version()}};
  return {{"available", true},
          {"name", d.name},
          {"compute_capability", std::to_string(d.sm_major) + "." + std::to_string(d.sm_minor)},
          {"sm_count", d.multiprocessors},
          {"max_sm_clock_mhz", d.sm_clock_mhz},
          {"memory_clock_mhz", d.memory_clock_mhz},
          {"memory_gib", d.memory_gib},
          {"nvidia_driver", nvidia_driver_version()},
          {"cuda_driver_version", d.driver_version},
          {"cuda_runtime_version", d.runtime_version}};
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace

std::string build_revision() { return ATTN_GIT_REVISION; }

nlohmann::json run_context(int threads) {
  return {{"git_revision", ATTN_GIT_REVISION},
          {"build_type", ATTN_BUILD_TYPE},
          {"compiler", ATTN_COMPILER},
          {"compiler_flags", ATTN_COMPILER_FLAGS},
          {"cpu_model", cpu_model()},
          {"cpu_cores", std::thread::hardware_concurrency()},
          {"cpu_mhz", cpu_mhz()},
          {"threads", threads},
          {"gpu", gpu_context()},
          {"date", utc_now()}};
}

}  // namespace attn
