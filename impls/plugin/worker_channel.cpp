#include "impls/plugin/worker_channel.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace attn::plugin {
namespace {

bool read_exactly(int socket, char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(socket, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool send_message(int socket, const std::string& text, int fd_to_pass) {
  const auto length = static_cast<std::uint32_t>(text.size());
  std::string frame(sizeof length, '\0');
  std::memcpy(frame.data(), &length, sizeof length);
  frame += text;
  std::size_t sent = 0;
  while (sent < frame.size()) {
    iovec iov{frame.data() + sent, frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0 && fd_to_pass >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
    }
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

Received receive_message(int socket, int timeout_ms, std::string& text, int* received_fd) {
  if (received_fd != nullptr) *received_fd = -1;
  pollfd p{socket, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Received::failed;
    if (r == 0) return Received::timed_out;
    break;
  }
  std::uint32_t length = 0;
  iovec iov{&length, sizeof length};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(socket, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n == 0) return Received::closed;
  if (n < 0) return errno == ECONNRESET ? Received::closed : Received::failed;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int fd;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    if (received_fd != nullptr && *received_fd < 0)
      *received_fd = fd;
    else
      ::close(fd);
  }
  if (static_cast<std::size_t>(n) < sizeof length && !read_exactly(socket, reinterpret_cast<char*>(&length) + n, sizeof length - std::size_t(n)))
    return Received::closed;
  text.assign(length, '\0');
  if (!read_exactly(socket, text.data(), length)) return Received::closed;
  return Received::message;
}

}  // namespace attn::plugin
