#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace attn {

// Bad input from a user: an impossible problem, a malformed repro string or file. The CLI
// reports its message and exits with code 2; nothing else should catch it silently.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A token of the user's, quoted for an InputError's message: a long one (a file pasted by
// mistake) is cut, its length said, so the message stays one readable line.
std::string echoed(std::string_view text);

}  // namespace attn
