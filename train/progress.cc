#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace coppice {

std::string format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>((s / 60) % 60), static_cast<long long>(s % 60));
  return buf;
}

std::string format_progress(const ProgressLine& p) {
  char buf[256];
  const double pct = p.total > 0 ? 100.0 * static_cast<double>(p.step) / static_cast<double>(p.total) : 0.0;
  std::snprintf(buf, sizeof buf, "epoch %lld step %lld/%lld (%.0f%%) loss %.4f acc %.1f%% %.0f samples/s ETA %s",
                static_cast<long long>(p.epoch), static_cast<long long>(p.step), static_cast<long long>(p.total), pct,
                p.loss, 100.0 * p.accuracy, p.samples_per_second, format_duration(p.eta_seconds).c_str());
  return buf;
}

ProgressReporter::ProgressReporter(std::FILE* out, int interactive)
    : out_(out), interactive_(out != nullptr && (interactive < 0 ? isatty(fileno(out)) != 0 : interactive != 0)) {}

void ProgressReporter::report(const ProgressLine& p) {
  if (out_ == nullptr) return;
  const std::string text = format_progress(p);
  if (interactive_) {
    // Pad with spaces so that a shorter line fully covers the previous one.
    std::string line = "\r" + text;
    if (text.size() < last_width_) line.append(last_width_ - text.size(), ' ');
    last_width_ = text.size();
    std::fputs(line.c_str(), out_);
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void ProgressReporter::message(const std::string& text) {
  if (out_ == nullptr) return;
  finish();
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

void ProgressReporter::finish() {
  if (out_ == nullptr) return;
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  last_width_ = 0;
  std::fflush(out_);
}

}  // namespace coppice
