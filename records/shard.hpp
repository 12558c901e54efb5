#pragma once
// --shard I/N, for verify's cases and bench's families alike: this process runs the I-th of N
// deterministic parts, and its result file records which ("shard": {"index", "count"}).
#include <cstddef>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

struct Shard {
  int index = 1;
  int count = 1;
  // Position `position` of the full list (cases, or benchmark families) belongs to this shard
  // when position % count == index - 1: round robin, so every shard gets a mix.
  bool contains(std::size_t position) const { return position % static_cast<std::size_t>(count) == static_cast<std::size_t>(index - 1); }
  nlohmann::json to_json() const { return {{"index", index}, {"count", count}}; }
};
// "I/N"; throws InputError ("--shard '3/2': ...") unless 1 <= I <= N.
Shard parse_shard(std::string_view text);
// The positions of a list of `size` items that belong to the shard, ascending.
std::vector<std::size_t> shard_positions(std::size_t size, const Shard& shard);

}  // namespace attn
