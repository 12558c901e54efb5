#pragma once
// The messages between the harness and its plugin worker: length-prefixed JSON over a Unix
// socket, with at most one file descriptor (the shared arena) passed alongside (SCM_RIGHTS).
// Sends never raise SIGPIPE (a dead worker is an error return, not the harness's death).
#include <string>

namespace attn::plugin {

enum class Received { message, closed, timed_out, failed };

// Returns false when the peer is gone or the send failed.
bool send_message(int socket, const std::string& text, int fd_to_pass = -1);
// Waits up to timeout_ms (negative: forever) for the start of a message, then reads it whole.
// received_fd gets a passed descriptor or -1 (may be null when none is expected; one that
// arrives anyway is closed).
Received receive_message(int socket, int timeout_ms, std::string& text, int* received_fd = nullptr);

}  // namespace attn::plugin
