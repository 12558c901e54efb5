#include "core/npy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/result_file.hpp"

namespace attn::npy {
namespace {

constexpr char magic[] = "\x93NUMPY";
constexpr std::size_t magic_bytes = 6;
// Larger arrays are refused before any size arithmetic could overflow (2^62 bytes).
constexpr std::int64_t max_total_bytes = std::int64_t(1) << 62;

struct TypeInfo {
  ElementType type;
  std::string_view descr;
  char kind;
  int bytes;
};
constexpr TypeInfo types[] = {
    {ElementType::f16, "<f2", 'f', 2},  {ElementType::f32, "<f4", 'f', 4}, {ElementType::f64, "<f8", 'f', 8},
    {ElementType::boolean, "|b1", 'b', 1}, {ElementType::u8, "|u1", 'u', 1}, {ElementType::u16, "<u2", 'u', 2},
    {ElementType::i32, "<i4", 'i', 4},  {ElementType::i64, "<i8", 'i', 8},
};

const TypeInfo& info(ElementType type) {
  for (const auto& t : types)
    if (t.type == type) return t;
  throw std::logic_error("npy: unknown element type");
}

std::string supported_descrs() {
  std::vector<std::string_view> all;
  for (const auto& t : types) all.push_back(t.descr);
  return fmt::format("{}", fmt::join(all, ", "));
}

// What a header value can be: a string, a boolean, or a tuple of non-negative integers.
struct Value {
  enum class Kind { string, boolean, tuple } kind = Kind::string;
  std::string text;
  bool flag = false;
  std::vector<std::int64_t> numbers;
};

// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// A small recursive-descent parser that accepts exactly what NumPy writes (and the few
// spellings older versions wrote: double quotes, 3L) and names what it does not accept.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : s_(text), name_(name) {}

  std::vector<std::pair<std::string, Value>> dict() {
    skip_space();
    expect('{', "the header is not a dict (it does not start with '{')");
    std::vector<std::pair<std::string, Value>> entries;
    for (;;) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      if (peek() != '\'' && peek() != '"') fail(fmt::format("header dict: expected a quoted key at offset {}", pos_));
      std::string key = quoted();
      skip_space();
      expect(':', fmt::format("header dict: expected ':' after key '{}'", key));
      skip_space();
      Value value = parse_value(key);
      for (const auto& entry : entries)
        if (entry.first == key) fail(fmt::format("header dict has key '{}' twice", key));
      entries.emplace_back(std::move(key), std::move(value));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') continue;
      fail(fmt::format("header dict: expected ',' or '}}' at offset {}", pos_));
    }
    skip_space();
    if (pos_ != s_.size()) fail(fmt::format("header has trailing text after the dict at offset {}", pos_));
    return entries;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", name_, what)); }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= s_.size(); }
  void skip_space() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c, const std::string& what) {
    if (peek() != c || at_end()) fail(what);
    ++pos_;
  }
  std::string quoted() {
    const char quote = s_[pos_++];
    const std::size_t start = pos_;
    while (!at_end() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') fail("header dict: escapes in strings are not supported");
      ++pos_;
    }
    if (at_end()) fail("header dict: unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }
  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  Value parse_value(const std::string& key) {
    Value v;
    if (peek() == '\'' || peek() == '"') {
      v.kind = Value::Kind::string;
      v.text = quoted();
    } else if (word("True")) {
      v.kind = Value::Kind::boolean;
      v.flag = true;
    } else if (word("False")) {
      v.kind = Value::Kind::boolean;
      v.flag = false;
    } else if (peek() == '(') {
      ++pos_;
      v.kind = Value::Kind::tuple;
      for (;;) {
        skip_space();
        if (peek() == ')') {
          ++pos_;
          break;
        }
        v.numbers.push_back(integer(key));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() != ')') fail(fmt::format("header dict: '{}' is not a tuple of integers (at offset {})", key, pos_));
      }
    } else if (peek() == '[') {
      fail(fmt::format("header dict: '{}' is a list; structured dtypes are not supported", key));
    } else {
      fail(fmt::format("header dict: unsupported value for '{}' at offset {}", key, pos_));
    }
    return v;
  }
  std::int64_t integer(const std::string& key) {
    if (peek() == '-') fail(fmt::format("header dict: '{}' has a negative dimension", key));
    if (peek() < '0' || peek() > '9') fail(fmt::format("header dict: '{}' is not a tuple of integers (at offset {})", key, pos_));
    std::int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (value > (max_total_bytes - 9) / 10) fail(fmt::format("header dict: a dimension of '{}' is too large", key));
      value = value * 10 + (s_[pos_++] - '0');
    }
    if (peek() == 'L') ++pos_;  // Python 2's long literal, written by old NumPy
    return value;
  }

  std::string_view s_;
  std::string_view name_;
  std::size_t pos_ = 0;
};

// Little-endian unsigned integer of `width` bytes at bytes[at] (the caller checked the bounds).
std::uint32_t read_le(std::span<const std::byte> bytes, std::size_t at, int width) {
  std::uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(bytes[at + std::size_t(i)]);
  return v;
}

ElementType parse_descr(const std::string& d, std::string_view name) {
  if (d == "?" || d == "b1") return ElementType::boolean;
  if (d.empty()) throw InputError(fmt::format("{}: descr is empty", name));
  const char order = d[0];
  const std::string code = (order == '<' || order == '>' || order == '|' || order == '=') ? d.substr(1) : d;
  for (const auto& t : types) {
    if (code != t.descr.substr(1) && !(t.type == ElementType::boolean && code == "?")) continue;
    if (order == '>' && t.bytes > 1)
      throw InputError(fmt::format("{}: descr '{}' is big-endian; only little-endian data is read (save it as '<{}')", name, d, code));
    return t.type;
  }
  throw InputError(fmt::format("{}: descr '{}' is not supported (supported: {})", name, d, supported_descrs()));
}

}  // namespace

std::string_view descr(ElementType type) { return info(type).descr; }
int item_bytes(ElementType type) { return info(type).bytes; }

std::int64_t Array::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string shape_string(std::span<const std::int64_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

namespace {

// What the preamble and header say: the array's type and shape (no data yet), where the data
// starts and how many bytes it must be.
struct Layout {
  Array meta;
  std::size_t data_offset = 0;
  std::size_t data_bytes = 0;
};

// `bytes` holds at least the preamble and the header (a whole file, or read_file's prefix of it).
Layout parse_layout(std::span<const std::byte> bytes, std::string_view name) {
  if (bytes.empty()) throw InputError(fmt::format("{}: empty file, not a .npy file", name));
  if (bytes.size() < magic_bytes + 2 || std::memcmp(bytes.data(), magic, magic_bytes) != 0) {
    const bool prefix = bytes.size() < magic_bytes + 2 &&
                        (std::memcmp(bytes.data(), magic, std::min(bytes.size(), magic_bytes)) == 0);
    if (prefix) throw InputError(fmt::format("{}: truncated: {} bytes, shorter than the .npy preamble", name, bytes.size()));
    throw InputError(fmt::format("{}: bad magic: not a .npy file (it does not start with \\x93NUMPY)", name));
  }
  const int major = std::to_integer<int>(bytes[6]), minor = std::to_integer<int>(bytes[7]);
  if (major < 1 || major > 3)
    throw InputError(fmt::format("{}: .npy format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", name, major, minor));
  const int length_width = major == 1 ? 2 : 4;
  const std::size_t preamble = magic_bytes + 2 + std::size_t(length_width);
  if (bytes.size() < preamble)
    throw InputError(fmt::format("{}: truncated: {} bytes, shorter than the version {}.0 preamble ({} bytes)", name, bytes.size(), major, preamble));
  const std::size_t header_bytes = read_le(bytes, magic_bytes + 2, length_width);
  if (header_bytes > bytes.size() - preamble)
    throw InputError(fmt::format("{}: truncated header: the preamble says {} header bytes but only {} follow", name, header_bytes,
                                 bytes.size() - preamble));
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + preamble, header_bytes);
  for (char c : header)
    if (c == '\0') throw InputError(fmt::format("{}: the header holds a NUL byte", name));

  std::optional<std::string> descr_text;
  std::optional<bool> fortran;
  std::optional<std::vector<std::int64_t>> shape;
  for (auto& [key, value] : HeaderParser(header, name).dict()) {
    if (key == "descr") {
      if (value.kind != Value::Kind::string) throw InputError(fmt::format("{}: header dict: 'descr' is not a string", name));
      descr_text = value.text;
    } else if (key == "fortran_order") {
      if (value.kind != Value::Kind::boolean) throw InputError(fmt::format("{}: header dict: 'fortran_order' is not True or False", name));
      fortran = value.flag;
    } else if (key == "shape") {
      if (value.kind != Value::Kind::tuple) throw InputError(fmt::format("{}: header dict: 'shape' is not a tuple", name));
      shape = value.numbers;
    } else {
      throw InputError(fmt::format("{}: header dict has an unknown key '{}' (a .npy header has descr, fortran_order and shape)", name, key));
    }
  }
  if (!descr_text) throw InputError(fmt::format("{}: header dict has no 'descr'", name));
  if (!fortran) throw InputError(fmt::format("{}: header dict has no 'fortran_order'", name));
  if (!shape) throw InputError(fmt::format("{}: header dict has no 'shape'", name));

  Array array;
  array.type = parse_descr(*descr_text, name);
  array.shape = *shape;
  if (*fortran && array.shape.size() > 1)
    throw InputError(fmt::format("{}: fortran_order is True: only C-order arrays are read (np.ascontiguousarray before saving)", name));

  const std::int64_t item = item_bytes(array.type);
  std::int64_t numel = 1;
  for (auto s : array.shape) {
    if (s != 0 && numel > max_total_bytes / item / s)
      throw InputError(fmt::format("{}: shape {} is too large", name, shape_string(array.shape)));
    numel *= s;
  }
  return {std::move(array), preamble + header_bytes, std::size_t(numel * item)};
}

void expect_data_bytes(const Layout& layout, std::uint64_t held, std::string_view name) {
  if (held != layout.data_bytes)
    throw InputError(fmt::format("{}: header says shape {} = {} elements of {} bytes but the file holds {} data bytes", name,
                                 shape_string(layout.meta.shape), layout.meta.numel(), item_bytes(layout.meta.type), held));
}

// Where the header ends, once the preamble in `bytes` says so; nullopt when `bytes` is too short
// or not a .npy preamble (parse_layout then names the fault).
std::optional<std::size_t> header_end(std::span<const std::byte> bytes) {
  if (bytes.size() < magic_bytes + 2 || std::memcmp(bytes.data(), magic, magic_bytes) != 0) return std::nullopt;
  const int major = std::to_integer<int>(bytes[6]);
  if (major < 1 || major > 3) return std::nullopt;
  const int width = major == 1 ? 2 : 4;
  const std::size_t preamble = magic_bytes + 2 + std::size_t(width);
  if (bytes.size() < preamble) return std::nullopt;
  return preamble + read_le(bytes, magic_bytes + 2, width);
}

}  // namespace

Array parse(std::span<const std::byte> bytes, std::string_view name) {
  Layout layout = parse_layout(bytes, name);
  expect_data_bytes(layout, bytes.size() - layout.data_offset, name);
  const auto* data = bytes.data() + layout.data_offset;
  layout.meta.data.assign(data, data + layout.data_bytes);
  return std::move(layout.meta);
}

// Reads no more than the header promises: the preamble, then the header, then exactly the data
// bytes it states, once the file's size agrees and the memory is there. A link to /dev/zero, a
// FIFO or a file larger than its header says is refused, never read to its end.
Array read_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) throw InputError(fmt::format("{}: no such file", name));
    throw InputError(fmt::format("{}: cannot be opened for reading: {}", name, std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(fmt::format("{}: cannot be read: {}", name, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw InputError(fmt::format("{}: is a directory, not a .npy file", name));
  if (!S_ISREG(st.st_mode))
    throw InputError(fmt::format("{}: not a regular file (a device, FIFO or socket): a .npy file is only read from a regular file", name));
  const std::uint64_t size = std::uint64_t(st.st_size);
  std::vector<std::byte> bytes;
  // Appends up to `count` bytes; returns false where the file ended first.
  auto read_more = [&](std::uint64_t count) {
    const std::size_t at = bytes.size();
    bytes.resize(at + std::size_t(count));
    std::size_t done = 0;
    while (done < count) {
      const ssize_t n = ::read(fd, bytes.data() + at + done, std::size_t(count) - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw InputError(fmt::format("{}: read error: {}", name, std::strerror(errno)));
      if (n == 0) break;
      done += std::size_t(n);
    }
    bytes.resize(at + done);
    return done == count;
  };
  constexpr std::uint64_t longest_preamble = magic_bytes + 2 + 4;
  read_more(std::min(size, longest_preamble));
  const auto end = header_end(bytes);
  if (!end) return parse(bytes, name);  // names what is wrong with the preamble
  read_more(std::min<std::uint64_t>(*end, size) - bytes.size());
  Layout layout = parse_layout(bytes, name);
  expect_data_bytes(layout, size - std::min<std::uint64_t>(size, layout.data_offset), name);
  check_memory_fits(double(layout.data_bytes), fmt::format("{} ({} bytes of data)", name, layout.data_bytes));
  // The data straight into the array: no second copy of what may be most of the memory.
  bytes.clear();
  if (!read_more(layout.data_bytes))
    throw InputError(fmt::format("{}: truncated while reading: {} of the {} data bytes its header promises", name, bytes.size(),
                                 layout.data_bytes));
  layout.meta.data = std::move(bytes);
  return std::move(layout.meta);
}

std::vector<std::byte> serialize(const Array& array, int major_version) {
  if (std::uint64_t(array.numel()) * std::uint64_t(item_bytes(array.type)) != array.data.size())
    throw std::logic_error(fmt::format("npy::serialize: shape {} does not match {} data bytes", shape_string(array.shape), array.data.size()));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr(array.type), shape_string(array.shape));
  int major = major_version;
  if (major == 0) major = header.size() + 1 + 10 > 65535 ? 2 : 1;
  if (major < 1 || major > 3) throw std::logic_error(fmt::format("npy::serialize: no .npy format version {}", major));
  const std::size_t preamble = major == 1 ? 10 : 12;
  const std::size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;  // data aligned to 64 bytes, as NumPy does
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');
  if (major == 1 && header.size() > 65535) throw std::logic_error("npy::serialize: header too long for version 1.0");

  std::vector<std::byte> out;
  out.reserve(total + array.data.size());
  for (std::size_t i = 0; i < magic_bytes; ++i) out.push_back(std::byte(static_cast<unsigned char>(magic[i])));
  out.push_back(std::byte(major));
  out.push_back(std::byte(0));
  const std::uint32_t length = std::uint32_t(header.size());
  for (std::size_t i = 0; i < preamble - 8; ++i) out.push_back(std::byte((length >> (8 * i)) & 0xff));
  for (char c : header) out.push_back(std::byte(static_cast<unsigned char>(c)));
  out.insert(out.end(), array.data.begin(), array.data.end());
  return out;
}

void write_file(const std::filesystem::path& path, const Array& array, int major_version) {
  const auto bytes = serialize(array, major_version);
  write_result_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace attn::npy
