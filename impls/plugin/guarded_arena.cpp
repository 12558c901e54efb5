#include "impls/plugin/guarded_arena.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attn::plugin {
namespace {

const char* verb(int access) { return access == 2 ? "wrote" : access == 1 ? "read" : "accessed"; }

}  // namespace

ArenaLayout ArenaLayout::plan(const std::vector<ArenaBuffer>& buffers, std::size_t page) {
  static_assert(sizeof(StatusPage) <= 4096);
  ArenaLayout layout;
  layout.page = page;
  std::size_t at = page;  // after the status page
  layout.guards.push_back(at);
  at += page;
  for (ArenaBuffer b : buffers) {
    const std::size_t pages = b.bytes == 0 ? 1 : (b.bytes + page - 1) / page;
    b.offset = at + pages * page - b.bytes;
    b.slack = b.offset - at;
    at += pages * page;
    layout.guards.push_back(at);
    at += page;
    layout.buffers.push_back(std::move(b));
  }
  layout.total = at;
  return layout;
}

const ArenaBuffer& ArenaLayout::buffer(std::string_view name) const {
  for (const auto& b : buffers)
    if (b.name == name) return b;
  throw std::out_of_range(fmt::format("no buffer '{}' in the arena", name));
}

bool ArenaLayout::in_guard(std::size_t offset) const {
  for (std::size_t g : guards)
    if (offset >= g && offset < g + page) return true;
  return false;
}

std::optional<std::string> ArenaLayout::describe_fault(std::size_t offset, int access) const {
  for (std::size_t gi = 0; gi < guards.size(); ++gi) {
    const std::size_t g = guards[gi];
    if (offset < g || offset >= g + page) continue;
    // Guard gi follows buffer gi - 1 (ending at g) and precedes buffer gi (its slack starts at g + page).
    const ArenaBuffer* before = gi > 0 ? &buffers[gi - 1] : nullptr;
    const ArenaBuffer* after = gi < buffers.size() ? &buffers[gi] : nullptr;
    const std::size_t past_end = offset - g;
    const std::size_t before_start = after != nullptr ? after->offset - offset : 0;
    if (before != nullptr && (after == nullptr || past_end <= before_start)) {
      const std::size_t elements = before->bytes / before->element_bytes;
      return fmt::format("{} past the end of {}: guard page hit at byte offset +{} after its last element ({}-byte elements: element "
                         "index {} of a {}-element buffer)",
                         verb(access), before->name, past_end, before->element_bytes, elements + past_end / before->element_bytes,
                         elements);
    }
    if (after != nullptr)
      return fmt::format("{} before the start of {}: guard page hit {} bytes before its first element", verb(access), after->name,
                         before_start);
  }
  return std::nullopt;
}

std::optional<std::string> ArenaLayout::check_slack(const std::byte* base, const ArenaBuffer& b) const {
  for (std::size_t i = b.slack; i-- > 0;) {  // nearest the buffer first
    const auto byte = static_cast<std::uint8_t>(base[b.offset - b.slack + i]);
    if (byte != canary_byte)
      return fmt::format("wrote before the start of {}: canary byte {} bytes before its first element changed (0x{:02x})", b.name,
                         b.slack - i, byte);
  }
  return std::nullopt;
}

void to_json(nlohmann::json& j, const ArenaLayout& l) {
  j = {{"page", l.page}, {"total", l.total}, {"guards", l.guards}, {"buffers", nlohmann::json::array()}};
  for (const auto& b : l.buffers)
    j["buffers"].push_back({{"name", b.name}, {"offset", b.offset}, {"bytes", b.bytes}, {"slack", b.slack}, {"element_bytes", b.element_bytes}});
}

void from_json(const nlohmann::json& j, ArenaLayout& l) {
  j.at("page").get_to(l.page);
  j.at("total").get_to(l.total);
  j.at("guards").get_to(l.guards);
  l.buffers.clear();
  for (const auto& b : j.at("buffers"))
    l.buffers.push_back({b.at("name").get<std::string>(), b.at("offset").get<std::size_t>(), b.at("bytes").get<std::size_t>(),
                         b.at("slack").get<std::size_t>(), b.at("element_bytes").get<std::size_t>()});
}

SharedArena::SharedArena(ArenaLayout layout) : layout_(std::move(layout)) {
  fd_ = memfd_create("attnbench-plugin-arena", MFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(fmt::format("memfd_create failed: {}", std::strerror(errno)));
  if (ftruncate(fd_, static_cast<off_t>(layout_.total)) != 0) {
    const int e = errno;
    ::close(fd_);
    throw std::runtime_error(fmt::format("ftruncate of the plugin arena to {} bytes failed: {}", layout_.total, std::strerror(e)));
  }
  void* p = mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd_);
    throw std::runtime_error(fmt::format("mmap of the plugin arena ({} bytes) failed: {}", layout_.total, std::strerror(e)));
  }
  base_ = static_cast<std::byte*>(p);  // a fresh memfd reads as zeros: the status page is clear
  for (const auto& b : layout_.buffers) std::memset(base_ + b.offset - b.slack, canary_byte, b.slack);
}

SharedArena::~SharedArena() {
  if (base_ != nullptr) munmap(base_, layout_.total);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace attn::plugin
