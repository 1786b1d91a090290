// A progress display for the training loop: on a terminal, one line redrawn
// in place (epoch, step/total, loss, accuracy, samples/s, ETA); elsewhere (a
// log file, a pipe) a plain line per report.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace coppice {

struct ProgressLine {
  int64_t epoch = 0;
  int64_t step = 0;   // steps done
  int64_t total = 0;  // steps in the run
  double loss = 0.0;
  double accuracy = 0.0;  // in [0, 1]
  double samples_per_second = 0.0;
  double eta_seconds = -1.0;  // < 0: unknown
};

// The text of one report, without a line end: "epoch 2 step 120/1000 (12%)
// loss 0.4312 acc 87.5% 5230 samples/s ETA 0:01:23".
std::string format_progress(const ProgressLine& p);
// "1:02:03", "0:00:07"; "?" for a negative value.
std::string format_duration(double seconds);

class ProgressReporter {
 public:
  // `out` null: reports nothing. `interactive` < 0: isatty(fileno(out)).
  explicit ProgressReporter(std::FILE* out, int interactive = -1);
  bool interactive() const { return interactive_; }
  void report(const ProgressLine& p);
  // Writes a plain message on its own line (ending a redrawn line first).
  void message(const std::string& text);
  // Ends a redrawn line.
  void finish();

 private:
  std::FILE* out_;
  bool interactive_;
  bool line_open_ = false;
  size_t last_width_ = 0;
};

}  // namespace coppice
