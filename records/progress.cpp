#include "records/progress.hpp"

#include <algorithm>
#include <unistd.h>

#include <fmt/format.h>

namespace attn {

Progress::Progress(std::string label, std::size_t total, std::FILE* out, bool terminal)
    : label_(std::move(label)), total_(total), out_(out), terminal_(terminal) {}

bool Progress::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

std::string Progress::bar_text(std::size_t width) const {
  const std::size_t total = std::max<std::size_t>(total_, 1);
  const std::size_t done = std::min(done_, total);
  const std::size_t filled = done * width / total;
  const int percent = static_cast<int>(100 * done / total);
  std::string text = fmt::format("[{}] [{}{}] {}/{} ({}%)", label_, std::string(filled, '#'), std::string(width - filled, '.'), done_, total_, percent);
  if (!what_.empty()) text += ' ' + what_;
  return text;
}

void Progress::step(const std::string& what) {
  ++done_;
  what_ = what;
  if (out_ == nullptr) return;
  if (terminal_) {
    redraw();
    return;
  }
  const std::size_t total = std::max<std::size_t>(total_, 1);
  const int percent = static_cast<int>(100 * std::min(done_, total) / total);
  // Plain lines: one per 5% step, and the last one.
  if (percent / 5 != last_percent_printed_ / 5 || done_ == total_) {
    last_percent_printed_ = percent;
    fmt::print(out_, "[{}] {}/{} ({}%) {}\n", label_, done_, total_, percent, what_);
    std::fflush(out_);
  }
}

void Progress::clear() {
  if (out_ == nullptr || !terminal_ || !drawn_) return;
  fmt::print(out_, "\r\x1b[2K");
  drawn_ = false;
}

void Progress::redraw() {
  if (out_ == nullptr || !terminal_ || finished_) return;
  std::string text = bar_text();
  if (text.size() > 110) text = text.substr(0, 107) + "...";  // one line on a usual terminal
  fmt::print(out_, "\r\x1b[2K{}", text);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::finish() {
  if (out_ == nullptr || finished_) return;
  if (terminal_ && drawn_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
  drawn_ = false;
  finished_ = true;
}

}  // namespace attn
