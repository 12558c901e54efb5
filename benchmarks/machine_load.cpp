#include "benchmarks/machine_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace attn::bench {
namespace {

double seconds_of(const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; }

}  // namespace

std::optional<CpuSample> sample_cpu() {
  std::ifstream stat("/proc/stat");
  std::string line;
  if (!stat || !std::getline(stat, line) || line.rfind("cpu ", 0) != 0) return std::nullopt;
  std::istringstream fields(line.substr(4));
  // user nice system idle iowait irq softirq steal: every field but idle and iowait is busy
  // time; steal counts because a neighbour on the host took it from us.
  double value[8] = {};
  for (double& v : value)
    if (!(fields >> v)) return std::nullopt;
  const double ticks = double(sysconf(_SC_CLK_TCK));
  if (!(ticks > 0)) return std::nullopt;
  CpuSample s;
  s.machine_busy_seconds = (value[0] + value[1] + value[2] + value[5] + value[6] + value[7]) / ticks;
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  s.own_seconds = seconds_of(self.ru_utime) + seconds_of(self.ru_stime) + seconds_of(children.ru_utime) + seconds_of(children.ru_stime);
  s.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  s.cores = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return s;
}

MachineLoad load_between(const CpuSample& before, const CpuSample& after) {
  MachineLoad load;
  load.cores = after.cores;
  load.seconds = after.wall_seconds - before.wall_seconds;
  if (load.seconds > 0) {
    const double others = (after.machine_busy_seconds - before.machine_busy_seconds) - (after.own_seconds - before.own_seconds);
    // /proc/stat ticks and getrusage round differently: a few ticks either way is noise.
    load.others_cores = std::clamp(others / load.seconds, 0.0, double(load.cores));
  }
  return load;
}

std::string MachineLoad::describe() const {
  const double share = cores > 0 ? others_cores / cores : 0;
  if (loaded())
    return fmt::format("the machine was loaded: other processes kept {:.2f} of its {} cores busy ({:.0f}%) over {:.1f} s; timings are "
                       "slower and noisier than on a quiet machine",
                       others_cores, cores, 100 * share, seconds);
  return fmt::format("the machine was quiet: other processes used {:.2f} of its {} cores ({:.0f}%) over {:.1f} s", others_cores, cores,
                     100 * share, seconds);
}

}  // namespace attn::bench
