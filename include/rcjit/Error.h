// rcjit::Error: the one exception type the public API throws on bad input or failure.
#pragma once
#include <stdexcept>
#include <string>

namespace rcjit {

/// Thrown by every public function on bad input (shapes, dtypes, files, devices) or a
/// failed runtime step. The message names the op or step and the offending values.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

} // namespace rcjit
