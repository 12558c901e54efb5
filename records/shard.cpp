#include "records/shard.hpp"

#include <charconv>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {
namespace {

int parse_int(std::string_view text, std::string_view what, std::string_view whole) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw InputError(fmt::format("--shard '{}': {} '{}' is not an integer (expected I/N, e.g. 2/4)", whole, what, text));
  return value;
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) throw InputError(fmt::format("--shard '{}': expected I/N (e.g. 2/4: the second of four parts)", text));
  Shard s{parse_int(text.substr(0, slash), "I", text), parse_int(text.substr(slash + 1), "N", text)};
  if (s.count < 1) throw InputError(fmt::format("--shard '{}': N must be at least 1", text));
  if (s.index < 1 || s.index > s.count) throw InputError(fmt::format("--shard '{}': I must be between 1 and N = {}", text, s.count));
  return s;
}

std::vector<std::size_t> shard_positions(std::size_t size, const Shard& shard) {
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < size; ++i)
    if (shard.contains(i)) positions.push_back(i);
  return positions;
}

}  // namespace attn
