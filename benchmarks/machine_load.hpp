#pragma once
// How much of the machine other processes used while we measured. Timings taken while another
// job competes for the cores are slower and noisier; a bench says so instead of letting a
// loaded machine's numbers pass for a quiet one's. Linux only (/proc/stat); elsewhere the
// sample is unavailable and nothing is claimed.
#include <optional>
#include <string>

namespace attn::bench {

struct CpuSample {
  double machine_busy_seconds = 0;  // CPU time every process used, summed over cores (/proc/stat)
  double own_seconds = 0;           // this process's CPU time, its waited-for children's included
  double wall_seconds = 0;
  int cores = 0;
};

std::optional<CpuSample> sample_cpu();

struct MachineLoad {
  double others_cores = 0;  // cores other processes kept busy on average between the samples
  int cores = 0;
  double seconds = 0;
  // Others used more than a tenth of the machine: timings are not those of a quiet machine.
  bool loaded() const { return others_cores > 0.1 * cores; }
  std::string describe() const;  // one sentence for the console and the JSON notes
};

MachineLoad load_between(const CpuSample& before, const CpuSample& after);

}  // namespace attn::bench
