#include "core/memory.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <sys/resource.h>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

std::optional<double> available_memory_bytes() {
  std::optional<double> available;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") available = kib * 1024.0;
  }
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit limit{};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      available = std::min(available.value_or(INFINITY), double(limit.rlim_cur));
  }
  return available;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (bytes >= 1024.0 && unit + 1 < std::size(units)) bytes /= 1024.0, ++unit;
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.3g} {}", bytes, units[unit]);
}

void check_memory_fits(double bytes, std::string_view what) {
  const auto available = available_memory_bytes();
  if (available && !(bytes <= *available))
    throw InputError(fmt::format("{} needs about {} of memory; {} is available here", what, format_bytes(bytes), format_bytes(*available)));
}

}  // namespace attn
