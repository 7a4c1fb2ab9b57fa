#pragma once
// The one exception type tgraph throws.
#include <stdexcept>
#include <string>

namespace tg {

/// Every error tgraph reports; the message starts with the op or component in brackets.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace tg
