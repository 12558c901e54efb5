#pragma once
// Progress of a long run (verify's cases, bench's benchmarks). On a terminal: a bar redrawn in
// place on the last line, which `print` keeps below the lines it prints. Elsewhere (CI logs,
// pipes): a plain line "[verify] 12/80 (15%) ..." every ~5% and at the end, no control characters.
#include <cstdio>
#include <string>

namespace attn {

class Progress {
 public:
  // `out` is where the run prints (stdout); `terminal` whether it is a terminal (isatty).
  Progress(std::string label, std::size_t total, std::FILE* out, bool terminal);
  // Whether stdout is a terminal.
  static bool stdout_is_terminal();

  // One more item done; `what` names it (a case label, a benchmark name).
  void step(const std::string& what);
  // Before printing a line of the run's own output: clears the bar (terminal only).
  void clear();
  // After printing: draws the bar again (terminal only).
  void redraw();
  // Ends the bar with a newline (terminal) so later output starts on a fresh line.
  void finish();

  void set_total(std::size_t total) { total_ = total; }
  std::size_t done() const { return done_; }
  std::size_t total() const { return total_; }
  // The bar as drawn, without control characters (for tests): "[####......] 12/80 (15%) WHAT".
  std::string bar_text(std::size_t width = 30) const;

 private:
  std::string label_;
  std::size_t total_, done_ = 0;
  std::FILE* out_;
  bool terminal_;
  bool drawn_ = false, finished_ = false;
  int last_percent_printed_ = -1;
  std::string what_;
};

}  // namespace attn
