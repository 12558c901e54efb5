#include "records/device_info.hpp"

#include <fmt/format.h>

namespace attn {

nlohmann::json to_json(const DeviceStatus& d) {
  if (!d.available) return {{"available", false}, {"reason", d.reason}};
  return {{"available", true},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.sm_major, d.sm_minor)},
          {"multiprocessors", d.multiprocessors},
          {"sm_clock_mhz", d.sm_clock_mhz},
          {"memory_clock_mhz", d.memory_clock_mhz},
          {"memory_gib", d.memory_gib},
          {"l2_bytes", d.l2_bytes},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version}};
}

}  // namespace attn
