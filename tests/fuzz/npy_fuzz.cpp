// libFuzzer target: the .npy reader on arbitrary bytes. Every input must either parse or be
// refused with attn::InputError; whatever parses must serialise and parse back to the same array.
// Any other exception, a crash, a sanitizer report, a leak or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "core/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  attn::npy::Array array;
  try {
    array = attn::npy::parse(bytes, "fuzz.npy");
  } catch (const attn::InputError&) {
    return 0;
  }
  if (!(attn::npy::parse(attn::npy::serialize(array), "again.npy") == array)) __builtin_trap();
  return 0;
}
