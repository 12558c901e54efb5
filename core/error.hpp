#pragma once
#include <stdexcept>
#include <string>

namespace attn {

// Bad input from a user: an impossible problem, a malformed repro string or file. The CLI
// reports its message and exits with code 2; nothing else should catch it silently.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attn
