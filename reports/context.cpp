#include "reports/context.hpp"

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

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

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace

nlohmann::json run_context(int threads) {
  return {{"git_revision", ATTN_GIT_REVISION},
          {"build_type", ATTN_BUILD_TYPE},
          {"compiler", ATTN_COMPILER},
          {"compiler_flags", ATTN_COMPILER_FLAGS},
          {"cpu_model", cpu_model()},
          {"cpu_cores", std::thread::hardware_concurrency()},
          {"threads", threads},
          {"date", utc_now()}};
}

}  // namespace attn
