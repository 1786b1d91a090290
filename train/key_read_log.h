// The job keys (schema patterns: "data.batch_size", "sparsity.rules[]") that
// the loader's readers asked for on this thread while a log is open.
// tests/train/job_keys_test loads jobs under one to hold the readers and the
// declarations of train/job_keys.cc to each other: every declared key is
// read by some reader, and every key read is declared. Without an open log,
// noting a key costs a thread-local read.
#pragma once

#include <set>
#include <string>

namespace coppice {

class KeyReadLog {
 public:
  KeyReadLog();   // opens: readers on this thread note into it until it closes
  ~KeyReadLog();  // closes, reopening the one open before it (if any)
  KeyReadLog(const KeyReadLog&) = delete;
  KeyReadLog& operator=(const KeyReadLog&) = delete;

  const std::set<std::string>& keys() const { return keys_; }

  // Adds `pattern` to the open log of this thread, if there is one.
  static void note(const std::string& pattern);

 private:
  std::set<std::string> keys_;
  KeyReadLog* previous_;
};

}  // namespace coppice
