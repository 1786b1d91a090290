#include "tensor/error_context.h"

#include <utility>

namespace coppice {
namespace {

thread_local std::vector<std::string> open_contexts;

}  // namespace

ErrorContext::ErrorContext(std::string text) { open_contexts.push_back(std::move(text)); }

ErrorContext::~ErrorContext() { open_contexts.pop_back(); }

std::vector<std::string> ErrorContext::current() { return open_contexts; }

std::string ErrorContext::wrap(const std::vector<std::string>& contexts, std::string message) {
  for (auto it = contexts.rbegin(); it != contexts.rend(); ++it) message = *it + ": " + message;
  return message;
}

}  // namespace coppice
