#pragma once
// How much memory this process may still take, so that a problem too large for the machine is
// refused with the figure it needs before anything is allocated (not std::bad_alloc, or the OOM
// killer, halfway through a run).
#include <optional>
#include <string>
#include <string_view>

namespace attn {

// MemAvailable from /proc/meminfo, lowered to RLIMIT_AS and RLIMIT_DATA where those are set;
// nullopt where none is known (then nothing is refused for its size).
std::optional<double> available_memory_bytes();

// "1.5 GiB", "68.7 TiB": for messages.
std::string format_bytes(double bytes);

// Throws InputError when `bytes` (an estimate, in double so absurd sizes cannot overflow) exceeds
// what is available, saying what needs it, how much and how much there is.
void check_memory_fits(double bytes, std::string_view what);

}  // namespace attn
