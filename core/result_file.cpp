#include "core/result_file.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {
namespace {

std::string subject(const std::filesystem::path& path, std::string_view what) {
  return what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
}

std::string_view kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void create_parent(const std::filesystem::path& path, std::string_view what) {
  if (!path.has_parent_path()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the folder {}: {}", subject(path, what), path.parent_path().string(), ec.message()));
}

// A name beside `path` that no other writer (another thread, another run) picks.
std::filesystem::path temporary_beside(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.string() + fmt::format(".tmp.{}.{}", ::getpid(), counter.fetch_add(1));
}

// O_EXCL | O_NOFOLLOW: whatever was planted at the temporary name is not written through.
int open_temporary(const std::filesystem::path& tmp, const std::filesystem::path& path, std::string_view what) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) throw InputError(fmt::format("{}: cannot create {}: {}", subject(path, what), tmp.string(), std::strerror(errno)));
  return fd;
}

}  // namespace

void check_result_path(const std::filesystem::path& path, std::string_view what) {
  if (path.empty()) throw InputError(fmt::format("{}: an empty path", what.empty() ? "result file" : what));
  // "DIR/" names a directory whether or not it exists yet: refused now, not after the run.
  if (!path.has_filename())
    throw InputError(fmt::format("{}: ends with '/', so it names a directory; a result is written as a file (give a file path, e.g. {}results.json)",
                                 subject(path, what), path.string()));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;  // created; a missing parent is created too
    // ENOTDIR: a parent is a file. Anything else (EACCES, ELOOP) is as fatal for a writer.
    throw InputError(fmt::format("{}: {}", subject(path, what), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    throw InputError(fmt::format("{}: is {}; a result is only ever written as a regular file (give a file path)", subject(path, what),
                                 kind_of(st.st_mode)));
}

void prepare_result_path(const std::filesystem::path& path, std::string_view what) {
  check_result_path(path, what);
  create_parent(path, what);
  const auto tmp = temporary_beside(path);
  ::close(open_temporary(tmp, path, what));
  ::unlink(tmp.c_str());
}

void prepare_result_dir(const std::filesystem::path& dir, std::string_view what) {
  if (dir.empty()) throw InputError(fmt::format("{}: an empty path", what.empty() ? "result folder" : what));
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw InputError(fmt::format("{}: exists and is not a directory", subject(dir, what)));
    if (::access(dir.c_str(), W_OK | X_OK) != 0) throw InputError(fmt::format("{}: {}", subject(dir, what), std::strerror(errno)));
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the directory: {}", subject(dir, what), ec.message()));
}

void write_result_file(const std::filesystem::path& path, std::string_view content, std::string_view what) {
  check_result_path(path, what);
  create_parent(path, what);
  const auto tmp = temporary_beside(path);
  const int fd = open_temporary(tmp, path, what);
  auto fail = [&](std::string_view doing, int error) {
    ::unlink(tmp.c_str());
    throw InputError(fmt::format("{}: {} {}: {}", subject(path, what), doing, tmp.string(), std::strerror(error)));
  };
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      fail("cannot write", error);
    }
    done += std::size_t(n);
  }
  if (::close(fd) != 0) fail("cannot write", errno);
  // Again just before the rename: something may have been put at the path while the run went on.
  try {
    check_result_path(path, what);
  } catch (const InputError&) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename", errno);
}

std::string write_rescue_file(const std::filesystem::path& path, std::string_view content) {
  const std::string stem = path.filename().empty() ? std::string("results") : path.filename().string();
  const std::string name = fmt::format("{}.rescued-{}.json", stem, ::getpid());
  for (const std::filesystem::path& rescue : {path.parent_path() / name, std::filesystem::temp_directory_path() / name}) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(rescue, ec))) continue;  // never over anything
    try {
      write_result_file(rescue, content);
      return rescue.string();
    } catch (const InputError&) {
    }
  }
  return {};
}

}  // namespace attn
