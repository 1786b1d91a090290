// Context for errors that surface after the call that caused them. A CUDA
// index check is read back at the next synchronization of the device
// (tensor/cuda/deferred_checks.h), where a try/catch around the call that
// queued it can no longer add what the call was doing. So the call also
// opens an ErrorContext: a check queued while it is alive keeps its text,
// and its failure reads "<outer text>: <inner text>: <the check's message>",
// as nested try/catch blocks would have made it.
#pragma once

#include <string>
#include <vector>

namespace coppice {

class ErrorContext {
 public:
  explicit ErrorContext(std::string text);
  ~ErrorContext();
  ErrorContext(const ErrorContext&) = delete;
  ErrorContext& operator=(const ErrorContext&) = delete;

  // The texts of the contexts alive on this thread, outermost first.
  static std::vector<std::string> current();

  // `message` inside `contexts` (as current() gave them).
  static std::string wrap(const std::vector<std::string>& contexts, std::string message);
};

}  // namespace coppice
