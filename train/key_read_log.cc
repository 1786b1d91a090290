#include "train/key_read_log.h"

namespace coppice {

namespace {
thread_local KeyReadLog* open_log = nullptr;
}  // namespace

KeyReadLog::KeyReadLog() : previous_(open_log) { open_log = this; }

KeyReadLog::~KeyReadLog() { open_log = previous_; }

void KeyReadLog::note(const std::string& pattern) {
  if (open_log != nullptr) open_log->keys_.insert(pattern);
}

}  // namespace coppice
